// Network faults between the node and Redis, and between the node and the
// Kafka brokers, through a real TCP fault proxy (toxiproxy, started by
// `scripts/services start --ha`; issue 14 item 4, last bullet).  Labels `ha`
// and `fault`.
//
// Topology: the node's Redis is a private redis-server of each test behind a
// toxiproxy proxy the test creates; its Kafka is the HA set's three brokers,
// reached only through their PROXIED listeners, which advertise the ports of
// the proxies kafka-1..3 (so every byte between the node and any broker
// passes the proxy).  The test's producer, its samples of Redis and its
// admin calls bypass the proxies: only the node sees the faults.
//
// Faults (toxics): added latency below every deadline, connections reset
// (RST on the next byte, new connections too), and a black hole (bytes
// dropped, connections held open) that outlasts every timeout of the node
// (redis.command-timeout 1 s, redis.connect-timeout 500 ms, kafka.timeout-ms
// 3 s) by several seconds after the node noticed it.
//
// Each scenario runs a `run` node under a live producer and checks what the
// node claims DURING the fault, sampled every 100 ms: /readyz status and
// state, and the PULL_SESSION_LIST gate (/v1/users/u0/sessions): latency
// keeps it ready and projecting; a reset or black hole makes it dirty (503,
// the gate closed) within a bound and keeps it so, checkpoints frozen, until
// the fault is healed; it never refuses.  Every snapshot of Redis taken
// during the run (MULTI/EXEC: checkpoints and every session set) is checked
// for a checkpoint ahead of its data.  Afterwards the node catches up by
// itself, Redis equals the test's model of the whole log and `audit` says
// consistent.  Each prints a soak-result line (scripts/soak --ha).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"
#include "redis/stores.hpp"
#include "tests/support/appender.hpp"
#include "tests/support/integration.hpp"
#include "tests/support/toxiproxy.hpp"

using namespace std::chrono_literals;
using qsp::describe;
using qsp::test::eventually;
using qsp::test::slurp;

