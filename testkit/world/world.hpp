// The simulated world of the test kit: in-memory fakes of the ports
// (ports/ports.hpp) with fault injection, for the actor tests and the kit.
// Every fake created by one fake_port_factory shares one fake_world (held by
// shared_ptr), so a test can inspect and modify the "outside world" (the
// Kafka log, the Redis hashes and sorted sets, the Redis Cluster's shards)
// while the projection runs, and arm faults for the next call(s) of a port.
//
// The world is made of one room per simulated service (common.hpp lists
// them); a test reaches every room's state and knobs through the world
// (`w->partitions`, `w->redis_down`, `w->shard_failover(...)`).  This header
// adds what spans the rooms: the projection's own keys (meta, checkpoints),
// and the port factory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "testkit/world/broker.hpp"
#include "testkit/world/common.hpp"
#include "testkit/world/consumer.hpp"
#include "testkit/world/ownership.hpp"
#include "testkit/world/redis.hpp"
#include "testkit/world/redis_cluster.hpp"
#include "testkit/world/redis_stores.hpp"

namespace qsp::test {

/// The state all fakes share: every room of the simulated world.
struct fake_world final : simulated_broker,
                          simulated_redis,
                          simulated_redis_cluster,
                          simulated_ownership {
  explicit fake_world(int32_t partition_count = 1);

  // -- the projection's keys (docs/DESIGN.md §4) ----------------------------------

  /// The namespace: the prefix of the projection's keys.
  std::string ns = "session_projection";
  std::string meta_key() const;
  std::string checkpoint_prefix() const;
  std::string checkpoint_key(int32_t p) const;
  bool has_meta() const;
  /// Stored next_offset of `p` (nullopt: key or field absent or not decimal).
  std::optional<int64_t> checkpoint(int32_t p) const;
  std::map<int32_t, int64_t> checkpoints() const;
  /// Writes meta / a whole checkpoint hash as a run with identity `id` would.
  void put_meta(const core::identity& id);
  void put_checkpoint(const core::identity& id, int32_t p, int64_t next_offset);
  /// Edits only the next_offset field (another writer, an operator).
  void set_next_offset(int32_t p, int64_t next_offset);
};

class fake_port_factory final : public port_factory {
public:
  explicit fake_port_factory(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::unique_ptr<broker_inspector>> make_inspector() override;
  caf::expected<std::unique_ptr<checkpoint_store>> make_checkpoint_store() override;
  caf::expected<std::unique_ptr<session_store>> make_session_store() override;
  caf::expected<std::shared_ptr<dispatch_log>> make_dispatch_log() override;
  caf::expected<std::unique_ptr<cluster_store>> make_cluster_store() override;
  const std::shared_ptr<fake_world>& world() const { return w_; }

private:
  std::shared_ptr<fake_world> w_;
};

/// Worlds made from now on (in this process) are as unkind as Redis where
/// today's rules assume it kinder (waits_as_the_product, stamps_as_read,
/// registry_in_shard, rollbacks_met_end_the_exemption): for the findings
/// tests (tests/testkit/findings_test.cpp).
void set_worlds_as_unkind_as_redis(bool on);
bool worlds_are_unkind_as_redis();

/// A world with `partition_count` empty partitions and a factory over it.
std::shared_ptr<fake_world> make_world(int32_t partition_count);
std::shared_ptr<fake_port_factory> make_fake_ports(std::shared_ptr<fake_world> w);

} // namespace qsp::test