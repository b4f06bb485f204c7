#include "redis/connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "messages/types.hpp"

namespace qsp::redis {

namespace {

/// hiredis writes with send(2) without MSG_NOSIGNAL: on a connection the
/// server has closed, that raises SIGPIPE, whose default action kills the
/// process (exit 141).  While alive, this blocks SIGPIPE in the calling
/// thread and then discards one raised by the write, so the failure is an
/// EPIPE error like any other, whether or not the host ignores SIGPIPE.
class sigpipe_guard {
public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~sigpipe_guard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

} // namespace

namespace {

timeval to_timeval(int ms) {
  return timeval{ms / 1000, (ms % 1000) * 1000};
}

/// TCP keepalive probes start after this many idle seconds (and repeat at a
/// third of it): a peer that vanished without a FIN/RST (host down, NAT or
/// firewall state dropped) is noticed even on an idle connection.
constexpr int keepalive_interval_s = 15;

/// OpenSSL's reason for the last error on this thread's queue (cleared).
std::string openssl_reason() {
  unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0)
    return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

/// The client TLS context of redis.tls: the CA (or the system store), the
/// client certificate and key, peer verification on.  Errors name the
/// setting (ec::invalid_config: an operator must act).
caf::expected<SSL_CTX*> make_tls_context(const settings& cfg, const std::string& where) {
  static const bool ssl_init = [] { return OPENSSL_init_ssl(0, nullptr) == 1; }();
  (void) ssl_init;
  auto fail = [&](SSL_CTX* ctx, const std::string& what) -> caf::error {
    if (ctx != nullptr)
      SSL_CTX_free(ctx);
    return caf::make_error(ec::invalid_config, where + ": TLS setup: " + what);
  };
  auto file = [](const char* option, const std::string& path) {
    return std::string{option} + " (" + (path.empty() ? "<unset>" : path) + ")";
  };
  if (cfg.tls_cert_file.empty() != cfg.tls_key_file.empty())
    return fail(nullptr, "redis.tls-cert-file and redis.tls-key-file must be set together");
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr)
    return fail(nullptr, "cannot create a TLS context: " + openssl_reason());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!cfg.tls_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, cfg.tls_ca_file.c_str(), nullptr) != 1)
      return fail(ctx, "cannot load " + file("redis.tls-ca-file", cfg.tls_ca_file) + ": "
                         + openssl_reason());
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return fail(ctx, "cannot use the system CA store (set redis.tls-ca-file): "
                       + openssl_reason());
  }
  if (!cfg.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg.tls_cert_file.c_str()) != 1)
      return fail(ctx, "cannot load " + file("redis.tls-cert-file", cfg.tls_cert_file) + ": "
                         + openssl_reason());
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return fail(ctx, "cannot load " + file("redis.tls-key-file", cfg.tls_key_file) + ": "
                         + openssl_reason());
  }
  return ctx;
}

/// True if `name` is an IPv4 or IPv6 address (checked against the
/// certificate's IP SANs, never sent as SNI).
bool is_ip_address(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

/// The names a certificate holds: its DNS and IP subject alternative names,
/// else its subject's common name.
std::string certificate_names(X509* cert) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  auto* sans = static_cast<GENERAL_NAMES*>(
    X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      if (g->type == GEN_DNS) {
        const auto* s = g->d.dNSName;
        add("DNS:" + std::string{reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                 static_cast<size_t>(ASN1_STRING_length(s))});
      } else if (g->type == GEN_IPADD) {
        const auto* s = g->d.iPAddress;
        char text[INET6_ADDRSTRLEN] = {0};
        int len = ASN1_STRING_length(s);
        if (len == 4 || len == 16)
          inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), text, sizeof(text));
        add(std::string{"IP:"} + (text[0] != 0 ? text : "?"));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (out.empty()) {
    char cn[256] = {0};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn)) > 0)
      add(std::string{"CN="} + cn + " (no subjectAltName)");
  }
  return out.empty() ? "no name" : out;
}

/// What the verify callback saw of a certificate whose name did not match
/// (the handshake runs on the connecting thread).
thread_local std::string mismatched_names;

int verify_callback(int ok, X509_STORE_CTX* store) {
  if (ok == 0) {
    int err = X509_STORE_CTX_get_error(store);
    if (err == X509_V_ERR_HOSTNAME_MISMATCH || err == X509_V_ERR_IP_ADDRESS_MISMATCH)
      if (X509* cert = X509_STORE_CTX_get_current_cert(store))
        mismatched_names = certificate_names(cert);
  }
  return ok;
}

