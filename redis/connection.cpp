#include "redis/connection.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstring>

#include <hiredis/hiredis_ssl.h>

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

} // namespace

connection::connection(settings cfg, redisContext* ctx, void* ssl)
  : cfg_(std::move(cfg)), ctx_(ctx), ssl_(ssl) {}

connection::~connection() {
  if (ctx_ != nullptr)
    redisFree(ctx_);
  if (ssl_ != nullptr)
    redisFreeSSLContext(static_cast<redisSSLContext*>(ssl_));
}

std::string connection::where() const {
  return "redis " + cfg_.host + ":" + std::to_string(cfg_.port);
}

caf::error connection::io_error(const std::string& what) const {
  std::string detail = ctx_ != nullptr && ctx_->err != 0 ? ctx_->errstr : "connection lost";
  return caf::make_error(ec::redis_unavailable, where() + ": " + what + ": " + detail);
}

caf::expected<std::unique_ptr<connection>> connection::open(const settings& cfg) {
  redisOptions opts{};
  REDIS_OPTIONS_SET_TCP(&opts, cfg.host.c_str(), static_cast<int>(cfg.port));
  auto ct = to_timeval(cfg.connect_timeout_ms);
  auto cmdt = to_timeval(cfg.command_timeout_ms);
  opts.connect_timeout = &ct;
  opts.command_timeout = &cmdt;
  auto where = "redis " + cfg.host + ":" + std::to_string(cfg.port);
  redisContext* ctx = redisConnectWithOptions(&opts);
  if (ctx == nullptr)
    return caf::make_error(ec::redis_unavailable, where + ": cannot allocate a context");
  if (ctx->err != 0) {
    std::string err = ctx->errstr;
    redisFree(ctx);
    return caf::make_error(ec::redis_unavailable, where + ": connect: " + err);
  }
  redisSSLContext* ssl = nullptr;
  if (cfg.tls) {
    static const bool ssl_init = [] { return redisInitOpenSSL() == REDIS_OK; }();
    (void) ssl_init;
    redisSSLContextError ssl_err = REDIS_SSL_CTX_NONE;
    auto opt = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
    ssl = redisCreateSSLContext(opt(cfg.tls_ca_file), nullptr, opt(cfg.tls_cert_file),
                                opt(cfg.tls_key_file), opt(cfg.tls_server_name), &ssl_err);
    if (ssl == nullptr) {
      redisFree(ctx);
      return caf::make_error(ec::redis_unavailable,
                             where + ": TLS setup: " + redisSSLContextGetError(ssl_err));
    }
    if (redisInitiateSSLWithContext(ctx, ssl) != REDIS_OK) {
      std::string err = ctx->errstr;
      redisFree(ctx);
      redisFreeSSLContext(ssl);
      return caf::make_error(ec::redis_unavailable, where + ": TLS handshake: " + err);
    }
  }
  std::unique_ptr<connection> conn{new connection(cfg, ctx, ssl)};
  if (!cfg.password.empty()) {
    std::vector<std::string> argv{"AUTH"};
    if (!cfg.username.empty())
      argv.push_back(cfg.username);
    argv.push_back(cfg.password);
    auto r = conn->command(argv);
    if (!r) {
      // Never echo the password; name the user.
      return caf::make_error(ec::redis_unavailable,
                             where + ": AUTH failed for user '"
                               + (cfg.username.empty() ? "default" : cfg.username)
                               + "': " + describe(r.error()));
    }
  }
  return conn;
}

caf::expected<reply_ptr> connection::command(const std::vector<std::string>& argv) {
  std::vector<std::string_view> views(argv.begin(), argv.end());
  append(views);
  return read_reply();
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
  sigpipe_guard guard;
  int done = 0;
  while (!done)
    if (redisBufferWrite(ctx_, &done) != REDIS_OK)
      return io_error("writing commands");
  return caf::none;
}

namespace {

caf::expected<reply_ptr> classify(const std::string& where, void* raw) {
  reply_ptr r{static_cast<redisReply*>(raw)};
  if (r->type == REDIS_REPLY_ERROR)
    return caf::make_error(ec::redis_reply, where + ": " + std::string{r->str, r->len});
  return r;
}

} // namespace

caf::expected<reply_ptr> connection::read_reply() {
  sigpipe_guard guard; // redisGetReply first writes what is still queued
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr)
    return io_error("reading a reply");
  return classify(where(), raw);
}

caf::expected<reply_ptr> connection::poll_reply(int timeout_ms) {
  if (ssl_ != nullptr || timeout_ms < 0)
    return read_reply();
  void* raw = nullptr;
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK)
    return io_error("parsing a reply");
  if (raw != nullptr)
    return classify(where(), raw);
  pollfd pfd{ctx_->fd, POLLIN, 0};
  int n = ::poll(&pfd, 1, timeout_ms);
  if (n < 0 && errno != EINTR)
    return caf::make_error(ec::redis_unavailable,
                           where() + ": waiting for a reply: " + std::strerror(errno));
  if (n <= 0)
    return reply_ptr{};
  // Readable (or hung up): one read(2), which does not block now.
  if (redisBufferRead(ctx_) != REDIS_OK)
    return io_error("reading a reply");
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK)
    return io_error("parsing a reply");
  if (raw == nullptr)
    return reply_ptr{};
  return classify(where(), raw);
}

} // namespace qsp::redis