namespace {

const qsp::test::services& ha() { return *qsp::test::ha_env(); }

using clock_type = std::chrono::steady_clock;

double secs(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The node's deadlines in these tests; the faults outlast all of them.
constexpr auto command_timeout = 1s;
constexpr auto connect_timeout = 500ms;
constexpr auto kafka_timeout = 3s;

/// What the node must claim while the fault holds.
enum class claim {
  stays_ready, ///< /readyz 200 and the gate open on every sample; checkpoints advance
  goes_dirty,  ///< /readyz 503, state not ready, the gate closed, checkpoints frozen
  lags_only,   ///< either ready or dirty (never refused); no bound on which
};

/// One toxic on one or more proxies.
struct fault {
  std::string kind;                 ///< for the reports, e.g. "redis-blackhole"
  std::vector<std::string> proxies; ///< toxiproxy proxy names
  std::string type;                 ///< latency, reset_peer, timeout
  std::vector<std::string> streams; ///< upstream and/or downstream
  std::string attributes;           ///< JSON object
};

struct net_fault : ::testing::Test {
  static constexpr int users = 50;
  std::string topic = qsp::test::unique_name("net-fault");
  std::string ns = qsp::test::unique_name("ns");
  std::string convs = qsp::test::unique_name("convs") + ":";
  int partitions = 2;
  std::optional<qsp::test::private_redis> redis_server;
  std::optional<qsp::test::toxiproxy> toxi;
  std::string redis_proxy = qsp::test::unique_name("redis");
  uint16_t redis_proxy_port = 0;
  qsp::kafka::client_settings cfg; // direct: the test's own clients bypass the proxies
  std::unique_ptr<qsp::kafka::admin> admin;
  uint16_t http_port = 0;
  std::vector<std::pair<std::string, std::string>> toxics_on; // (proxy, toxic) to remove

  std::mutex log_mu;
  std::map<int, std::vector<std::pair<int64_t, qsp::core::dispatch>>> log;
  uint64_t next_id = 0;

  void SetUp() override {
    REQUIRE_HA_SET();
    if (ha().toxiproxy_api.empty() || ha().kafka_proxies.size() != 3)
      FAIL() << ha().env_file << " names no toxiproxy (TOXIPROXY_API, KAFKA_PROXIES): restart the "
             << "HA set with this tree's scripts/services start --ha";
    toxi.emplace(ha().toxiproxy_api);
    std::string why;
    ASSERT_TRUE(toxi->up(&why)) << why;
    // A test killed mid-fault (a timeout) leaves its toxics on the brokers'
    // proxies: remove them, saying so.
    for (auto& [id, addr] : ha().kafka_proxies) {
      auto removed = toxi->clear_toxics(broker_proxy(id), &why);
      ASSERT_TRUE(removed) << why;
      for (auto& n : *removed)
        std::printf("removed toxic %s left on proxy %s\n", n.c_str(), broker_proxy(id).c_str());
    }
    redis_server.emplace("net-fault", std::vector<std::string>{});
    ASSERT_TRUE(redis_server->wait_ready());
    auto port = toxi->create_proxy(redis_proxy, "127.0.0.1:" + std::to_string(redis_server->port),
                                   &why);
    ASSERT_TRUE(port) << why;
    redis_proxy_port = *port;
    cfg = qsp::test::kafka_client(ha());
    cfg.timeout_ms = 30000;
    auto a = qsp::kafka::admin::make(cfg);
    ASSERT_TRUE(a) << describe(a.error());
    admin = std::move(*a);
    auto r = qsp::test::run_program(QSP_BIN_DIR "/qsp-devtool",
                                    {"create-topic", ha().kafka_bootstrap, topic,
                                     std::to_string(partitions), "--replication-factor=3"});
    ASSERT_EQ(r.rc, 0) << r.err;
    for (int p = 0; p < partitions; ++p)
      ASSERT_TRUE(eventually([&] {
        auto part = qsp::test::describe_partition(cfg, topic, p, &why);
        return part && part->leader > 0 && part->isr.size() == 3;
      }, 30s)) << topic << "/" << p << ": " << why;
  }

  void TearDown() override {
    heal();
    if (toxi && redis_proxy_port != 0)
      toxi->delete_proxy(redis_proxy);
    if (admin)
      (void) admin->delete_topic(topic);
  }

  // -- faults ---------------------------------------------------------------

  void inject(const fault& f) {
    for (auto& proxy : f.proxies)
      for (auto& stream : f.streams) {
        auto name = f.type + "-" + stream;
        std::string why;
        ASSERT_TRUE(toxi->add_toxic(proxy, name, f.type, stream, f.attributes, &why)) << why;
        toxics_on.emplace_back(proxy, name);
      }
  }

  void heal() {
    for (auto& [proxy, name] : toxics_on) {
      std::string why;
      EXPECT_TRUE(toxi->remove_toxic(proxy, name, &why)) << why;
    }
    toxics_on.clear();
  }

  std::string broker_proxy(int id) { return "kafka-" + std::to_string(id); }

  std::vector<std::string> all_broker_proxies() {
    std::vector<std::string> out;
    for (auto& [id, addr] : ha().kafka_proxies)
      out.push_back(broker_proxy(id));
    return out;
  }

  // -- the log and the node -------------------------------------------------

  qsp::core::dispatch next_record(int part) {
    std::lock_guard<std::mutex> guard{log_mu};
    auto d = qsp::test::make_dispatch(next_id++, users);
    auto off = log[part].empty() ? 0 : log[part].back().first + 1;
    log[part].emplace_back(off, d);
    return d;
  }

  std::map<int, std::vector<std::pair<int64_t, qsp::core::dispatch>>> log_snapshot() {
    std::lock_guard<std::mutex> guard{log_mu};
    return log;
  }

  uint64_t records() {
    std::lock_guard<std::mutex> guard{log_mu};
    return next_id;
  }

  void produce(int per_partition) {
    auto p = qsp::kafka::producer::make(cfg);
    ASSERT_TRUE(p) << describe(p.error());
    for (int n = 0; n < per_partition; ++n)
      for (int part = 0; part < partitions; ++part)
        ASSERT_TRUE(p->send(topic, part, qsp::core::encode_json(next_record(part))));
    ASSERT_TRUE(p->flush());
  }

  /// A steady trickle of records into every partition until stopped (an
  /// idempotent producer on the direct listeners: offsets follow the sends).
  qsp::test::appender trickle() {
    return qsp::test::appender{cfg, topic, partitions,
                               [this](int part) { return next_record(part); }};
  }

  /// One sample: what the node claims, then an atomic snapshot of Redis
  /// (direct, not through the proxy).
  struct sample {
    double t = 0;            ///< seconds since the fault was injected (< 0 before)
    int readyz = 0;          ///< /readyz status (0: no answer)
    std::string state;       ///< its "state"
    std::string last_error;  ///< its "last_error"
    int gate = 0;            ///< /v1/users/u0/sessions status
    std::map<int, int64_t> cps; ///< empty if the snapshot failed
  };

  /// Samples every 100 ms until stopped (bounded: 3,000 samples) and counts
  /// entries below a sampled checkpoint that are missing or stale in the same
  /// snapshot.
  class sampler {
  public:
    explicit sampler(net_fault& s) : s_(s), thread_([this] { loop(); }) {}
    ~sampler() { stop(); }
    void stop() {
      if (thread_.joinable()) {
        stop_ = true;
        thread_.join();
      }
    }
    void mark_fault() { t_fault_ = clock_type::now(); faulted_ = true; }
    std::vector<sample> taken() {
      std::lock_guard<std::mutex> g{mu_};
      return samples_;
    }
    size_t checked = 0, overshoots = 0;
    std::vector<std::string> examples;

  private:
    void loop() {
      auto c = qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(s_.redis_server->port));
      while (!stop_) {
        sample one;
        auto r = qsp::test::http_get(s_.http_port, "/readyz", 2s);
        one.readyz = r.status;
        auto j = nlohmann::json::parse(r.body, nullptr, false);
        if (!j.is_discarded() && j.is_object()) {
          one.state = j.value("state", std::string{});
          one.last_error = j.value("last_error", std::string{});
        }
        one.gate = qsp::test::http_get(s_.http_port, "/v1/users/u0/sessions?limit=1", 2s).status;
        snapshot(*c, one);
        one.t = faulted_ ? secs(clock_type::now() - t_fault_) : -1;
        {
          std::lock_guard<std::mutex> g{mu_};
          samples_.push_back(std::move(one));
          if (samples_.size() >= 3000)
            return;
        }
        std::this_thread::sleep_for(100ms); // the sampling rate
      }
    }

    void snapshot(qsp::redis::connection& conn, sample& one) {
      conn.append({"MULTI"});
      for (int p = 0; p < s_.partitions; ++p)
        conn.append({"HGET", qsp::redis::checkpoint_key(s_.ns, s_.topic, p), "next_offset"});
      for (int u = 0; u < users; ++u)
        conn.append({"ZRANGE", s_.convs + "u" + std::to_string(u), "0", "-1", "WITHSCORES"});
      conn.append({"EXEC"});
      for (int i = 0; i < 1 + s_.partitions + users; ++i)
        if (!conn.read_reply())
          return;
      auto exec = conn.read_reply("EXEC");
      if (!exec || (*exec)->type != REDIS_REPLY_ARRAY)
        return;
      auto* rep = exec->get();
      if (rep->elements != static_cast<size_t>(s_.partitions + users))
        return;
      for (int p = 0; p < s_.partitions; ++p) {
        auto* e = rep->element[p];
        one.cps[p] = e->type == REDIS_REPLY_STRING ? std::stoll(std::string{e->str, e->len}) : 0;
      }
      std::map<std::string, std::map<std::string, int64_t>> sets;
      for (int u = 0; u < users; ++u) {
        auto* z = rep->element[s_.partitions + u];
        auto& out = sets["u" + std::to_string(u)];
        for (size_t k = 0; k + 1 < z->elements; k += 2)
          out[std::string{z->element[k]->str, z->element[k]->len}]
            = std::stoll(std::string{z->element[k + 1]->str, z->element[k + 1]->len});
      }
      auto log = s_.log_snapshot(); // after the checkpoints: it covers them
      qsp::test::model m;
      for (auto& [p, cp] : one.cps) {
        auto& recs = log[p];
        if (cp > static_cast<int64_t>(recs.size())) {
          note("partition " + std::to_string(p) + " checkpoint " + std::to_string(cp)
               + " past the log's end " + std::to_string(recs.size()));
          continue;
        }
        for (auto& [off, d] : recs)
          if (off < cp)
            qsp::test::apply(m, d);
      }
      for (auto& [user, cv] : m)
        for (auto& [conv, score] : cv) {
          ++checked;
          auto& got = sets[user];
          auto it = got.find(conv);
          if (it == got.end() || it->second < score)
            note("checkpoint ahead of its data: " + user + " " + conv);
        }
    }

    void note(std::string what) {
      ++overshoots;
      if (examples.size() < 10)
        examples.push_back(std::move(what));
    }

    net_fault& s_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> faulted_{false};
    clock_type::time_point t_fault_;
    std::mutex mu_;
    std::vector<sample> samples_;
    std::thread thread_;
  };

  std::vector<std::string> args(const std::string& cmd) {
    return {cmd,
            "--projection.dispatch-topic=" + topic,
            "--projection.partition-count=" + std::to_string(partitions),
            "--projection.namespace=" + ns,
            "--projection.convs-prefix=" + convs,
            "--projection.max-batch-records=300",
            "--kafka.bootstrap-servers=" + ha().kafka_proxied_bootstrap,
            "--kafka.timeout-ms=" + std::to_string(kafka_timeout.count() * 1000),
            "--redis.host=127.0.0.1",
            "--redis.port=" + std::to_string(redis_proxy_port),
            "--redis.command-timeout=" + std::to_string(command_timeout.count()) + "s",
            "--redis.connect-timeout=" + std::to_string(connect_timeout.count()) + "ms",
            "--http.listen=\"\""};
  }

  std::vector<std::string> run_args() {
    auto a = args("run");
    http_port = qsp::test::free_port();
    qsp::test::set_option(a, "http.listen", "127.0.0.1:" + std::to_string(http_port));
    return a;
  }

  std::map<int, int64_t> checkpoints() {
    auto c = qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(redis_server->port));
    std::map<int, int64_t> out;
    for (int p = 0; p < partitions; ++p) {
      auto v = qsp::test::redis_cmd(*c, {"HGET", qsp::redis::checkpoint_key(ns, topic, p),
                                         "next_offset"});
      out[p] = v.empty() || v.rfind("ERR", 0) == 0 ? -1 : std::stoll(v);
    }
    return out;
  }

