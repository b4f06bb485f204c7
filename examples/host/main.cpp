// example-host: a CAF application (Debian's 0.17 or 1.1, one source through
// qsession/projection/caf_compat.hpp) with its own typed actors, its own
// type-ID block at caf::first_custom_type_id, its own `status` atom and its
// own `redis.*` options, embedding one or two projections (tenants) through
// the installed package or as a subproject.  docs/EMBEDDING.md walks through it.
//
//   example-host --host.mode=serve   --tenant-a.projection.dispatch-topic=... [--tenant-b....]
//       waits until every tenant is ready, prints each tenant's sessions of
//       --host.user, shuts them down
//   example-host --host.mode=respawn --host.cycles=5 --tenant-a....
//       spawns, waits ready, pulls, shuts down tenant-a N times; prints the
//       thread count after each shutdown
//   example-host --host.mode=ping --host.pings=200 --tenant-a....
//       spawns the tenants (their Redis may be down) and measures the round
//       trip to the host's own actor meanwhile
//
// Output lines are "key=value" words, for the tests.  Exit: 0 ok, 2 a tenant
// refused to spawn (bad settings), 3 a tenant refused to start, 1 otherwise.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/config_option_adder.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/type_id.hpp"
#include "caf/typed_event_based_actor.hpp"

#include <qsession/projection.hpp>

#include "gate.hpp"        // the host's sessions gate (tested in host_kit_test.cpp)
#include "messages.hpp"    // the host's own messages: a block at caf::first_custom_type_id
#include "ports/ports.hpp"  // the host's own header of that name

namespace host {

/// The host's own actor: answers its own `status` and `ping`.
using service_actor = qsp::typed_actor<
  caf::result<cache_entry>(atom::status),
  caf::result<int64_t>(atom::ping, int64_t)>;

service_actor::behavior_type service(service_actor::pointer) {
  return {
    [](atom::status) { return cache_entry{"cache-port", cache_port}; },
    [](atom::ping, int64_t x) { return x; },
  };
}

struct config : caf::actor_system_config {
  std::string mode = "serve";
  std::string user = "u1";
  int64_t cycles = 5;
  int64_t pings = 200;
  // The host's own Redis (a cache): same group name as the projection's
  // standalone options, no collision since the tenants live under their own.
  std::string redis_host = "127.0.0.1";
  int64_t redis_port = cache_port;

  config() {
    // Before the actor system exists: the host's own block (0.17: in this
    // configuration; 1.x: CAF's meta objects of the process), then the
    // projection's.
    qsp::add_type_blocks<caf::id_block::host>(*this);
    qsp::register_types(*this);
    opt_group{custom_options_, "host"}
      .add(mode, "mode", "serve|respawn|ping")
      .add(user, "user", "user whose sessions are printed")
      .add(cycles, "cycles", "respawn cycles")
      .add(pings, "pings", "round trips to the host's actor in ping mode");
    opt_group{custom_options_, "redis"}
      .add(redis_host, "host", "the host's own cache")
      .add(redis_port, "port", "the host's own cache port");
    qsp::add_options(custom_options_, "tenant-a");
    qsp::add_options(custom_options_, "tenant-b");
  }
};

/// The process's threads; with `names`, their names (comm) too.
int threads(std::string* names = nullptr) {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (auto* e = readdir(d))
      if (e->d_name[0] != '.') {
        ++n;
        if (names) {
          std::string comm;
          std::ifstream in{std::string{"/proc/self/task/"} + e->d_name + "/comm"};
          std::getline(in, comm);
          *names += (names->empty() ? "" : ",") + comm;
        }
      }
    closedir(d);
  }
  return n;
}

using clock = std::chrono::steady_clock;

struct tenant {
  std::string name;
  qsp::projection_settings settings;
  qsp::projection_actor handle;
};

