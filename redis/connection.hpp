// One hiredis connection: TCP or TLS, AUTH with ACL user/password, timeouts.
// Errors are classified (ec::redis_unavailable for I/O, timeout, closed;
// ec::redis_reply for an error reply) and never carry the password.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "caf/expected.hpp"

namespace qsp::redis {

struct settings {
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  std::string username;  ///< empty: the default user
  std::string password;  ///< empty: no AUTH
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  int connect_timeout_ms = 3000;
  int command_timeout_ms = 10000;
  /// Key layout (DESIGN.md §3): {ns}:meta, {ns}:checkpoint:{topic}:{p}, {convs}{user}.
  std::string ns = "session_projection";
  std::string convs_prefix = "convs:";
};

struct reply_deleter { void operator()(redisReply* r) const { freeReplyObject(r); } };
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

class connection {
public:
  static caf::expected<std::unique_ptr<connection>> open(const settings& cfg);
  ~connection();

  /// One command, one reply; an error reply becomes ec::redis_reply.
  caf::expected<reply_ptr> command(const std::vector<std::string>& argv);
  /// Queues a command without waiting (pipelining).
  void append(const std::vector<std::string_view>& argv);
  /// Queues commands already in RESP (one or more).
  void append_formatted(std::string_view resp);
  /// Writes every queued command to the socket (so the server starts on them).
  caf::error flush();
  /// Reads the next pipelined reply.
  caf::expected<reply_ptr> read_reply();
  /// Like read_reply, but waits at most `timeout_ms` for the reply to arrive
  /// and returns a null reply if it has not (yet).  TLS connections read
  /// blocking, since bytes inside the TLS layer are invisible to poll(2).
  caf::expected<reply_ptr> poll_reply(int timeout_ms);

  const settings& config() const { return cfg_; }
  std::string where() const;

private:
  connection(settings cfg, redisContext* ctx, void* ssl);
  caf::error io_error(const std::string& what) const;

  settings cfg_;
  redisContext* ctx_;
  void* ssl_;  ///< redisSSLContext*, opaque here
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
};

} // namespace qsp::redis
