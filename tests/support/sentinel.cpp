#include "tests/support/sentinel.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace qsp::test {

std::string cli(uint16_t port, const std::string& args) {
  auto cmd = "redis-cli --no-auth-warning -h 127.0.0.1 -p " + std::to_string(port) + " " + args
             + " 2>/dev/null";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
      out.append(buf, n);
    ::pclose(f);
  }
  return out;
}

namespace {

/// The value of `field` in a redis-cli reply that lists field and value on
/// alternating lines (SENTINEL MASTER), or in an INFO text ("field:value").
std::string field_of(const std::string& text, const std::string& field) {
  std::istringstream in{text};
  std::string line;
  bool next = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (next)
      return line;
    if (line == field)
      next = true;
    else if (line.rfind(field + ":", 0) == 0)
      return line.substr(field.size() + 1);
  }
  return {};
}

} // namespace

private_sentinel::private_sentinel(const std::string& master_name, uint16_t primary_port,
                                   int quorum, const std::vector<std::string>& extra_conf) {
  dir = "/tmp/" + unique_name("sentinel");
  sh("mkdir -p " + dir);
  port = free_port();
  {
    std::ofstream conf{dir + "/sentinel.conf"};
    conf << "port " << port << "\n"
         << "bind 127.0.0.1\n"
         << "daemonize no\n"
         << "dir " << dir << "\n"
         << "logfile " << dir << "/sentinel.log\n"
         << "sentinel monitor " << master_name << " 127.0.0.1 " << primary_port << " " << quorum
         << "\n"
         << "sentinel down-after-milliseconds " << master_name << " 1000\n"
         << "sentinel failover-timeout " << master_name << " 10000\n"
         << "sentinel parallel-syncs " << master_name << " 2\n";
    for (auto& line : extra_conf)
      conf << line << "\n";
  }
  auto conf = dir + "/sentinel.conf";
  pid = ::fork();
  if (pid == 0) {
    ::execlp("redis-server", "redis-server", conf.c_str(), "--sentinel", nullptr);
    ::_exit(127);
  }
}

void private_sentinel::stop() {
  if (pid > 0) {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
}

private_sentinel::~private_sentinel() {
  stop();
  sh("rm -rf " + dir);
}

sentinel_set::sentinel_set(int replicas, int n_sentinels, std::vector<std::string> server_extra) {
  // Diskless replication without delay: a replica is in sync within
  // milliseconds, after the start and after every failover.
  std::vector<std::string> base{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"};
  base.insert(base.end(), server_extra.begin(), server_extra.end());
  servers.push_back(std::make_unique<private_redis>("ha-primary", base));
  auto primary = servers[0]->port;
  for (int i = 0; i < replicas; ++i) {
    auto args = base;
    args.insert(args.end(), {"--replicaof", "127.0.0.1", std::to_string(primary)});
    servers.push_back(std::make_unique<private_redis>("ha-replica", args));
  }
  for (auto& s : servers)
    s->wait_ready();
  for (int i = 0; i < n_sentinels; ++i)
    sentinels.push_back(std::make_unique<private_sentinel>(master_name, primary, 2));
}

sentinel_set::~sentinel_set() {
  // Sentinels first: none of them reconfigures a server that is stopping.
  sentinels.clear();
  servers.clear();
}

std::vector<std::string> sentinel_set::sentinel_list() const {
  std::vector<std::string> out;
  for (auto& s : sentinels)
    out.push_back(s->address());
  return out;
}

std::string sentinel_set::sentinels_option() const {
  std::string v = "--redis.sentinels=[";
  for (auto& s : sentinels)
    v += (v.back() == '[' ? "\"" : ",\"") + s->address() + "\"";
  return v + "]";
}

bool sentinel_set::wait_settled(std::chrono::milliseconds limit) {
  auto replicas = std::to_string(servers.size() - 1);
  auto others = std::to_string(sentinels.size() - 1);
  return eventually(
    [&] {
      for (size_t i = 1; i < servers.size(); ++i)
        if (servers[i]->pid > 0
            && field_of(cli(servers[i]->port, "INFO replication"), "master_link_status") != "up")
          return false;
      for (auto& s : sentinels) {
        auto m = cli(s->port, "SENTINEL MASTER " + master_name);
        if (field_of(m, "num-slaves") != replicas || field_of(m, "num-other-sentinels") != others)
          return false;
        if (field_of(m, "flags") != "master")
          return false;
      }
      return true;
    },
    limit);
}

uint16_t sentinel_set::primary_port_per(size_t i) const {
  auto out = cli(sentinels[i]->port, "SENTINEL GET-MASTER-ADDR-BY-NAME " + master_name);
  std::istringstream in{out};
  std::string host, port;
  std::getline(in, host);
  std::getline(in, port);
  return port.empty() ? 0 : static_cast<uint16_t>(std::atoi(port.c_str()));
}

private_redis* sentinel_set::server_at(uint16_t port) {
  for (auto& s : servers)
    if (s->port == port)
      return s.get();
  return nullptr;
}

uint16_t sentinel_set::wait_failover_from(uint16_t old_port, std::chrono::milliseconds limit) {
  uint16_t now = 0;
  bool done = eventually(
    [&] {
      now = 0;
      for (size_t i = 0; i < sentinels.size(); ++i) {
        if (sentinels[i]->pid <= 0)
          continue;
        auto p = primary_port_per(i);
        if (p == 0 || p == old_port || (now != 0 && p != now))
          return false;
        now = p;
      }
      if (now == 0 || field_of(cli(now, "INFO replication"), "role") != "master")
        return false;
      for (auto& s : servers) {
        if (s->pid <= 0 || s->port == now || s->port == old_port)
          continue;
        auto info = cli(s->port, "INFO replication");
        if (field_of(info, "master_port") != std::to_string(now)
            || field_of(info, "master_link_status") != "up")
          return false;
      }
      return true;
    },
    limit);
  return done ? now : 0;
}

bool sentinel_set::failover() {
  auto r = cli(sentinels[0]->port, "SENTINEL FAILOVER " + master_name);
  return r.rfind("OK", 0) == 0;
}

redis::settings sentinel_set::settings(const std::string& ns,
                                       const std::string& convs_prefix) const {
  redis::settings r;
  for (auto& s : sentinels)
    r.sentinels.push_back(redis::address{"127.0.0.1", s->port});
  r.master_name = master_name;
  r.ns = ns;
  r.convs_prefix = convs_prefix;
  r.connect_timeout_ms = 1000;
  r.command_timeout_ms = 2000;
  return r;
}

} // namespace qsp::test
