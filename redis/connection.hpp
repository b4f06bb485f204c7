// One hiredis connection: TCP or TLS, AUTH with ACL user/password, timeouts,
// TCP keepalive.  Errors are classified and never carry the password:
// - ec::redis_unavailable: connect, I/O, a timed-out read or write, closed,
//   interrupted, a TLS handshake that failed for a reason other than the
//   certificates;
// - ec::invalid_config: AUTH refused, an ACL that denies a command or key
//   (NOPERM), TLS files that cannot be loaded, a certificate that does not
//   verify (final: an operator must act);
// - ec::redis_reply: any other error reply.
#pragma once

#include <atomic>
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
  /// Held by every connection until it is closed (the projection's I/O
  /// token: its shutdown waits until all are released).
  std::shared_ptr<void> keepalive;
};

struct reply_deleter { void operator()(redisReply* r) const { freeReplyObject(r); } };
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

class connection {
public:
  static caf::expected<std::unique_ptr<connection>> open(const settings& cfg);
  ~connection();

  /// One command, one reply; an error reply becomes ec::redis_reply (a NOPERM
  /// one ec::invalid_config naming the command).  Blocks at most the command
  /// timeout.
  caf::expected<reply_ptr> command(const std::vector<std::string>& argv);
  /// Queues a command without waiting (pipelining).
  void append(const std::vector<std::string_view>& argv);
  /// Queues commands already in RESP (one or more).
  void append_formatted(std::string_view resp);
  /// Writes every queued command to the socket (so the server starts on them).
  caf::error flush();
  /// Reads the next pipelined reply (blocking, at most the command timeout).
  /// `what` names the command in errors.
  caf::expected<reply_ptr> read_reply(std::string_view what = "a pipelined command");
  /// Like read_reply, but waits at most `timeout_ms` for the reply to arrive
  /// and returns a null reply if it has not (yet).  TLS connections read
  /// blocking, since bytes inside the TLS layer are invisible to poll(2).
  caf::expected<reply_ptr> poll_reply(int timeout_ms,
                                      std::string_view what = "a pipelined command");
  /// What take_integer_replies() did.
  struct integer_replies {
    size_t taken = 0;   ///< integer replies consumed
    bool other = false; ///< the next reply is not a plain integer: read it with poll_reply()
  };
  /// The pipeline's fast path for replies expected to be integers (ZADD's):
  /// consumes up to `max` integer replies at the head of the input without
  /// building reply objects, waiting at most `timeout_ms` (>= 0) for input
  /// when none is complete (TLS: reads blocking, like poll_reply).  Stops
  /// before anything else (an error reply, another type, a malformed
  /// integer): `other` is set and that reply, with everything after it, goes
  /// to hiredis, so poll_reply() reads it as before.  taken == 0 and !other:
  /// nothing complete arrived in time.
  caf::expected<integer_replies> take_integer_replies(size_t max, int timeout_ms);
  /// Callable from any thread: shuts the socket down, so a call blocked in
  /// I/O on another thread returns an error at once; every later call fails
  /// fast (ec::redis_unavailable, "interrupted").  The context itself is
  /// freed only by the destructor, on the owning thread.
  void interrupt();
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }

  const settings& config() const { return cfg_; }
  std::string where() const;

private:
  connection(settings cfg, redisContext* ctx, void* ssl);
  caf::error io_error(const std::string& what) const;
  caf::error interrupted_error() const;
  /// Gives the input take_integer_replies() read but did not consume to
  /// hiredis' reader (before hiredis reads anything, so the order is kept).
  void hand_over_input();
  /// Consumes complete integer replies at in_[in_begin_, in_end_).
  size_t take_buffered_integers(size_t max, bool& other);
  /// SO_RCVLOWAT: poll(2) reports the socket readable once this many bytes
  /// are in (1 but while take_integer_replies waits).
  void set_lowat(int bytes);

  settings cfg_;
  redisContext* ctx_;
  void* ssl_;  ///< redisSSLContext*, opaque here
  int fd_;     ///< the socket, fixed for the connection's life (for interrupt)
  std::atomic<bool> interrupted_{false};
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
  /// Input read by take_integer_replies() and not consumed yet.  Bytes are
  /// here only while hiredis' reader holds none (hiredis_input_ false).
  std::unique_ptr<char[]> in_;
  size_t in_begin_ = 0, in_end_ = 0;
  /// hiredis' reader may hold unparsed input or a partial reply: replies
  /// are read through it until it has returned a whole one and holds no more.
  bool hiredis_input_ = false;
  int lowat_ = 1;
};

} // namespace qsp::redis
