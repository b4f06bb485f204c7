// qsp-devtool: topic management and a demo dispatch producer for local runs,
// the README's run command and benchmarks.  Not part of the node.
//
//   qsp-devtool create-topic BOOTSTRAP TOPIC PARTITIONS [--replication-factor=N]
//                            [--config=KEY=VALUE ...]
//       N defaults to 1; -1 takes the broker's default.replication.factor.
//       Topic configs such as min.insync.replicas=2,
//       unclean.leader.election.enable=true, retention.ms=...
//   qsp-devtool delete-topic BOOTSTRAP TOPIC
//   qsp-devtool probe BOOTSTRAP [--coordinators] [--brokers=N] [--topic=NAME]
//                     [--timeout-ms=N]
//       exit 0 when the broker answers a Metadata request listing a broker
//       (with --brokers=N: at least N brokers, i.e. N registered and
//       unfenced; scripts/services start --ha waits for 3) and, with
//       --coordinators, has a group coordinator (an offset fetch
//       for a probe group) and a transaction coordinator (a transactional
//       producer's init, which also makes the broker create
//       __consumer_offsets and __transaction_state up front), and with
//       --topic=NAME a Metadata answer for that topic without a topic error
//       (e.g. "Broker: Topic authorization failed" for a principal without a
//       Describe ACL); exit 1 with the reason on stderr otherwise (followed by
//       the client's last error, e.g. a failed TLS handshake or SASL
//       authentication, when it reported one).  scripts/services' readiness
//       probe.
//
//   Every command takes librdkafka properties for its clients, anywhere after
//   the command: -X KEY=VALUE (repeatable) and -F FILE (KEY=VALUE lines, # and
//   blank lines skipped; scripts/services start --secure writes
//   <state>/kafka-admin.properties), applied in the order given, e.g.
//     qsp-devtool probe 127.0.0.1:9093 -F .services-secure/kafka-admin.properties
//     qsp-devtool probe 127.0.0.1:9093 -X security.protocol=SASL_SSL
//       -X sasl.mechanism=SCRAM-SHA-512 -X sasl.username=admin
//       -X sasl.password=... -X ssl.ca.location=ca.crt
//   qsp-devtool produce BOOTSTRAP TOPIC PARTITIONS COUNT [RATE_PER_S] [SEED]
//                       [--realistic] [--summary] [--batch=N] [--resp-out=FILE]
//       COUNT 0 with a RATE: produce until SIGTERM/SIGINT.  Users are drawn
//       Zipf-like from 100k, conversations from 1M, 1–5 recipients.
//       Benchmark options (bench/, scripts/bench):
//       --realistic  add the fields a real dispatch envelope carries besides the
//                    three the projection reads (message id, sender, kind, seq,
//                    a 20-140 character preview with some non-ASCII text,
//                    attachment count, silent flag): ~300 bytes instead of ~90.
//                    The decoder skips (but validates) them.
//       --summary    print one line on stderr at the end:
//                    summary: dispatches=N recipients=R bytes=B seconds=S
//                    batch=N est_zadd_calls=Z est_members=M users=U
//                    where Z and M are what the writer's per-user coalescing
//                    yields for full batches of --batch records (default 5000)
//                    per partition (one ZADD per distinct user, one member per
//                    distinct (user, conversation)); U is the number of distinct
//                    recipients (= the session sets the projection must create).
//       --resp-out=FILE  (implies --summary) also write those coalesced ZADD GT
//                    commands, key convs:{user}, as RESP to FILE: replayed with
//                    `redis-cli --pipe` they give the Redis ceiling for exactly
//                    the command stream the node sends (scripts/bench).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "app/workload.hpp"
#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"

#include <librdkafka/rdkafka.h>

