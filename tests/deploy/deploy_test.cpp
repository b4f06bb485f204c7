// The operator artefacts under deploy/ against the node they describe:
// - every PromQL expression of the Grafana dashboard (panels and template
//   variables) parses (`promtool check rules` on a generated rules file) and
//   names only metrics a running node exports (scraped from /metrics);
// - the alert rules name only exported metrics too, and their runbook links
//   resolve to headings of docs/OPERATIONS.md.
// `promtool check rules` / `promtool test rules` on the alert rules themselves
// are separate CTest tests (tests/deploy/CMakeLists.txt).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "tests/support/integration.hpp"

using namespace qsp;
using namespace std::chrono_literals;

namespace {

const std::string dashboard_path = QSP_SOURCE_DIR "/deploy/grafana/qsession-projection.json";
const std::string rules_path = QSP_SOURCE_DIR "/deploy/prometheus/qsession-projection.rules.yml";
const std::string operations_path = QSP_SOURCE_DIR "/docs/OPERATIONS.md";

// -- PromQL: the metric names an expression selects ------------------------------

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}

/// Index just past the closing `close` matching the opener at `i` (strings
/// inside are skipped); npos if unbalanced.
size_t skip_group(const std::string& s, size_t i, char open, char close);

/// Index just past the string literal starting at `i`.
size_t skip_string(const std::string& s, size_t i) {
  char q = s[i++];
  while (i < s.size() && s[i] != q) {
    if (s[i] == '\\' && q != '`')
      ++i;
    ++i;
  }
  return std::min(i + 1, s.size());
}

size_t skip_group(const std::string& s, size_t i, char open, char close) {
  int depth = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = skip_string(s, i);
      continue;
    }
    if (c == open)
      ++depth;
    else if (c == close && --depth == 0)
      return i + 1;
    ++i;
  }
  return std::string::npos;
}

/// The metric names an expression selects: identifiers that are not
/// functions (followed by `(`), aggregation operators or keywords, not label
/// names (inside `{...}` or a `by`/`without`/`on`/`ignoring`/`group_*` list),
/// not numbers or durations.  Throws on an unbalanced expression.
std::set<std::string> metric_names(const std::string& expr) {
  // Aggregation operators may take their `by`/`without` clause before the
  // parenthesis (`sum by (le) (...)`): never metric names.
  static const std::set<std::string> keywords{
    "and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN",
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio"};
  static const std::set<std::string> label_lists{"by", "without", "on", "ignoring",
                                                 "group_left", "group_right"};
  std::set<std::string> out;
  const auto& s = expr;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = skip_string(s, i);
    } else if (c == '{' || c == '[') {
      auto j = skip_group(s, i, c, c == '{' ? '}' : ']');
      if (j == std::string::npos)
        throw std::runtime_error("unbalanced " + std::string(1, c) + " in: " + expr);
      i = j;
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n')
        ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c))
               || (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.'))
        ++i; // 0.99, 1e3, 0x1f, 5m, 1h30m
    } else if (ident_start(c)) {
      size_t j = i;
      while (j < s.size() && ident_char(s[j]))
        ++j;
      auto word = s.substr(i, j - i);
      size_t k = j;
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k])))
        ++k;
      bool call = k < s.size() && s[k] == '(';
      if (label_lists.count(word) > 0) {
        if (call) {
          auto e = skip_group(s, k, '(', ')');
          if (e == std::string::npos)
            throw std::runtime_error("unbalanced ( after " + word + " in: " + expr);
          j = e;
        }
      } else if (!call && keywords.count(word) == 0) {
        out.insert(word);
      }
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// -- Grafana: expressions and variables ---------------------------------------------

struct dashboard_expr {
  std::string where; ///< panel title and refId, or the variable's name
  std::string expr;  ///< as written, variables not substituted
};

