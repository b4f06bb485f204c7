// The public test kit from CAF's own test framework (the kit needs neither
// it nor GoogleTest): the acceptance story, Redis frozen and released.
// CAF 1.x's framework (caf/test/test.hpp, its main() from
// caf_test_main.hpp); kit_caf017_test.cpp is the same test on CAF 0.17's.
// Its own executable: tests/actor/CMakeLists.txt picks one of the two.
#include "caf/test/caf_test_main.hpp"
#include "caf/test/test.hpp"

#include <chrono>
#include <string>

#include "qsession/projection/testkit.hpp"

using namespace std::chrono_literals;

SUITE("kit") {

TEST("the public kit drives a freeze and a release from a CAF test") {
  qsp::testkit::kit k;
  k.produce(0, "conv-1", 1000, {"alice"});
  k.start();
  require(k.run_until_ready());
  k.redis_freeze();
  k.produce(1, "conv-2", 2000, {"alice"});
  require(k.run_until_state("dirty"));
  k.advance(10s);
  check(!k.ready());
  k.redis_release();
  require(k.run_until_ready());
  require(k.run_until_offset(1, k.log_end(1)));
  check(k.model_equals_redis());
  check(!k.failed());
  check_eq(k.explain(), std::string{});
}

} // SUITE("kit")

CAF_TEST_MAIN()