namespace {

volatile std::sig_atomic_t stop_requested = 0;

int fail(const caf::error& e) {
  std::fprintf(stderr, "qsp-devtool: %s\n", qsp::describe(e).c_str());
  return 1;
}

using qsp::workload::zipf;

// -- benchmark options (--realistic, --summary) ----------------------------------

using qsp::workload::add_envelope;

/// What the writer's coalescing does to full batches of `batch` records per
/// partition; optionally writes the resulting ZADD commands as RESP (for
/// `redis-cli --pipe`: the Redis ceiling for exactly this command stream).
class coalescing_estimate {
public:
  coalescing_estimate(int partitions, size_t batch, std::FILE* resp)
    : parts_(static_cast<size_t>(partitions)), batch_(batch), resp_(resp) {}
  void add(int partition, const qsp::core::dispatch& d) {
    auto& p = parts_[static_cast<size_t>(partition)];
    for (auto& u : d.recipients) {
      auto [it, fresh] = p.users[u].emplace(d.conversation_id, d.created_at);
      if (!fresh && it->second < d.created_at)
        it->second = d.created_at;
    }
    if (++p.records == batch_)
      close(p);
  }
  void finish() {
    for (auto& p : parts_)
      close(p);
  }
  unsigned long long zadd_calls = 0, members = 0;

private:
  struct part {
    size_t records = 0;
    std::unordered_map<std::string, std::unordered_map<std::string, int64_t>> users;
  };
  void bulk(std::string_view s) {
    std::fprintf(resp_, "$%zu\r\n", s.size());
    std::fwrite(s.data(), 1, s.size(), resp_);
    std::fputs("\r\n", resp_);
  }
  void close(part& p) {
    zadd_calls += p.users.size();
    for (auto& [u, convs] : p.users) {
      members += convs.size();
      if (resp_ == nullptr)
        continue;
      // ZADD convs:{user} GT score member ... (the node's default convs-prefix)
      std::fprintf(resp_, "*%zu\r\n", 3 + 2 * convs.size());
      bulk("ZADD");
      bulk("convs:" + u);
      bulk("GT");
      for (auto& [conv, score] : convs) {
        bulk(std::to_string(score));
        bulk(conv);
      }
    }
    p.users.clear();
    p.records = 0;
  }
  std::vector<part> parts_;
  size_t batch_;
  std::FILE* resp_;
};

// -- probe ----------------------------------------------------------------------

struct rk_deleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using rk_ptr = std::unique_ptr<rd_kafka_t, rk_deleter>;

using properties = std::vector<std::pair<std::string, std::string>>;

/// -X KEY=VALUE and -F FILE of the command line (-F: KEY=VALUE lines).
properties client_properties;

/// The last error a probe client reported (its error callback: a refused
/// connection, a failed TLS handshake or SASL authentication), to follow the
/// probe's own reason.
struct last_error {
  std::string text;
  static void on_error(rd_kafka_t*, int, const char* reason, void* opaque) {
    static_cast<last_error*>(opaque)->text = reason;
  }
  /// `what`, followed by the client's last error if it reported one.
  std::string explain(rd_kafka_t* rk, std::string what) {
    rd_kafka_poll(rk, 0); // serves the queued error callbacks
    if (!text.empty())
      what += " (last client error: " + text + ")";
    return what;
  }
};

rk_ptr probe_handle(rd_kafka_type_t type, const std::string& bootstrap, properties props,
                    std::string& why, last_error* errors = nullptr) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  props.insert(props.begin(), client_properties.begin(), client_properties.end());
  props.emplace_back("bootstrap.servers", bootstrap);
  props.emplace_back("client.id", "qsp-devtool-probe");
  props.emplace_back("log_level", "0"); // a broker that is not up yet is the expected case
  for (auto& [k, v] : props)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      why = err;
      return nullptr;
    }
  if (errors != nullptr) {
    rd_kafka_conf_set_opaque(conf, errors);
    rd_kafka_conf_set_error_cb(conf, &last_error::on_error);
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    why = err;
  }
  return rk_ptr{rk};
}

