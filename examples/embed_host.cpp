// Embedding the projection in an existing CAF application: the host owns the
// actor_system, spawns the projection inside it, waits for readiness and
// serves PULL_SESSION_LIST through the projection's gate.
//
//   qsp-embed-example BOOTSTRAP REDIS_HOST REDIS_PORT TOPIC PARTITIONS NS CONVS_PREFIX USER
//
// Prints the user's sessions once ready and exits 0; exits 3 if refused.
#include <iostream>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include "actors/projection.hpp"
#include "adapters/real_ports.hpp"
#include "messages/registration.hpp"

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

  // 2. Typed settings and the real adapters.
  qsp::projection_settings ps;
  ps.topic = argv[4];
  ps.partition_count = std::stoi(argv[5]);
  ps.ns = argv[6];
  ps.convs_prefix = argv[7];
  qsp::real_ports_settings rs;
  rs.kafka.client.bootstrap_servers = argv[1];
  rs.kafka.topic = ps.topic;
  rs.redis.host = argv[2];
  rs.redis.port = static_cast<uint16_t>(std::stoi(argv[3]));
  rs.redis.ns = ps.ns;
  rs.redis.convs_prefix = ps.convs_prefix;

  auto proj = qsp::spawn_projection(sys, ps, qsp::make_real_ports(rs),
                                    std::make_shared<qsp::core::json_decoder>());
  if (!proj) {
    std::cerr << qsp::describe(proj.error()) << '\n';
    return 2;
  }

  // 3. Subscribe to readiness changes; gate PULL_SESSION_LIST on them.
  caf::scoped_actor self{sys};
  self->send(*proj, qsp::atom::subscribe_v, caf::actor{self});
  int rc = -1;
  while (rc < 0) {
    self->receive([&](qsp::atom::status, const qsp::projection_status& st) {
      if (st.state == "refused") {
        std::cerr << "refused: " << st.last_error << '\n';
        rc = 3;
      } else if (st.ready) {
        self->request(*proj, std::chrono::seconds(10), qsp::atom::pull_v, std::string{argv[8]},
                      uint32_t{10})
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
  self->send(*proj, qsp::atom::shutdown_v);
  return rc;
}
