#include "tests/support/integration.hpp"

#include <gtest/gtest.h>

#include "messages/types.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <mutex>
#include <cerrno>
#include <atomic>
#include <random>
#include <sstream>
#include <cctype>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "messages/types.hpp"

extern char** environ;

namespace qsp::test {

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "integration test setup: %s\n", msg.c_str());
  std::abort();
}

} // namespace

namespace {

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in{v};
  while (std::getline(in, item, ','))
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// "1=host:port,2=host:port" -> {1: "host:port", ...}; false on a malformed entry.
bool parse_id_list(const std::string& v, std::map<int, std::string>& out) {
  for (auto& item : split_list(v)) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()
        || item.find_first_not_of("0123456789") != eq)
      return false;
    out[std::stoi(item.substr(0, eq))] = item.substr(eq + 1);
  }
  return true;
}

/// Parses an env file of scripts/services; nullopt (reason in `why`) when it
/// cannot be read or lacks what every set writes.
std::optional<services> read_services(const std::string& file, std::string& why) {
  std::ifstream in{file};
  if (!in) {
    why = "cannot read " + file;
    return std::nullopt;
  }
  services r;
  r.env_file = file;
  auto slash = file.rfind('/');
  r.state_dir = slash == std::string::npos ? "." : file.substr(0, slash);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("export ", 0) == 0)
      line = line.substr(7);
    auto eq = line.find('=');
    if (eq == std::string::npos)
      continue;
    auto k = line.substr(0, eq), v = line.substr(eq + 1);
    bool ok = true;
    if (k == "REDIS_HOST")
      r.redis_host = v;
    else if (k == "REDIS_PORT")
      r.redis_port = static_cast<uint16_t>(std::stoi(v));
    else if (k == "KAFKA_BOOTSTRAP")
      r.kafka_bootstrap = v;
    else if (k == "QSP_SERVICES_TOPOLOGY")
      r.ha = v == "ha";
    else if (k == "REDIS_MASTER_NAME")
      r.redis_master_name = v;
    else if (k == "REDIS_SENTINELS")
      r.redis_sentinels = split_list(v);
    else if (k == "REDIS_REPLICAS")
      r.redis_replicas = split_list(v);
    else if (k == "REDIS_NODES")
      ok = parse_id_list(v, r.redis_nodes);
    else if (k == "KAFKA_BROKERS")
      ok = parse_id_list(v, r.kafka_brokers);
    else if (k == "TOXIPROXY_API")
      r.toxiproxy_api = v;
    else if (k == "KAFKA_PROXIED_BOOTSTRAP")
      r.kafka_proxied_bootstrap = v;
    else if (k == "KAFKA_PROXIES")
      ok = parse_id_list(v, r.kafka_proxies);
    if (!ok) {
      why = file + ": malformed " + k + " (want id=host:port,...): " + v;
      return std::nullopt;
    }
  }
  if (r.redis_port == 0 || r.kafka_bootstrap.empty()) {
    why = file + " lacks REDIS_PORT or KAFKA_BOOTSTRAP";
    return std::nullopt;
  }
  if (r.ha
      && (r.redis_master_name.empty() || r.redis_sentinels.empty() || r.redis_nodes.empty()
          || r.kafka_brokers.empty())) {
    why = file + " says QSP_SERVICES_TOPOLOGY=ha but lacks REDIS_MASTER_NAME, REDIS_SENTINELS,"
                 " REDIS_NODES or KAFKA_BROKERS";
    return std::nullopt;
  }
  return r;
}

} // namespace

void soak_result(const std::string& kind, int faults, uint64_t records, uint64_t entries_checked,
                 uint64_t lost, uint64_t overshoots, int refusals) {
  std::printf("soak-result: kind=%s faults=%d records=%llu entries_checked=%llu lost=%llu "
              "overshoots=%llu refusals=%d\n",
              kind.c_str(), faults, static_cast<unsigned long long>(records),
              static_cast<unsigned long long>(entries_checked),
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(overshoots),
              refusals);
  std::fflush(stdout);
}