/// True if a failed TLS handshake is about the certificates (a configuration
/// problem on one side or the other), not about the transport.
bool certificate_problem(const std::string& err) {
  std::string low;
  for (char c : err)
    low.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return low.find("certificate") != std::string::npos || low.find("unknown ca") != std::string::npos
         || low.find("verify failed") != std::string::npos
         || low.find("hostname mismatch") != std::string::npos;
}

/// True for the text hiredis leaves after a read or write that hit
/// SO_RCVTIMEO/SO_SNDTIMEO (EAGAIN in blocking mode, TCP and TLS alike).
bool timed_out(const redisContext* ctx) {
  if (ctx->err == REDIS_ERR_TIMEOUT)
    return true;
  return ctx->err == REDIS_ERR_IO
         && std::strstr(ctx->errstr, std::strerror(EAGAIN)) != nullptr;
}

} // namespace

connection::connection(settings cfg, std::string where, redisContext* ctx, void* ssl)
  : cfg_(std::move(cfg)), where_(std::move(where)), ctx_(ctx), ssl_(ssl), fd_(ctx->fd) {}

connection::~connection() {
  if (ctx_ != nullptr)
    redisFree(ctx_);
  if (ssl_ != nullptr)
    SSL_CTX_free(static_cast<SSL_CTX*>(ssl_));
}

std::string connection::where() const { return where_; }

void connection::interrupt() {
  // The flag first: a call that wakes up from the shutdown reports
  // "interrupted", and every later call fails before touching the socket.
  // shutdown(2) (not close) keeps the descriptor number ours until the
  // destructor, so it cannot hit a reused descriptor.
  if (!interrupted_.exchange(true, std::memory_order_acq_rel) && fd_ >= 0)
    ::shutdown(fd_, SHUT_RDWR);
}

caf::error connection::interrupted_error() const {
  return caf::make_error(ec::redis_unavailable, where() + ": interrupted");
}

caf::expected<bool> connection::wait_readable(int timeout_ms) {
  pollfd pfd{ctx_->fd, POLLIN, 0};
  int n = ::poll(&pfd, 1, timeout_ms);
  if (n < 0 && errno != EINTR)
    return caf::make_error(ec::redis_unavailable,
                           where() + ": waiting for a reply: " + std::strerror(errno));
  return n > 0;
}

caf::error connection::io_error(const std::string& what) const {
  if (interrupted())
    return caf::make_error(ec::redis_unavailable, where() + ": " + what + ": interrupted");
  if (ctx_ != nullptr && ctx_->err != 0 && timed_out(ctx_))
    return caf::make_error(ec::redis_unavailable,
                           where() + ": " + what + ": timed out after "
                             + std::to_string(cfg_.command_timeout_ms)
                             + " ms (redis.command-timeout); the connection is unusable");
  std::string detail = ctx_ != nullptr && ctx_->err != 0 ? ctx_->errstr : "connection lost";
  return caf::make_error(ec::redis_unavailable, where() + ": " + what + ": " + detail);
}

