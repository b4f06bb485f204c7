// One hiredis connection: TCP or TLS, AUTH with ACL user/password, timeouts,
// TCP keepalive.  Errors are classified and never carry the password:
// - ec::redis_unavailable: connect, I/O, a timed-out read or write, closed,
//   interrupted, a TLS handshake that failed for a reason other than the
//   certificates;
// - ec::invalid_config: AUTH refused, an ACL that denies a command or key
//   (NOPERM), TLS files that cannot be loaded, a certificate that does not
//   verify, or one that is not valid for the server's name (final: an
//   operator must act);
//
// TLS checks the server's certificate against the CA and, inside the
// handshake (OpenSSL's host check), against settings::tls_server_name, or
// the host dialled where that is empty: an IP (a Sentinel's answer) must be
// among the certificate's IP SANs.  tls_verify_hostname = false skips the
// name check.
// - ec::redis_reply: any other error reply (READONLY and MASTERDOWN among
//   them: the server is, or follows, a replica now).
//
// With Sentinels (settings::sentinels non-empty) open() asks them in order for
// the primary of settings::master_name (SENTINEL GET-MASTER-ADDR-BY-NAME; the
// first that answers wins), connects there and checks that ROLE says
// `master` before the connection is handed out.  A Sentinel that cannot be
// reached or does not know the name is skipped; if none answers, the error
// names every Sentinel and why (ec::invalid_config if every one of them
// answered and refused: unknown name, credentials, ACL; ec::redis_unavailable
// otherwise).  A ROLE other than master is ec::redis_unavailable (a stale
// answer or a failover in progress): nothing is written there.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "caf/expected.hpp"

namespace qsp::redis {

/// A host and port (a Sentinel, or the primary a Sentinel named).
struct address {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

/// The primary found by the last resolving open(), shared by the copies of
/// one settings (one port factory): connections opened with
/// resolve::pinned go to the same server, so the session sets and the
/// checkpoints of one generation are never written to two primaries (see
/// connection::open).
class primary_pin {
public:
  std::optional<address> get() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return at_;
  }
  void set(address a) {
    std::lock_guard<std::mutex> guard{mtx_};
    at_ = std::move(a);
  }

private:
  mutable std::mutex mtx_;
  std::optional<address> at_;
};

struct settings {
  std::string host = "127.0.0.1";  ///< unused with sentinels
  uint16_t port = 6379;            ///< unused with sentinels
  /// Non-empty: ask these Sentinels, in order, for the primary of master_name.
  std::vector<address> sentinels;
  std::string master_name;
  std::string sentinel_username;  ///< empty: the default user
  std::string sentinel_password;  ///< empty: no AUTH to the Sentinels
  /// Set by the port factory: see primary_pin.
  std::shared_ptr<primary_pin> pin;
  /// Non-empty: Redis Cluster mode, these are the seed nodes (see
  /// redis/cluster.hpp); host, port and sentinels are not used.
  std::vector<address> cluster_nodes;
  std::string username;  ///< empty: the default user
  std::string password;  ///< empty: no AUTH
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  /// The name the server's certificate must hold (and the SNI); empty: the
  /// host dialled.
  std::string tls_server_name;
  /// Check the certificate's name (OpenSSL's host check in the handshake).
  bool tls_verify_hostname = true;
  int connect_timeout_ms = 3000;
  int command_timeout_ms = 10000;
  /// WAIT after every checkpoint write (redis.wait-replicas / wait-timeout); 0: none.
  int wait_replicas = 0;
  int wait_timeout_ms = 100;
  /// Key layout (docs/DESIGN.md §3): {ns}:meta, {ns}:checkpoint:{topic}:{p}, {convs}{user}.
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
  /// With Sentinels: `fresh` asks them for the primary and records it in
  /// cfg.pin; `pinned` connects to the primary cfg.pin holds (asking the
  /// Sentinels only if it holds none yet), so that a failover between the
  /// two opens makes the second one fail (ROLE or connect) instead of
  /// writing to another server.  Without Sentinels both connect to host:port.
  enum class resolve { fresh, pinned };

  static caf::expected<std::unique_ptr<connection>> open(const settings& cfg,
                                                         resolve how = resolve::fresh);
  /// A connection to exactly `at` (a Redis Cluster node), with the
  /// settings' credentials and TLS; nothing resolved, no ROLE check.
  static caf::expected<std::unique_ptr<connection>> open_at(const settings& cfg,
                                                            const address& at);
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
  /// append_formatted(resp) and flush(), but without copying `resp` into
  /// hiredis' output buffer when nothing else is queued (TCP): written to
  /// the socket straight from the caller's buffer.  Errors as flush() has
  /// them (a timed-out write names redis.command-timeout).
  caf::error write_formatted(std::string_view resp);
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
  enum class peer { server, primary, sentinel };
  /// One connection to `at`: TCP or TLS, AUTH with the credentials `kind` uses.
  static caf::expected<std::unique_ptr<connection>> connect(const settings& cfg,
                                                            const address& at, peer kind);
  /// The Sentinels' answer: the primary's address, or an error naming each.
  static caf::expected<address> ask_sentinels(const settings& cfg);
  /// ROLE says master, or ec::redis_unavailable naming what it says.
  caf::error check_primary();

  connection(settings cfg, std::string where, redisContext* ctx, void* ssl);
  caf::error io_error(const std::string& what) const;
  /// poll(2) for input, at most timeout_ms: true once readable (or hung up),
  /// false on a timeout, an error naming the failure otherwise.
  caf::expected<bool> wait_readable(int timeout_ms);
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
  std::string where_;
  redisContext* ctx_;
  void* ssl_;  ///< SSL_CTX*, opaque here
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