const services& env() {
  static const services s = [] {
    const char* path = std::getenv("QSP_SERVICES_ENV");
    std::string file = path != nullptr ? path : QSP_SOURCE_DIR "/.services/env";
    std::string why;
    auto r = read_services(file, why);
    if (!r) {
      if (why.rfind("cannot read ", 0) == 0)
        why += ": start the services with scripts/services start";
      die(why);
    }
    return *r;
  }();
  return s;
}

const services* ha_env(std::string* why) {
  static const std::pair<std::optional<services>, std::string> found = [] {
    std::vector<std::string> files;
    if (const char* path = std::getenv("QSP_SERVICES_ENV"))
      files.emplace_back(path);
    else
      files = {QSP_SOURCE_DIR "/.services-ha/env", QSP_SOURCE_DIR "/.services/env"};
    std::string reasons;
    for (auto& f : files) {
      std::string w;
      auto r = read_services(f, w);
      if (r && r->ha)
        return std::make_pair(r, std::string{});
      reasons += (reasons.empty() ? "" : "; ") + (r ? f + " describes the default set" : w);
    }
    return std::make_pair(std::optional<services>{},
                          "no HA set (" + reasons
                            + "): run scripts/test --ha, or start one with"
                              " QSP_SERVICES_DIR=.services-ha scripts/services start --ha");
  }();
  if (why != nullptr)
    *why = found.second;
  return found.first ? &*found.first : nullptr;
}

long long delete_cluster_keys(redis::cluster_router& router, const std::string& pattern) {
  long long n = 0;
  for (size_t i = 0; i < router.map().shards().size(); ++i) {
    auto c = router.primary(i);
    if (!c) {
      ADD_FAILURE() << describe(c.error());
      return -1;
    }
    auto err = redis::scan_keys(**c, pattern, [&](const std::string& key) {
      if ((*c)->command({"DEL", key}))
        ++n;
      return caf::error{};
    });
    if (err) {
      ADD_FAILURE() << describe(err);
      return -1;
    }
  }
  return n;
}

std::map<std::string, std::string> read_env_file(const std::string& file) {
  std::map<std::string, std::string> out;
  std::ifstream in{file};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("export ", 0) == 0)
      line = line.substr(7);
    if (auto eq = line.find('='); eq != std::string::npos)
      out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string service_set::at(const std::string& key) const {
  auto i = env.find(key);
  return i == env.end() ? std::string{} : i->second;
}

std::string service_set::secret(const std::string& file_key) const {
  std::ifstream in{at(file_key)};
  std::string s;
  std::getline(in, s);
  return s;
}

const service_set* find_set(const std::string& topology, const std::string& dir_name,
                            const std::string& start_hint, std::string* why) {
  static std::mutex mtx;
  static std::map<std::string, std::pair<std::optional<service_set>, std::string>> found;
  std::lock_guard<std::mutex> guard{mtx};
  auto i = found.find(topology);
  if (i == found.end()) {
    std::vector<std::string> files;
    if (const char* p = std::getenv("QSP_SERVICES_ENV"))
      files.emplace_back(p);
    files.emplace_back(std::string{QSP_SOURCE_DIR} + "/" + dir_name + "/env");
    std::string reasons;
    std::optional<service_set> hit;
    for (auto& f : files) {
      if (!std::ifstream{f}) {
        reasons += (reasons.empty() ? "" : "; ") + ("cannot read " + f);
        continue;
      }
      service_set s;
      s.file = f;
      s.dir = f.find('/') == std::string::npos ? "." : f.substr(0, f.rfind('/'));
      s.env = read_env_file(f);
      if (s.at("QSP_SERVICES_TOPOLOGY") == topology) {
        hit = std::move(s);
        break;
      }
      reasons += (reasons.empty() ? "" : "; ") + f + " describes another set";
    }
    std::string reason = hit ? std::string{}
                             : "no " + topology + " set (" + reasons + "): " + start_hint;
    i = found.emplace(topology, std::make_pair(std::move(hit), std::move(reason))).first;
  }
  if (why != nullptr)
    *why = i->second.second;
  return i->second.first ? &*i->second.first : nullptr;
}