caf::expected<std::unique_ptr<connection>>
connection::connect(const settings& cfg, const address& at, peer kind) {
  std::string where;
  switch (kind) {
    case peer::server: where = "redis " + at.to_string(); break;
    case peer::primary:
      where = "redis " + at.to_string() + " (primary of '" + cfg.master_name + "')";
      break;
    case peer::sentinel: where = "sentinel " + at.to_string(); break;
  }
  bool sentinel = kind == peer::sentinel;
  const auto& username = sentinel ? cfg.sentinel_username : cfg.username;
  const auto& password = sentinel ? cfg.sentinel_password : cfg.password;
  // The TLS context first: files that cannot be loaded are a configuration
  // error whether or not the server is up.
  SSL_CTX* ssl = nullptr;
  if (cfg.tls) {
    auto made = make_tls_context(cfg, where);
    if (!made)
      return made.error();
    ssl = *made;
  }
  auto free_ssl = [&] {
    if (ssl != nullptr)
      SSL_CTX_free(ssl);
  };
  redisOptions opts{};
  REDIS_OPTIONS_SET_TCP(&opts, at.host.c_str(), static_cast<int>(at.port));
  auto ct = to_timeval(cfg.connect_timeout_ms);
  auto cmdt = to_timeval(cfg.command_timeout_ms);
  opts.connect_timeout = &ct;
  // Sets SO_RCVTIMEO/SO_SNDTIMEO on the socket: every blocking read or write
  // (TLS ones too: OpenSSL reads the same descriptor) gives up after it.
  opts.command_timeout = &cmdt;
  redisContext* ctx = redisConnectWithOptions(&opts);
  if (ctx == nullptr) {
    free_ssl();
    return caf::make_error(ec::redis_unavailable, where + ": cannot allocate a context");
  }
  if (ctx->err != 0) {
    std::string err = ctx->errstr;
    redisFree(ctx);
    free_ssl();
    return caf::make_error(ec::redis_unavailable, where + ": connect: " + err);
  }
  if (redisEnableKeepAliveWithInterval(ctx, keepalive_interval_s) != REDIS_OK) {
    std::string err = ctx->errstr;
    redisFree(ctx);
    free_ssl();
    return caf::make_error(ec::redis_unavailable, where + ": enabling TCP keepalive: " + err);
  }
  if (ssl != nullptr) {
    // The name the certificate must hold: redis.tls-server-name, else the
    // host dialled (for a Sentinel's answer: the address it gave).
    const std::string& name = cfg.tls_server_name.empty() ? at.host : cfg.tls_server_name;
    const bool ip = is_ip_address(name);
    SSL* s = SSL_new(ssl);
    if (s == nullptr) {
      redisFree(ctx);
      free_ssl();
      return caf::make_error(ec::redis_unavailable,
                             where + ": TLS setup: cannot create a session: " + openssl_reason());
    }
    if (!ip)
      SSL_set_tlsext_host_name(s, name.c_str()); // SNI
    if (cfg.tls_verify_hostname) {
      // OpenSSL's host check, done inside the handshake: a certificate for
      // another name fails it, like one from another CA.
      X509_VERIFY_PARAM* param = SSL_get0_param(s);
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (ip)
        X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
      else
        X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    }
    SSL_set_verify(s, SSL_VERIFY_PEER, verify_callback);
    mismatched_names.clear();
    if (redisInitiateSSL(ctx, s) != REDIS_OK) {
      // hiredis owns the session only once the handshake succeeded.
      std::string err = ctx->errstr;
      long verdict = SSL_get_verify_result(s);
      SSL_free(s);
      bool timeout = timed_out(ctx);
      redisFree(ctx);
      free_ssl();
      if (timeout)
        return caf::make_error(ec::redis_unavailable,
                               where + ": TLS handshake: timed out after "
                                 + std::to_string(cfg.command_timeout_ms) + " ms");
      if (verdict == X509_V_ERR_HOSTNAME_MISMATCH || verdict == X509_V_ERR_IP_ADDRESS_MISMATCH)
        return caf::make_error(
          ec::invalid_config,
          where + ": TLS handshake: the server's certificate is not valid for '" + name
            + "' (" + (cfg.tls_server_name.empty() ? "the host dialled; set redis.tls-server-name "
                                                     "to check another name"
                                                   : "redis.tls-server-name")
            + "): it holds " + (mismatched_names.empty() ? "other names" : mismatched_names)
            + " (redis.tls-verify-hostname=false skips this check: not recommended)");
      if (verdict != X509_V_OK)
        err += std::string{" ("} + X509_verify_cert_error_string(verdict) + ")";
      if (certificate_problem(err))
        return caf::make_error(ec::invalid_config,
                               where + ": TLS handshake: " + err
                                 + " (check redis.tls-ca-file, redis.tls-cert-file/"
                                   "redis.tls-key-file)");
      return caf::make_error(ec::redis_unavailable, where + ": TLS handshake: " + err);
    }
  }
  settings mine = cfg;
  mine.host = at.host;
  mine.port = at.port;
  std::unique_ptr<connection> conn{new connection(std::move(mine), where, ctx, ssl)};
  if (!password.empty()) {
    std::vector<std::string> argv{"AUTH"};
    if (!username.empty())
      argv.push_back(username);
    argv.push_back(password);
    auto r = conn->command(argv);
    if (!r) {
      // Never echo the password; name the user.  The server refusing the
      // credentials (WRONGPASS, no password set on the server, ...) is final;
      // no answer at all is an outage.
      auto code = r.error().code() == static_cast<uint8_t>(ec::redis_unavailable)
                    ? ec::redis_unavailable
                    : ec::invalid_config;
      return caf::make_error(code, where + ": AUTH failed for user '"
                                     + (username.empty() ? "default" : username) + "'"
                                     + (sentinel ? " (redis.sentinel-username / "
                                                   "redis.sentinel-password-file)"
                                                 : "")
                                     + ": " + describe(r.error()));
    }
  }
  return conn;
}

