// qsp::register_types from several threads at once, in a process that has
// not registered the projection's types yet: what two kits do when a host
// (or qsp_schedule_tests) runs them on two threads.  On CAF 1.x the type-ID
// blocks go into one process-wide table that CAF grows without a lock; two
// threads growing it at once freed the same array twice ("double free or
// corruption" about one run in three of qsp_schedule_tests).
//
// Each case forks a fresh child (nothing registered yet), starts the threads
// at one barrier, and the parent asserts the child ended normally and saw
// every block's types.  This program must not register anything before the
// fork: it links no tests/support/caf_types.cpp.
#include <gtest/gtest.h>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "caf/actor_system_config.hpp"

#include "qsession/projection/caf_compat.hpp"
#include "qsession/projection/projection.hpp"

#if CAF_MAJOR_VERSION >= 1
#  include "caf/detail/meta_object.hpp"
#  include "caf/type_id.hpp"
#endif

namespace {

constexpr int threads = 8;
constexpr int children = 40;

/// The child's work: `threads` threads register at once; exit code 0 if
/// every thread returned and (1.x) the process-wide table has the
/// projection's types, 3 if not.
[[noreturn]] void child() {
  std::atomic<int> waiting{threads};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&] {
      caf::actor_system_config cfg;
      --waiting;
      while (waiting.load() > 0) {
      }
      qsp::register_types(cfg);
    });
  for (auto& t : ts)
    t.join();
#if CAF_MAJOR_VERSION >= 1
  auto* meta = caf::detail::global_meta_object_or_null(caf::type_id_v<qsp::ec>);
  if (meta == nullptr || meta->type_name != caf::type_name_v<qsp::ec>)
    _exit(3);
#endif
  _exit(0);
}

TEST(RegisterTypes, ManyThreadsAtOnceInAFreshProcess) {
  for (int n = 0; n < children; ++n) {
    auto pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0)
      child();
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child " << n << " of " << children
                                   << " died by signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                   << " while " << threads << " threads registered the types";
    ASSERT_EQ(WEXITSTATUS(status), 0) << "child " << n << ": the types are missing";
  }
}

} // namespace
