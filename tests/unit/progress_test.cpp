// The progress display's logic: rate and ETA, formatting, width fitting, and
// how the status line lets log lines pass (app/progress.hpp).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sstream>

#include "app/progress.hpp"

using namespace qsp::app;
using namespace std::chrono_literals;

namespace {

using clock_type = progress_meter::clock;

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// A FILE* into memory (no terminal: status_line falls back to COLUMNS/80).
struct mem_file {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ~mem_file() {
    std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

} // namespace

TEST(ProgressMeter, RateIsTheAverageWhileWarmingUpThenSmoothed) {
  auto t0 = clock_type::now();
  progress_meter m{t0, 3.0};
  m.update(0, 1000, t0);
  EXPECT_EQ(m.rate(), 0);
  EXPECT_FALSE(m.eta_seconds());
  m.update(100, 1000, t0 + 1s);
  m.update(300, 1000, t0 + 2s);
  EXPECT_DOUBLE_EQ(m.rate(), 150); // 300 in 2 s
  ASSERT_TRUE(m.eta_seconds());
  EXPECT_DOUBLE_EQ(*m.eta_seconds(), 700.0 / 150.0);
  // Past the warm-up: a stall lowers the rate, it does not zero it.
  m.update(450, 1000, t0 + 3s);
  m.update(450, 1000, t0 + 4s);
  double stalled = m.rate();
  EXPECT_GT(stalled, 0);
  EXPECT_LT(stalled, 150);
  m.update(450, 1000, t0 + 5s);
  EXPECT_LT(m.rate(), stalled);
}

TEST(ProgressMeter, ClampsAndEndsAtZeroEta) {
  auto t0 = clock_type::now();
  progress_meter m{t0};
  m.update(-5, 10, t0);
  EXPECT_EQ(m.done(), 0);
  m.update(50, 10, t0 + 1s);
  EXPECT_EQ(m.done(), 10);
  EXPECT_DOUBLE_EQ(m.fraction(), 1.0);
  EXPECT_EQ(m.eta_seconds(), 0.0);
  progress_meter empty{t0};
  empty.update(0, 0, t0);
  EXPECT_DOUBLE_EQ(empty.fraction(), 1.0);
}

TEST(ProgressFormat, CountsRatesDurations) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1,000");
  EXPECT_EQ(format_count(1000000), "1,000,000");
  EXPECT_EQ(format_count(-12345), "-12,345");
  EXPECT_EQ(format_rate(850), "850/s");
  EXPECT_EQ(format_rate(52300), "52.3k/s");
  EXPECT_EQ(format_rate(1250000), "1.25M/s");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(754), "12:34");
  EXPECT_EQ(format_duration(3723), "1:02:03");
}

TEST(ProgressFormat, OptionsParse) {
  EXPECT_EQ(parse_progress_mode("auto"), progress_mode::automatic);
  EXPECT_EQ(parse_progress_mode("on"), progress_mode::on);
  EXPECT_EQ(parse_progress_mode("off"), progress_mode::off);
  EXPECT_FALSE(parse_progress_mode("yes"));
  EXPECT_EQ(parse_redraw("50ms"), 50ms);
  EXPECT_EQ(parse_redraw("2s"), 2000ms);
  for (auto* bad : {"", "50", "ms", "0ms", "2min", "-5ms", "61s"})
    EXPECT_FALSE(parse_redraw(bad)) << bad;
}

