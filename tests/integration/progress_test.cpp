// Live progress of `catch-up` and `audit` (app/progress.hpp) against the real
// services: under a real pseudo-terminal (util-linux `script`) the bar
// appears, its done count grows between redraws, and it ends at 100 % with
// the final figures, with log lines passing above it ungarbled; without a
// terminal (or with --progress=off) there are no \r or escape codes, only
// plain periodic lines.
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;

namespace {

constexpr int partitions = 3;
constexpr int per_partition = 20000;
constexpr int64_t total = int64_t{partitions} * per_partition;

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

/// Runs the node with `args` on a pseudo-terminal of 100 columns (stdout and
/// stderr both on it), bounded to 120 s.  `out` is what the terminal received.
test::cli_result run_on_pty(const std::vector<std::string>& args) {
  std::string cmd = "stty cols 100 rows 40 && exec " + shell_quote(QSP_BIN_DIR "/qsession-projection");
  for (auto& a : args)
    cmd += " " + shell_quote(a);
  return test::run_program("/usr/bin/timeout",
                           {"-k", "5", "120", "script", "-qfec", cmd, "/dev/null"});
}

/// The text segments between carriage returns and newlines, with the
/// erase-to-end-of-line code removed: each redraw of the bar is one segment.
std::vector<std::string> segments(const std::string& raw) {
  std::vector<std::string> out;
  std::string cur;
  auto push = [&] {
    out.push_back(cur);
    cur.clear();
  };
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw.compare(i, 3, "\033[K") == 0) {
      i += 2;
    } else if (raw[i] == '\r' || raw[i] == '\n') {
      push();
    } else {
      cur.push_back(raw[i]);
    }
  }
  push();
  return out;
}

/// What a terminal shows after `raw`: \r returns to column 0, \n starts a
/// new line, ESC[K erases to the end of the line, other CSI sequences
/// (colours) are dropped, other characters overwrite.
std::vector<std::string> screen(const std::string& raw) {
  std::vector<std::string> lines{""};
  size_t col = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    auto& line = lines.back();
    if (c == '\033' && i + 1 < raw.size() && raw[i + 1] == '[') {
      size_t j = i + 2;
      while (j < raw.size() && !(raw[j] >= '@' && raw[j] <= '~'))
        ++j;
      if (j < raw.size() && raw[j] == 'K')
        line.resize(std::min(line.size(), col));
      i = j;
    } else if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      lines.emplace_back();
      col = 0;
    } else {
      if (col < line.size())
        line[col] = c;
      else
        line.push_back(c);
      ++col;
    }
  }
  return lines;
}

struct frame {
  int64_t done = 0;
  int64_t total = 0;
};

int64_t parse_count(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  return std::stoll(s);
}

/// The bar frames of `label` (not the final line) in order of drawing.
std::vector<frame> frames(const std::string& raw, const std::string& label) {
  static const std::regex bar{R"(^(\S+) +(\d+\.\d)% \[[#-]+\] ([\d,]+)/([\d,]+) offsets)"};
  std::vector<frame> out;
  for (auto& seg : segments(raw)) {
    std::smatch m;
    if (std::regex_search(seg, m, bar) && m[1] == label)
      out.push_back({parse_count(m[3]), parse_count(m[4])});
  }
  return out;
}

struct Progress : ::testing::Test {
  std::string topic = test::unique_name("progress");
  std::string convs = test::unique_name("convs") + ":";
  std::unique_ptr<kafka::admin> admin;

  void SetUp() override {
    auto a = kafka::admin::make(test::kafka_client());
    ASSERT_TRUE(a) << describe(a.error());
    admin = std::move(*a);
    test::create_topic(topic, partitions);
    auto p = kafka::producer::make(test::kafka_client());
    ASSERT_TRUE(p) << describe(p.error());
    uint64_t id = 0;
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part)
        ASSERT_TRUE(p->send(topic, part, core::encode_json(test::make_dispatch(id++, 40))));
    ASSERT_TRUE(p->flush());
  }
  void TearDown() override { admin->delete_topic(topic); }

  /// A command against a fresh namespace `ns`; small batches, one in flight,
  /// so the catch-up takes many checkpoints (many distinct done counts).
  std::vector<std::string> args(const std::string& cmd, const std::string& ns,
                                std::vector<std::string> extra) {
    auto a = test::node_args(topic, partitions, ns, convs);
    a.insert(a.begin(), cmd);
    a.push_back("--projection.max-batch-records=100");
    a.push_back("--projection.max-batches-in-flight=1");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

/// The bar's frames grow to the total; the screen ends with exactly one bar
/// line, the final one, and no log line shares a line with a bar.
void expect_bar(const std::string& raw, const std::string& label, const std::string& final_text) {
  auto fs = frames(raw, label);
  ASSERT_GE(fs.size(), 2u) << raw;
  int64_t distinct = 1;
  for (size_t i = 0; i < fs.size(); ++i) {
    EXPECT_EQ(fs[i].total, total) << raw;
    if (i > 0) {
      EXPECT_GE(fs[i].done, fs[i - 1].done) << "the done count went back:\n" << raw;
      distinct += fs[i].done > fs[i - 1].done ? 1 : 0;
    }
  }
  EXPECT_GE(distinct, 2) << "the bar never moved:\n" << raw;
  EXPECT_LT(fs.front().done, total) << raw;
  auto lines = screen(raw);
  std::vector<std::string> bars;
  for (auto& l : lines)
    if (has(l, "% ["))
      bars.push_back(l);
  ASSERT_EQ(bars.size(), 1u) << "intermediate frames must be overwritten, the final one kept:\n"
                             << raw;
  EXPECT_EQ(bars[0].rfind(label + " 100.0% [##########", 0), 0u) << bars[0];
  EXPECT_TRUE(has(bars[0], final_text)) << bars[0];
  EXPECT_TRUE(has(bars[0], " average")) << bars[0];
  EXPECT_LE(bars[0].size(), 99u) << "wider than the 100-column terminal: " << bars[0];
  // A log line erases the bar before it is written: it starts a line.
  for (auto& l : lines) {
    auto ts = l.find("[20"); // spdlog's timestamp
    if (ts != std::string::npos) {
      EXPECT_EQ(ts, 0u) << "a log line glued to a bar: " << l;
    }
  }
}

} // namespace

