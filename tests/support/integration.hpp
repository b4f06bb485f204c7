// Helpers for integration tests against the real services started by
// scripts/services (addresses in .services/env).  Each test uses its own
// topic, namespace and key prefix.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "core/dispatch.hpp"
#include "qsession/projection/settings.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"

namespace qsp::test {

struct services {
  std::string redis_host;
  uint16_t redis_port = 0;          ///< the HA set: the primary at its start
  std::string kafka_bootstrap;      ///< the HA set: every broker, comma-separated

  std::string env_file;             ///< the file these come from
  std::string state_dir;            ///< its directory (the set's QSP_SERVICES_DIR)
  // The replicated set of `scripts/services start --ha` (QSP_SERVICES_TOPOLOGY=ha);
  // false and empty for the default set.
  bool ha = false;
  std::string redis_master_name;              ///< Sentinel's name of the primary
  std::vector<std::string> redis_sentinels;   ///< host:port
  std::vector<std::string> redis_replicas;    ///< host:port, at the set's start
  std::map<int, std::string> redis_nodes;     ///< node id -> host:port
  std::map<int, std::string> kafka_brokers;   ///< node id -> host:port
  // The HA set's fault proxy (toxiproxy): its API ("host:port"), and the
  // brokers as a client of their PROXIED listener sees them (every address
  // a toxiproxy proxy named kafka-<id>); empty when the set has none.
  std::string toxiproxy_api;
  std::string kafka_proxied_bootstrap;
  std::map<int, std::string> kafka_proxies;   ///< node id -> host:port of its proxy
};

/// Reads QSP_SERVICES_ENV or the repo's .services/env; aborts the test run
/// with a clear message when the services are not running.
const services& env();

/// The HA set (scripts/services start --ha), read from QSP_SERVICES_ENV when
/// set, else from the repo's .services-ha/env (where scripts/test --ha starts
/// it), else from .services/env; nullptr when none of these describes an HA
/// set, with the reason in `why`.  HA tests skip then.
const services* ha_env(std::string* why = nullptr);

// In a gtest body: skips without an HA set; fails instead when
// QSP_REQUIRE_HA is set (scripts/test --ha), so a set that is not found
// cannot pass as skipped.
#define REQUIRE_HA_SET()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (qsp::test::ha_env(&why_) == nullptr) {             \
      if (std::getenv("QSP_REQUIRE_HA") != nullptr)        \
        FAIL() << why_;                                    \
      GTEST_SKIP() << why_;                                \
    }                                                      \
  } while (false)

/// Every key matching `pattern` on every primary of `router`, DELeted
/// (redis::scan_keys); how many, or -1 after an ADD_FAILURE naming the error.
long long delete_cluster_keys(redis::cluster_router& router, const std::string& pattern);

/// KEY=VALUE lines of an env file ("export " prefixes allowed), read now.
std::map<std::string, std::string> read_env_file(const std::string& file);

/// A service set of scripts/services described by its env file
/// (QSP_SERVICES_TOPOLOGY names it: "secure", "rcluster", ...).
struct service_set {
  std::map<std::string, std::string> env;
  std::string file;
  std::string dir;  ///< its QSP_SERVICES_DIR
  /// The value of `key` ("" when absent).
  std::string at(const std::string& key) const;
  /// The first line of the file the value of `file_key` names (a password).
  std::string secret(const std::string& file_key) const;
};

/// The set of `topology`: from QSP_SERVICES_ENV if that file describes it,
/// else from <repo>/<dir_name>/env (where scripts/test starts it); nullptr
/// otherwise, with the reason in `why` (naming `start_hint`).  Read once.
const service_set* find_set(const std::string& topology, const std::string& dir_name,
                            const std::string& start_hint, std::string* why);

/// The Redis Cluster set (scripts/services start --redis-cluster), as
/// find_set finds it: the rcluster and rcluster_migration tests share it.
const service_set* redis_cluster_set(std::string* why);

// In a gtest body: skips without the set found by `find`; fails instead
// when the environment variable `require` is set (scripts/test), so a set
// that is not found cannot pass as skipped.
#define REQUIRE_SERVICE_SET(find, require)                 \
  do {                                                     \
    std::string why_;                                      \
    if ((find)(&why_) == nullptr) {                        \
      if (std::getenv(require) != nullptr)                 \
        FAIL() << why_;                                    \
      GTEST_SKIP() << why_;                                \
    }                                                      \
  } while (false)

/// Runs `scripts/services ARGS` on the set `s` (QSP_SERVICES_DIR = its state
/// dir), e.g. "kill-broker 2"; its exit code.
int services_cmd(const services& s, const std::string& args);

/// Client settings for the brokers of `s`.
kafka::client_settings kafka_client(const services& s);

/// A connection to a Redis or Sentinel at "host:port"; aborts if it cannot connect.
std::unique_ptr<redis::connection> redis_conn_at(const std::string& host_port);