  /// Every partition's checkpoint moves past where it is now (bounded).
  bool all_checkpoints_advance(std::chrono::milliseconds limit) {
    auto before = checkpoints();
    return eventually([&] {
      auto now = checkpoints();
      for (auto& [p, cp] : before)
        if (now[p] <= cp)
          return false;
      return true;
    }, limit);
  }

  bool caught_up() {
    auto cps = checkpoints();
    for (auto& [p, recs] : log_snapshot())
      if (cps[p] != static_cast<int64_t>(recs.size()))
        return false;
    return true;
  }

  /// Entries of the model of the whole log missing or stale in Redis.
  size_t lost_entries(std::vector<std::string>& examples) {
    qsp::test::model m;
    for (auto& [p, recs] : log_snapshot())
      for (auto& [off, d] : recs)
        qsp::test::apply(m, d);
    auto c = qsp::test::redis_conn_at("127.0.0.1:" + std::to_string(redis_server->port));
    size_t lost = 0;
    for (auto& [user, cv] : m) {
      auto got = qsp::test::zset(*c, convs + user);
      for (auto& [conv, score] : cv) {
        auto it = got.find(conv);
        if (it == got.end() || it->second != score) {
          ++lost;
          if (examples.size() < 10)
            examples.push_back(user + " " + conv);
        }
      }
    }
    return lost;
  }

