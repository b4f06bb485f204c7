// The Redis adapters: the checkpoint store (meta + per-partition checkpoints,
// guarded writes through Lua) and the session store (pipelined ZADD GT).
#pragma once

#include <memory>

#include "ports/ports.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"

namespace qsp::redis {

/// Key names of docs/DESIGN.md §3.
std::string meta_key(const std::string& ns);
std::string checkpoint_prefix(const std::string& ns, const std::string& topic);
std::string checkpoint_key(const std::string& ns, const std::string& topic, int32_t partition);
/// The leader-epoch sidecar of a checkpoint (not under the checkpoint prefix:
/// the seven-field checkpoint hash and its stray-key scan stay as they are).
std::string epoch_key(const std::string& ns, const std::string& topic, int32_t partition);
/// docs/DESIGN.md §12: who owns a partition (node, epoch, heartbeat_ms) ...
std::string owner_key(const std::string& ns, const std::string& topic, int32_t partition);
/// ... and what its owner last published (with a TTL).
std::string status_key(const std::string& ns, const std::string& topic, int32_t partition);
/// Redis Cluster mode: the primaries the namespace has known (node id ->
/// the replids it was judged in, space-separated), in the namespace's slot.
std::string primaries_key(const std::string& ns, const std::string& topic);
/// `s` with Redis glob metacharacters escaped, for SCAN MATCH.
std::string glob_escape(const std::string& s);

/// The RESP of one `ZADD {prefix}{user} GT score member ...`: put_zadd()
/// writes at most zadd_bound() bytes at `p` and returns the end.
size_t zadd_bound(std::string_view prefix, const session_update& u);
char* put_zadd(char* p, std::string_view prefix, const session_update& u);

class redis_checkpoint_store final : public checkpoint_store {
public:
  static caf::expected<std::unique_ptr<redis_checkpoint_store>> open(const settings& cfg);

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
  void interrupt() override;

private:
  redis_checkpoint_store(std::unique_ptr<connection> conn,
                         std::unique_ptr<cluster_router> router = nullptr)
    : conn_(std::move(conn)), router_(std::move(router)) {}
  /// redis.wait-replicas after a checkpoint write (nothing when 0).
  caf::expected<void> wait_replicas();
  std::unique_ptr<connection> conn_;  ///< with Redis Cluster mode: to the namespace's shard
  std::unique_ptr<cluster_router> router_;  ///< Redis Cluster mode only
};

class redis_cluster_store final : public cluster_store {
public:
  static caf::expected<std::unique_ptr<redis_cluster_store>> open(const settings& cfg);

  caf::expected<std::vector<owned_status>> publish(const std::string& topic,
                                                  const std::string& node,
                                                  const std::vector<owned_status>& statuses,
                                                  std::chrono::milliseconds ttl,
                                                  int64_t now_ms) override;
  caf::expected<void> release(const std::string& topic, const std::string& node,
                              const std::map<int32_t, uint64_t>& partitions) override;
  caf::expected<std::vector<cluster_partition>> view(const std::string& topic,
                                                     int32_t partition_count) override;
  void interrupt() override;

private:
  explicit redis_cluster_store(std::unique_ptr<connection> conn) : conn_(std::move(conn)) {}
  std::unique_ptr<connection> conn_;
};

class redis_session_store final : public session_store {
public:
  static caf::expected<std::unique_ptr<redis_session_store>> open(const settings& cfg);

  caf::expected<void> apply(const std::vector<session_update>& updates) override;
  caf::expected<void> send(const std::vector<session_update>& updates) override;
  caf::expected<bool> confirm(size_t n, std::chrono::milliseconds wait) override;
  caf::expected<session_list> sessions(const std::string& user, size_t limit) override;
  void interrupt() override;

private:
  explicit redis_session_store(std::unique_ptr<connection> conn) : conn_(std::move(conn)) {}
  std::unique_ptr<connection> conn_;
  std::unique_ptr<char[]> buf_;      ///< reused RESP buffer
  size_t buf_capacity_ = 0;
  size_t replies_read_ = 0;          ///< of the batch being confirmed
  caf::error first_failure_;         ///< of the batch being confirmed
};

} // namespace qsp::redis