caf::expected<address> connection::ask_sentinels(const settings& cfg) {
  // Every Sentinel in order; the first that names the primary wins.  The
  // error lists each one's failure; it is final (invalid_config) only if
  // every Sentinel answered and refused (unknown name, credentials, ACL), so
  // an unreachable one that might know better keeps it transient.
  std::string failures;
  bool all_final = true;
  auto note = [&](const address& s, const std::string& why, bool final) {
    failures += (failures.empty() ? "" : "; ") + s.to_string() + ": " + why;
    all_final = all_final && final;
  };
  auto is_final = [](const caf::error& e) {
    return e.code() == static_cast<uint8_t>(ec::invalid_config);
  };
  for (auto& s : cfg.sentinels) {
    auto c = connect(cfg, s, peer::sentinel);
    if (!c) {
      note(s, describe(c.error()), is_final(c.error()));
      continue;
    }
    auto r = (*c)->command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", cfg.master_name});
    if (!r) {
      note(s, describe(r.error()), is_final(r.error()));
      continue;
    }
    auto* rep = r->get();
    if (rep->type == REDIS_REPLY_NIL) {
      note(s, "does not know a master named '" + cfg.master_name + "'", true);
      continue;
    }
    uint16_t port = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2
        && rep->element[0]->type == REDIS_REPLY_STRING
        && rep->element[1]->type == REDIS_REPLY_STRING) {
      std::string p{rep->element[1]->str, rep->element[1]->len};
      char* end = nullptr;
      long v = std::strtol(p.c_str(), &end, 10);
      if (!p.empty() && *end == '\0' && v > 0 && v <= 65535)
        port = static_cast<uint16_t>(v);
    }
    if (port == 0) {
      note(s, "unexpected reply to SENTINEL GET-MASTER-ADDR-BY-NAME", false);
      continue;
    }
    return address{std::string{rep->element[0]->str, rep->element[0]->len}, port};
  }
  return caf::make_error(all_final ? ec::invalid_config : ec::redis_unavailable,
                         "redis.sentinels: no Sentinel named the primary of '" + cfg.master_name
                           + "' (redis.master-name): " + failures);
}

caf::error connection::check_primary() {
  auto r = command({"ROLE"});
  if (!r)
    return r.error();
  auto* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0
      || rep->element[0]->type != REDIS_REPLY_STRING)
    return caf::make_error(ec::redis_reply, where() + ": unexpected reply to ROLE");
  std::string role{rep->element[0]->str, rep->element[0]->len};
  if (role == "master")
    return caf::none;
  return caf::make_error(ec::redis_unavailable,
                         where() + ": ROLE says '" + role
                           + "', not 'master' (a stale Sentinel answer or a failover in "
                             "progress): nothing is written there");
}

caf::expected<std::unique_ptr<connection>> connection::open_at(const settings& cfg,
                                                               const address& at) {
  return connect(cfg, at, peer::server);
}

caf::expected<std::unique_ptr<connection>> connection::open(const settings& cfg, resolve how) {
  if (cfg.sentinels.empty())
    return connect(cfg, address{cfg.host, cfg.port}, peer::server);
  std::optional<address> at;
  if (how == resolve::pinned && cfg.pin)
    at = cfg.pin->get();
  if (!at) {
    auto found = ask_sentinels(cfg);
    if (!found)
      return found.error();
    at = std::move(*found);
  }
  auto conn = connect(cfg, *at, peer::primary);
  if (!conn)
    return conn.error();
  if (auto err = (*conn)->check_primary())
    return err;
  if (cfg.pin && (how == resolve::fresh || !cfg.pin->get()))
    cfg.pin->set(*at);
  return conn;
}

caf::expected<reply_ptr> connection::command(const std::vector<std::string>& argv) {
  if (interrupted())
    return interrupted_error();
  std::vector<std::string_view> views(argv.begin(), argv.end());
  append(views);
  return read_reply(argv.empty() ? std::string_view{"a command"} : std::string_view{argv[0]});
}

