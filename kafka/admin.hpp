// The broker inspector (librdkafka admin API): cluster id, KIP-516 topic id,
// partition count, retention.ms, cleanup.policy and watermarks.  Also topic creation/deletion,
// used by tests, the demo and benchmarks.
#pragma once

#include <string>

#include "kafka/client.hpp"
#include "ports/ports.hpp"

namespace qsp::kafka {

class admin final : public broker_inspector {
public:
  static caf::expected<std::unique_ptr<admin>> make(const client_settings& cfg);

  caf::expected<broker_state> inspect(const std::string& topic) override;
  caf::expected<broker_state> identity(const std::string& topic) override;
  /// Every wait for the broker in progress returns ec::shutting_down at
  /// once, and so does every later call (cluster_id: before it asks).
  void interrupt() override;

  caf::expected<std::string> cluster_id();
  /// `replication_factor` -1: the broker's default.replication.factor.
  caf::expected<void> create_topic(const std::string& topic, int partitions,
                                   const std::vector<std::pair<std::string, std::string>>& configs = {},
                                   int replication_factor = 1);
  caf::expected<void> delete_topic(const std::string& topic);
  /// Advances a partition's low watermark to `before` (as retention would).
  caf::expected<void> delete_records(const std::string& topic, int32_t partition, int64_t before);

private:
  admin(handle_ptr rk, int timeout_ms, std::shared_ptr<error_sink> errors);
  caf::expected<broker_state> identity_now(const std::string& topic);
  caf::expected<broker_state> inspect_now(const std::string& topic);
  /// A request that went unanswered (ec::kafka_unavailable) may have failed
  /// for a reason only librdkafka's error callback tells: refused
  /// credentials, a certificate, TLS against plaintext.  Those become the
  /// final error (final_client_error); otherwise the client's last error
  /// is added to `e` as context.
  caf::error explain(caf::error e, const std::string& topic);
  /// Low (earliest) and latest offsets per partition under `isolation`.
  caf::expected<std::vector<int64_t>> list_offsets(const std::string& topic, int partitions,
                                                   rd_kafka_OffsetSpec_t spec,
                                                   rd_kafka_IsolationLevel_t isolation);
  struct topic_configs {
    int64_t retention_ms = -1;   ///< -1: not reported
    std::string cleanup_policy;  ///< "": not reported
  };
  /// retention.ms and cleanup.policy, in one DescribeConfigs request.
  caf::expected<topic_configs> configs(const std::string& topic);

  handle_ptr rk_;
  int timeout_ms_;
  std::shared_ptr<error_sink> errors_;
  interrupter waits_;
};

} // namespace qsp::kafka