  // -- the scenario ---------------------------------------------------------

  /// Runs `f` against a `run` node under load and checks `during` while it
  /// holds.  stays_ready/lags_only: the fault holds for `hold`.  goes_dirty:
  /// the node must answer 503 within `dirty_within` of the injection, and the
  /// fault then holds for `hold` more.
  void scenario(const fault& f, claim during, std::chrono::milliseconds hold,
                std::chrono::milliseconds dirty_within = 15s) {
    ASSERT_NO_FATAL_FAILURE(produce(1500));
    auto logf = "/tmp/" + qsp::test::unique_name(f.kind) + ".log";
    qsp::test::node_process node{run_args(), logf};
    ASSERT_TRUE(qsp::test::readyz_reaches(http_port, 200, 90s)) << slurp(logf);
    auto more = trickle();
    ASSERT_TRUE(all_checkpoints_advance(60s)) << "no progress before the fault\n" << slurp(logf);
    sampler samples{*this};
    ASSERT_TRUE(eventually([&] { return samples.taken().size() >= 3; }, 30s));

    auto before = checkpoints();
    auto t_fault = clock_type::now();
    samples.mark_fault();
    ASSERT_NO_FATAL_FAILURE(inject(f));
    double first_503 = -1;
    if (during == claim::goes_dirty) {
      qsp::test::http_reply last;
      ASSERT_TRUE(qsp::test::readyz_reaches(http_port, 503, dirty_within, &last))
        << f.kind << ": /readyz still " << last.status << " " << last.body << " "
        << dirty_within.count() << " ms into the fault\n" << slurp(logf);
      first_503 = secs(clock_type::now() - t_fault);
    }
    // The fault's duration (not a synchronisation): it outlasts every timeout.
    std::this_thread::sleep_for(hold);
    auto at_heal = checkpoints();
    double t_heal = secs(clock_type::now() - t_fault);
    heal();

    qsp::test::http_reply last;
    EXPECT_TRUE(qsp::test::readyz_reaches(http_port, 200, 120s, &last))
      << f.kind << ": not ready 120 s after the fault was healed: " << last.body << "\n"
      << slurp(logf);
    double ready_again = secs(clock_type::now() - t_fault) - t_heal;
    EXPECT_TRUE(all_checkpoints_advance(60s)) << "no progress after the fault\n" << slurp(logf);
    more.stop();
    EXPECT_TRUE(eventually([&] { return caught_up(); }, 90s))
      << "the node did not catch up with the log\n" << slurp(logf);
    samples.stop();
    auto taken = samples.taken();
    EXPECT_FALSE(node.wait_for(0ms).has_value()) << "the node exited\n" << slurp(logf);
    int rc = node.stop();
    EXPECT_EQ(rc, 0) << slurp(logf);
    auto text = slurp(logf);
    int refusals = (rc == 3 ? 1 : 0) + (contains(text, "] refused: ") ? 1 : 0);

    // What the node claimed while the fault held.
    std::vector<std::string> transitions;
    std::string prev;
    size_t in_fault = 0, held = 0;
    std::optional<std::map<int, int64_t>> frozen;
    for (auto& s : taken) {
      auto now = std::to_string(s.readyz) + " " + s.state + " gate " + std::to_string(s.gate);
      if (now != prev) {
        char at[32];
        std::snprintf(at, sizeof at, "%+6.1f s  ", s.t);
        transitions.push_back(at + now + (s.last_error.empty() ? "" : " (" + s.last_error + ")"));
        prev = now;
      }
      if (s.t < 0 || s.t > t_heal)
        continue;
      ++in_fault;
      EXPECT_NE(s.state, "refused") << "at " << s.t << " s: " << s.last_error;
      EXPECT_NE(s.readyz, 0) << "/readyz did not answer at " << s.t << " s";
      switch (during) {
        case claim::stays_ready:
          EXPECT_EQ(s.readyz, 200) << f.kind << " at " << s.t << " s: " << s.state << " "
                                   << s.last_error;
          EXPECT_EQ(s.gate, 200) << f.kind << ": the sessions gate at " << s.t << " s";
          break;
        case claim::goes_dirty:
          // From the first 503 on, plus one command timeout for a write in
          // flight when the node noticed, nothing may open or move.
          if (s.t >= first_503 + secs(command_timeout) && s.t <= t_heal - 0.2) {
            ++held;
            EXPECT_EQ(s.readyz, 503) << f.kind << " at " << s.t << " s: " << s.state;
            EXPECT_NE(s.state, "ready") << f.kind << " at " << s.t << " s";
            EXPECT_EQ(s.gate, 503) << f.kind << ": the sessions gate at " << s.t << " s";
            if (!s.cps.empty()) {
              if (!frozen)
                frozen = s.cps;
              EXPECT_EQ(s.cps, *frozen) << f.kind << ": a checkpoint moved at " << s.t
                                        << " s while the node was cut off";
            }
          }
          break;
        case claim::lags_only:
          break;
      }
    }
    EXPECT_GE(in_fault, 10u) << "too few samples during the fault";
    if (during == claim::goes_dirty) {
      EXPECT_GE(held, 10u) << "too few samples while the fault held";
    }
    if (during == claim::stays_ready) {
      for (auto& [p, cp] : before)
        EXPECT_GT(at_heal[p], cp) << f.kind << ": partition " << p
                                  << "'s checkpoint did not move during the fault";
    }
    EXPECT_EQ(samples.overshoots, 0u) << ::testing::PrintToString(samples.examples);

    std::vector<std::string> lost_examples;
    size_t lost = lost_entries(lost_examples);
    EXPECT_EQ(lost, 0u) << ::testing::PrintToString(lost_examples);
    auto audit = qsp::test::run_cli(args("audit"));
    EXPECT_EQ(audit.rc, 0) << audit.out << audit.err;
    EXPECT_TRUE(contains(audit.out, "verdict: consistent")) << audit.out;
    EXPECT_EQ(refusals, 0) << text;

    std::printf("%s: fault held %.1f s%s; ready again %.1f s after the heal; %zu samples (%zu "
                "during the fault), %zu entries checked below sampled checkpoints, %zu "
                "overshoots; %llu records, %zu lost\n",
                f.kind.c_str(), t_heal,
                first_503 >= 0 ? (", /readyz 503 after " + std::to_string(first_503).substr(0, 4)
                                  + " s").c_str()
                               : "",
                ready_again, taken.size(), in_fault, samples.checked, samples.overshoots,
                static_cast<unsigned long long>(records()), lost);
    std::printf("/readyz state and the sessions gate (seconds relative to the fault):\n");
    for (auto& t : transitions)
      std::printf("  %s\n", t.c_str());
    qsp::test::soak_result(f.kind, 1, records(), samples.checked, lost, samples.overshoots,
                           refusals);
  }
};

} // namespace