void connection::append(const std::vector<std::string_view>& argv) {
  argv_.clear();
  lens_.clear();
  for (auto& a : argv) {
    argv_.push_back(a.data());
    lens_.push_back(a.size());
  }
  redisAppendCommandArgv(ctx_, static_cast<int>(argv_.size()), argv_.data(), lens_.data());
}

void connection::append_formatted(std::string_view resp) {
  redisAppendFormattedCommand(ctx_, resp.data(), resp.size());
}

caf::error connection::flush() {
  if (interrupted())
    return interrupted_error();
  sigpipe_guard guard;
  int done = 0;
  while (!done)
    if (redisBufferWrite(ctx_, &done) != REDIS_OK)
      return io_error("writing commands");
  return caf::none;
}

caf::error connection::write_formatted(std::string_view resp) {
  if (interrupted())
    return interrupted_error();
  // TLS writes go through its layer; queued commands must go first.
  if (ssl_ != nullptr || ctx_->err != 0 || sdslen(ctx_->obuf) != 0) {
    append_formatted(resp);
    return flush();
  }
  size_t done = 0;
  while (done < resp.size()) {
    // Blocking like hiredis' own writes (SO_SNDTIMEO: EAGAIN once the
    // command timeout passes); MSG_NOSIGNAL: a closed peer is EPIPE.
    auto n = ::send(fd_, resp.data() + done, resp.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR)
      continue;
    // As hiredis records a failed write: the context is unusable from here
    // on, and io_error tells a timeout from other failures.
    ctx_->err = REDIS_ERR_IO;
    std::snprintf(ctx_->errstr, sizeof(ctx_->errstr), "%s", std::strerror(errno));
    return io_error("writing commands");
  }
  return caf::none;
}

namespace {

/// True for an ACL denial: "NOPERM ..." as such, or wrapped by a script
/// error ("ERR Error running script ...: NOPERM ..." on Redis 6.2).
bool noperm(std::string_view text) {
  return text.rfind("NOPERM", 0) == 0 || text.find(": NOPERM") != std::string_view::npos;
}

caf::expected<reply_ptr> classify(const connection& c, std::string_view what, void* raw) {
  reply_ptr r{static_cast<redisReply*>(raw)};
  if (r->type == REDIS_REPLY_ERROR) {
    auto where = c.where();
    std::string_view text{r->str, r->len};
    if (noperm(text)) {
      // Redis says which: "... to access a key" / "... one of the keys" (key
      // patterns) or "... to run the '<cmd>' command".
      bool key = text.find("access a key") != std::string_view::npos
                 || text.find("access one of the keys") != std::string_view::npos;
      return caf::make_error(
        ec::invalid_config,
        where + ": the ACL denies " + std::string{what}
          + (key ? " a key outside the user's key patterns (they must cover projection.namespace "
                   "and projection.convs-prefix, see config/redis-acl.conf): "
                 : " (grant the command to the user, see config/redis-acl.conf): ")
          + std::string{text});
    }
    // The server wants a password and none was given: as final as a wrong
    // one (retrying cannot help; an operator must set redis.password-file).
    if (text.rfind("NOAUTH", 0) == 0)
      return caf::make_error(ec::invalid_config,
                             where + ": the server requires authentication and no password is "
                                     "configured (set "
                               + (where.rfind("sentinel ", 0) == 0
                                    ? "redis.sentinel-username / redis.sentinel-password-file"
                                    : "redis.username / redis.password-file")
                               + "): " + std::string{text});
    // A replica refusing a write, or one that lost its primary: after a
    // failover (transient: the restart resolves the new primary).
    if (text.rfind("READONLY", 0) == 0 || text.rfind("MASTERDOWN", 0) == 0)
      return caf::make_error(ec::redis_reply,
                             where + ": " + std::string{text}
                               + " (the server is not the primary now: a failover?)");
    return caf::make_error(ec::redis_reply, where + ": " + std::string{text});
  }
  return r;
}

/// Size of the fast path's input buffer (one read(2) at most).
constexpr size_t input_capacity = 64 * 1024;

} // namespace

void connection::set_lowat(int bytes) {
  if (bytes == lowat_)
    return;
  // Best effort: without it the waits below only wake up more often.
  if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) == 0)
    lowat_ = bytes;
}