const service_set* redis_cluster_set(std::string* why) {
  return find_set("rcluster", ".services-rcluster",
                  "start one with QSP_SERVICES_DIR=.services-rcluster scripts/services start "
                  "--redis-cluster",
                  why);
}

int services_cmd(const services& s, const std::string& args) {
  return sh("QSP_SERVICES_DIR='" + s.state_dir + "' " QSP_SOURCE_DIR "/scripts/services " + args);
}

kafka::client_settings kafka_client(const services& s) {
  kafka::client_settings c;
  c.bootstrap_servers = s.kafka_bootstrap;
  c.client_id = "qsp-test";
  return c;
}

std::unique_ptr<redis::connection> redis_conn_at(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    die("not host:port: " + host_port);
  redis::settings cfg;
  cfg.host = host_port.substr(0, colon);
  cfg.port = static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1)));
  cfg.command_timeout_ms = 5000;
  auto c = redis::connection::open(cfg);
  if (!c)
    die("redis " + host_port + ": " + describe(c.error()));
  return std::move(*c);
}

namespace {

struct rk_deleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using rk_ptr = std::unique_ptr<rd_kafka_t, rk_deleter>;

rk_ptr plain_handle(const kafka::client_settings& cfg, std::string& why) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  std::vector<std::pair<std::string, std::string>> props{
    {"bootstrap.servers", cfg.bootstrap_servers}, {"client.id", cfg.client_id}};
  props.insert(props.end(), cfg.properties.begin(), cfg.properties.end());
  for (auto& [k, v] : props)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      why = err;
      return nullptr;
    }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    why = err;
  }
  return rk_ptr{rk};
}

} // namespace

int kafka_broker_pid(const services& s, int id) {
  std::ifstream in{s.env_file};
  std::string line, value;
  while (std::getline(in, line))
    if (line.rfind("export KAFKA_PIDS=", 0) == 0)
      value = line.substr(18); // the last one counts, like the shell's
  std::map<int, std::string> pids;
  if (!parse_id_list(value, pids))
    return -1;
  auto it = pids.find(id);
  if (it == pids.end() || it->second.empty()
      || it->second.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(it->second);
}

std::optional<std::vector<std::pair<int64_t, std::string>>>
read_committed_log(const kafka::client_settings& cfg, const std::string& topic,
                   int32_t partition, std::chrono::milliseconds limit, std::string* why) {
  auto fail = [&](std::string text) -> std::optional<std::vector<std::pair<int64_t, std::string>>> {
    if (why != nullptr)
      *why = std::move(text);
    return std::nullopt;
  };
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  std::vector<std::pair<std::string, std::string>> props{
    {"bootstrap.servers", cfg.bootstrap_servers}, {"client.id", cfg.client_id},
    {"group.id", unique_name("qsp-test-reader")}, {"enable.auto.commit", "false"},
    {"isolation.level", "read_committed"}, {"enable.partition.eof", "true"},
    {"auto.offset.reset", "error"}};
  props.insert(props.end(), cfg.properties.begin(), cfg.properties.end());
  for (auto& [k, v] : props)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return fail(k + ": " + err);
    }
  rk_ptr rk{rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err))};
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return fail(std::string{"cannot create a consumer: "} + err);
  }
  auto* parts = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(parts, topic.c_str(), partition)->offset
    = RD_KAFKA_OFFSET_BEGINNING;
  auto aerr = rd_kafka_assign(rk.get(), parts);
  rd_kafka_topic_partition_list_destroy(parts);
  if (aerr)
    return fail("assign " + topic + ": " + rd_kafka_err2str(aerr));
  std::vector<std::pair<int64_t, std::string>> out;
  std::string failure;
  bool eof = false;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!eof && failure.empty() && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 200);
    if (m == nullptr)
      continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
      eof = true;
    else if (m->err)
      failure = topic + "/" + std::to_string(partition) + ": " + rd_kafka_message_errstr(m);
    else
      out.emplace_back(m->offset, std::string{static_cast<const char*>(m->payload), m->len});
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk.get());
  if (!failure.empty())
    return fail(failure);
  if (!eof)
    return fail(topic + "/" + std::to_string(partition) + ": the end of the log not reached in "
                + std::to_string(limit.count()) + " ms (" + std::to_string(out.size())
                + " records read)");
  return out;
}