TEST(ProgressBar, FitsEveryWidthAndDropsFieldsFirst) {
  auto t0 = clock_type::now();
  progress_meter m{t0};
  m.update(0, 1000000, t0);
  m.update(481234, 1000000, t0 + 2s);
  for (size_t w = 30; w <= 200; ++w) {
    auto line = render_bar("catch-up", m, "offsets", "slowest p2 44.0%", w);
    EXPECT_LE(line.size(), w) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
  auto wide = render_bar("catch-up", m, "offsets", "slowest p2 44.0%", 120);
  EXPECT_TRUE(has(wide, "catch-up  48.1% [")) << wide;
  EXPECT_TRUE(has(wide, "]   481,234/1,000,000 offsets")) << wide; // padded to the total
  EXPECT_TRUE(has(wide, "240.6k/s")) << wide;
  EXPECT_TRUE(has(wide, "ETA 0:02")) << wide;
  EXPECT_TRUE(has(wide, "slowest p2 44.0%")) << wide;
  auto narrow = render_bar("catch-up", m, "offsets", "slowest p2 44.0%", 70);
  EXPECT_FALSE(has(narrow, "slowest")) << narrow;
  EXPECT_TRUE(has(narrow, "481,234/1,000,000 offsets")) << narrow;
}

TEST(ProgressBar, SteadyLayoutAndNoAbsurdEta) {
  auto t0 = clock_type::now();
  progress_meter slow{t0}, fast{t0};
  slow.update(0, 1000000000, t0);
  slow.update(5, 1000000000, t0 + 1s); // 5/s: ETA of 6 years
  fast.update(0, 1000000000, t0);
  fast.update(100000000, 1000000000, t0 + 2s); // 50M/s
  auto a = render_bar("catch-up", slow, "offsets", "", 120);
  auto b = render_bar("catch-up", fast, "offsets", "", 120);
  EXPECT_TRUE(has(a, "ETA ?")) << a;
  EXPECT_TRUE(has(b, "ETA 0:18")) << b;
  // The bar and the counts keep their columns whatever the numbers.
  EXPECT_EQ(a.find(']'), b.find(']')) << a << "\n" << b;
  EXPECT_EQ(a.find(" offsets"), b.find(" offsets")) << a << "\n" << b;
  EXPECT_EQ(a.find("ETA"), b.find("ETA")) << a << "\n" << b;
  EXPECT_NE(a.back(), ' ') << "trailing padding is trimmed: " << a;
}

TEST(ProgressBar, NeverShowsHundredBeforeTheEnd) {
  auto t0 = clock_type::now();
  progress_meter m{t0};
  m.update(999999, 1000000, t0);
  auto line = render_bar("audit", m, "offsets", "", 100);
  EXPECT_TRUE(has(line, " 99.9% [")) << line;
  EXPECT_TRUE(has(line, "#-]")) << line; // one cell left
}

TEST(ProgressBar, FinalLineHasTheFigures) {
  auto line = render_final("catch-up", 1000000, "offsets", 19.2, "1,000,000 records projected", 120);
  EXPECT_TRUE(has(line, "catch-up 100.0% [###")) << line;
  EXPECT_TRUE(has(line, "##] 1,000,000 offsets in 19.2s, 52.1k/s average")) << line;
  EXPECT_TRUE(has(line, "(1,000,000 records projected)")) << line;
  EXPECT_LE(line.size(), 120u);
  // Issue 42: an 80-column terminal keeps the detail and drops the bar.
  auto narrow = render_final("catch-up", 1000000, "offsets", 19.2, "1,000,000 records projected", 79);
  EXPECT_TRUE(has(narrow, "(1,000,000 records projected)")) << narrow;
  EXPECT_TRUE(has(narrow, "catch-up 100.0% 1,000,000 offsets in 19.2s")) << narrow;
  EXPECT_LE(narrow.size(), 79u) << narrow;
  auto plain = render_final("catch-up", 1000000, "offsets", 75, "", 0);
  EXPECT_EQ(plain, "catch-up: 100% 1,000,000 offsets in 1:15, 13.3k/s average");
  auto none = render_final("catch-up", 0, "offsets", 0, "", 0);
  EXPECT_EQ(none, "catch-up: 100% 0 offsets in 0.0s, -/s average");
}

TEST(StatusLine, LogLinesPassAboveTheBar) {
  mem_file out;
  auto line = std::make_shared<status_line>(out.f);
  spdlog::logger log{"progress-test", line};
  log.set_pattern("%v");
  line->show("BAR 1");
  log.info("a log line");
  line->show("BAR 2");
  line->settle("BAR DONE");
  log.info("after");
  // Drawn with \r + erase; the log line erases the bar, the bar is redrawn
  // after it; the settled line ends with a newline and is not redrawn.
  EXPECT_EQ(out.text(), "\rBAR 1\033[K"
                        "\r\033[K" "a log line\n" "\rBAR 1\033[K"
                        "\rBAR 2\033[K"
                        "\rBAR DONE\033[K\n"
                        "after\n");
}

TEST(StatusLine, KeepEndsTheShownLineOnce) {
  mem_file out;
  status_line line{out.f};
  line.keep(); // nothing shown: nothing written
  line.show("BAR");
  line.keep();
  line.keep();
  EXPECT_EQ(out.text(), "\rBAR\033[K\n");
}

TEST(ProgressDisplay, PlainLinesOnlyWhenDueAndWithoutTerminalCodes) {
  std::vector<std::string> lines;
  auto t0 = clock_type::now();
  progress_display d{"audit", "offsets", progress_options{}, nullptr,
                     [&](const std::string& s) { lines.push_back(s); }, 5s, t0};
  EXPECT_FALSE(d.bar());
  d.update(0, 1000, t0);
  d.update(100, 1000, t0 + 1s);
  EXPECT_TRUE(lines.empty());
  EXPECT_TRUE(d.due(t0 + 5s));
  d.update(500, 1000, t0 + 5s, "model 3 users");
  d.update(600, 1000, t0 + 6s);
  d.update(900, 1000, t0 + 10s);
  d.finish(1000, t0 + 12s, "1,000 records");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "audit: 50.0% (500/1,000 offsets), 100/s, ETA 0:05; model 3 users");
  EXPECT_TRUE(has(lines[1], "audit: 90.0% (900/1,000 offsets)")) << lines[1];
  EXPECT_EQ(lines[2], "audit: 100% 1,000 offsets in 12.0s, 83/s average  (1,000 records)");
  for (auto& l : lines)
    EXPECT_EQ(l.find_first_of("\r\033"), std::string::npos) << l;
}

