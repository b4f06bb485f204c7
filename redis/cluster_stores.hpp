// The Redis adapters of Redis Cluster mode (docs/DESIGN.md §15): the session
// store that splits each batch by shard, and the reading of every primary's
// copy for the start.  The checkpoint and cluster stores of this mode are
// the standalone ones on a connection to the namespace's shard (every key
// of the namespace shares one slot: see open_namespace_shard()).
#pragma once

#include <deque>
#include <memory>

#include "ports/ports.hpp"
#include "qsession/projection/metrics.hpp"
#include "redis/cluster.hpp"

namespace qsp::redis {

/// A connection to the primary serving the namespace's slot (cfg.ns is a
/// hash tag), found through the seeds' slot map.
caf::expected<std::unique_ptr<connection>> open_namespace_shard(const settings& cfg);

/// Every primary of the router's map, its prerequisites and its copy of
/// `topic` (core::shard_report), and the slots none serves.
caf::expected<core::redis_cluster_state> read_cluster_state(cluster_router& router,
                                                            const std::string& topic);

/// After the registry was read into `st`: for each primary
/// core::gone_primaries() names, whether its copy key exists where its
/// lowest recorded slot is served now (EXISTS, one per primary), into
/// st.gone_copy_found.
caf::error find_gone_copies(cluster_router& router, const std::string& topic,
                            core::redis_cluster_state& st);

/// A start's copies (core::copy_refresh): refuses (ec::redis_unavailable:
/// the start is judged again) unless every primary is one `plan` judged, in
/// the same history and under the same copy tag; writes each primary its
/// copy of plan.positions, then WAITs on every primary for all of its
/// replicas: one of plan.must_wait whose replicas do not all acknowledge
/// within half the command timeout is ec::redis_unavailable naming it.
caf::error refresh_cluster_copies(cluster_router& router, const core::identity& id,
                                  const core::copy_refresh& plan);

/// Pipelined ZADD GT split by shard: each batch's commands go to every
/// shard at once; confirm() reads every shard's replies, following MOVED
/// (the map is refreshed and the command resent to the new owner) and ASK
/// (ASKING, then the command, at the target, for that command only) on a
/// connection of their own, and fails on TRYAGAIN/CLUSTERDOWN/LOADING
/// (transient).  A batch is confirmed only once every reply, resends
/// included, was read.
class redis_cluster_session_store final : public session_store {
public:
  /// `stats` (may be null) gets the per-primary counters.
  static caf::expected<std::unique_ptr<redis_cluster_session_store>>
  open(const settings& cfg, std::shared_ptr<metrics> stats = nullptr);

  caf::expected<void> apply(const std::vector<session_update>& updates) override;
  caf::expected<void> send(const std::vector<session_update>& updates) override;
  caf::expected<bool> confirm(size_t n, std::chrono::milliseconds wait) override;
  caf::expected<session_list> sessions(const std::string& user, size_t limit) override;
  caf::expected<void>
  write_copies(const core::identity& id,
               const std::map<int32_t, std::pair<int64_t, int32_t>>& positions) override;
  void expect_primaries(const std::map<std::string, core::judged_primary>& judged) override {
    expected_ = judged;
  }
  void interrupt() override;

  /// Redirections followed so far (MOVED, ASK), for the metrics.
  uint64_t moved() const { return moved_; }
  uint64_t asked() const { return asked_; }

private:
  /// The primaries the generation's start judged.
  std::map<std::string, core::judged_primary> expected_;
  /// ec::redis_unavailable unless every primary of facts_ is one of
  /// expected_, with the same replid and copy tag.
  caf::error check_judged() const;
  /// The check before issue 32 (the mutant copies_one_failover_back).
  caf::error one_failover_back() const;
  /// CLUSTER INFO of every primary of facts_: their epochs as they are now,
  /// stamped on the copies about to be written (issue 45, rule 4).
  caf::error read_epochs();
  redis_cluster_session_store(std::unique_ptr<cluster_router> r, std::shared_ptr<metrics> stats)
    : router_(std::move(r)), stats_(std::move(stats)) {}
  void count(const address& to, const metrics::shard_counters& add) {
    if (stats_)
      stats_->count_shard(to.to_string(), add);
  }
  /// The commands of one batch for one primary, kept until their replies
  /// are read (a redirected one is resent from here).
  struct part {
    address to;
    std::string resp;
    std::vector<uint32_t> ends;  ///< end of each command in resp
    size_t read = 0;             ///< replies read
  };
  struct batch {
    std::vector<part> parts;
  };
  /// Reads the replies of `p` until all are in or `deadline` passes.
  caf::expected<bool> read_part(part& p, std::chrono::steady_clock::time_point deadline,
                                bool blocking);
  /// Resends command `i` of `p` after a MOVED/ASK (synchronously); a
  /// failure is kept in first_failure_ unless the connection is gone.
  caf::error follow(const part& p, size_t i, const redirection& r);
  /// The node ids and replids of the primaries (for the copies).
  caf::error learn_primaries();

  std::unique_ptr<cluster_router> router_;
  std::deque<batch> batches_;
  caf::error first_failure_;
  std::string key_;  ///< scratch: a session set's key
  std::vector<primary_facts> facts_;
  uint64_t moved_ = 0, asked_ = 0;
  std::shared_ptr<metrics> stats_;
};

} // namespace qsp::redis