std::optional<partition_info> describe_partition(const kafka::client_settings& cfg,
                                                 const std::string& topic, int32_t partition,
                                                 std::string* why) {
  std::string w;
  auto fail = [&](std::string text) -> std::optional<partition_info> {
    if (why != nullptr)
      *why = std::move(text);
    return std::nullopt;
  };
  auto rk = plain_handle(cfg, w);
  if (!rk)
    return fail("cannot create a client: " + w);
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  auto err = rd_kafka_metadata(rk.get(), 0, t, &md, cfg.timeout_ms);
  rd_kafka_topic_destroy(t);
  if (err)
    return fail("metadata of " + topic + ": " + rd_kafka_err2str(err));
  std::optional<partition_info> out;
  for (int i = 0; i < md->topic_cnt && !out; ++i) {
    auto& mt = md->topics[i];
    if (topic != mt.topic || mt.err)
      continue;
    for (int j = 0; j < mt.partition_cnt; ++j) {
      auto& mp = mt.partitions[j];
      if (mp.id != partition)
        continue;
      partition_info p;
      p.leader = mp.err ? -1 : mp.leader;
      p.replicas.assign(mp.replicas, mp.replicas + mp.replica_cnt);
      p.isr.assign(mp.isrs, mp.isrs + mp.isr_cnt);
      std::sort(p.replicas.begin(), p.replicas.end());
      std::sort(p.isr.begin(), p.isr.end());
      out = p;
    }
  }
  rd_kafka_metadata_destroy(md);
  if (!out)
    return fail("the metadata lack " + topic + "/" + std::to_string(partition));
  return out;
}

std::optional<std::string> topic_config(const kafka::client_settings& cfg,
                                        const std::string& topic, const std::string& key,
                                        std::string* why) {
  std::string w;
  auto fail = [&](std::string text) -> std::optional<std::string> {
    if (why != nullptr)
      *why = std::move(text);
    return std::nullopt;
  };
  auto rk = plain_handle(cfg, w);
  if (!rk)
    return fail("cannot create a client: " + w);
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk.get());
  rd_kafka_ConfigResource_t* res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  rd_kafka_DescribeConfigs(rk.get(), &res, 1, nullptr, q);
  rd_kafka_ConfigResource_destroy(res);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, cfg.timeout_ms + 1000);
  std::optional<std::string> value;
  std::string problem = "DescribeConfigs of " + topic + " timed out";
  if (ev != nullptr) {
    if (rd_kafka_event_error(ev)) {
      problem = std::string{"DescribeConfigs of "} + topic + ": " + rd_kafka_event_error_string(ev);
    } else if (auto* result = rd_kafka_event_DescribeConfigs_result(ev)) {
      size_t n = 0;
      auto** resources = rd_kafka_DescribeConfigs_result_resources(result, &n);
      problem = topic + " has no config " + key;
      for (size_t i = 0; i < n && !value; ++i) {
        if (rd_kafka_ConfigResource_error(resources[i])) {
          problem = std::string{"DescribeConfigs of "} + topic + ": "
                    + rd_kafka_ConfigResource_error_string(resources[i]);
          continue;
        }
        size_t m = 0;
        auto** entries = rd_kafka_ConfigResource_configs(resources[i], &m);
        for (size_t j = 0; j < m; ++j)
          if (key == rd_kafka_ConfigEntry_name(entries[j])) {
            const char* v = rd_kafka_ConfigEntry_value(entries[j]);
            value = v != nullptr ? v : "";
            break;
          }
      }
    }
    rd_kafka_event_destroy(ev);
  }
  rd_kafka_queue_destroy(q);
  if (!value)
    return fail(problem);
  return value;
}

