// A small Redis Sentinel topology owned by one test: a primary, replicas and
// Sentinels (`redis-server --sentinel`), each on a free loopback port in its
// own temp dir, stopped by PID when the owner goes out of scope.  Sized for
// fast failovers: down-after-milliseconds 1000, quorum 2.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "tests/support/integration.hpp"

namespace qsp::test {

/// One `redis-server <conf> --sentinel` process.
struct private_sentinel {
  std::string dir;
  uint16_t port = 0;
  int pid = -1;

  /// Monitors `master_name` at 127.0.0.1:`primary_port` with `quorum`;
  /// `extra_conf` lines go to its sentinel.conf.
  private_sentinel(const std::string& master_name, uint16_t primary_port, int quorum,
                   const std::vector<std::string>& extra_conf = {});
  ~private_sentinel();
  void stop();
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

class sentinel_set {
public:
  /// Starts a primary, `replicas` replicas of it and `sentinels` Sentinels;
  /// `server_extra` goes to every redis-server (primary and replicas).
  explicit sentinel_set(int replicas = 2, int sentinels = 3,
                        std::vector<std::string> server_extra = {});
  ~sentinel_set();
  sentinel_set(const sentinel_set&) = delete;
  sentinel_set& operator=(const sentinel_set&) = delete;

  const std::string master_name = "qsp-primary";
  /// [0] is the first primary.
  std::vector<std::unique_ptr<private_redis>> servers;
  std::vector<std::unique_ptr<private_sentinel>> sentinels;

  /// "127.0.0.1:p" of every Sentinel, in order.
  std::vector<std::string> sentinel_list() const;
  /// The node option, --redis.sentinels=["127.0.0.1:p",...].
  std::string sentinels_option() const;

  /// Waits (bounded) until every Sentinel sees the primary, every replica
  /// (link up) and the other Sentinels: a failover can then happen.
  bool wait_settled(std::chrono::milliseconds limit = std::chrono::seconds(30));
  /// The port Sentinel `i` names as the primary (0 if it does not answer).
  uint16_t primary_port_per(size_t i) const;
  /// The server whose port `port` is (nullptr if none).
  private_redis* server_at(uint16_t port);
  /// Waits (bounded) until every live Sentinel names a primary other than
  /// `old_port`, that server says ROLE master, and every other live server
  /// lists it as its master with the link up.  Returns the new port (0 on
  /// timeout).
  uint16_t wait_failover_from(uint16_t old_port,
                              std::chrono::milliseconds limit = std::chrono::seconds(60));
  /// SENTINEL FAILOVER through Sentinel 0; true if it accepted.
  bool failover();

  /// redis::settings resolving through these Sentinels.
  redis::settings settings(const std::string& ns, const std::string& convs_prefix) const;
};

/// redis-cli against 127.0.0.1:port; its stdout ("" on failure).
std::string cli(uint16_t port, const std::string& args);

} // namespace qsp::test
