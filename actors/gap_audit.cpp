#include "actors/gap_audit.hpp"

#include <string>

namespace qsp {

namespace {

std::string range_text(int32_t partition, int64_t begin, int64_t end) {
  return "partition " + std::to_string(partition) + " offsets [" + std::to_string(begin) + ", "
         + std::to_string(end) + ")";
}

} // namespace

gap_auditor::gap_auditor(dispatch_log_factory make, std::chrono::milliseconds timeout)
  : make_(std::move(make)), timeout_(timeout) {}

uint64_t gap_auditor::audits() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return audits_;
}

void gap_auditor::interrupt() {
  std::shared_ptr<dispatch_log> log;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    interrupted_ = true;
    log = log_;
  }
  cv_.notify_all();
  if (log)
    log->interrupt();
}

caf::expected<void>
gap_auditor::audit(int32_t partition, const std::vector<std::pair<int64_t, int64_t>>& gaps) {
  if (gaps.empty())
    return {};
  std::lock_guard<std::mutex> run{run_mtx_};
  auto stopped = [this] {
    std::lock_guard<std::mutex> guard{mtx_};
    return interrupted_;
  };
  if (stopped())
    return caf::make_error(ec::shutting_down, "gap audit: the projection is stopping");
  if (!log_) {
    auto made = make_();
    if (!made)
      return made.error();
    if (!*made)
      return caf::make_error(ec::kafka_read, "gap audit: no reader of the projection's own");
    std::lock_guard<std::mutex> guard{mtx_};
    log_ = std::move(*made);
    if (interrupted_)
      log_->interrupt();
  }
  auto begin = gaps.front().first;
  auto end = gaps.back().second;
  // The assignment becomes exactly this partition at the first gap.
  if (auto ok = log_->start({{partition, begin}}); !ok)
    return ok.error();
  auto reader = log_->reader(partition);
  if (!reader)
    return caf::make_error(ec::kafka_read, "gap audit: no reader for " + range_text(partition, begin, end));
  reader->on_data([this] {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      ++wakes_;
    }
    cv_.notify_all();
  });
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  size_t g = 0;
  caf::error found;
  bool done = false;
  caf::expected<void> result{};
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      seen = wakes_;
    }
    int64_t passed = -1;
    auto ok = reader->poll_each(
      512,
      [&](const log_record_view& rec) {
        if (rec.offset >= end) {
          done = true;
          return false;
        }
        while (g < gaps.size() && gaps[g].second <= rec.offset)
          ++g;
        if (g < gaps.size() && rec.offset >= gaps[g].first) {
          found = caf::make_error(
            ec::refused, "reader contract: the dispatch-log reader skipped partition "
                           + std::to_string(partition) + " offset " + std::to_string(rec.offset)
                           + ": the projection's own read_committed read of "
                           + range_text(partition, gaps[g].first, gaps[g].second)
                           + " finds a committed record there");
          return false;
        }
        return true;
      },
      passed);
    if (!ok) {
      result = ok.error();
      break;
    }
    if (found) {
      result = std::move(found);
      break;
    }
    if (done || passed >= end)
      break;
    if (stopped()) {
      result = caf::make_error(ec::shutting_down, "gap audit: the projection is stopping");
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      result = caf::make_error(ec::kafka_unavailable,
                               "gap audit of " + range_text(partition, begin, end)
                                 + ": the broker delivered nothing up to offset "
                                 + std::to_string(end) + " within "
                                 + std::to_string(timeout_.count()) + " ms");
      break;
    }
    // Wait for the reader's wake-up, or re-poll after a short while (a
    // reader without on_data).
    std::unique_lock<std::mutex> lock{mtx_};
    cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(20)),
                   [&] { return wakes_ != seen || interrupted_; });
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ++audits_;
  }
  return result;
}

} // namespace qsp
