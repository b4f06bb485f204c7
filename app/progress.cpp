#include "app/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ansicolor_sink.h>

namespace qsp::app {

// -- options ------------------------------------------------------------------

std::optional<progress_mode> parse_progress_mode(std::string_view text) {
  if (text == "auto")
    return progress_mode::automatic;
  if (text == "on")
    return progress_mode::on;
  if (text == "off")
    return progress_mode::off;
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> parse_redraw(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  if (digits == 0 || digits > 6)
    return std::nullopt;
  auto n = std::stoll(std::string{text.substr(0, digits)});
  auto unit = text.substr(digits);
  std::chrono::milliseconds v;
  if (unit == "ms")
    v = std::chrono::milliseconds(n);
  else if (unit == "s")
    v = std::chrono::seconds(n);
  else
    return std::nullopt;
  if (v < std::chrono::milliseconds(1) || v > std::chrono::minutes(1))
    return std::nullopt;
  return v;
}

bool bar_enabled(progress_mode mode) {
  switch (mode) {
    case progress_mode::on:
      return true;
    case progress_mode::off:
      return false;
    default:
      return isatty(STDERR_FILENO) == 1;
  }
}

// -- progress_meter ---------------------------------------------------------------

progress_meter::progress_meter(clock::time_point start, double smoothing_seconds)
  : start_(start), smoothing_(smoothing_seconds), first_at_(start), last_at_(start) {
}

void progress_meter::update(int64_t done, int64_t total, clock::time_point now) {
  total_ = std::max<int64_t>(0, total);
  done_ = std::clamp<int64_t>(done, 0, total_);
  if (!sampled_) {
    sampled_ = true;
    first_done_ = last_done_ = done_;
    first_at_ = last_at_ = now;
    return;
  }
  double dt = std::chrono::duration<double>(now - last_at_).count();
  if (dt <= 0)
    return;
  double since_first = std::chrono::duration<double>(now - first_at_).count();
  if (since_first <= smoothing_) {
    // Warm-up: the average since the first sample (an EWMA seeded with the
    // first interval would over-weight it).
    rate_ = static_cast<double>(done_ - first_done_) / since_first;
  } else {
    double inst = static_cast<double>(done_ - last_done_) / dt;
    double alpha = 1.0 - std::exp(-dt / smoothing_);
    rate_ = alpha * inst + (1.0 - alpha) * rate_;
  }
  rate_ = std::max(0.0, rate_);
  last_done_ = done_;
  last_at_ = now;
}

std::optional<double> progress_meter::eta_seconds() const {
  if (done_ >= total_)
    return 0.0;
  if (rate_ <= 0)
    return std::nullopt;
  return static_cast<double>(total_ - done_) / rate_;
}

double progress_meter::elapsed(clock::time_point now) const {
  return std::max(0.0, std::chrono::duration<double>(now - start_).count());
}

double progress_meter::fraction() const {
  return total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
}

// -- formatting -------------------------------------------------------------------

std::string format_count(int64_t n) {
  auto digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

std::string format_rate(double r) {
  if (r >= 999.95e3)
    return fmt::format("{:.2f}M/s", r / 1e6);
  if (r >= 999.5)
    return fmt::format("{:.1f}k/s", r / 1e3);
  return fmt::format("{:.0f}/s", r);
}

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600)
    return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

namespace {

std::string format_elapsed(double seconds) {
  return seconds < 60 ? fmt::format("{:.1f}s", seconds) : format_duration(seconds);
}

std::string cells(size_t n, double fraction) {
  auto full = std::min(n, static_cast<size_t>(std::floor(fraction * static_cast<double>(n))));
  return std::string(full, '#') + std::string(n - full, '-');
}

std::string cut(std::string s, size_t width) {
  if (s.size() > width)
    s.resize(width);
  return s;
}

constexpr size_t min_cells = 10, max_cells = 30;

/// "0:12"; "?" while the rate is unknown or the ETA beyond 100 hours (a
/// stalled catch-up's decaying rate would give absurd figures).
std::string eta_text(const progress_meter& m) {
  auto eta = m.eta_seconds();
  if (!eta || *eta >= 100.0 * 3600)
    return "?";
  return format_duration(*eta);
}

} // namespace

std::string render_bar(std::string_view label, const progress_meter& m, std::string_view unit,
                       std::string_view detail, size_t width) {
  // Truncate, never round up to 100 % before the end.
  double pct = std::floor(m.fraction() * 1000.0) / 10.0;
  auto head = fmt::format("{} {:5.1f}% ", label, pct);
  // Fields padded to a steady width, so the bar does not jitter between
  // redraws as the numbers change.
  auto total = format_count(m.total());
  auto counts = fmt::format(" {:>{}}/{} {}", format_count(m.done()), total.size(), total, unit);
  auto rate = fmt::format("{:>8}", m.rate() > 0 ? format_rate(m.rate()) : std::string{"-/s"});
  auto eta = fmt::format("{:<5}", eta_text(m));
  // Richest first; the first that leaves room for the smallest bar wins.
  std::string tails[] = {
    fmt::format("  {}  ETA {}{}{}", rate, eta, detail.empty() ? "" : "  ", detail),
    fmt::format("  {}  ETA {}", rate, eta),
    fmt::format("  ETA {}", eta),
    std::string{},
  };
  for (auto& tail : tails) {
    size_t fixed = head.size() + 2 + counts.size() + tail.size();
    if (fixed + min_cells <= width || tail.empty()) {
      size_t n = width > fixed ? std::clamp(width - fixed, min_cells, max_cells) : min_cells;
      auto line = cut(head + "[" + cells(n, m.fraction()) + "]" + counts + tail, width);
      line.erase(line.find_last_not_of(' ') + 1);
      return line;
    }
  }
  return {}; // unreachable: the last tail always fits
}

std::string render_final(std::string_view label, int64_t count, std::string_view unit,
                         double elapsed_seconds, std::string_view detail, size_t width) {
  auto avg = elapsed_seconds > 0 ? format_rate(static_cast<double>(count) / elapsed_seconds)
                                 : std::string{"-/s"};
  auto figures = fmt::format(" {} {} in {}, {} average", format_count(count), unit,
                             format_elapsed(elapsed_seconds), avg);
  auto extra = detail.empty() ? std::string{} : fmt::format("  ({})", detail);
  auto head = fmt::format("{} 100.0% ", label);
  size_t fixed = head.size() + 2 + figures.size();
  if (width == 0) // plain: no bar
    return fmt::format("{}: 100%{}{}", label, figures, extra);
  if (fixed + extra.size() + min_cells > width && !extra.empty()) {
    // A narrow terminal: the figures and the detail ("N records
    // projected") matter more than the bar (issue 42: an 80-column
    // terminal lost the detail).  Without the bar, then without the
    // average, before the detail goes.
    auto bare = fmt::format("{}{}{}", head, figures.substr(1), extra);
    if (bare.size() <= width)
      return bare;
    auto shorter = fmt::format("{}{} {} in {}{}", head, format_count(count), unit,
                               format_elapsed(elapsed_seconds), extra);
    if (shorter.size() <= width)
      return shorter;
    extra.clear();
  }
  size_t n = width > fixed + extra.size()
               ? std::clamp(width - fixed - extra.size(), min_cells, max_cells)
               : min_cells;
  return cut(head + "[" + cells(n, 1.0) + "]" + figures + extra, width);
}

std::string render_plain(const progress_meter& m, std::string_view unit) {
  double pct = std::floor(m.fraction() * 1000.0) / 10.0;
  auto rate = m.rate() > 0 ? format_rate(m.rate()) : std::string{"-/s"};
  auto eta = eta_text(m);
  return fmt::format("{:.1f}% ({}/{} {}), {}, ETA {}", pct, format_count(m.done()),
                     format_count(m.total()), unit, rate, eta);
}

// -- status_line ----------------------------------------------------------------

namespace {

constexpr const char* erase_to_end = "\033[K";

} // namespace

status_line::status_line(std::FILE* out)
  : out_(out),
    inner_(std::make_unique<spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>>(
      out, spdlog::color_mode::automatic)) {
}

void status_line::draw(const std::string& line) {
  std::fputs("\r", out_);
  std::fputs(line.c_str(), out_);
  std::fputs(erase_to_end, out_);
}

void status_line::show(const std::string& line) {
  std::lock_guard<std::mutex> guard{mutex_};
  shown_ = cut(line, width() - 1);
  draw(shown_);
  std::fflush(out_);
}

void status_line::settle(const std::string& line) {
  std::lock_guard<std::mutex> guard{mutex_};
  draw(cut(line, width() - 1));
  std::fputs("\n", out_);
  shown_.clear();
  std::fflush(out_);
}

void status_line::keep() {
  std::lock_guard<std::mutex> guard{mutex_};
  if (shown_.empty())
    return;
  std::fputs("\n", out_);
  shown_.clear();
  std::fflush(out_);
}

size_t status_line::width() const {
  winsize ws{};
  if (ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
    return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS")) {
    auto n = std::strtol(env, nullptr, 10);
    if (n >= 20 && n <= 1000)
      return static_cast<size_t>(n);
  }
  return 80;
}

void status_line::sink_it_(const spdlog::details::log_msg& msg) {
  // Erase the status line, write the log line where it was, draw it below.
  if (!shown_.empty()) {
    std::fputs("\r", out_);
    std::fputs(erase_to_end, out_);
  }
  inner_->log(msg); // flushes
  if (!shown_.empty()) {
    draw(shown_);
    std::fflush(out_);
  }
}

void status_line::flush_() {
  inner_->flush();
}

void status_line::set_pattern_(const std::string& pattern) {
  inner_->set_pattern(pattern);
}

void status_line::set_formatter_(std::unique_ptr<spdlog::formatter> f) {
  inner_->set_formatter(std::move(f));
}

// -- progress_display -------------------------------------------------------------

progress_display::progress_display(std::string label, std::string unit,
                                   const progress_options& opts,
                                   std::shared_ptr<status_line> line, plain_fn plain,
                                   clock::duration plain_every, clock::time_point start)
  : label_(std::move(label)),
    unit_(std::move(unit)),
    redraw_(opts.redraw),
    line_(std::move(line)),
    plain_(std::move(plain)),
    plain_every_(plain_every),
    meter_(start),
    start_(start),
    last_draw_(start) {
}

progress_display::~progress_display() {
  abandon();
}

bool progress_display::due(clock::time_point now) const {
  if (ended_)
    return false;
  if (line_)
    return !drawn_ || now - last_draw_ >= redraw_;
  return plain_ && plain_every_.count() > 0 && now - last_draw_ >= plain_every_;
}

void progress_display::update(int64_t done, int64_t total, clock::time_point now,
                              const std::string& detail) {
  if (ended_)
    return;
  bool draw = due(now);
  meter_.update(done, total, now);
  if (!draw)
    return;
  last_draw_ = now;
  drawn_ = true;
  if (line_)
    line_->show(render_bar(label_, meter_, unit_, detail, line_->width() - 1));
  else
    plain_(label_ + ": " + render_plain(meter_, unit_) + (detail.empty() ? "" : "; " + detail));
}

void progress_display::finish(int64_t count, clock::time_point now, const std::string& detail) {
  if (ended_)
    return;
  ended_ = true;
  double secs = meter_.elapsed(now);
  if (line_)
    line_->settle(render_final(label_, count, unit_, secs, detail, line_->width() - 1));
  else if (plain_)
    plain_(render_final(label_, count, unit_, secs, detail, 0));
}

void progress_display::abandon() {
  if (ended_)
    return;
  ended_ = true;
  if (line_ && drawn_)
    line_->keep();
}

// -- catch_up_progress -------------------------------------------------------------

catch_up_progress::catch_up_progress(const progress_options& opts,
                                     std::shared_ptr<status_line> line,
                                     std::shared_ptr<spdlog::logger> logger)
  : opts_(opts), line_(bar_enabled(opts.mode) ? std::move(line) : nullptr),
    logger_(std::move(logger)) {
}

catch_up_progress::~catch_up_progress() = default;

bool catch_up_progress::wants_status(clock::time_point now) const {
  return final_pending_ || (display_ && display_->due(now));
}

void catch_up_progress::on_status(const projection_status& st, clock::time_point now) {
  int64_t done = 0, total = 0;
  std::string detail;
  if (!st.partitions.empty()) {
    const partition_status* slowest = nullptr;
    double slowest_fraction = 2;
    for (auto& p : st.partitions) {
      if (kept_.count(p.partition) > 0)
        continue;
      int64_t span = std::max<int64_t>(0, p.h0 - p.start);
      int64_t got = std::clamp<int64_t>(p.next_offset - p.start, 0, span);
      total += span;
      done += got;
      double f = span > 0 ? static_cast<double>(got) / static_cast<double>(span) : 1.0;
      if (f < slowest_fraction) {
        slowest_fraction = f;
        slowest = &p;
      }
    }
    if (st.partitions.size() > 1 && slowest != nullptr && slowest_fraction < 1.0)
      detail = fmt::format("slowest p{} {:.1f}%",
                           slowest->partition, std::floor(slowest_fraction * 1000.0) / 10.0);
  }
  if (st.state == "catching-up") {
    if (!display_)
      start(st, now);
    if (!st.partitions.empty())
      display_->update(done, total, now, detail);
  } else if (st.state == "ready") {
    if (last_state_ != "ready" && st.partitions.empty()) {
      // A push: ask for the partitions, they give the final figures.
      final_pending_ = true;
      if (!display_) // ready before a catching-up push was seen
        start(st, now);
    } else if (final_pending_ && !st.partitions.empty() && display_) {
      final_pending_ = false;
      auto records = static_cast<int64_t>(st.records - records_at_start_);
      display_->finish(total, now, format_count(records) + " records projected");
      display_.reset();
    }
    if (!st.partitions.empty() && !final_pending_) {
      kept_.clear();
      for (auto& p : st.partitions)
        kept_.insert(p.partition);
    }
  } else {
    // dirty, refused, stopped: this generation's bar stays as it was; the
    // next generation catches every partition up from its checkpoint.
    abandon();
    kept_.clear();
  }
  last_state_ = st.state;
}

void catch_up_progress::start(const projection_status& st, clock::time_point now) {
  display_ = std::make_unique<progress_display>(
    "catch-up", "offsets", opts_, line_,
    [log = logger_](const std::string& text) { log->info("{}", text); },
    // No plain periodic lines: the projection logs one per progress-interval.
    progress_display::clock::duration::zero(), now);
  records_at_start_ = st.records;
}

void catch_up_progress::on_status_error(clock::time_point now) {
  if (final_pending_ && display_) {
    final_pending_ = false;
    display_->finish(display_->meter().total(), now);
    display_.reset();
  }
}

void catch_up_progress::abandon() {
  final_pending_ = false;
  display_.reset(); // keeps a drawn bar as history
}

} // namespace qsp::app
