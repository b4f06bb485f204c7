// Redis Cluster mode, the I/O part (docs/DESIGN.md §15): the slot map read from
// the seed nodes, and connections to the primaries.  Routing is done here,
// over the same hiredis connections as the other modes (TLS with the host
// check, ACL user, timeouts, interrupt, the pipelined ZADD fast path), not by
// a second client library: see docs/PERFORMANCE.md, "Redis Cluster mode".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caf/expected.hpp"
#include "redis/cluster_map.hpp"
#include "redis/connection.hpp"

namespace qsp::redis {

/// What a start checks and records of one primary.
struct primary_facts {
  std::string node_id;
  std::string address;                 ///< host:port
  std::vector<slot_range> slots;       ///< as the slot map says
  size_t replicas = 0;                 ///< as the slot map says
  std::string replid;                  ///< INFO replication master_replid
  std::string replid2;                 ///< master_replid2 (zero_replid: none)
  std::string version;                 ///< redis_version
  std::string maxmemory_policy;
  std::string cluster_state;           ///< CLUSTER INFO cluster_state
  int64_t config_epoch = -1;           ///< CLUSTER INFO cluster_my_epoch
  int64_t current_epoch = -1;          ///< CLUSTER INFO cluster_current_epoch
};

/// A MOVED or ASK error reply: where the slot is (now, or for this command).
struct redirection {
  bool ask = false;
  uint16_t slot = 0;
  address to;
};
/// The "field:value" lines of an INFO or CLUSTER INFO text (section
/// headers and blank lines skipped, "\r\n" or "\n").
std::map<std::string, std::string> info_fields(std::string_view text);
/// Parses "MOVED 3999 127.0.0.1:6381" / "ASK ..."; nullopt for any other text.
std::optional<redirection> parse_redirection(std::string_view error_text);
/// TRYAGAIN, CLUSTERDOWN, LOADING: the cluster is reorganising or
/// recovering (transient: the node goes dirty and restarts).
bool transient_cluster_error(std::string_view error_text);

/// Every key of `c`'s server matching `pattern` (SCAN MATCH, 1000 a round,
/// until the cursor returns to 0), handed to `visit`; an error of SCAN or
/// of `visit` ends it.
caf::error scan_keys(connection& c, const std::string& pattern,
                     const std::function<caf::error(const std::string& key)>& visit);

/// The slot map and one connection per primary, opened on first use.  Not
/// thread-safe but for interrupt().
class cluster_router {
public:
  /// Asks the seeds (cfg.cluster_nodes), in order, for CLUSTER SLOTS; the
  /// first answer wins.  The error names every seed and why.
  static caf::expected<std::unique_ptr<cluster_router>> open(const settings& cfg);

  /// Re-reads CLUSTER SLOTS from `first` (a MOVED's target: it knows it
  /// owns the slot, where other nodes may not have heard yet), else the
  /// primaries already known, else the seeds.
  caf::error refresh(const address* first = nullptr);
  const slot_map& map() const { return map_; }
  const settings& config() const { return cfg_; }

  /// The connection to the primary of shard `i` of map() (the pipeline
  /// lane).
  caf::expected<connection*> primary(size_t i);
  /// A connection to `at`, opened on first use and kept (a MOVED/ASK
  /// target, or a primary's second connection: see `lane`).  Lanes keep
  /// connections to one address apart (e.g. pipelined ZADDs and
  /// synchronous resends).
  caf::expected<connection*> at(const address& to, int lane = 0);
  /// Forgets the connection to `to` on `lane`: after an I/O error on it.
  /// Only that lane's: a caller may hold another lane's connection (the
  /// pipelined ZADDs' while a resend or a map refresh fails elsewhere).
  void drop(const address& to, int lane = 0);
  /// The lanes: 0 pipelined ZADDs, 1 synchronous commands (resends, copies,
  /// reads), 2 the slot map (refresh).
  static constexpr int pipeline_lane = 0, sync_lane = 1, map_lane = 2;

  /// CLUSTER MYID, INFO and CLUSTER INFO of every primary of map().
  caf::expected<std::vector<primary_facts>> facts();

  void interrupt();

private:
  explicit cluster_router(settings cfg) : cfg_(std::move(cfg)) {}
  caf::error read_map(connection& c, const std::string& host);

  settings cfg_;
  slot_map map_;
  std::mutex mtx_;  ///< guards conns_ against interrupt()
  std::map<std::pair<std::string, int>, std::unique_ptr<connection>> conns_;
  bool interrupted_ = false;
};

} // namespace qsp::redis