/// One partition as the cluster's metadata describes it (broker node ids).
struct partition_info {
  int32_t leader = -1;
  std::vector<int32_t> replicas;
  std::vector<int32_t> isr;
};
/// nullopt (reason in `why`) if the metadata request fails or lacks the partition.
std::optional<partition_info> describe_partition(const kafka::client_settings& cfg,
                                                 const std::string& topic, int32_t partition,
                                                 std::string* why = nullptr);
/// A topic config's value as the broker reports it (DescribeConfigs); nullopt
/// (reason in `why`) if the request fails or the key is missing.
std::optional<std::string> topic_config(const kafka::client_settings& cfg,
                                        const std::string& topic, const std::string& key,
                                        std::string* why = nullptr);

/// The pid scripts/services recorded for Kafka node `id` of the set `s`
/// (KAFKA_PIDS, re-read from its env file: fault commands rewrite it); -1 if
/// the node is not running or not listed.
int kafka_broker_pid(const services& s, int id);

/// Every committed record of `topic`/`partition` (read_committed, from the
/// log start to its end as the leader reports it) as (offset, value); nullopt
/// (reason in `why`) on an error or if the end is not reached in `limit`.
std::optional<std::vector<std::pair<int64_t, std::string>>>
read_committed_log(const kafka::client_settings& cfg, const std::string& topic,
                   int32_t partition, std::chrono::milliseconds limit, std::string* why = nullptr);

/// One line per fault scenario that scripts/soak --ha adds up (stdout):
/// "soak-result: kind=K faults=F records=R entries_checked=E lost=L overshoots=O refusals=X".
/// `lost`: entries of the test's model missing or stale in Redis at the end;
/// `overshoots`: entries missing below a checkpoint sampled during the fault;
/// `refusals`: refusals of the node (exit 3 or a logged refusal).
void soak_result(const std::string& kind, int faults, uint64_t records, uint64_t entries_checked,
                 uint64_t lost, uint64_t overshoots, int refusals);

/// A name unique to this process and call: prefix-<pid>-<n>.
std::string unique_name(const std::string& prefix);

kafka::client_settings kafka_client();
redis::settings redis_settings(const std::string& ns, const std::string& convs_prefix);
/// Projection settings against the test services.
projection_settings projection_settings_for(const std::string& topic, int32_t partitions,
                                            const std::string& ns,
                                            const std::string& convs_prefix);

/// A connection for checks and direct edits.
std::unique_ptr<redis::connection> redis_conn();
/// Runs a command and returns the reply as text (integers in decimal), or "ERR:<msg>".
std::string redis_cmd(redis::connection& c, const std::vector<std::string>& argv);
/// A sorted set as member -> score.
std::map<std::string, int64_t> zset(redis::connection& c, const std::string& key);

/// Opens a connection with `cfg` (its command_timeout_ms set), blocks it in
/// a BLPOP that never returns and checks that the read times out, naming the
/// timeout, well before 5 s.
void expect_blocked_read_times_out(const redis::settings& cfg);

struct cli_result {
  int rc = -1;
  std::string out;
  std::string err;
};

/// The node binary the CLI helpers run: $QSP_NODE_BIN, else
/// build/bin/qsession-projection.
std::string node_binary();
/// Runs the node binary (node_binary()) with `args` and waits for it.
cli_result run_cli(const std::vector<std::string>& args);
/// Runs any program with `args` and waits for it.
cli_result run_program(const std::string& bin, const std::vector<std::string>& args);
/// Starts any program in the background (like spawn_cli); returns its pid.
int spawn_program(const std::string& bin, const std::vector<std::string>& args,
                  const std::string& log_path);

/// Starts the node in the background; returns its pid.  Output goes to `log_path`.
int spawn_cli(const std::vector<std::string>& args, const std::string& log_path);
/// Waits for a child started with spawn_cli; returns its exit code (128+sig if killed).
int wait_cli(int pid);
/// Like wait_cli, but waits at most `limit`; nullopt if the child still runs.
std::optional<int> wait_cli_for(int pid, std::chrono::milliseconds limit);

/// A node started with spawn_cli that is SIGKILLed and reaped when the owner
/// goes out of scope without having reaped it (a failed ASSERT, an exception),
/// so no test leaves a node running into the next one.
class node_process {
public:
  node_process(const std::vector<std::string>& args, const std::string& log_path);
  ~node_process();
  node_process(const node_process&) = delete;
  node_process& operator=(const node_process&) = delete;
  int pid() const { return pid_; }
  /// Sends `sig` if the child has not been reaped yet.
  void signal(int sig);
  /// Waits for the exit (unbounded, like wait_cli); returns the exit code.
  int wait();
  /// Waits at most `limit`; nullopt if it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds limit);
  /// SIGTERM, then waits; the exit code.
  int stop();
  /// The exit code once reaped.
  std::optional<int> exit_code() const { return rc_; }

private:
  int pid_ = -1;
  std::optional<int> rc_;
};

