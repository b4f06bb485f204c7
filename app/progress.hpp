// Live progress of `catch-up`, `audit` and `run`'s catch-up phase on stderr.
//
// On a terminal (or with --progress=on) one aggregate line is redrawn in place
// ("\r" + line + erase-to-end-of-line):
//
//   catch-up  48.1% [#########----------] 481,234/1,000,000 offsets  52.3k/s  ETA 0:10  slowest p2 44.0%
//
// and ends, with a newline, at the final figures:
//
//   catch-up 100.0% [###################] 1,000,000 offsets in 0:19, 52.1k/s average  (1,000,000 records)
//
// Log lines written while the bar is shown go through status_line (an spdlog
// sink): the bar is erased, the log line written, the bar drawn again below
// it, so neither garbles the other.  Without a terminal (or --progress=off)
// nothing is redrawn: the caller prints plain periodic lines instead.
//
// No dependency beyond spdlog, which the node already uses.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <spdlog/sinks/base_sink.h>

#include "qsession/projection/types.hpp"

namespace spdlog {
class logger;
} // namespace spdlog

namespace qsp::app {

// -- options ------------------------------------------------------------------

/// --progress=auto|on|off: auto draws the bar when stderr is a terminal.
enum class progress_mode { automatic, on, off };

std::optional<progress_mode> parse_progress_mode(std::string_view text);

struct progress_options {
  progress_mode mode = progress_mode::automatic;
  /// --progress-redraw: least time between two redraws of the bar.
  std::chrono::milliseconds redraw{200};
};

/// Parses "250ms", "1s" (an integer and a unit) into [1ms, 1min].
std::optional<std::chrono::milliseconds> parse_redraw(std::string_view text);

/// Whether `mode` draws the bar on stderr (automatic: stderr is a terminal).
bool bar_enabled(progress_mode mode);

// -- pure logic (unit-tested) ---------------------------------------------------

/// Done/total, a smoothed rate and an ETA from samples of a monotonic count.
/// The rate is the average since the first sample for the first `smoothing`
/// seconds, then an exponentially weighted moving average with that time
/// constant, so a short stall shows as a falling rate, not as zero.
class progress_meter {
public:
  using clock = std::chrono::steady_clock;

  explicit progress_meter(clock::time_point start, double smoothing_seconds = 3.0);

  /// A sample: `done` of `total` at `now` (done is clamped to [0, total]).
  void update(int64_t done, int64_t total, clock::time_point now);

  int64_t done() const { return done_; }
  int64_t total() const { return total_; }
  /// Records per second, smoothed; 0 before two samples apart in time.
  double rate() const { return rate_; }
  /// Seconds left at the smoothed rate; nullopt while the rate is unknown.
  std::optional<double> eta_seconds() const;
  /// Seconds since the start.
  double elapsed(clock::time_point now) const;
  /// done / total in [0, 1] (1 for an empty total).
  double fraction() const;

private:
  clock::time_point start_;
  double smoothing_;
  int64_t done_ = 0;
  int64_t total_ = 0;
  bool sampled_ = false;
  int64_t first_done_ = 0;
  clock::time_point first_at_;
  int64_t last_done_ = 0;
  clock::time_point last_at_;
  double rate_ = 0;
};

/// "1,234,567".
std::string format_count(int64_t n);
/// "850/s", "52.3k/s", "1.25M/s".
std::string format_rate(double per_second);
/// "0:07", "12:34", "1:02:03" (seconds rounded).
std::string format_duration(double seconds);

/// One frame of the bar, at most `width` columns (fields the width cannot
/// hold are dropped, the bar itself shrinks to 10 cells).  `unit` names what
/// is counted ("offsets"); `detail` is an optional trailing field.
std::string render_bar(std::string_view label, const progress_meter& m, std::string_view unit,
                       std::string_view detail, size_t width);

/// The final line: 100 %, the count, elapsed time and average rate; `detail`
/// follows in parentheses when not empty.
std::string render_final(std::string_view label, int64_t count, std::string_view unit,
                         double elapsed_seconds, std::string_view detail, size_t width);

/// The same figures as one plain log line, no bar, no terminal codes:
///   "48.1% (481,234/1,000,000 offsets), 52.3k/s, ETA 0:10"
std::string render_plain(const progress_meter& m, std::string_view unit);

// -- the terminal -------------------------------------------------------------

/// Owns the bottom line of stderr: a status line that log lines pass above.
/// Also the node's spdlog sink (it wraps spdlog's colour sink for stderr), so
/// a log line from any thread erases the line, is written, and the line is
/// drawn again.
class status_line final : public spdlog::sinks::base_sink<std::mutex> {
public:
  explicit status_line(std::FILE* out = stderr);