TEST(ProgressDisplay, BarRedrawsAtMostOncePerInterval) {
  mem_file out;
  auto line = std::make_shared<status_line>(out.f);
  auto t0 = clock_type::now();
  progress_options opts;
  opts.redraw = 200ms;
  progress_display d{"audit", "offsets", opts, line, nullptr, 0s, t0};
  EXPECT_TRUE(d.bar());
  d.update(0, 1000, t0);            // first frame
  d.update(10, 1000, t0 + 100ms);   // too soon
  d.update(20, 1000, t0 + 200ms);   // second frame
  d.finish(1000, t0 + 1s);
  auto text = out.text();
  size_t frames = 0;
  for (size_t i = text.find('\r'); i != std::string::npos; i = text.find('\r', i + 1))
    ++frames;
  EXPECT_EQ(frames, 3u) << text;
  EXPECT_TRUE(has(text, "0/1,000 offsets")) << text;
  EXPECT_FALSE(has(text, " 10/1,000 offsets")) << text;
  EXPECT_TRUE(has(text, " 20/1,000 offsets")) << text;
  EXPECT_TRUE(has(text, "audit 100.0% [")) << text;
  EXPECT_EQ(text.back(), '\n');
}

// Partitions added to a running projection (docs/DESIGN.md §12, handover): the
// catch-up that follows counts the added partitions only, not the ones the
// projection kept (a trial saw "100% 501 offsets" for an added partition
// that started at its H0).
TEST(CatchUpProgress, AnAdditionCountsOnlyTheAddedPartitions) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("%v");
  auto logger = std::make_shared<spdlog::logger>("progress-test", sink);
  std::vector<std::string> lines;
  auto logged = [&] {
    lines.clear();
    std::istringstream in{out.str()};
    for (std::string l; std::getline(in, l);)
      lines.push_back(l);
    return lines.size();
  };
  progress_options opts;
  catch_up_progress cp{opts, nullptr, logger};
  auto t0 = clock_type::now();
  auto status = [](std::string state, std::vector<qsp::partition_status> parts, uint64_t records) {
    qsp::projection_status s;
    s.state = std::move(state);
    s.partitions = std::move(parts);
    s.records = records;
    return s;
  };
  auto part = [](int32_t p, int64_t start, int64_t h0, int64_t next) {
    qsp::partition_status x;
    x.partition = p;
    x.start = start;
    x.h0 = h0;
    x.next_offset = next;
    return x;
  };
  cp.on_status(status("catching-up", {part(0, 0, 500, 0)}, 0), t0);
  cp.on_status(status("ready", {}, 500), t0 + 1s);
  cp.on_status(status("ready", {part(0, 0, 500, 500)}, 500), t0 + 1s);
  ASSERT_EQ(logged(), 1u);
  EXPECT_TRUE(has(lines[0], "catch-up: 100% 500 offsets")) << lines[0];
  // Partition 1 is added at 752 with H0 753; partition 0 goes on past its H0.
  cp.on_status(status("catching-up", {part(0, 0, 500, 600), part(1, 752, 753, 752)}, 600),
               t0 + 2s);
  cp.on_status(status("ready", {}, 601), t0 + 3s);
  cp.on_status(status("ready", {part(0, 0, 500, 700), part(1, 752, 753, 753)}, 601), t0 + 3s);
  ASSERT_EQ(logged(), 2u);
  EXPECT_TRUE(has(lines[1], "catch-up: 100% 1 offsets")) << lines[1];
  // After a restart every partition catches up from its checkpoint again.
  cp.on_status(status("dirty", {}, 601), t0 + 4s);
  cp.on_status(status("catching-up", {part(0, 700, 710, 700), part(1, 753, 760, 753)}, 601),
               t0 + 5s);
  cp.on_status(status("ready", {}, 618), t0 + 6s);
  cp.on_status(status("ready", {part(0, 700, 710, 710), part(1, 753, 760, 760)}, 618), t0 + 6s);
  ASSERT_EQ(logged(), 3u);
  EXPECT_TRUE(has(lines[2], "catch-up: 100% 17 offsets")) << lines[2];
}
