// The Redis ports over the simulated Redis (redis.hpp) and, in Redis Cluster
// mode, its shards (redis_cluster.hpp): the checkpoint store and the session
// store.
//
// Fidelity notes:
// - The checkpoint store implements the guarded write exactly like the Lua
//   script in redis/stores.cpp (meta identity, checkpoint identity and
//   partition, stored next_offset == expected or absent for expected < 0),
//   fenced by the owner record (ownership.hpp) as core::check_owner says.
// - The session store applies ZADD GT per member; sessions() orders like
//   ZREVRANGE (score descending, then member descending).  Its sends are
//   pipelined: their replies are read (and may be lost) later, oldest first.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/cluster.hpp"
#include "testkit/world/common.hpp"
#include "testkit/world/redis_cluster.hpp"

namespace qsp::test {

class fake_checkpoint_store final : public checkpoint_store {
public:
  explicit fake_checkpoint_store(std::shared_ptr<fake_world> w) : w_(std::move(w)) {}
  caf::expected<std::string> server_version() override;
  caf::expected<std::string> maxmemory_policy() override;
  caf::expected<core::stored_state> read(const std::string& topic,
                                         int32_t partition_count) override;
  caf::expected<bool> create_meta(const core::identity& id) override;
  caf::expected<void> write_checkpoint(const core::identity& id, int32_t partition,
                                       int64_t expected, int64_t next_offset,
                                       int32_t leader_epoch = -1,
                                       uint64_t owner_epoch = 0,
                                       const std::string& owner_node = {}) override;
  caf::expected<uint64_t> claim(const std::string& topic, int32_t partition,
                                const std::string& node, int64_t now_ms,
                                uint64_t mine = 0) override;
  caf::expected<core::redis_cluster_state> cluster_state(const std::string& topic) override;
  caf::expected<void> refresh_copies(const core::identity& id,
                                     const core::copy_refresh& plan) override;

private:
  std::shared_ptr<fake_world> w_;
};

class fake_session_store final : public session_store {
public:
  explicit fake_session_store(std::shared_ptr<fake_world> w);
  caf::expected<void> apply(const std::vector<session_update>& updates) override;
  caf::expected<void> send(const std::vector<session_update>& updates) override;
  caf::expected<bool> confirm(size_t n, std::chrono::milliseconds wait) override;
  caf::expected<session_list> sessions(const std::string& user, size_t limit) override;
  /// As the default, without counting a read (calls.sessions counts pulls).
  caf::expected<void> probe() override;
  caf::expected<void>
  write_copies(const core::identity& id,
               const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) override;
  void expect_primaries(const std::map<std::string, core::judged_primary>& judged) override {
    expected_ = judged;
  }

private:
  std::map<std::string, core::judged_primary> expected_;
  /// The primaries' histories when this store was made (it learns the
  /// primaries then, as the real Redis Cluster store does): a copy is
  /// written only to the primaries it learned (redis/cluster_stores.cpp,
  /// failed_over_since).
  std::vector<std::string> replids_;
  /// What this store read of the primaries (stamps_as_read): when it was
  /// made, and again when a primary it does not know serves slots.
  simulated_redis_cluster::stamp_map learned_;
  void learn_primaries();

  /// redis_down, or a connection reset since this store's last call: drops
  /// the unread sends and answers the error; none if the connection is up.
  caf::error connection(const std::string& what);
  /// Lazy pipeline: what a send puts on the wire (counters, faults, hook)
  /// into `held`; a partial failure applies what Redis executed.
  caf::expected<void> enqueue(const std::vector<session_update>& updates,
                              std::vector<applied_update>& held);
  std::shared_ptr<fake_world> w_;
  uint64_t resets_seen_ = 0;
  struct unconfirmed {
    size_t zadds = 0;
    bool error_reply = false;  ///< one of its replies is an error
    /// moved_fault: not applied yet (the resend applies them), and how many
    /// more confirms answer "not yet".
    std::vector<applied_update> held;
    int64_t not_yet = 0;
  };
  std::deque<unconfirmed> unconfirmed_; ///< sends not confirmed yet, oldest first
};

} // namespace qsp::test