std::string unique_name(const std::string& prefix) {
  // The pid alone is not unique across one test run: pid_max is 32768 here,
  // and a run that builds the embedding host forks tens of thousands of
  // processes, so a later test process could reuse an earlier one's pid and
  // meet its topic or namespace (seen as a refused audit: meta stored for
  // another topic).  A per-process random tag makes that practically
  // impossible.
  static const std::string tag = [] {
    std::random_device rd;
    std::ostringstream out;
    out << std::hex << (static_cast<uint64_t>(rd()) << 32 | rd());
    return out.str().substr(0, 8);
  }();
  static std::atomic<int> n{0};
  return prefix + "-" + std::to_string(::getpid()) + tag + "-" + std::to_string(n++);
}

kafka::client_settings kafka_client() {
  kafka::client_settings c;
  c.bootstrap_servers = env().kafka_bootstrap;
  c.client_id = "qsp-test";
  return c;
}

redis::settings redis_settings(const std::string& ns, const std::string& convs_prefix) {
  redis::settings r;
  r.host = env().redis_host;
  r.port = env().redis_port;
  r.ns = ns;
  r.convs_prefix = convs_prefix;
  return r;
}

projection_settings projection_settings_for(const std::string& topic, int32_t partitions,
                                            const std::string& ns,
                                            const std::string& convs_prefix) {
  projection_settings s;
  s.topic = topic;
  s.partition_count = partitions;
  s.ns = ns;
  s.convs_prefix = convs_prefix;
  s.kafka.bootstrap_servers = env().kafka_bootstrap;
  s.kafka.client_id = "qsp-test";
  s.redis.host = env().redis_host;
  s.redis.port = env().redis_port;
  return s;
}

std::unique_ptr<redis::connection> redis_conn() {
  auto c = redis::connection::open(redis_settings("unused", "unused"));
  if (!c)
    die("redis: " + describe(c.error()));
  return std::move(*c);
}

std::string redis_cmd(redis::connection& c, const std::vector<std::string>& argv) {
  auto r = c.command(argv);
  if (!r)
    return "ERR:" + describe(r.error());
  auto* rep = r->get();
  if (rep->type == REDIS_REPLY_INTEGER)
    return std::to_string(rep->integer);
  if (rep->str != nullptr)
    return std::string{rep->str, rep->len};
  return {};
}

std::map<std::string, int64_t> zset(redis::connection& c, const std::string& key) {
  std::map<std::string, int64_t> out;
  auto r = c.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  if (!r)
    return out;
  auto* rep = r->get();
  for (size_t i = 0; i + 1 < rep->elements; i += 2)
    out[std::string{rep->element[i]->str, rep->element[i]->len}]
      = std::stoll(std::string{rep->element[i + 1]->str, rep->element[i + 1]->len});
  return out;
}

