// qsp-bench-resp-sink: a loopback RESP server that acknowledges at once, for
// the node-only ceiling (scripts/bench --sink, docs/PERFORMANCE.md).  With it
// in place of Redis, the catch-up runs as fast as the node itself can go.
//
// It parses pipelined RESP arrays of bulk strings (what hiredis sends) and
// answers each command with the reply type the node's adapters expect, so
// the node's code paths are the ones it takes against Redis:
//   ZADD key GT score member ...   :<number of members>   (as if all were new)
//   INFO server | memory           a bulk string with redis_version /
//                                  maxmemory_policy (7.0.15, noeviction)
//   SCAN ...                       "0" and no keys
//   EVAL <checkpoint read script>  meta absent, no checkpoints: ["none", []]
//   EVAL <cluster view script>     no owner or status records: one empty
//                                  array per key
//   EVAL <create-meta script>      "created"
//   EVAL <guarded write script>    "ok"
//   AUTH, PING, SELECT, CLIENT     +OK / +PONG
//   anything else                  -ERR naming the command
// Nothing is stored: checkpoints are acknowledged, not kept, so a node
// restarted against it bootstraps again.  Counts go to stderr at exit,
// errors= among them: the -ERR replies to what it does not know (a node
// that gets one fails its catch-up, which tests/integration/bench_sink_test
// checks against the node as it is).
//
// Usage: qsp-bench-resp-sink PORT_FILE   (listens on 127.0.0.1:0, writes the
// port to PORT_FILE, runs until SIGTERM/SIGINT)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

volatile sig_atomic_t stop_requested = 0;

struct counts {
  unsigned long long commands = 0, zadd = 0, members = 0, eval = 0, other = 0, bytes_in = 0,
                     errors = 0;
};

struct client {
  int fd = -1;
  std::string in;
  size_t pos = 0;
  std::string out;
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  return true;
}

void bulk(std::string& out, std::string_view s) {
  out += '$';
  out += std::to_string(s.size());
  out += "\r\n";
  out += s;
  out += "\r\n";
}

void answer(const std::vector<std::string_view>& argv, std::string& out, counts& n) {
  ++n.commands;
  const std::string_view cmd = argv.empty() ? std::string_view{} : argv[0];
  if (iequals(cmd, "ZADD")) {
    ++n.zadd;
    // ZADD key [options] score member ...: the pairs follow the options.
    size_t i = 2;
    while (i < argv.size() && (iequals(argv[i], "GT") || iequals(argv[i], "LT") ||
                               iequals(argv[i], "NX") || iequals(argv[i], "XX") ||
                               iequals(argv[i], "CH")))
      ++i;
    const size_t members = (argv.size() - i) / 2;
    n.members += members;
    out += ':';
    out += std::to_string(members);
    out += "\r\n";
  } else if (iequals(cmd, "EVAL") && argv.size() >= 3) {
    ++n.eval;
    const std::string_view script = argv[1];
    if (script.find("'exists'") != std::string_view::npos) {
      bulk(out, "created");
    } else if (script.find("'format_version'") != std::string_view::npos) {
      bulk(out, "ok");
    } else if (script.find("out[i] = redis.call('HGETALL', KEYS[i])") != std::string_view::npos) {
      // The cluster view: HGETALL of each owner and status key (none).
      const size_t keys = static_cast<size_t>(std::strtoull(std::string{argv[2]}.c_str(), nullptr, 10));
      out += '*';
      out += std::to_string(keys);
      out += "\r\n";
      for (size_t k = 0; k < keys; ++k)
        out += "*0\r\n";
    } else if (script.find("local out = {}") != std::string_view::npos) {
      // The checkpoint read: with ARGV[1] == 'meta' its first entries are
      // meta's type and fields; then one triple per existing key (none).
      if (!argv.empty() && argv.back() == "meta")
        out += "*2\r\n$4\r\nnone\r\n*0\r\n";
      else
        out += "*0\r\n";
    } else {
      ++n.errors;
      out += "-ERR qsp-bench-resp-sink: unknown script\r\n";
    }
  } else if (iequals(cmd, "INFO")) {
    ++n.other;
    bulk(out, "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n");
  } else if (iequals(cmd, "SCAN")) {
    ++n.other;
    out += "*2\r\n$1\r\n0\r\n*0\r\n";
  } else if (iequals(cmd, "PING")) {
    ++n.other;
    out += "+PONG\r\n";
  } else if (iequals(cmd, "AUTH") || iequals(cmd, "SELECT") || iequals(cmd, "CLIENT")) {
    ++n.other;
    out += "+OK\r\n";
  } else {
    ++n.other;
    ++n.errors;
    out += "-ERR qsp-bench-resp-sink: unsupported command '";
    out += cmd;
    out += "'\r\n";
  }
}

