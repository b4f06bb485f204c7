// The public test kit from CAF's own test framework (the kit needs neither
// it nor GoogleTest): the acceptance story, Redis frozen and released.
// CAF 0.17's framework (caf/test/unit_test.hpp, its main() from
// unit_test_impl.hpp); kit_caf1_test.cpp is the same test on CAF 1.x's.
// Its own executable: tests/actor/CMakeLists.txt picks one of the two.
#define CAF_SUITE kit

#include "caf/test/unit_test.hpp"
#include "caf/test/unit_test_impl.hpp"

#include <chrono>

#include "qsession/projection/testkit.hpp"

using namespace std::chrono_literals;

CAF_TEST(the public kit drives a freeze and a release from a CAF test) {
  qsp::testkit::kit k;
  k.produce(0, "conv-1", 1000, {"alice"});
  k.start();
  CAF_REQUIRE(k.run_until_ready());
  k.redis_freeze();
  k.produce(1, "conv-2", 2000, {"alice"});
  CAF_REQUIRE(k.run_until_state("dirty"));
  k.advance(10s);
  CAF_CHECK(!k.ready());
  k.redis_release();
  CAF_REQUIRE(k.run_until_ready());
  CAF_REQUIRE(k.run_until_offset(1, k.log_end(1)));
  CAF_CHECK(k.model_equals_redis());
  CAF_CHECK(!k.failed());
  CAF_CHECK_EQUAL(k.explain(), "");
}
