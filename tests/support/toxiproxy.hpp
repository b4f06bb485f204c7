// A client of toxiproxy's HTTP API (Shopify/toxiproxy v2, installed by
// scripts/bootstrap into .deps/bin and started by `scripts/services start
// --ha`): the TCP fault proxy of the network-fault tests.  Loopback only.
//
// Toxics used here (toxiproxy's README has the full list):
//   latency     {"latency": ms, "jitter": ms}   every chunk delayed
//   reset_peer  {"timeout": 0}                  the next chunk resets the connection (RST)
//   timeout     {"timeout": 0}                  a black hole: data dropped, the
//                                               connection held open until removed
// A toxic applies to the proxy's open connections and to every new one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qsp::test {

class toxiproxy {
public:
  /// `api`: "host:port" of the toxiproxy server (TOXIPROXY_API).
  explicit toxiproxy(std::string api);

  /// GET /version answers.
  bool up(std::string* why = nullptr) const;

  /// Creates proxy `name` listening on a free loopback port and forwarding to
  /// `upstream` ("host:port"); the port it listens on, nullopt (reason in
  /// `why`) on an error.
  std::optional<uint16_t> create_proxy(const std::string& name, const std::string& upstream,
                                       std::string* why = nullptr);
  bool delete_proxy(const std::string& name, std::string* why = nullptr);

  /// Adds toxic `toxic` of `type` on `stream` ("upstream": client to server,
  /// "downstream": server to client) of proxy `proxy`; `attributes` is a JSON
  /// object, e.g. {"latency":300,"jitter":50}.
  bool add_toxic(const std::string& proxy, const std::string& toxic, const std::string& type,
                 const std::string& stream, const std::string& attributes,
                 std::string* why = nullptr);
  bool remove_toxic(const std::string& proxy, const std::string& toxic,
                    std::string* why = nullptr);
  /// The proxy's toxics as toxiproxy lists them (JSON), "" on an error.
  std::string toxics(const std::string& proxy) const;
  /// Removes every toxic of `proxy` (left by a test that was killed); the
  /// names removed, nullopt (reason in `why`) on an error.
  std::optional<std::vector<std::string>> clear_toxics(const std::string& proxy,
                                                       std::string* why = nullptr);

  const std::string& api() const { return api_; }

private:
  struct reply {
    int status = 0; // 0: no answer
    std::string body;
  };
  reply request(const std::string& method, const std::string& path,
                const std::string& body = "") const;

  std::string api_;
  std::string host_;
  uint16_t port_ = 0;
};

} // namespace qsp::test
