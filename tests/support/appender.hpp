// A background producer for fault tests: a steady trickle of plain
// (non-transactional, idempotent) records into every partition of a topic
// until stopped, so the node has work to do during a fault.  The records
// come from the test's own model (`next`, which enters each record in the
// model before it is sent), so the model always covers what was sent.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "core/dispatch.hpp"
#include "kafka/client.hpp"

namespace qsp::test {

class appender {
public:
  /// Starts at once.  `max_rounds` bounds it (a round is one record per
  /// partition; every tenth round flushes and pauses 20 ms, so 40,000
  /// rounds last about 80 s at least).
  appender(kafka::client_settings cfg, std::string topic, int partitions,
           std::function<core::dispatch(int)> next, int max_rounds = 40000);
  ~appender();
  appender(const appender&) = delete;
  appender& operator=(const appender&) = delete;

  /// Stops and joins (idempotent); a failure to send or flush is a gtest
  /// failure of the calling test.
  void stop();

  /// Records sent so far.
  uint64_t sent() const { return sent_; }

private:
  void loop();

  kafka::client_settings cfg_;
  std::string topic_;
  int partitions_;
  std::function<core::dispatch(int)> next_;
  int max_rounds_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

} // namespace qsp::test