void collect_panels(const nlohmann::json& panels, std::vector<dashboard_expr>& out) {
  for (auto& p : panels) {
    if (p.contains("panels"))
      collect_panels(p["panels"], out);
    if (!p.contains("targets"))
      continue;
    for (auto& t : p["targets"])
      if (t.contains("expr") && t["expr"].is_string())
        out.push_back({"panel \"" + p.value("title", std::string{"?"}) + "\" target "
                         + t.value("refId", std::string{"?"}),
                       t["expr"].get<std::string>()});
  }
}

/// A query variable's query: a string or {"query": string}.  Grafana's
/// label_values(selector, label) contributes its selector.
void collect_variables(const nlohmann::json& dash, std::vector<dashboard_expr>& out,
                       std::set<std::string>& names, std::vector<std::string>& problems) {
  if (!dash.contains("templating"))
    return;
  for (auto& v : dash["templating"]["list"]) {
    auto name = v.value("name", std::string{});
    names.insert(name);
    if (v.value("type", std::string{}) != "query")
      continue;
    std::string q;
    if (v["query"].is_string())
      q = v["query"].get<std::string>();
    else if (v["query"].is_object())
      q = v["query"].value("query", std::string{});
    std::smatch m;
    static const std::regex label_values{R"(^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$)"};
    static const std::regex label_only{R"(^\s*label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$)"};
    if (std::regex_match(q, m, label_values))
      out.push_back({"variable $" + name, m[1].str()});
    else if (std::regex_match(q, label_only))
      continue;
    else if (std::regex_search(q, std::regex{R"(^\s*query_result\((.*)\)\s*$)"}))
      out.push_back({"variable $" + name, q.substr(q.find('(') + 1, q.rfind(')') - q.find('(') - 1)});
    else
      problems.push_back("variable $" + name + ": query not understood by this test: " + q);
  }
}

/// Replaces Grafana variables ($x, ${x}, ${x:fmt}, [[x]]) by values that
/// parse: durations for the interval built-ins, ".*" for the dashboard's
/// own variables (they only appear in label matchers).  Unknown variables
/// are reported.
std::string substitute(const std::string& expr, const std::set<std::string>& vars,
                       std::vector<std::string>& unknown) {
  static const std::map<std::string, std::string> builtins{
    {"__rate_interval", "5m"}, {"__interval", "1m"}, {"__range", "1h"},
    {"__interval_ms", "60000"}, {"__range_s", "3600"}, {"__range_ms", "3600000"}};
  static const std::regex var{R"(\$\{([A-Za-z_][A-Za-z0-9_]*)(:[^}]*)?\}|\[\[([A-Za-z_][A-Za-z0-9_]*)(:[^\]]*)?\]\]|\$([A-Za-z_][A-Za-z0-9_]*))"};
  std::string out;
  auto begin = std::sregex_iterator(expr.begin(), expr.end(), var);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    auto& m = *it;
    std::string name = m[1].matched ? m[1].str() : m[3].matched ? m[3].str() : m[5].str();
    out += expr.substr(last, static_cast<size_t>(m.position(0)) - last);
    if (auto b = builtins.find(name); b != builtins.end())
      out += b->second;
    else if (vars.count(name) > 0)
      out += ".*";
    else {
      unknown.push_back(name);
      out += m.str(0);
    }
    last = static_cast<size_t>(m.position(0) + m.length(0));
  }
  return out + expr.substr(last);
}

// -- the rules file ---------------------------------------------------------------------

struct rule_expr {
  std::string alert;
  std::string expr;
};

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string{} : s.substr(b, e - b + 1);
}

/// `expr:` values of the alert rules: one line, or a `|` block.  The file is
/// ours; anything else is reported, so the check cannot silently skip a rule.
std::vector<rule_expr> rules_exprs(const std::string& text, std::vector<std::string>& problems) {
  std::vector<rule_expr> out;
  std::istringstream in{text};
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  std::string alert;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto t = trim(lines[i]);
    if (t.rfind("- alert:", 0) == 0 || t.rfind("- record:", 0) == 0)
      alert = trim(t.substr(t.find(':') + 1));
    if (t.rfind("expr:", 0) != 0)
      continue;
    auto v = trim(t.substr(5));
    if (v == "|" || v == "|-" || v == ">" || v == ">-") {
      auto indent = lines[i].find_first_not_of(' ');
      std::string block;
      while (i + 1 < lines.size()
             && (trim(lines[i + 1]).empty() || lines[i + 1].find_first_not_of(' ') > indent))
        block += lines[++i] + "\n";
      out.push_back({alert, block});
    } else if (!v.empty() && v[0] != '"' && v[0] != '\'') {
      out.push_back({alert, v});
    } else {
      problems.push_back(alert + ": quoted expr not understood by this test: " + v);
    }
  }
  return out;
}

/// GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'.
std::set<std::string> heading_anchors(const std::string& markdown) {
  std::set<std::string> out;
  std::istringstream in{markdown};
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l[0] != '#')
      continue;
    auto text = trim(l.substr(l.find_first_not_of('#')));
    std::string a;
    for (char c : text) {
      auto u = static_cast<unsigned char>(c);
      if (std::isalnum(u) || c == '_' || c == '-')
        a += static_cast<char>(std::tolower(u));
      else if (c == ' ')
        a += '-';
    }
    out.insert(a);
  }
  return out;
}

// -- the node ----------------------------------------------------------------------------

/// Every sample name a ready node exports (histograms as _bucket/_sum/_count),
/// plus the series Prometheus adds to every scrape itself.
std::set<std::string> exported_names(const std::string& metrics_text) {
  std::set<std::string> out{"up", "scrape_duration_seconds", "scrape_samples_scraped",
                            "scrape_samples_post_metric_relabeling", "scrape_series_added"};
  std::istringstream in{metrics_text};
  for (std::string l; std::getline(in, l);) {
    // A family the node declares (# TYPE) counts even without a sample now:
    // the Redis Cluster mode per-primary counters have samples only in that
    // mode.
    if (l.rfind("# TYPE ", 0) == 0) {
      auto name = l.substr(7, l.find(' ', 7) - 7);
      if (name.rfind("qsp_redis_shard_", 0) == 0)
        out.insert(name);
      continue;
    }
    if (l.empty() || l[0] == '#')
      continue;
    auto end = l.find_first_of("{ ");
    out.insert(l.substr(0, end));
  }
  return out;
}

/// Histogram families (from # TYPE): a bare family name is not a series.
std::set<std::string> histogram_families(const std::string& metrics_text) {
  std::set<std::string> out;
  static const std::regex type{R"(^# TYPE (\S+) histogram$)"};
  std::istringstream in{metrics_text};
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_match(l, m, type))
      out.insert(m[1].str());
  return out;
}

std::string missing_message(const std::string& where, const std::string& name,
                            const std::set<std::string>& histograms) {
  auto msg = where + " names " + name + ", which the node does not export";
  if (histograms.count(name) > 0)
    msg += " (a histogram: select " + name + "_bucket, _sum or _count)";
  return msg;
}

/// Starts a node on a fresh one-partition topic with a few records, waits
/// until it is ready (every per-partition series exists then) and scrapes it.
std::string scrape_ready_node() {
  auto topic = test::unique_name("deploy");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 1);
  auto prod = kafka::producer::make(test::kafka_client());
  EXPECT_TRUE(prod);
  if (!prod)
    return {};
  for (uint64_t i = 0; i < 20; ++i)
    EXPECT_TRUE(prod->send(topic, 0, core::encode_json(test::make_dispatch(i, 5))));
  EXPECT_TRUE(prod->flush());
  auto port = test::free_port();
  auto args = test::node_args(topic, 1, ns, convs);
  args.insert(args.begin(), "run");
  test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(port));
  auto logf = "/tmp/" + test::unique_name("deploy") + ".log";
  test::node_process node{args, logf};
  std::string text;
  if (!test::readyz_reaches(port, 200, 60s)) {
    ADD_FAILURE() << "node not ready: " << test::slurp(logf);
  } else {
    auto r = test::http_get(port, "/metrics");
    EXPECT_EQ(r.status, 200);
    text = r.body;
  }
  EXPECT_EQ(node.stop(), 0) << test::slurp(logf);
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
  return text;
}

} // namespace

