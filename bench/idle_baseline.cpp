// qsp-bench-idle-baseline [--scheduler.policy=P] [--seconds=S]: an actor
// system with no actor at all, alive for S seconds.  scripts/idle-cpu
// measures it beside an idle projection: what CAF's scheduler costs by
// itself, so the projection's own share can be told apart.
#include <chrono>
#include <thread>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/config_option_adder.hpp"

namespace {

struct config : caf::actor_system_config {
  int64_t seconds = 60;
  config() { opt_group{custom_options_, "global"}.add(seconds, "seconds", "how long to live"); }
};

} // namespace

int main(int argc, char** argv) {
  config cfg;
  if (auto err = cfg.parse(argc, argv))
    return 2;
  caf::actor_system sys{cfg};
  std::this_thread::sleep_for(std::chrono::seconds(cfg.seconds));
  return 0;
}
