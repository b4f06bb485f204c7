// The simulated ownership store (docs/CLUSTER.md): the owner records and
// statuses a namespace's nodes keep in Redis (redis.hpp), their expiry on
// the world's clock, and its port, the cluster store.  The claim and the
// fence of a checkpoint write are the checkpoint store's (redis_stores.hpp),
// over these records.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "testkit/world/common.hpp"

namespace qsp::test {

/// The ownership room of the world.
struct simulated_ownership : virtual world_core {
  /// Drops the statuses whose TTL ran out (called by the cluster store).
  void expire_statuses();
  /// The owner record of `p` of `topic` as core::owner_record (absent:
  /// present false), and its key (default: this world's topic).
  core::owner_record owner(const std::string& topic, int32_t p) const;
  std::string owner_key(const std::string& topic, int32_t p) const;
  std::string owner_key(int32_t p) const;

  /// At the start of a cluster store's publish, with the statuses it is about
  /// to publish (a test may change owner records here: what the node's
  /// claims meanwhile became).  Runs under the lock, inside the port call.
  std::function<void(const std::vector<owned_status>&)> before_publish;

private:
  fake_world& world();
  const fake_world& world() const;
};

/// The cluster store over the world's hashes.  A status expires `ttl` after
/// its publish on the world's clock (fake_world::now_ms; without one, it
/// lives until released or overwritten).
class fake_cluster_store final : public cluster_store {
public:
  explicit fake_cluster_store(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::vector<owned_status>> publish(const std::string& topic, const std::string& node,
                                              const std::vector<owned_status>& statuses,
                                              std::chrono::milliseconds ttl,
                                              int64_t now_ms) override;
  caf::expected<void> release(const std::string& topic, const std::string& node,
                              const std::map<int32_t, uint64_t>& partitions) override;
  caf::expected<std::vector<cluster_partition>> view(const std::string& topic,
                                                     int32_t partition_count) override;

private:
  std::shared_ptr<fake_world> w_;
};

} // namespace qsp::test