TEST(PromqlNames, SelectorsOnlyNotFunctionsLabelsOrDurations) {
  using set = std::set<std::string>;
  EXPECT_EQ(metric_names("qsp_ready"), (set{"qsp_ready"}));
  EXPECT_EQ(metric_names(R"(max by (job, topic) (qsp_state{state="refused", x=~"a|b"}) == 1)"),
            (set{"qsp_state"}));
  EXPECT_EQ(metric_names("histogram_quantile(0.99, sum by (le) (rate(a_bucket{t=\"}\"}[5m])))"),
            (set{"a_bucket"}));
  EXPECT_EQ(metric_names("a / on (job) group_left(topic) b offset 1h30m unless c and bool d"),
            (set{"a", "b", "c", "d"}));
  EXPECT_EQ(metric_names("sum(rate(x_total[5m])) without (kind) > 1e3 or absent(up{job=\"j\"})"),
            (set{"x_total", "up"}));
  EXPECT_EQ(metric_names("topk by (p) (3, m1) + count without (a) (m2) - max(m3)"),
            (set{"m1", "m2", "m3"}));
  EXPECT_EQ(metric_names("count_values(\"v\", y) # a comment naming z\n+ w:rate5m"),
            (set{"y", "w:rate5m"}));
  EXPECT_THROW(metric_names("a{x=\"1\""), std::runtime_error);
}

TEST(GrafanaVariables, BuiltinsAndOwnVariablesAreReplacedUnknownOnesReported) {
  std::vector<std::string> unknown;
  EXPECT_EQ(substitute("rate(a{t=~\"$topic\",p=\"${partition:regex}\"}[$__rate_interval]) [[x]]",
                       {"topic", "partition"}, unknown),
            "rate(a{t=~\".*\",p=\".*\"}[5m]) [[x]]");
  EXPECT_EQ(unknown, (std::vector<std::string>{"x"}));
}