namespace {

// Nodes still running when the test binary exits (a failed ASSERT returned
// before the test stopped them) are killed, so no test leaves one behind.
std::set<int>& live_children() {
  static std::set<int> pids;
  return pids;
}

int exit_code_of(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

void kill_live_children() {
  for (int pid : live_children()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  live_children().clear();
}

} // namespace

std::string node_binary() {
  // QSP_NODE_BIN: another build of the node's command line (the example
  // reader's node runs the pipeline and fail-closed tests so).
  if (auto* bin = std::getenv("QSP_NODE_BIN"); bin != nullptr && *bin != '\0')
    return bin;
  return QSP_BIN_DIR "/qsession-projection";
}

int spawn_cli(const std::vector<std::string>& args, const std::string& log_path) {
  // A refused `run` stays up in state refused until it is stopped (issue
  // 42); the tests that drive a refusal through `run` wait for its exit, so
  // they get the supervisors' mode, --projection.exit-on-refusal=true,
  // unless they name the option themselves (the tests of the default do).
  if (!args.empty() && args[0] == "run"
      && std::none_of(args.begin(), args.end(), [](const std::string& a) {
           return a.rfind("--projection.exit-on-refusal", 0) == 0;
         })) {
    auto with = args;
    with.push_back("--projection.exit-on-refusal=true");
    return spawn_program(node_binary(), with, log_path);
  }
  return spawn_program(node_binary(), args, log_path);
}

int spawn_program(const std::string& bin, const std::vector<std::string>& args,
                  const std::string& log_path) {
  static const bool registered = [] { return std::atexit(kill_live_children) == 0; }();
  (void) registered;
  std::vector<std::string> full{bin};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (log_path + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0)
    die(std::string{"cannot start "} + argv[0]);
  posix_spawn_file_actions_destroy(&fa);
  live_children().insert(pid);
  return pid;
}

int wait_cli(int pid) {
  int status = 0;
  live_children().erase(pid);
  if (waitpid(pid, &status, 0) < 0)
    return -1;
  return exit_code_of(status);
}

std::optional<int> wait_cli_for(int pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    int r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      live_children().erase(pid);
      return exit_code_of(status);
    }
    if (r < 0) {
      live_children().erase(pid);
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

node_process::node_process(const std::vector<std::string>& args, const std::string& log_path)
  : pid_(spawn_cli(args, log_path)) {}

node_process::~node_process() {
  if (!rc_) {
    ::kill(pid_, SIGKILL);
    rc_ = wait_cli(pid_);
  }
}

void node_process::signal(int sig) {
  if (!rc_)
    ::kill(pid_, sig);
}

int node_process::wait() {
  if (!rc_)
    rc_ = wait_cli(pid_);
  return *rc_;
}

std::optional<int> node_process::wait_for(std::chrono::milliseconds limit) {
  if (!rc_)
    rc_ = wait_cli_for(pid_, limit);
  return rc_;
}

int node_process::stop() {
  signal(SIGTERM);
  return wait();
}

cli_result run_cli(const std::vector<std::string>& args) {
  return run_program(node_binary(), args);
}

cli_result run_program(const std::string& bin, const std::vector<std::string>& args) {
  auto log = "/tmp/" + unique_name("qsp-cli");
  cli_result r;
  r.rc = wait_cli(spawn_program(bin, args, log));
  r.err = slurp(log);
  r.out = slurp(log + ".out");
  std::remove(log.c_str());
  std::remove((log + ".out").c_str());
  return r;
}

std::vector<std::string> node_args(const std::string& topic, int partitions, const std::string& ns,
                                   const std::string& convs_prefix) {
  return {"--projection.dispatch-topic=" + topic,
          "--projection.partition-count=" + std::to_string(partitions),
          "--projection.namespace=" + ns,
          "--projection.convs-prefix=" + convs_prefix,
          "--kafka.bootstrap-servers=" + env().kafka_bootstrap,
          "--redis.host=" + env().redis_host,
          "--redis.port=" + std::to_string(env().redis_port),
          "--http.listen=\"\""};
}

void apply(model& m, const core::dispatch& d) {
  for (auto& u : d.recipients) {
    auto& s = m[u][d.conversation_id];
    s = std::max(s, d.created_at);
  }
}

std::vector<std::string> diff_with_redis(const model& m, const std::string& convs_prefix) {
  std::vector<std::string> out;
  auto c = redis_conn();
  for (auto& [user, convs] : m) {
    auto got = zset(*c, convs_prefix + user);
    if (got.size() != convs.size())
      out.push_back(user + ": " + std::to_string(got.size()) + " members, expected "
                    + std::to_string(convs.size()));
    for (auto& [conv, score] : convs) {
      auto i = got.find(conv);
      if (i == got.end())
        out.push_back(user + ": missing " + conv);
      else if (i->second != score)
        out.push_back(user + ": " + conv + " has " + std::to_string(i->second) + ", expected "
                      + std::to_string(score));
    }
  }
  return out;
}

core::dispatch make_dispatch(uint64_t i, int users) {
  core::dispatch d;
  d.conversation_id = "c-" + std::to_string(i % 97);
  d.created_at = 1733140000000 + static_cast<int64_t>(i);
  for (uint64_t r = 0; r < 1 + i % 3; ++r)
    d.recipients.push_back("u" + std::to_string((i * 7 + r * 13) % static_cast<uint64_t>(users)));
  return d;
}

model write_transactional_log(const std::string& topic, int64_t& lso) {
  auto p = kafka::producer::make(kafka_client(), topic + "-tx");
  if (!p)
    die(describe(p.error()));
  model committed;
  auto txn = [&](int first, int n, bool commit) {
    if (!p->begin())
      die("begin transaction");
    for (int i = first; i < first + n; ++i) {
      core::dispatch d{"c-tx-" + std::to_string(i), 1733140000000 + i,
                       {commit ? "kept" : "aborted-user"}};
      if (!p->send(topic, 0, core::encode_json(d)))
        die("produce");
      if (commit)
        qsp::test::apply(committed, d);
    }
    // Flush first: an abort would otherwise purge records never sent, and
    // the tests want aborted records on the log.
    if (!p->flush() || !(commit ? p->commit() : p->abort()))
      die("end transaction");
  };
  txn(0, 5, true);
  txn(5, 4, false); // aborted in the middle
  txn(9, 3, true);  // the log ends with this commit marker
  // Records + one marker per transaction; markers land asynchronously.
  lso = 5 + 1 + 4 + 1 + 3 + 1;
  auto admin = kafka::admin::make(kafka_client());
  if (!admin)
    die(describe(admin.error()));
  bool settled = eventually([&] {
    auto st = (*admin)->inspect(topic);
    return st && st->marks[0].high == lso;
  });
  if (!settled)
    die("the transaction markers of " + topic + " did not settle");
  return committed;
}

void create_topic(const std::string& topic, int partitions) {
  auto admin = kafka::admin::make(kafka_client());
  if (!admin)
    die(describe(admin.error()));
  if (auto ok = (*admin)->create_topic(topic, partitions); !ok)
    die(describe(ok.error()));
  // Wait (bounded) until the topic's metadata is visible with every partition.
  for (int i = 0; i < 100; ++i) {
    auto id = (*admin)->identity(topic);
    if (id && id->partition_count == partitions && !id->topic_id.empty())
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  die("topic " + topic + " did not appear");
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

black_hole::black_hole() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error("black_hole: socket: " + std::string{std::strerror(errno)});
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::listen(listen_fd_, 64) != 0
      || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("black_hole: bind/listen on 127.0.0.1: "
                             + std::string{std::strerror(errno)});
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { run(); });
}

black_hole::~black_hole() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

std::string black_hole::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

void black_hole::run() {
  std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
  auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!stop_ && std::chrono::steady_clock::now() < until) {
    if (::poll(fds.data(), fds.size(), 50) <= 0)
      continue;
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) {
        fds.push_back(pollfd{c, POLLIN, 0});
        ++accepted_;
      }
    }
    for (size_t i = 1; i < fds.size();) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        auto n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) { // the client closed it
          ::close(fds[i].fd);
          fds.erase(fds.begin() + static_cast<long>(i));
          continue;
        }
        received_ += static_cast<size_t>(n);
      }
      ++i;
    }
  }
  for (size_t i = 1; i < fds.size(); ++i)
    ::close(fds[i].fd);
}

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void set_option(std::vector<std::string>& args, const std::string& key, const std::string& value) {
  auto prefix = "--" + key + "=";
  args.erase(std::remove_if(args.begin(), args.end(),
                            [&](const std::string& a) { return a.rfind(prefix, 0) == 0; }),
             args.end());
  args.push_back(prefix + value);
}

