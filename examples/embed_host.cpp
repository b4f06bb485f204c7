// Embedding the projection in an existing CAF application, through the public
// headers only: the host owns the actor_system, spawns the projection inside
// it, waits for readiness and serves PULL_SESSION_LIST through its gate.
//
//   qsp-embed-example BOOTSTRAP REDIS_HOST REDIS_PORT TOPIC PARTITIONS NS CONVS_PREFIX USER
//
// Prints the user's sessions once ready and exits 0; exits 3 if refused.
#include <iostream>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include <qsession/projection.hpp>

int main(int argc, char** argv) {
  if (argc != 9) {
    std::cerr << "usage: qsp-embed-example BOOTSTRAP REDIS_HOST REDIS_PORT TOPIC PARTITIONS NS "
                 "CONVS_PREFIX USER\n";
    return 2;
  }
  // 1. The host's own config: register the projection's message types.
  caf::actor_system_config cfg;
  qsp::register_types(cfg);
  caf::actor_system sys{cfg};

  // 2. One settings struct: the projection builds its adapters from it.
  qsp::projection_settings ps;
  ps.topic = argv[4];
  ps.partition_count = std::stoi(argv[5]);
  ps.ns = argv[6];
  ps.convs_prefix = argv[7];
  ps.kafka.bootstrap_servers = argv[1];
  ps.redis.host = argv[2];
  ps.redis.port = static_cast<uint16_t>(std::stoi(argv[3]));

  auto proj = qsp::spawn_projection(sys, ps);
  if (!proj) {
    std::cerr << qsp::describe(proj.error()) << '\n';
    return 2;
  }

  // 3. Subscribe to status pushes; gate PULL_SESSION_LIST on readiness.
  caf::scoped_actor self{sys};
  qsp::mail(self, qsp::atom::subscribe_v, caf::actor_cast<qsp::status_listener>(self)).send(*proj);
  int rc = -1;
  while (rc < 0) {
    self->receive([&](qsp::atom::status, const qsp::projection_status& st) {
      if (st.state == "refused") {
        std::cerr << "refused: " << st.last_error << '\n';
        rc = 3;
      } else if (st.ready) {
        qsp::mail(self, qsp::atom::pull_v, std::string{argv[8]}, uint32_t{10}).request(*proj, std::chrono::seconds(10))
          .receive(
            [&](const qsp::session_list& list) {
              for (auto& e : list)
                std::cout << e.conversation_id << ' ' << e.last_active << '\n';
              rc = 0;
            },
            [&](const caf::error& err) {
              std::cerr << qsp::describe(err) << '\n';
              rc = 1;
            });
      }
    });
  }
  // 4. Shut down and wait until all of its I/O has stopped.
  qsp::mail(self, qsp::atom::shutdown_v).request(*proj, std::chrono::seconds(30))
    .receive([](caf::ok_atom) {},
             [&](const caf::error& err) { std::cerr << qsp::describe(err) << '\n'; });
  return rc;
}