TEST(DeployRules, RunbookLinksResolveToOperationsHeadings) {
  auto rules = test::slurp(rules_path);
  ASSERT_FALSE(rules.empty()) << rules_path;
  auto anchors = heading_anchors(test::slurp(operations_path));
  std::regex link{R"(runbook_url:\s*"docs/OPERATIONS\.md#([^"]+)\")"};
  size_t alerts = 0, links = 0;
  for (std::istringstream in{rules}; !in.eof();) {
    std::string l;
    std::getline(in, l);
    alerts += trim(l).rfind("- alert:", 0) == 0 ? 1 : 0;
    std::smatch m;
    if (l.find("runbook_url:") == std::string::npos || trim(l).rfind('#', 0) == 0)
      continue;
    ++links;
    ASSERT_TRUE(std::regex_search(l, m, link)) << "runbook_url not into docs/OPERATIONS.md: " << l;
    EXPECT_EQ(anchors.count(m[1].str()), 1u)
      << "runbook anchor #" << m[1].str() << " is not a heading of docs/OPERATIONS.md";
  }
  EXPECT_GT(alerts, 0u);
  EXPECT_EQ(links, alerts) << "every alert needs a runbook_url";
}

TEST(DeployDashboard, ExpressionsParseAndNameOnlyMetricsTheNodeExports) {
  std::ifstream f{dashboard_path};
  ASSERT_TRUE(f) << dashboard_path;
  auto dash = nlohmann::json::parse(f);
  // Importable with any Prometheus: the data source is a variable.
  std::vector<dashboard_expr> exprs;
  std::set<std::string> vars;
  std::vector<std::string> problems;
  collect_panels(dash["panels"], exprs);
  collect_variables(dash, exprs, vars, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  ASSERT_GE(exprs.size(), 10u);
  bool ds_var = false;
  for (auto& v : dash["templating"]["list"])
    ds_var |= v.value("type", std::string{}) == "datasource" && v.value("query", std::string{}) == "prometheus";
  EXPECT_TRUE(ds_var) << "no template variable of type datasource (prometheus)";
  EXPECT_EQ(dash.dump().find("\"__inputs\""), std::string::npos);

  // 1. Every expression parses: as recording rules, checked by promtool.
  auto rules_file = "/tmp/" + test::unique_name("dashboard") + ".rules.yml";
  {
    std::ofstream out{rules_file};
    out << "groups:\n  - name: dashboard\n    rules:\n";
    for (size_t i = 0; i < exprs.size(); ++i) {
      std::vector<std::string> unknown;
      auto e = substitute(exprs[i].expr, vars, unknown);
      for (auto& u : unknown)
        ADD_FAILURE() << exprs[i].where << " uses $" << u
                      << ", neither a variable of the dashboard nor a Grafana built-in";
      // A JSON string is a valid YAML double-quoted scalar.
      out << "      - record: dashboard:expr_" << i << "\n        expr: "
          << nlohmann::json(e).dump() << "\n";
    }
  }
  auto check = test::run_program(QSP_PROMTOOL, {"check", "rules", rules_file});
  std::string legend;
  for (size_t i = 0; i < exprs.size(); ++i)
    legend += "  dashboard:expr_" + std::to_string(i) + " = " + exprs[i].where + "\n";
  EXPECT_EQ(check.rc, 0) << "promtool (" QSP_PROMTOOL ") check rules failed:\n"
                         << check.out << check.err << "rule names:\n" << legend;
  EXPECT_NE(check.out.find("SUCCESS: " + std::to_string(exprs.size()) + " rules found"),
            std::string::npos) << check.out << check.err;
  std::remove(rules_file.c_str());

  // 2. Every metric they (and the alert rules) name is exported by a running node.
  auto text = scrape_ready_node();
  ASSERT_FALSE(text.empty());
  auto names = exported_names(text);
  auto histograms = histogram_families(text);
  std::set<std::string> used;
  for (auto& e : exprs)
    for (auto& n : metric_names(e.expr)) {
      used.insert(n);
      EXPECT_EQ(names.count(n), 1u) << missing_message(e.where, n, histograms);
    }
  // The dashboard draws every family the brief asks for.
  for (auto* must : {"qsp_ready", "qsp_state", "qsp_catch_up_lag", "qsp_next_offset",
                     "qsp_live_lag", "qsp_last_progress_age_seconds", "qsp_records_total",
                     "qsp_recipient_writes_total", "qsp_batch_write_seconds_bucket",
                     "qsp_restarts_total", "qsp_failures_total", "qsp_open_transaction_gap"})
    EXPECT_EQ(used.count(must), 1u) << "the dashboard does not draw " << must;

  std::vector<std::string> rule_problems;
  auto rules = rules_exprs(test::slurp(rules_path), rule_problems);
  EXPECT_TRUE(rule_problems.empty()) << rule_problems.front();
  EXPECT_GE(rules.size(), 7u);
  for (auto& r : rules)
    for (auto& n : metric_names(r.expr))
      EXPECT_EQ(names.count(n), 1u) << missing_message("alert " + r.alert, n, histograms);
}

// Issue 42, the real run: a Prometheus server (Debian's, the package that
// brings promtool) scrapes three nodes in one job, every second, with the
// shipped alert rules; one node refuses (3 partitions configured, 2 in the
// topic) and stays up in state refused.  QspProjectionRefused fires for that
// instance alone, and QspNodeDown for none (every node answers).  The
// interval the alert fires within is the rules test's to hold
// (qsession-projection.rules.test.yml, exact clock); this run prints it.
TEST(DeployAlerts, ARefusedNodeAmongTwoHealthyOnesFiresTheRefusedAlert) {
  auto prometheus = std::string{"/usr/bin/prometheus"};
  ASSERT_EQ(access(prometheus.c_str(), X_OK), 0)
    << prometheus << " is missing: scripts/bootstrap installs Debian's prometheus package";
  auto topic = test::unique_name("deploy-alerts");
  auto ns = test::unique_name("ns");
  auto convs = test::unique_name("convs") + ":";
  test::create_topic(topic, 2);
  auto dir = "/tmp/" + test::unique_name("deploy-alerts");
  test::sh("mkdir -p " + dir);
  std::vector<uint16_t> ports;
  std::vector<std::unique_ptr<test::node_process>> nodes;
  for (int k = 0; k < 3; ++k) {
    ports.push_back(test::free_port());
    // Two healthy nodes (each its own namespace), one refused.
    auto args = test::node_args(topic, k < 2 ? 2 : 3, ns + "-" + std::to_string(k), convs);
    args.insert(args.begin(), "run");
    test::set_option(args, "http.listen", "127.0.0.1:" + std::to_string(ports[k]));
    args.push_back("--projection.exit-on-refusal=false");  // the default, named
    nodes.push_back(std::make_unique<test::node_process>(args, dir + "/node-" + std::to_string(k) + ".log"));
  }
  ASSERT_TRUE(test::readyz_reaches(ports[0], 200, 60s)) << test::slurp(dir + "/node-0.log");
  ASSERT_TRUE(test::readyz_reaches(ports[1], 200, 60s)) << test::slurp(dir + "/node-1.log");
  ASSERT_TRUE(test::eventually([&] {
    return test::http_get(ports[2], "/readyz").body.find("\"state\":\"refused\"") != std::string::npos;
  }, 60s)) << test::slurp(dir + "/node-2.log");
  auto refused_at = std::chrono::steady_clock::now();

  auto prom_port = test::free_port();
  {
    std::ofstream cfg{dir + "/prometheus.yml"};
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "rule_files:\n  - " << rules_path << "\n"
        << "scrape_configs:\n  - job_name: qsession-projection\n    static_configs:\n"
        << "      - targets: [";
    for (int k = 0; k < 3; ++k)
      cfg << (k ? ", " : "") << "\"127.0.0.1:" << ports[k] << "\"";
    cfg << "]\n";
  }
  int prom = test::spawn_program(prometheus,
                                 {"--config.file=" + dir + "/prometheus.yml",
                                  "--storage.tsdb.path=" + dir + "/tsdb",
                                  "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                                 dir + "/prometheus.log");
  struct stop_prometheus {
    int pid;
    ~stop_prometheus() {
      ::kill(pid, SIGTERM);
      test::wait_cli(pid);
    }
  } stop{prom};
  nlohmann::json firing;
  std::string last;
  bool fired = test::eventually([&] {
    auto r = test::http_get(prom_port, "/api/v1/alerts", 2s);
    last = r.body;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded())
      return false;
    firing = nlohmann::json::array();
    for (auto& a : j["data"]["alerts"])
      if (a.value("state", "") == "firing")
        firing.push_back(a);
    for (auto& a : firing)
      if (a["labels"].value("alertname", "") == "QspProjectionRefused")
        return true;
    return false;
  }, 90s);
  ASSERT_TRUE(fired) << "no QspProjectionRefused firing; last /api/v1/alerts: " << last << "\n"
                     << test::slurp(dir + "/prometheus.log");
  std::cout << "QspProjectionRefused firing "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - refused_at).count()
            << " ms after the node refused (Prometheus started after it)\n";
  for (auto& a : firing) {
    auto name = a["labels"].value("alertname", "");
    EXPECT_NE(name, "QspNodeDown") << a.dump();
    EXPECT_NE(name, "QspMetricsAbsent") << a.dump();
    if (name == "QspProjectionRefused") {
      EXPECT_EQ(a["labels"].value("instance", ""), "127.0.0.1:" + std::to_string(ports[2])) << a.dump();
      EXPECT_EQ(a["labels"].value("topic", ""), topic) << a.dump();
    }
  }
  // The refused node is still up, and exits 3 once stopped; the others 0.
  EXPECT_FALSE(nodes[2]->exit_code());
  EXPECT_EQ(nodes[2]->stop(), 3) << test::slurp(dir + "/node-2.log");
  EXPECT_EQ(nodes[0]->stop(), 0);
  EXPECT_EQ(nodes[1]->stop(), 0);
  auto admin = kafka::admin::make(test::kafka_client());
  (*admin)->delete_topic(topic);
  if (!HasFailure())
    test::sh("rm -rf " + dir);
}
