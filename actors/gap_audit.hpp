// The gap audit (qsession/projection/reader.hpp, "no skipped offset"): when
// a host's reader leaves offsets undelivered (between two records, below its
// first record, or below the position it claims to have passed), the
// projection re-reads those offsets through its own read_committed reader
// before the checkpoint passes them.  Under read_committed only transaction
// markers and aborted records may be missing; a record found there means the
// host's reader skipped it, and the projection refuses.  Not used with the
// product's own reader (it is the one that audits).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "caf/expected.hpp"

#include "ports/ports.hpp"

namespace qsp {

class gap_auditor {
public:
  /// `make`: the projection's own reader (made on first use, kept).
  /// `timeout`: how long one audit may wait for the broker (kafka.timeout-ms).
  gap_auditor(dispatch_log_factory make, std::chrono::milliseconds timeout);

  /// Checks that no committed record lies in any of `gaps` ([begin, end),
  /// ascending, disjoint) of `partition`.  ec::refused naming the first
  /// record found there; ec::kafka_unavailable if the broker does not answer
  /// within the timeout; the reader's own errors as they are.  Callable from
  /// several consumers' threads (one audit at a time).
  caf::expected<void> audit(int32_t partition,
                            const std::vector<std::pair<int64_t, int64_t>>& gaps);

  /// From any thread: a waiting audit returns ec::shutting_down, and so does
  /// every later one.
  void interrupt();

  /// Audits done and offsets re-read (for tests and metrics).
  uint64_t audits() const;

private:
  dispatch_log_factory make_;
  std::chrono::milliseconds timeout_;
  std::mutex run_mtx_; ///< one audit at a time
  std::shared_ptr<dispatch_log> log_;
  mutable std::mutex mtx_; ///< guards what follows (wake-ups, interrupt)
  std::condition_variable cv_;
  bool interrupted_ = false;
  uint64_t wakes_ = 0;
  uint64_t audits_ = 0;
};

} // namespace qsp