void connection::hand_over_input() {
  set_lowat(1); // hiredis reads blocking: never wait for more than a reply

  if (in_end_ > in_begin_) {
    // Cannot fail but on an out-of-memory; hiredis then reports it on read.
    redisReaderFeed(ctx_->reader, in_.get() + in_begin_, in_end_ - in_begin_);
    hiredis_input_ = true;
  }
  in_begin_ = in_end_ = 0;
}

caf::expected<reply_ptr> connection::read_reply(std::string_view what) {
  if (interrupted())
    return interrupted_error();
  hand_over_input();
  sigpipe_guard guard; // redisGetReply first writes what is still queued
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr)
    return io_error("reading a reply");
  hiredis_input_ = ctx_->reader->pos < ctx_->reader->len;
  return classify(*this, what, raw);
}

caf::expected<reply_ptr> connection::poll_reply(int timeout_ms, std::string_view what) {
  if (interrupted())
    return interrupted_error();
  if (ssl_ != nullptr || timeout_ms < 0)
    return read_reply(what);
  hand_over_input();
  hiredis_input_ = true; // until a whole reply came back and nothing is left
  void* raw = nullptr;
  auto done = [&] {
    hiredis_input_ = ctx_->reader->pos < ctx_->reader->len;
    return classify(*this, what, raw);
  };
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK)
    return io_error("parsing a reply");
  if (raw != nullptr)
    return done();
  auto readable = wait_readable(timeout_ms);
  if (!readable)
    return readable.error();
  if (!*readable)
    return reply_ptr{};
  // Readable (or hung up): one read(2), which does not block now.
  if (redisBufferRead(ctx_) != REDIS_OK)
    return io_error("reading a reply");
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK)
    return io_error("parsing a reply");
  if (raw == nullptr)
    return reply_ptr{};
  return done();
}

size_t connection::take_buffered_integers(size_t max, bool& other) {
  // ":" [ "-" ] digits CRLF, as Redis writes integer replies.  Anything else
  // is left for hiredis, which parses (or rejects) it as it always did.
  const char* const buf = in_.get();
  size_t taken = 0;
  size_t at = in_begin_;
  while (taken < max && at < in_end_) {
    if (buf[at] != ':') {
      other = true;
      break;
    }
    size_t i = at + 1;
    if (i < in_end_ && buf[i] == '-')
      ++i;
    const size_t digits = i;
    while (i < in_end_ && buf[i] >= '0' && buf[i] <= '9')
      ++i;
    if (i + 1 >= in_end_) {
      // Incomplete so far (or too long ever to be an integer reply).
      other = in_end_ - at >= 32;
      break;
    }
    if (i == digits || buf[i] != '\r' || buf[i + 1] != '\n') {
      other = true;
      break;
    }
    at = i + 2;
    ++taken;
  }
  in_begin_ = at;
  if (in_begin_ == in_end_)
    in_begin_ = in_end_ = 0;
  return taken;
}

caf::expected<connection::integer_replies> connection::take_integer_replies(size_t max,
                                                                             int timeout_ms) {
  if (interrupted())
    return interrupted_error();
  integer_replies out;
  if (hiredis_input_) {
    out.other = true;
    return out;
  }
  if (!in_)
    in_.reset(new char[input_capacity]);
  out.taken = take_buffered_integers(max, out.other);
  if (out.taken > 0 || out.other) {
    if (out.other)
      hand_over_input();
    return out;
  }
  // Nothing complete: read once, waiting at most timeout_ms.
  if (ssl_ == nullptr) {
    // Each awaited reply is at least 4 bytes (":0\r\n"): wake up once they
    // can all be in, not for every segment Redis writes (one wake-up per
    // batch instead of dozens).  An error reply is longer, and a closed
    // connection wakes poll(2) anyway.
    const size_t have = in_end_ - in_begin_;
    const size_t total = std::min(4 * max, input_capacity);
    set_lowat(static_cast<int>(total > have ? total - have : 1));
    auto readable = wait_readable(timeout_ms);
    if (!readable)
      return readable.error();
    if (!*readable)
      return out;
  }
  if (in_begin_ > 0) {
    std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  // hiredis' own read function: TLS or not, errors and EOF set on the
  // context as for any of its reads (io_error names them).
  auto nread = ctx_->funcs->read(ctx_, in_.get() + in_end_, input_capacity - in_end_);
  if (nread < 0)
    return io_error("reading a reply");
  in_end_ += static_cast<size_t>(nread);
  out.taken = take_buffered_integers(max, out.other);
  if (out.other)
    hand_over_input();
  return out;
}

} // namespace qsp::redis