TEST_F(Progress, CatchUpAndAuditOnATerminalDrawABarThatEndsAtTheFinalFigures) {
  auto ns = test::unique_name("ns");
  auto r = run_on_pty(args("catch-up", ns, {"--progress-redraw=20ms"}));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  ASSERT_NO_FATAL_FAILURE(expect_bar(r.out, "catch-up", "60,000 offsets in "));
  EXPECT_TRUE(has(r.out, "(60,000 records projected)")) << r.out;
  EXPECT_TRUE(has(r.out, "catching-up -> ready")) << r.out;

  // The audit redraws per replay round (a few thousand records per
  // partition) with a 1ms redraw interval.
  auto a = run_on_pty(args("audit", ns, {"--progress-redraw=1ms"}));
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  ASSERT_NO_FATAL_FAILURE(expect_bar(a.out, "audit", "60,000 offsets in "));
  EXPECT_TRUE(has(a.out, "(60,000 records)")) << a.out;
  EXPECT_TRUE(has(a.out, "verdict: consistent")) << a.out;
}

TEST_F(Progress, WithoutATerminalOrWithProgressOffOnlyPlainLines) {
  static const std::regex catch_up_line{R"(catch-up \d+\.\d% \([\d]+ offsets left, )"};
  static const std::regex audit_line{R"(audit: \d+\.\d% \([\d,]+/60,000 offsets\), )"};
  auto count = [](const std::string& text, const std::regex& re) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
  };
  auto plain = [&](std::string text, const std::regex& re, const std::string& final_line) {
    // A terminal turns every \n into \r\n: only a \r of its own redraws.
    for (auto i = text.find("\r\n"); i != std::string::npos; i = text.find("\r\n", i))
      text.erase(i, 1);
    EXPECT_EQ(text.find('\r'), std::string::npos) << text;
    EXPECT_EQ(text.find("\033[K"), std::string::npos) << text;
    EXPECT_FALSE(has(text, "% [")) << text;
    EXPECT_GE(count(text, re), 2) << text;
    EXPECT_TRUE(has(text, final_line)) << text;
  };
  // stderr is a file.
  auto ns = test::unique_name("ns");
  auto r = test::run_cli(args("catch-up", ns, {"--projection.progress-interval=20ms"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find('\033'), std::string::npos) << r.err; // not even colours
  plain(r.err, catch_up_line, "catch-up: 100% 60,000 offsets in ");
  auto a = test::run_cli(args("audit", ns, {"--projection.progress-interval=1ms"}));
  ASSERT_EQ(a.rc, 0) << a.out << a.err;
  EXPECT_EQ(a.err.find('\033'), std::string::npos) << a.err;
  plain(a.err, audit_line, "audit: 100% 60,000 offsets in ");

  // A terminal, but --progress=off: the same plain lines (log colours stay).
  auto ns2 = test::unique_name("ns");
  auto off = run_on_pty(args("catch-up", ns2, {"--progress=off",
                                               "--projection.progress-interval=20ms"}));
  ASSERT_EQ(off.rc, 0) << off.out;
  plain(off.out, catch_up_line, "catch-up: 100% 60,000 offsets in ");

  // --progress=on forces the bar into a file.
  auto ns3 = test::unique_name("ns");
  auto on = test::run_cli(args("catch-up", ns3, {"--progress=on"}));
  ASSERT_EQ(on.rc, 0) << on.err;
  EXPECT_TRUE(has(on.err, "\033[K")) << on.err;
  EXPECT_TRUE(has(on.err, "% [")) << on.err;  // the bar, redrawn
  // The final line in 80 columns (a file has no width): the figures and
  // "(N records projected)" before the bar (issue 42: the detail was the
  // part that went).
  EXPECT_TRUE(has(on.err, "catch-up 100.0% 60,000 offsets in ")) << on.err;
  EXPECT_TRUE(has(on.err, "(60,000 records projected)")) << on.err;
}

TEST(ProgressCli, BadProgressOptionsAreUsageErrors) {
  auto r = test::run_cli({"catch-up", "--progress=sometimes"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(has(r.err, "--progress: auto, on or off, got \"sometimes\"")) << r.err;
  auto d = test::run_cli({"audit", "--progress-redraw=5"});
  EXPECT_EQ(d.rc, 2);
  EXPECT_TRUE(has(d.err, "--progress-redraw")) << d.err;
  auto h = test::run_cli({"--help"});
  EXPECT_TRUE(has(h.out, "--progress=auto|on|off")) << h.out;
  EXPECT_TRUE(has(h.out, "--progress-redraw=")) << h.out;
  EXPECT_TRUE(has(h.out, "--projection.progress-interval")) << h.out;
}