/// Waits for status pushes until every tenant is ready (true) or one refused.
bool wait_ready(caf::scoped_actor& self, const std::vector<tenant*>& ts) {
  std::map<std::string, bool> ready;
  for (auto* t : ts)
    qsp::mail(self, qsp::atom::subscribe_v, caf::actor_cast<qsp::status_listener>(self)).send(t->handle);
  for (;;) {
    bool refused = false;
    self->receive([&](qsp::atom::status, const qsp::projection_status& st) {
      // Pushes name their projection: tell the tenants apart by namespace.
      for (auto* t : ts)
        if (t->settings.ns == st.ns && t->settings.topic == st.topic) {
          auto h = judge(st);
          if (h == health::refused) {
            std::cout << "refused tenant=" << t->name << " error=" << st.last_error << std::endl;
            refused = true;
          }
          ready[t->name] = h == health::ready;
        }
    });
    if (refused)
      return false;
    if (ready.size() == ts.size()
        && std::all_of(ready.begin(), ready.end(), [](auto& kv) { return kv.second; })) {
      for (auto* t : ts)
        qsp::mail(self, qsp::atom::unsubscribe_v, caf::actor_cast<qsp::status_listener>(self)).send(t->handle);
      return true;
    }
  }
}

/// Pulls `user`'s sessions the way the host's clients do: through the
/// tenant's gate (gate.hpp), which quits with the projection.
void print_sessions(caf::scoped_actor& self, tenant& t, const std::string& user) {
  auto alert = [](const std::string& name, const std::string& error) {
    std::cout << "refused tenant=" << name << " error=" << error << std::endl;
  };
  auto g = spawn_gate(self->system(), t.name, t.handle, alert, std::chrono::seconds(10));
  qsp::mail(self, atom::pull_v, user, uint32_t{1000}).request(g, std::chrono::seconds(15))
    .receive(
      [&](const qsp::session_list& list) {
        std::cout << "sessions tenant=" << t.name << " count=" << list.size() << std::endl;
        for (auto& e : list)
          std::cout << "session tenant=" << t.name << " conversation=" << e.conversation_id
                    << " last_active=" << e.last_active << std::endl;
      },
      [&](const caf::error& err) {
        std::cout << "pull-error tenant=" << t.name << " error=" << qsp::describe(err)
                  << std::endl;
      });
}

bool shutdown(caf::scoped_actor& self, tenant& t) {
  bool ok = false;
  auto t0 = clock::now();
  qsp::mail(self, qsp::atom::shutdown_v).request(t.handle, std::chrono::seconds(60))
    .receive([&](caf::ok_atom) { ok = true; },
             [&](const caf::error& err) {
               std::cout << "shutdown-error tenant=" << t.name << " error=" << qsp::describe(err)
                         << std::endl;
             });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0).count();
  std::cout << "stopped tenant=" << t.name << " ok=" << ok << " ms=" << ms << std::endl;
  t.handle = qsp::projection_actor{};
  return ok;
}