/// The common flags for a test's topic/namespace.
std::vector<std::string> node_args(const std::string& topic, int partitions, const std::string& ns,
                                   const std::string& convs_prefix);

/// The expected content of every convs:{user}: user -> conv -> max created_at.
using model = std::map<std::string, std::map<std::string, int64_t>>;
void apply(model& m, const core::dispatch& d);

/// Reads back every user of `m` from Redis and returns what differs (empty: equal).
std::vector<std::string> diff_with_redis(const model& m, const std::string& convs_prefix);

/// A deterministic dispatch number `i` (users u0..u{users-1}).
core::dispatch make_dispatch(uint64_t i, int users = 50);

/// Writes a transactional log to partition 0 of `topic`: 5 committed records,
/// 4 aborted ones (recipient "aborted-user"), 3 committed, so it ends with a
/// commit marker; waits (bounded) until the markers are on the log.  Returns
/// the model of the committed records; `lso` gets the last stable offset (15).
model write_transactional_log(const std::string& topic, int64_t& lso);

/// Creates a topic and waits until its metadata is visible.
void create_topic(const std::string& topic, int partitions);

/// The content of a file ("" if missing).
std::string slurp(const std::string& path);

/// Polls `pred` every 50 ms for at most `limit`; true if it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

/// A free loopback TCP port (bound and released; a small race is possible).
uint16_t free_port();

/// A broker that never answers: a loopback TCP listener that accepts every
/// connection, reads and drops what it is sent and never writes a byte,
/// until destroyed (at most 10 minutes).  A client pointed at it waits in
/// every request until its own timeout.
class black_hole {
public:
  black_hole();
  ~black_hole();
  black_hole(const black_hole&) = delete;
  black_hole& operator=(const black_hole&) = delete;
  /// "127.0.0.1:port".
  std::string address() const;
  /// Connections accepted so far.
  int accepted() const { return accepted_.load(); }
  /// Bytes received (and dropped) so far.
  size_t received() const { return received_.load(); }

private:
  void run();
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<size_t> received_{0};
  std::thread thread_;
};

/// Runs a shell command; returns its exit code.
int sh(const std::string& cmd);

/// Sets `--key=value` in a node's argument list: replaces every existing
/// `--key=...` (CAF keeps the last one; this keeps the list unambiguous) or
/// appends it.
void set_option(std::vector<std::string>& args, const std::string& key, const std::string& value);

/// One HTTP answer; status 0 when nothing answered (refused, closed, timed out).
struct http_reply {
  int status = 0;
  std::string body;
};

/// GET http://127.0.0.1:port/path (HTTP/1.1, Connection: close), bounded by
/// `timeout` for connect, send and the whole read.
http_reply http_get(uint16_t port, const std::string& path,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Polls GET /readyz every 50 ms until it answers `status` (200 or 503), for
/// at most `limit`; true if it did.  `last` gets the last answer seen.
bool readyz_reaches(uint16_t port, int status, std::chrono::milliseconds limit,
                    http_reply* last = nullptr);

/// SIGSTOPs `pid` on construction; SIGCONTs it on resume() and, if still
/// paused, on destruction, so every exit path (a failed ASSERT included)
/// resumes the process.
class pause_guard {
public:
  explicit pause_guard(int pid);
  ~pause_guard();
  pause_guard(const pause_guard&) = delete;
  pause_guard& operator=(const pause_guard&) = delete;
  void resume();
  bool paused() const { return paused_; }

private:
  int pid_;
  bool paused_ = false;
};

/// A private redis-server on a free loopback port, owned by a test and
/// stopped by PID.  `extra` goes after the defaults; with `tls_port` the port
/// is a TLS port and plain TCP is off.
struct private_redis {
  std::string dir;
  uint16_t port = 0;
  int pid = -1;
  std::vector<std::string> extra;
  bool tls_port = false;

  private_redis(const std::string& name, std::vector<std::string> extra_args, bool tls = false);
  ~private_redis();
  void start();
  /// SIGKILL and reap (the data directory stays).
  void kill_hard();
  /// SIGTERM and reap.
  void stop();
  /// Waits (bounded) until redis-cli `cli_args` PING answers PONG.
  bool wait_ready(const std::string& cli_args = "");
};

/// The indented shell block that follows the line
/// `<!-- TAG runs this block: NAME -->` in docs/FILE (e.g. tag
/// "tests/rcluster_scale", file "OPERATIONS.md"), without its indentation:
/// its first line's indentation, kept by every line of it (blank lines
/// included), ends it.  "" if the file has no such marker.
std::string doc_block(const std::string& file, const std::string& tag, const std::string& name);

} // namespace qsp::test
