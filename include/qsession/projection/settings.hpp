// The projection's one settings struct: everything spawn_projection needs,
// validated before anything is spawned.  Fill it in code, or declare the
// projection's options on a CAF config and read them back
// (qsession/projection/options.hpp), which is what the standalone node does.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "caf/error.hpp"
#include "caf/timespan.hpp"

namespace qsp {

/// The Kafka client (librdkafka) of the projection.
struct kafka_settings {
  std::string bootstrap_servers = "127.0.0.1:9092";  ///< kafka.bootstrap-servers
  std::string client_id = "qsession-projection";     ///< kafka.client-id
  /// kafka.group-id: identifies the client only; offsets are never committed.
  std::string group_id = "qsession-projection";
  /// kafka.properties: extra librdkafka properties (security.protocol, sasl.*,
  /// ssl.*, ...).  The ones the guarantees depend on are refused.
  std::vector<std::pair<std::string, std::string>> properties;
  std::chrono::milliseconds timeout{10000};  ///< kafka.timeout-ms: admin/metadata requests
  /// kafka.session-timeout-ms: the group membership's session timeout
  /// (ownership `group` only): a member silent for longer loses its
  /// partitions to the survivors (docs/CLUSTER.md).
  std::chrono::milliseconds session_timeout{6000};
};

/// The Redis server holding checkpoints and session sets: host:port, or the
/// primary that Redis Sentinels name.
struct redis_settings {
  std::string host = "127.0.0.1";  ///< redis.host (unused with sentinels or cluster_nodes)
  uint16_t port = 6379;            ///< redis.port (unused with sentinels or cluster_nodes)
  /// redis.sentinels: ["host:port", ...].  Non-empty: every connection asks
  /// them, in order, for the primary of master_name and checks ROLE there;
  /// host and port are not used (the option reader refuses both set).
  std::vector<std::string> sentinels;
  std::string master_name;        ///< redis.master-name (required with sentinels)
  /// redis.cluster-nodes: ["host:port", ...], seed nodes of a Redis Cluster.
  /// Non-empty selects Redis Cluster mode (docs/OPERATIONS.md, "Redis
  /// Cluster mode"): the slot map comes from the seeds, session sets go to
  /// the shard of their key, and the namespace must be a hash tag such as
  /// "{session_projection}".  Not with sentinels or an explicit host/port.
  std::vector<std::string> cluster_nodes;
  std::string sentinel_username;  ///< redis.sentinel-username (empty: the default user)
  /// redis.sentinel-password / redis.sentinel-password-file; never logged.
  std::string sentinel_password;
  std::string username;            ///< redis.username (empty: the default user)
  std::string password;            ///< redis.password / redis.password-file; never logged
  /// redis.tls: TLS to Redis, and to the Sentinels too (same CA, client
  /// certificate and server name).
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  /// redis.tls-server-name: the name the server's certificate must hold,
  /// and the SNI (empty: the host dialled, for Sentinels' answers an IP).
  std::string tls_server_name;
  /// redis.tls-verify-hostname: check the certificate's name in the TLS
  /// handshake (default); false logs a warning at every start.
  bool tls_verify_hostname = true;
  /// redis.connect-timeout
  std::chrono::milliseconds connect_timeout{3000};
  /// redis.command-timeout: the deadline of every exchange, pipelined ZADD
  /// replies included; a batch unconfirmed for longer fails the writer.
  std::chrono::milliseconds command_timeout{5000};
  /// redis.allow-eviction: start although maxmemory-policy is not noeviction.
  bool allow_eviction = false;
  /// redis.wait-replicas: after every checkpoint write, WAIT until this many
  /// replicas acknowledged it (and so, the replication stream being ordered,
  /// every write below it), for at most wait_timeout.  Fewer acknowledgements
  /// are no error: it only shrinks the replay after a failover.  0: no WAIT.
  int wait_replicas = 0;
  /// redis.wait-timeout: WAIT's bound; below command_timeout.
  std::chrono::milliseconds wait_timeout{100};
};

/// Who owns (projects) which partitions of the topic (docs/DESIGN.md §12).
enum class ownership_mode {
  all,          ///< this projection owns every partition (the default)
  static_set,   ///< projection.ownership = "static": the partitions listed
  group,        ///< Kafka's consumer-group protocol decides (cooperative-sticky)
  host,         ///< the embedding host sends assign / revoke
};

/// "all", "static", "group", "host".
const char* to_string(ownership_mode m);

struct projection_settings {
  std::string topic;               ///< projection.dispatch-topic (required)
  int32_t partition_count = 0;     ///< projection.partition-count (required)
  std::string ns = "session_projection";  ///< projection.namespace
  std::string convs_prefix = "convs:";    ///< projection.convs-prefix
  size_t max_batch_records = 5000;        ///< projection.max-batch-records
  /// projection.max-batches-in-flight: batches a consumer may have sent to
  /// the writer and not yet seen confirmed.
  size_t max_batches_in_flight = 2;
  /// A consumer's safety-net poll while no records arrive (records and
  /// partition EOFs wake it at once through librdkafka's queue callback).
  caf::timespan idle_poll = std::chrono::seconds(10);
  caf::timespan backoff_initial = std::chrono::milliseconds(200);
  caf::timespan backoff_max = std::chrono::seconds(30);
  /// projection.progress-interval: while catching up, a progress log line
  /// (done/H0 per partition, %, rate, ETA) per interval.
  caf::timespan progress_interval = std::chrono::seconds(5);
  /// projection.identity-check-interval: the run-time identity fence
  /// (docs/DESIGN.md §4) re-checks the broker identity at least this often.
  caf::timespan identity_check_interval = std::chrono::seconds(1);
  /// projection.identity-check-min-gap: while checkpoints wait for the fence,
  /// checks run back to back but at most one per this gap.  <= the interval.
  caf::timespan identity_check_min_gap = std::chrono::milliseconds(50);
  /// projection.shutdown-timeout: `shutdown` answers once every actor and
  /// every blocking call of the projection has stopped, or with
  /// ec::shutting_down after this long.
  caf::timespan shutdown_timeout = std::chrono::seconds(10);
  /// projection.allow-shared-convs-prefix: spawn although another live
  /// projection in this process writes the same convs-prefix on the same
  /// Redis under another namespace (their tenants' session sets would merge).
  bool allow_shared_convs_prefix = false;
  /// projection.replay-from-log-start: this start begins every partition it
  /// owns at the log's low watermark instead of its checkpoint (which never
  /// moves back), and so rewrites every session set the log still gives
  /// (ZADD GT: what Redis holds is raised, never lowered).  The repair of a
  /// gap `audit` found (docs/OPERATIONS.md, "After redis-cli --cluster
  /// fix"); readiness opens at H0 as always.
  bool replay_from_log_start = false;

  /// projection.ownership (docs/DESIGN.md §12, docs/CLUSTER.md).
  ownership_mode ownership = ownership_mode::all;
  /// projection.partitions: the partitions owned with ownership = static
  /// (config text "0-5,9"); sorted, distinct, each in [0, partition-count).
  std::vector<int32_t> partitions;
  /// projection.node-id: this node's name in ownership records and the
  /// cluster status (empty: "<hostname>-<pid>").
  std::string node_id;
  /// projection.heartbeat-interval: in every mode but `all`, how often the
  /// node publishes its partitions' status and reads the namespace's;
  /// a status lives for three of them.
  caf::timespan heartbeat_interval = std::chrono::milliseconds(250);
  /// True in every mode but `all`: ownership records, fenced checkpoint
  /// writes, published status and the namespace-wide readiness gate.
  bool clustered() const { return ownership != ownership_mode::all; }

  kafka_settings kafka;
  redis_settings redis;

  /// An error (ec::invalid_config) naming the key and what is expected.
  caf::error validate() const;
};

} // namespace qsp