int run(caf::actor_system& sys, config& cfg) {
  std::vector<tenant> ts;
  for (std::string name : {"tenant-a", "tenant-b"}) {
    if (!caf::get_if(&cfg.content, name + ".projection.dispatch-topic"))
      continue;
    auto s = qsp::read_settings(cfg.content, name);
    if (!s) {
      std::cout << "bad-settings tenant=" << name << " error=" << qsp::describe(s.error())
                << std::endl;
      return 2;
    }
    ts.push_back(tenant{name, std::move(*s), qsp::projection_actor{}});
  }
  if (ts.empty()) {
    std::cout << "no tenant configured (--tenant-a.projection.dispatch-topic=...)" << std::endl;
    return 2;
  }
  auto svc = sys.spawn(service);
  caf::scoped_actor self{sys};
  // Spawns one tenant's projection: 0, or 2 when its settings are refused.
  auto spawn_one = [&](tenant& t) -> int {
    auto p = qsp::spawn_projection(sys, t.settings);
    if (!p) {
      std::cout << "spawn-refused tenant=" << t.name << " error=" << qsp::describe(p.error())
                << std::endl;
      return 2;
    }
    t.handle = *p;
    return 0;
  };
  auto spawn_all = [&]() -> int {
    for (auto& t : ts)
      if (int rc = spawn_one(t); rc != 0)
        return rc;
    return 0;
  };
  auto stop_all = [&] {
    bool ok = true;
    for (auto& t : ts)
      if (t.handle)
        ok &= shutdown(self, t);
    return ok;
  };
  std::vector<tenant*> all;
  for (auto& t : ts)
    all.push_back(&t);
  int rc = 0;
  if (cfg.mode == "serve") {
    if ((rc = spawn_all()) != 0) {
      stop_all();
      return rc;
    }
    if (!wait_ready(self, all)) {
      stop_all();
      return 3;
    }
    for (auto& t : ts) {
      std::cout << "ready tenant=" << t.name << std::endl;
      print_sessions(self, t, cfg.user);
    }
    return stop_all() ? 0 : 1;
  }
  if (cfg.mode == "respawn") {
    auto& t = ts.front();
    int baseline = -1;
    for (int64_t i = 1; i <= cfg.cycles; ++i) {
      if (int rc = spawn_one(t); rc != 0)
        return rc;
      if (!wait_ready(self, {&t})) {
        shutdown(self, t);
        return 3;
      }
      print_sessions(self, t, cfg.user);
      if (!shutdown(self, t))
        return 1;
      // A detached actor's thread ends just after its last message: give
      // the count a bounded moment to settle before reading it.
      // A detached actor's thread ends just after its down message: let the
      // count settle (bounded) before reading it.  The first cycle sets the
      // baseline (it also starts the Kafka handle reaper).
      auto settle = [&](int target) {
        int last = threads(), stable = 0;
        for (int k = 0; k < 200 && (target < 0 ? stable < 10 : last > target); ++k) {
          self->receive(caf::after(std::chrono::milliseconds(10)) >> [] {});
          int now = threads();
          stable = now == last ? stable + 1 : 0;
          last = now;
        }
      };
      settle(baseline);
      if (baseline < 0)
        baseline = threads();
      std::string names;
      std::cout << "cycle=" << i << " threads=" << threads(&names) << " names=" << names
                << std::endl;
    }
    return 0;
  }
  if (cfg.mode == "ping") {
    if ((rc = spawn_all()) != 0) {
      stop_all();
      return rc;
    }
    std::vector<int64_t> us;
    for (int64_t i = 0; i < cfg.pings; ++i) {
      auto t0 = clock::now();
      qsp::mail(self, host::atom::ping_v, i).request(svc, std::chrono::seconds(10))
        .receive([](int64_t) {}, [](const caf::error&) {});
      us.push_back(
        std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - t0).count());
      // Spread the pings over the projections' failing start-up.
      self->receive(caf::after(std::chrono::milliseconds(20)) >> [] {});
    }
    std::sort(us.begin(), us.end());
    for (auto& t : ts)
      qsp::mail(self, qsp::atom::status_v).request(t.handle, std::chrono::seconds(10))
        .receive(
          [&](const qsp::projection_status& st) {
            std::cout << "state tenant=" << t.name << " state=" << st.state
                      << " ready=" << st.ready << std::endl;
          },
          [](const caf::error&) {});
    std::cout << "pings=" << us.size() << " p50_us=" << us[us.size() / 2]
              << " p99_us=" << us[us.size() * 99 / 100] << " max_us=" << us.back() << std::endl;
    qsp::mail(self, host::atom::status_v).request(svc, std::chrono::seconds(10))
      .receive([](const cache_entry& e) { std::cout << "host-status " << e.key << "=" << e.value << std::endl; },
               [](const caf::error&) {});
    return stop_all() ? 0 : 1;
  }
  std::cout << "unknown --host.mode=" << cfg.mode << std::endl;
  return 2;
}

} // namespace host

int main(int argc, char** argv) {
  host::config cfg;
  if (auto err = cfg.parse(argc, argv)) {
    std::cerr << "error: " << caf::to_string(err) << '\n';
    return 2;
  }
  caf::actor_system sys{cfg};
  return host::run(sys, cfg);
}