// -- Redis ------------------------------------------------------------------

TEST_F(net_fault, RedisLatencyTheNodeStaysReadyAndProjects) {
  // 150-250 ms on every reply, far below redis.command-timeout (1 s).
  scenario({"redis-latency", {redis_proxy}, "latency", {"downstream"},
            R"({"latency":200,"jitter":50})"},
           claim::stays_ready, 6s);
}

TEST_F(net_fault, RedisConnectionsResetTheNodeIsDirtyUntilHealed) {
  // Every connection, the open ones and every new one, is reset (RST) at its
  // next byte: reconnects fail too.
  scenario({"redis-reset", {redis_proxy}, "reset_peer", {"upstream"}, R"({"timeout":0})"},
           claim::goes_dirty, 8s);
}

TEST_F(net_fault, RedisBlackHoleLongerThanEveryTimeoutTheNodeIsDirtyUntilHealed) {
  // Bytes dropped both ways, connections held open: only the node's own
  // deadlines notice.  Held 8 s after the node went dirty (8x the command
  // timeout), so several restarts meet it too.
  scenario({"redis-blackhole", {redis_proxy}, "timeout", {"upstream", "downstream"},
            R"({"timeout":0})"},
           claim::goes_dirty, 8s);
}

// -- Kafka ------------------------------------------------------------------

