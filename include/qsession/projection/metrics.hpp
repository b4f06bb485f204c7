// Counters and the batch-latency histogram of one projection instance.  Owned
// by the projection (not global), written by its actors, read by /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace qsp {

struct metrics {
  static constexpr std::array<double, 12> latency_bounds{
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0};
  static constexpr size_t error_kinds = 16;

  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> recipient_writes{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> restarts{0};
  /// librdkafka client-level errors not tied to a partition (all brokers
  /// down, transport, authentication), counted by the dispatch-log consumer.
  std::atomic<uint64_t> kafka_client_errors{0};
  /// Run-time identity checks (the fence) done, and those that failed to
  /// get an answer (a changed identity is a refusal, counted in failures).
  std::atomic<uint64_t> identity_checks{0};
  std::atomic<uint64_t> identity_check_errors{0};
  std::array<std::atomic<uint64_t>, error_kinds> failures{};
  std::array<std::atomic<uint64_t>, latency_bounds.size() + 1> latency_buckets{};
  std::atomic<uint64_t> latency_count{0};
  std::atomic<uint64_t> latency_sum_ns{0};

  /// Redis Cluster mode, per primary ("host:port"): ZADDs written, error
  /// replies to them, and redirections followed (MOVED, ASK).
  struct shard_counters {
    uint64_t writes = 0;
    uint64_t errors = 0;
    uint64_t moved = 0;
    uint64_t asked = 0;
  };
  void count_shard(const std::string& primary, const shard_counters& add) {
    std::lock_guard<std::mutex> guard{shard_mtx_};
    auto& c = shards_[primary];
    c.writes += add.writes;
    c.errors += add.errors;
    c.moved += add.moved;
    c.asked += add.asked;
  }
  std::map<std::string, shard_counters> shard_snapshot() const {
    std::lock_guard<std::mutex> guard{shard_mtx_};
    return shards_;
  }

  void observe_batch_latency(uint64_t ns) {
    double s = static_cast<double>(ns) / 1e9;
    size_t i = 0;
    while (i < latency_bounds.size() && s > latency_bounds[i])
      ++i;
    latency_buckets[i].fetch_add(1, std::memory_order_relaxed);
    latency_count.fetch_add(1, std::memory_order_relaxed);
    latency_sum_ns.fetch_add(ns, std::memory_order_relaxed);
  }

private:
  mutable std::mutex shard_mtx_;
  std::map<std::string, shard_counters> shards_;
};

} // namespace qsp
