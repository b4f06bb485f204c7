// qsp-bench-idle-baseline [--scheduler.policy=P] [--seconds=S]: an actor
// system with no actor at all, alive for S seconds.  scripts/idle-cpu
// measures it beside an idle projection: what CAF's scheduler costs by
// itself, so the projection's own share can be told apart.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/config_option_adder.hpp"

#include "qsession/projection/caf_compat.hpp"

namespace {

struct config : caf::actor_system_config {
  int64_t seconds = 60;
  config() { opt_group{custom_options_, "global"}.add(seconds, "seconds", "how long to live"); }
};

} // namespace

int main(int argc, char** argv) {
  config cfg;
  qsp::add_type_blocks<>(cfg); // CAF 1.x: its own meta objects first
  // --scheduler.policy as the node takes it, on every CAF version.
  std::vector<std::string> names{argv, argv + argc};
  std::vector<char*> args;
  for (auto& a : names) {
    a = qsp::caf_cli_arg(a);
    args.push_back(a.data());
  }
  if (auto err = cfg.parse(static_cast<int>(args.size()), args.data()))
    return 2;
  caf::actor_system sys{cfg};
  std::this_thread::sleep_for(std::chrono::seconds(cfg.seconds));
  return 0;
}