/// "" when the broker is ready, the reason otherwise.
std::string probe_broker(const std::string& bootstrap, bool coordinators, int min_brokers,
                         const std::string& topic, int timeout_ms) {
  std::string why;
  {
    last_error errors;
    auto rk = probe_handle(RD_KAFKA_PRODUCER, bootstrap, {}, why, &errors);
    if (!rk)
      return "cannot create a client: " + why;
    const rd_kafka_metadata_t* md = nullptr;
    auto err = rd_kafka_metadata(rk.get(), 0, nullptr, &md, timeout_ms);
    if (err)
      return errors.explain(rk.get(), std::string{"metadata: "} + rd_kafka_err2str(err));
    int brokers = md->broker_cnt;
    rd_kafka_metadata_destroy(md);
    if (brokers < 1)
      return "metadata lists no broker yet";
    if (brokers < min_brokers)
      return "metadata lists " + std::to_string(brokers) + " of the " + std::to_string(min_brokers)
             + " brokers expected";
    if (!topic.empty()) {
      rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
      if (rkt == nullptr)
        return "topic " + topic + ": " + rd_kafka_err2str(rd_kafka_last_error());
      err = rd_kafka_metadata(rk.get(), 0, rkt, &md, timeout_ms);
      rd_kafka_topic_destroy(rkt);
      if (err)
        return errors.explain(rk.get(), "metadata of topic " + topic + ": " + rd_kafka_err2str(err));
      auto terr = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
      rd_kafka_metadata_destroy(md);
      if (terr)
        return "metadata of topic " + topic + ": " + rd_kafka_err2str(terr);
    }
  }
  if (!coordinators)
    return {};
  {
    last_error errors;
    auto rk = probe_handle(RD_KAFKA_CONSUMER, bootstrap,
                           {{"group.id", "qsp-services-probe"}, {"enable.auto.commit", "false"}},
                           why, &errors);
    if (!rk)
      return "cannot create a consumer: " + why;
    auto* parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, "__qsp_probe", 0);
    auto err = rd_kafka_committed(rk.get(), parts, timeout_ms);
    rd_kafka_topic_partition_list_destroy(parts);
    if (err)
      return errors.explain(rk.get(), std::string{"group coordinator not available yet: "}
                                        + rd_kafka_err2str(err));
    rd_kafka_consumer_close(rk.get());
  }
  {
    last_error errors;
    auto rk = probe_handle(RD_KAFKA_PRODUCER, bootstrap,
                           {{"transactional.id", "qsp-services-probe"}}, why, &errors);
    if (!rk)
      return "cannot create a transactional producer: " + why;
    if (auto* e = rd_kafka_init_transactions(rk.get(), timeout_ms)) {
      std::string text = "transaction coordinator not available yet: ";
      text += rd_kafka_error_string(e);
      rd_kafka_error_destroy(e);
      return errors.explain(rk.get(), text);
    }
  }
  return {};
}

/// Moves -X KEY=VALUE (also -XKEY=VALUE) and -F FILE out of argv (after the
/// command) into client_properties; "" on success, the problem otherwise.
std::string take_client_properties(int& argc, char** argv) {
  auto add = [](std::string_view kv, const std::string& where) -> std::string {
    auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return where + ": expected KEY=VALUE, not '" + std::string{kv} + "'";
    client_properties.emplace_back(std::string{kv.substr(0, eq)}, std::string{kv.substr(eq + 1)});
    return {};
  };
  int out = 2;
  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string problem;
    if (a == "-X" || a == "-F") {
      if (i + 1 >= argc)
        return std::string{a} + " needs an argument";
      std::string_view value = argv[++i];
      if (a == "-X") {
        problem = add(value, "-X");
      } else {
        std::ifstream in{std::string{value}};
        if (!in)
          return "-F: cannot read " + std::string{value};
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
          while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
            line.pop_back();
          auto start = line.find_first_not_of(" \t");
          if (start == std::string::npos || line[start] == '#')
            continue;
          problem = add(std::string_view{line}.substr(start),
                        std::string{value} + ":" + std::to_string(n));
          if (!problem.empty())
            break;
        }
      }
    } else if (a.substr(0, 2) == "-X") {
      problem = add(a.substr(2), "-X");
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (!problem.empty())
      return problem;
  }
  argc = out;
  argv[argc] = nullptr;
  return {};
}

} // namespace

