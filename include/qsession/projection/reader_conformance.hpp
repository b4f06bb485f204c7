// The conformance suite for dispatch-log readers (qsession/projection/
// reader.hpp, docs/EMBEDDING.md §8), installed with the test kit as
// qsession::projection_reader_conformance (it needs librdkafka: it produces
// its own topics on a real broker).  A host runs it against its own reader:
//
//   qsp::conformance::broker b;
//   b.bootstrap_servers = "127.0.0.1:9092";
//   auto results = qsp::conformance::run(
//     [](const std::string& topic, const std::string& servers) {
//       return my_reader_for(topic, servers);
//     }, b);
//   for (auto& r : results) EXPECT_NE(r.result, qsp::conformance::outcome::failed) << r;
//
// Each check creates a topic of its own (named after the check), produces
// what it needs (transactions included), asks the reader, and deletes the
// topic.  The checks: range refusals at both ends (with the observed range
// in the error), both ends accepted, markers and aborted records skipped,
// an open transaction pinning high at the last stable offset, epochs present
// and non-decreasing (and rising after a leader change, given a hook that
// moves leadership), a start whose stored epoch the log no longer backs
// refused (KIP-320; needs the hook too), add and remove while running,
// errors named, and a prompt interrupt.  Without the hook the two checks
// that need it are skipped, not failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "qsession/projection/reader.hpp"

namespace qsp::conformance {

struct broker {
  std::string bootstrap_servers = "127.0.0.1:9092";
  /// librdkafka properties for the suite's own producer and admin client
  /// (security.protocol, sasl.*, ssl.*, ...).
  std::vector<std::pair<std::string, std::string>> properties;
  /// Replication factor of the suite's topics.
  int16_t replication_factor = 1;
  /// How long one check waits for the reader to deliver what it expects.
  std::chrono::milliseconds timeout{30000};
  /// Moves the leadership of `topic`'s partition 0 to another broker and
  /// returns once a new leader serves it (e.g. restarts the leader broker).
  /// Empty: the epoch check runs without a leader change and says so.
  std::function<caf::error(const std::string& topic)> change_leader;
  /// Prefix of the suite's topic names.
  std::string topic_prefix = "qsp-conformance";
  /// A loopback address where no broker listens (the error checks).
  std::string unreachable_servers = "127.0.0.1:1";
};

/// Makes a fresh reader of `topic` at `bootstrap_servers` (the broker's, or
/// for the error checks a loopback address where nothing listens).
using reader_factory = std::function<caf::expected<std::shared_ptr<dispatch_log>>(
  const std::string& topic, const std::string& bootstrap_servers)>;

enum class outcome { passed, failed, skipped };

struct check_result {
  std::string name;
  outcome result = outcome::failed;
  /// What was observed (for a failure: what was expected instead).
  std::string detail;
};

std::ostream& operator<<(std::ostream& out, outcome x);
std::ostream& operator<<(std::ostream& out, const check_result& x);

/// Runs every check (or those whose name contains `only`).
std::vector<check_result> run(const reader_factory& make, const broker& b,
                              const std::string& only = {});

} // namespace qsp::conformance