// Parses the complete commands in c.in and answers them; false on a
// protocol error.  A command cut off by the end of the input waits for more.
bool serve(client& c, counts& n, std::vector<std::string_view>& argv) {
  const char* const buf = c.in.data();
  const size_t end = c.in.size();
  auto line = [&](size_t at, size_t& next) -> long long {
    // A decimal up to CRLF; -2: incomplete.
    const void* cr = std::memchr(buf + at, '\r', end - at);
    if (cr == nullptr) return -2;
    const size_t i = static_cast<size_t>(static_cast<const char*>(cr) - buf);
    if (i + 1 >= end) return -2;
    next = i + 2;
    long long v = 0;
    if (at == i) return -1;
    for (size_t k = at; k < i; ++k) {
      if (buf[k] < '0' || buf[k] > '9' || v > (1LL << 40)) return -1;
      v = v * 10 + (buf[k] - '0');
    }
    return v;
  };
  while (c.pos < end) {
    if (buf[c.pos] != '*') return false;
    size_t at = 0;
    const long long count = line(c.pos + 1, at);
    if (count == -2) break;
    if (count < 0) return false;
    argv.clear();
    bool complete = true;
    for (long long k = 0; k < count; ++k) {
      if (at >= end) {
        complete = false;
        break;
      }
      if (buf[at] != '$') return false;
      size_t data = 0;
      const long long len = line(at + 1, data);
      if (len == -2) {
        complete = false;
        break;
      }
      if (len < 0) return false;
      if (data + static_cast<size_t>(len) + 2 > end) {
        complete = false;
        break;
      }
      argv.emplace_back(buf + data, static_cast<size_t>(len));
      at = data + static_cast<size_t>(len) + 2;
    }
    if (!complete) break;
    answer(argv, c.out, n);
    c.pos = at;
  }
  if (c.pos > 0 && c.pos == end) {
    c.in.clear();
    c.pos = 0;
  } else if (c.pos > (1u << 20)) {
    c.in.erase(0, c.pos);
    c.pos = 0;
  }
  return true;
}

bool flush(client& c) {
  size_t done = 0;
  while (done < c.out.size()) {
    const ssize_t w = ::send(c.fd, c.out.data() + done, c.out.size() - done, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  c.out.clear();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: qsp-bench-resp-sink PORT_FILE\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop_requested = 1; };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(lfd, 16) != 0) {
    std::fprintf(stderr, "qsp-bench-resp-sink: cannot listen on 127.0.0.1: %s\n", std::strerror(errno));
    return 1;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (std::FILE* f = std::fopen(argv[1], "w")) {
    std::fprintf(f, "%d\n", ntohs(addr.sin_port));
    std::fclose(f);
  } else {
    std::fprintf(stderr, "qsp-bench-resp-sink: cannot write %s\n", argv[1]);
    return 1;
  }
  counts n;
  std::vector<client> clients;
  std::vector<std::string_view> args;
  std::vector<char> chunk(256 * 1024);
  while (!stop_requested) {
    std::vector<pollfd> fds{{lfd, POLLIN, 0}};
    for (auto& c : clients) fds.push_back(pollfd{c.fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), 200);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & POLLIN) {
      const int cfd = ::accept(lfd, nullptr, nullptr);
      if (cfd >= 0) {
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        clients.push_back(client{cfd, {}, 0, {}});
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      client& c = clients[i - 1];
      const ssize_t r = ::recv(c.fd, chunk.data(), chunk.size(), 0);
      if (r > 0) {
        n.bytes_in += static_cast<unsigned long long>(r);
        c.in.append(chunk.data(), static_cast<size_t>(r));
        if (serve(c, n, args) && flush(c)) continue;
      } else if (r < 0 && errno == EINTR) {
        continue;
      }
      ::close(c.fd);
      c.fd = -1;
    }
    std::vector<client> open;
    for (auto& c : clients)
      if (c.fd >= 0) open.push_back(std::move(c));
    clients.swap(open);
  }
  for (auto& c : clients) ::close(c.fd);
  ::close(lfd);
  std::fprintf(stderr,
               "resp-sink: commands=%llu zadd=%llu members=%llu eval=%llu other=%llu bytes_in=%llu "
               "errors=%llu\n",
               n.commands, n.zadd, n.members, n.eval, n.other, n.bytes_in, n.errors);
  return 0;
}