http_reply http_get(uint16_t port, const std::string& path, std::chrono::milliseconds timeout) {
  http_reply out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return out;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port)
                    + "\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < req.size()) {
    auto n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      return out;
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break; // closed (Connection: close), an error or the read timeout
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.1 503 Service Unavailable\r\n...\r\n\r\nbody"
  auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || raw.size() < 12)
    return out;
  int status = std::atoi(raw.c_str() + 9);
  if (status < 100 || status > 599)
    return out;
  // Complete only if the body is as long as Content-Length says (when given).
  auto body = raw.substr(head_end + 4);
  auto head = raw.substr(0, head_end);
  for (auto& c : head)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos
      && body.size() < static_cast<size_t>(std::atoll(head.c_str() + cl + 17)))
    return out;
  out.status = status;
  out.body = std::move(body);
  return out;
}

bool readyz_reaches(uint16_t port, int status, std::chrono::milliseconds limit, http_reply* last) {
  return eventually(
    [&] {
      auto r = http_get(port, "/readyz");
      if (last != nullptr)
        *last = r;
      return r.status == status;
    },
    limit);
}

pause_guard::pause_guard(int pid) : pid_(pid) {
  paused_ = pid_ > 0 && ::kill(pid_, SIGSTOP) == 0;
}

pause_guard::~pause_guard() { resume(); }

