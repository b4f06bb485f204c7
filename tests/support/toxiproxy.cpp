#include "tests/support/toxiproxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace qsp::test {

namespace {

bool fail(std::string* why, std::string text) {
  if (why != nullptr)
    *why = std::move(text);
  return false;
}

} // namespace

toxiproxy::toxiproxy(std::string api) : api_(std::move(api)) {
  auto colon = api_.rfind(':');
  if (colon != std::string::npos) {
    host_ = api_.substr(0, colon);
    port_ = static_cast<uint16_t>(std::atoi(api_.c_str() + colon + 1));
  }
}

toxiproxy::reply toxiproxy::request(const std::string& method, const std::string& path,
                                    const std::string& body) const {
  reply out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return out;
  timeval tv{};
  tv.tv_sec = 5; // every call is a local API call answered at once
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  if (::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1
      || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return out;
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + api_
                    + "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: "
                    + std::to_string(body.size()) + "\r\n\r\n" + body;
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
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || raw.size() < 12)
    return out;
  out.status = std::atoi(raw.c_str() + 9);
  out.body = raw.substr(head_end + 4);
  // Go's server may answer chunked; the tests only search the body's text,
  // which the chunk sizes do not disturb.
  return out;
}

bool toxiproxy::up(std::string* why) const {
  auto r = request("GET", "/version");
  if (r.status == 200)
    return true;
  return fail(why, "toxiproxy at " + api_ + " does not answer GET /version (status "
                     + std::to_string(r.status) + ")");
}

std::optional<uint16_t> toxiproxy::create_proxy(const std::string& name,
                                                const std::string& upstream, std::string* why) {
  auto r = request("POST", "/proxies",
                   "{\"name\":\"" + name + "\",\"listen\":\"127.0.0.1:0\",\"upstream\":\""
                     + upstream + "\",\"enabled\":true}");
  if (r.status != 201) {
    fail(why, "toxiproxy: creating proxy " + name + " -> " + upstream + ": status "
                + std::to_string(r.status) + " " + r.body);
    return std::nullopt;
  }
  // {"name":"...","listen":"127.0.0.1:41234",...}
  auto at = r.body.find("\"listen\":\"");
  auto colon = at == std::string::npos ? at : r.body.find(':', at + 10);
  if (colon == std::string::npos) {
    fail(why, "toxiproxy: no listen address in " + r.body);
    return std::nullopt;
  }
  int port = std::atoi(r.body.c_str() + colon + 1);
  if (port <= 0 || port > 65535) {
    fail(why, "toxiproxy: bad listen address in " + r.body);
    return std::nullopt;
  }
  return static_cast<uint16_t>(port);
}

bool toxiproxy::delete_proxy(const std::string& name, std::string* why) {
  auto r = request("DELETE", "/proxies/" + name);
  return r.status == 204 || r.status == 200
         || fail(why, "toxiproxy: deleting proxy " + name + ": status "
                        + std::to_string(r.status) + " " + r.body);
}

bool toxiproxy::add_toxic(const std::string& proxy, const std::string& toxic,
                          const std::string& type, const std::string& stream,
                          const std::string& attributes, std::string* why) {
  auto r = request("POST", "/proxies/" + proxy + "/toxics",
                   "{\"name\":\"" + toxic + "\",\"type\":\"" + type + "\",\"stream\":\"" + stream
                     + "\",\"toxicity\":1.0,\"attributes\":" + attributes + "}");
  return r.status == 200
         || fail(why, "toxiproxy: adding " + type + " toxic " + toxic + " to " + proxy
                        + ": status " + std::to_string(r.status) + " " + r.body);
}

bool toxiproxy::remove_toxic(const std::string& proxy, const std::string& toxic,
                             std::string* why) {
  auto r = request("DELETE", "/proxies/" + proxy + "/toxics/" + toxic);
  return r.status == 204 || r.status == 200
         || fail(why, "toxiproxy: removing toxic " + toxic + " from " + proxy + ": status "
                        + std::to_string(r.status) + " " + r.body);
}

std::string toxiproxy::toxics(const std::string& proxy) const {
  auto r = request("GET", "/proxies/" + proxy + "/toxics");
  return r.status == 200 ? r.body : std::string{};
}

std::optional<std::vector<std::string>> toxiproxy::clear_toxics(const std::string& proxy,
                                                                std::string* why) {
  auto r = request("GET", "/proxies/" + proxy + "/toxics");
  if (r.status != 200) {
    fail(why, "toxiproxy: listing the toxics of " + proxy + ": status " + std::to_string(r.status));
    return std::nullopt;
  }
  // [{"attributes":{...},"name":"timeout-upstream","type":"timeout",...},...]
  std::vector<std::string> names;
  for (size_t at = r.body.find("\"name\":\""); at != std::string::npos;
       at = r.body.find("\"name\":\"", at)) {
    at += 8;
    auto end = r.body.find('"', at);
    if (end == std::string::npos)
      break;
    names.push_back(r.body.substr(at, end - at));
  }
  for (auto& n : names)
    if (!remove_toxic(proxy, n, why))
      return std::nullopt;
  return names;
}

} // namespace qsp::test