  /// Draws `line` in place of the current one (cut to the terminal width).
  void show(const std::string& line);
  /// Draws `line` and ends it with a newline: it stays as history.
  void settle(const std::string& line);
  /// Ends a shown line with a newline (kept as history); no-op if none.
  void keep();
  /// Columns of stderr's terminal (COLUMNS, else 80, when unknown).
  size_t width() const;

protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;
  void set_pattern_(const std::string& pattern) override;
  void set_formatter_(std::unique_ptr<spdlog::formatter> f) override;

private:
  void draw(const std::string& line); // with mutex_ held
  std::FILE* out_;
  std::unique_ptr<spdlog::sinks::sink> inner_;
  std::string shown_; ///< the line on screen ("" if none)
};

// -- one progress display -------------------------------------------------------

/// Drives a bar on `line` (if enabled) or plain periodic lines through
/// `plain` (every `plain_every`; never when plain is null).  Not thread-safe:
/// one caller samples it.
class progress_display {
public:
  using clock = std::chrono::steady_clock;
  using plain_fn = std::function<void(const std::string&)>;

  progress_display(std::string label, std::string unit, const progress_options& opts,
                   std::shared_ptr<status_line> line, plain_fn plain,
                   clock::duration plain_every, clock::time_point start = clock::now());
  ~progress_display();
  progress_display(const progress_display&) = delete;
  progress_display& operator=(const progress_display&) = delete;

  bool bar() const { return line_ != nullptr; }
  /// True when a sample now would be drawn (redraw or plain line due).
  bool due(clock::time_point now) const;
  /// A sample; draws the bar or a plain line when due.  `detail` trails.
  void update(int64_t done, int64_t total, clock::time_point now = clock::now(),
              const std::string& detail = {});
  /// The final figures: the bar at 100 % (kept on screen), or one plain line.
  void finish(int64_t count, clock::time_point now = clock::now(),
              const std::string& detail = {});
  /// Stops without final figures: a shown bar stays as history.
  void abandon();
  const progress_meter& meter() const { return meter_; }

private:
  std::string label_;
  std::string unit_;
  std::chrono::milliseconds redraw_;
  std::shared_ptr<status_line> line_; ///< null: plain lines
  plain_fn plain_;
  clock::duration plain_every_;
  progress_meter meter_;
  clock::time_point start_;
  clock::time_point last_draw_;
  bool drawn_ = false;
  bool ended_ = false;
};

// -- catch-up ---------------------------------------------------------------------

/// `catch-up` and `run`'s catch-up phase, fed with the projection's status:
/// its pushes (state changes) and snapshots the caller requests whenever
/// wants_status() says so (they carry the partitions: start, h0, next_offset).
/// Counts are offsets to H0 (records, plus transaction markers if any).
/// With the bar: redrawn per snapshot, at 100 % with the final figures when
/// the projection is ready.  Without: the projection's own periodic log line
/// is the plain progress; this adds the final figures as one log line.
class catch_up_progress {
public:
  using clock = std::chrono::steady_clock;

  /// `line` is used only if the mode draws a bar (bar_enabled).
  catch_up_progress(const progress_options& opts, std::shared_ptr<status_line> line,
                    std::shared_ptr<spdlog::logger> logger);
  ~catch_up_progress();

  /// Whether a status snapshot is wanted now (a redraw is due, or the
  /// final figures are pending).
  bool wants_status(clock::time_point now) const;
  void on_status(const projection_status& st, clock::time_point now = clock::now());
  /// The snapshot request failed: end with what is known.
  void on_status_error(clock::time_point now = clock::now());
  /// Stops drawing; a drawn bar stays on screen as history.
  void abandon();

private:
  void start(const projection_status& st, clock::time_point now);

  progress_options opts_;
  std::shared_ptr<status_line> line_;
  std::shared_ptr<spdlog::logger> logger_;
  std::unique_ptr<progress_display> display_;
  std::string last_state_;
  bool final_pending_ = false;
  uint64_t records_at_start_ = 0;
  /// The partitions of the last ready status: when partitions are added to
  /// a running projection (docs/DESIGN.md §12, handover) they are not caught up
  /// again, so the catch-up that follows counts only the added ones.
  std::set<int32_t> kept_;
};

} // namespace qsp::app