void pause_guard::resume() {
  if (paused_) {
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }
}

private_redis::private_redis(const std::string& name, std::vector<std::string> extra_args,
                             bool tls)
  : extra(std::move(extra_args)), tls_port(tls) {
  dir = "/tmp/" + unique_name(name);
  sh("mkdir -p " + dir);
  port = free_port();
  start();
}

void private_redis::start() {
  std::vector<std::string> args{"redis-server", "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", dir,
                                "--logfile", dir + "/redis.log"};
  if (tls_port)
    args.insert(args.end(), {"--port", "0", "--tls-port", std::to_string(port)});
  else
    args.insert(args.end(), {"--port", std::to_string(port)});
  args.insert(args.end(), extra.begin(), extra.end());
  pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp("redis-server", argv.data());
    ::_exit(127);
  }
}

void private_redis::kill_hard() {
  if (pid > 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

void private_redis::stop() {
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

private_redis::~private_redis() {
  stop();
  sh("rm -rf " + dir);
}

bool private_redis::wait_ready(const std::string& cli_args) {
  for (int i = 0; i < 200; ++i) {
    if (sh("redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + cli_args
           + " PING 2>/dev/null | grep -q PONG") == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void expect_blocked_read_times_out(const redis::settings& cfg) {
  auto c = redis::connection::open(cfg);
  ASSERT_TRUE(c) << describe(c.error());
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*c)->command({"BLPOP", unique_name("never"), "0"});
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), static_cast<uint8_t>(ec::redis_unavailable));
  EXPECT_NE(describe(r.error()).find("timed out after " + std::to_string(cfg.command_timeout_ms)
                                     + " ms"),
            std::string::npos)
    << describe(r.error());
  EXPECT_GE(took, std::chrono::milliseconds(cfg.command_timeout_ms * 4 / 5));
  EXPECT_LT(took, std::chrono::seconds(5));
}

std::string doc_block(const std::string& file, const std::string& tag, const std::string& name) {
  std::ifstream in{std::string{QSP_SOURCE_DIR} + "/docs/" + file};
  const std::string marker = "<!-- " + tag + " runs this block: " + name + " -->";
  std::string line;
  while (std::getline(in, line))
    if (auto at = line.find_first_not_of(' '); at != std::string::npos && line.substr(at) == marker)
      break;
  if (!in)
    return {};
  std::vector<std::string> lines;
  size_t indent = std::string::npos;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(' ') == std::string::npos) {
      if (!lines.empty())
        lines.push_back("");
      continue;
    }
    auto at = line.find_first_not_of(' ');
    if (indent == std::string::npos)
      indent = at;
    if (at < indent)
      break;
    lines.push_back(line.substr(indent));
  }
  while (!lines.empty() && lines.back().empty())
    lines.pop_back();
  std::string out;
  for (auto& l : lines)
    out += l + "\n";
  return out;
}

} // namespace qsp::test