TEST_F(net_fault, KafkaLatencyTheNodeStaysReadyAndProjects) {
  // 200-300 ms on every response of every broker, below kafka.timeout-ms (3 s).
  scenario({"kafka-latency", all_broker_proxies(), "latency", {"downstream"},
            R"({"latency":250,"jitter":50})"},
           claim::stays_ready, 8s);
}

TEST_F(net_fault, KafkaConnectionsResetTheNodeIsDirtyUntilHealed) {
  // Every broker connection of the node reset at its next byte.
  scenario({"kafka-reset", all_broker_proxies(), "reset_peer", {"upstream"}, R"({"timeout":0})"},
           claim::goes_dirty, 8s);
}

TEST_F(net_fault, KafkaBlackHoleLongerThanEveryTimeoutTheNodeIsDirtyUntilHealed) {
  // Every broker unreachable without an error: the identity check gets no
  // answer and fails after kafka.timeout-ms (3 s); until then the node
  // stays ready (RELIABILITY.md "Network faults": the bound is the check's
  // interval, 1 s, plus kafka.timeout-ms plus the admin call's 2-s margin;
  // 15 s leaves room for a loaded machine).  Held 8 s after it went dirty.
  scenario({"kafka-blackhole", all_broker_proxies(), "timeout", {"upstream", "downstream"},
            R"({"timeout":0})"},
           claim::goes_dirty, 8s, 15s);
}

TEST_F(net_fault, KafkaBlackHoleOfOnePartitionLeaderOnlyLags) {
  // Only partition 0's leader is unreachable for the node (the others, and
  // the producer's path to every broker, are fine): partition 0 cannot be
  // fetched; whether the node stays ready or goes dirty depends on which
  // broker librdkafka asks for the identity check.  Lag only, never refused.
  std::string why;
  auto p0 = qsp::test::describe_partition(cfg, topic, 0, &why);
  ASSERT_TRUE(p0) << why;
  scenario({"kafka-blackhole-leader", {broker_proxy(p0->leader)}, "timeout",
            {"upstream", "downstream"}, R"({"timeout":0})"},
           claim::lags_only, 12s);
}