void usage(std::FILE* to) {
  std::fputs(
    "usage:\n"
    "  qsp-devtool create-topic BOOTSTRAP TOPIC PARTITIONS [--replication-factor=N]\n"
    "                           [--config=KEY=VALUE ...]\n"
    "  qsp-devtool delete-topic BOOTSTRAP TOPIC\n"
    "  qsp-devtool produce BOOTSTRAP TOPIC PARTITIONS COUNT [RATE_PER_S] [SEED]\n"
    "                      [--realistic] [--summary] [--batch=N] [--resp-out=FILE]\n"
    "      COUNT dispatches (0 with a RATE: until SIGTERM/SIGINT), RATE per second\n"
    "      (0 or none: as fast as possible), SEED of the generator (default 1);\n"
    "      recipients are users u0..u99999 (Zipf-like: u0 the busiest),\n"
    "      conversations c-0..c-999999\n"
    "  qsp-devtool probe BOOTSTRAP [--coordinators] [--brokers=N] [--topic=NAME]\n"
    "                    [--timeout-ms=N]\n"
    "Every command also takes librdkafka client properties: -X KEY=VALUE (repeatable)\n"
    "and -F FILE (KEY=VALUE lines), e.g. -X security.protocol=SASL_SSL.\n"
    "Exit 0 on success (nothing is printed), 1 on a broker error, 2 on a usage error.\n",
    to);
}

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string_view{argv[1]} == "--help" || std::string_view{argv[1]} == "-h"
                    || std::string_view{argv[1]} == "help")) {
    usage(stdout);
    return 0;
  }
  if (auto problem = take_client_properties(argc, argv); !problem.empty()) {
    std::fprintf(stderr, "qsp-devtool: %s\n", problem.c_str());
    return 2;
  }
  if (argc >= 3 && std::string_view{argv[1]} == "probe") {
    bool coordinators = false;
    int timeout_ms = 3000, min_brokers = 1;
    std::string topic;
    for (int i = 3; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--coordinators")
        coordinators = true;
      else if (a.substr(0, 10) == "--brokers=" && std::atoi(argv[i] + 10) > 0)
        min_brokers = std::atoi(argv[i] + 10);
      else if (a.substr(0, 13) == "--timeout-ms=" && std::atoi(argv[i] + 13) > 0)
        timeout_ms = std::atoi(argv[i] + 13);
      else if (a.substr(0, 8) == "--topic=" && a.size() > 8)
        topic = std::string{a.substr(8)};
      else {
        std::fprintf(stderr, "qsp-devtool probe: unknown option %s\n", argv[i]);
        return 2;
      }
    }
    auto why = probe_broker(argv[2], coordinators, min_brokers, topic, timeout_ms);
    if (why.empty())
      return 0;
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  if (argc < 4) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  qsp::kafka::client_settings cs;
  cs.bootstrap_servers = argv[2];
  cs.client_id = "qsp-devtool";
  cs.properties = client_properties;
  std::string topic = argv[3];
  if (cmd == "create-topic" || cmd == "delete-topic") {
    int partitions = 1, rf = 1;
    std::vector<std::pair<std::string, std::string>> configs;
    for (int i = 4; i < argc; ++i) {
      std::string_view a = argv[i];
      char* end = nullptr;
      if (a.substr(0, 21) == "--replication-factor=") {
        rf = static_cast<int>(std::strtol(argv[i] + 21, &end, 10));
        if (*end != '\0' || (rf < 1 && rf != -1)) {
          std::fprintf(stderr, "qsp-devtool: --replication-factor must be >= 1 or -1, not %s\n",
                       argv[i] + 21);
          return 2;
        }
      } else if (a.substr(0, 9) == "--config=" && a.find('=', 9) != std::string_view::npos
                 && a.find('=', 9) > 9) {
        auto eq = a.find('=', 9);
        configs.emplace_back(std::string{a.substr(9, eq - 9)}, std::string{a.substr(eq + 1)});
      } else if (i == 4 && cmd == "create-topic" && a.substr(0, 2) != "--") {
        partitions = static_cast<int>(std::strtol(argv[i], &end, 10));
        if (*end != '\0' || partitions < 1) {
          std::fprintf(stderr, "qsp-devtool: PARTITIONS must be a positive integer, not %s\n",
                       argv[i]);
          return 2;
        }
      } else {
        std::fprintf(stderr, "qsp-devtool: %s: unexpected argument %s\n", cmd.c_str(), argv[i]);
        return 2;
      }
    }
    auto admin = qsp::kafka::admin::make(cs);
    if (!admin)
      return fail(admin.error());
    auto r = cmd == "create-topic" ? (*admin)->create_topic(topic, partitions, configs, rf)
                                   : (*admin)->delete_topic(topic);
    return r ? 0 : fail(r.error());
  }
  if (cmd != "produce" || argc < 6) {
    std::fprintf(stderr, "qsp-devtool: unknown command or missing arguments: %s\n", cmd.c_str());
    usage(stderr);
    return 2;
  }
  // Positional arguments first; the benchmark options (--...) anywhere after them.
  std::vector<std::string> pos;
  bool realistic = false, summary = false;
  size_t batch = 5000;
  std::string resp_out;
  for (int i = 4; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--realistic")
      realistic = true;
    else if (a == "--summary")
      summary = true;
    else if (a.substr(0, 8) == "--batch=" && std::stoull(std::string{a.substr(8)}) > 0)
      batch = std::stoull(std::string{a.substr(8)});
    else if (a.substr(0, 11) == "--resp-out=")
      resp_out = std::string{a.substr(11)};
    else if (a.substr(0, 2) == "--") {
      std::fprintf(stderr, "qsp-devtool: unknown option %s\n", argv[i]);
      return 2;
    } else
      pos.emplace_back(a);
  }
  if (pos.size() < 2) {
    std::fprintf(stderr, "qsp-devtool: produce needs PARTITIONS and COUNT\n");
    usage(stderr);
    return 2;
  }
  int partitions = std::stoi(pos[0]);
  long long count = std::stoll(pos[1]);
  double rate = pos.size() > 2 ? std::stod(pos[2]) : 0;
  uint64_t seed = pos.size() > 3 ? std::stoull(pos[3]) : 1;
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  auto prod = qsp::kafka::producer::make(cs);
  if (!prod)
    return fail(prod.error());
  std::mt19937_64 rng{seed};
  zipf users{100000, 0.9};
  std::uniform_int_distribution<uint64_t> convs{0, 999999};
  std::uniform_int_distribution<int> fanout{1, 5};
  auto t0 = std::chrono::steady_clock::now();
  auto epoch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  qsp::core::dispatch d;
  // The envelope draws from its own generator: the three projected fields stay
  // the same sequence with or without --realistic.
  std::mt19937_64 envelope_rng{seed ^ 0x9e3779b97f4a7c15ull};
  std::FILE* resp = nullptr;
  if (!resp_out.empty()) {
    summary = true;
    resp = std::fopen(resp_out.c_str(), "w");
    if (resp == nullptr) {
      std::fprintf(stderr, "qsp-devtool: cannot write %s\n", resp_out.c_str());
      return 1;
    }
  }
  coalescing_estimate estimate{partitions, batch, resp};
  unsigned long long recipients = 0, bytes = 0;
  std::unordered_set<std::string> distinct_users;
  long long i = 0;
  const long long pace_step = std::max(1LL, static_cast<long long>(rate / 1000));
  for (; (count == 0 || i < count) && !stop_requested; ++i) {
    d.conversation_id = "c-" + std::to_string(convs(rng));
    d.created_at = epoch_ms + i;
    d.recipients.clear();
    for (int r = fanout(rng); r > 0; --r)
      d.recipients.push_back("u" + std::to_string(users(rng)));
    auto value = qsp::core::encode_json(d);
    if (realistic)
      add_envelope(value, i, envelope_rng, "u" + std::to_string(users(envelope_rng)));
    if (summary) {
      recipients += d.recipients.size();
      bytes += value.size();
      estimate.add(static_cast<int>(i % partitions), d);
      for (auto& u : d.recipients)
        distinct_users.insert(u);
    }
    if (auto ok = prod->send(topic, static_cast<int32_t>(i % partitions), value); !ok)
      return fail(ok.error());
    // Paced in 1-ms steps: one sleep per millisecond's worth of records, not
    // one per record (at 10k/s a sleep per record cost the producer a whole core).
    if (rate > 0 && (i + 1) % pace_step == 0) {
      auto due = t0 + std::chrono::duration<double>(static_cast<double>(i + 1) / rate);
      std::this_thread::sleep_until(due);
    }
  }
  if (auto ok = prod->flush(); !ok)
    return fail(ok.error());
  if (summary) {
    estimate.finish();
    if (resp != nullptr && std::fclose(resp) != 0) {
      std::fprintf(stderr, "qsp-devtool: writing %s failed\n", resp_out.c_str());
      return 1;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "summary: dispatches=%lld recipients=%llu bytes=%llu seconds=%.3f batch=%zu "
                 "est_zadd_calls=%llu est_members=%llu users=%zu\n",
                 i, recipients, bytes, secs, batch, estimate.zadd_calls, estimate.members,
                 distinct_users.size());
  }
  return 0;
}
