// The one place where CAF 0.17 (Debian 12's package) and CAF 1.x differ for
// the projection, its test kit and a host that embeds them.  The code is
// written in CAF 1.1's terms; on 0.17 this header maps those terms onto the
// old API.  Nothing else in the project tests the CAF version.
//
//   qsp::typed_actor<caf::result<T>(Args...)...>   a typed interface
//   qsp::extend_t<Base, caf::result<T>(Args...)...> one that adds to Base
//   qsp::mail(self, xs...).send(dst)              what 1.1 writes
//   qsp::mail(self, xs...).delay(d).send(dst)       self->mail(xs...)...
//   qsp::mail(self, xs...).request(dst, t).then(...)
//   qsp::mail(self, xs...).delegate(dst)
//   qsp::anon_mail(xs...).send(dst)                 caf::anon_mail(xs...)...
//   qsp::down_watch                                 monitors with one down handler
//   qsp::with_exit_handler(self, on_exit, fs...)    a behavior that traps exits
//
// A host may use them too: they are how the examples and EMBEDDING.md are
// written for both versions.
#pragma once

#include <chrono>
#include <fstream>
#include <functional>
#include <istream>
#include <sstream>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>
#include <tuple>
#include <type_traits>
#include <utility>

#include "caf/actor_addr.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/config.hpp"
#include "caf/error.hpp"
#include "caf/exit_reason.hpp"
#include "caf/fwd.hpp"
#include "caf/type_id.hpp"
#include "caf/result.hpp"
#include "caf/send.hpp"
#include "caf/typed_actor.hpp"

#if CAF_MAJOR_VERSION >= 1
#  include "caf/anon_mail.hpp"
#  include "caf/is_error_code_enum.hpp"
#  include "caf/init_global_meta_objects.hpp"
#  include "caf/disposable.hpp"
#  include "caf/default_enum_inspect.hpp"
#  include "caf/message.hpp"
#else
#  include "caf/atom.hpp"
#  include "caf/make_message.hpp"
#  include "caf/meta/type_name.hpp"
#  include "caf/replies_to.hpp"
#endif

/// CAF_ERROR_CODE_ENUM: 0.17 takes the category's name, 1.x the enum's
/// type ID (add it to a type-ID block) and to_string/from_string/from_integer.
/// QSP_ENUM_INSPECT(E), in E's namespace: 1.x inspects an enum with a type
/// ID by name (to_string/from_string/from_integer), 0.17 by its number.
#if CAF_MAJOR_VERSION >= 1
#  define QSP_ERROR_CODE_ENUM(type, name) CAF_ERROR_CODE_ENUM(type)
#  define QSP_ENUM_INSPECT(type)                                                               \
    template <class Inspector>                                                                 \
    bool inspect(Inspector& f, type& x) {                                                      \
      return caf::default_enum_inspect(f, x);                                                  \
    }
#else
#  define QSP_ERROR_CODE_ENUM(type, name) CAF_ERROR_CODE_ENUM(type, name)
#  define QSP_ENUM_INSPECT(type)
#endif

namespace qsp {

/// The CAF major.minor this translation unit sees (e.g. 1.1 -> 101, 0.17 -> 17).
inline constexpr int caf_version = CAF_MAJOR_VERSION * 100 + CAF_MINOR_VERSION;

#if CAF_MAJOR_VERSION >= 1

template <class... Sigs>
using typed_actor = caf::typed_actor<Sigs...>;

template <class Base, class... Sigs>
using extend_t = typename Base::template extend<Sigs...>;

template <class Self, class... Ts>
auto mail(Self&& self, Ts&&... xs) {
  return self->mail(std::forward<Ts>(xs)...);
}

template <class... Ts>
auto anon_mail(Ts&&... xs) {
  return caf::anon_mail(std::forward<Ts>(xs)...);
}

#else // CAF 0.17

namespace detail {

template <class Sig>
struct old_signature;

template <class R, class... Args>
struct old_signature<caf::result<R>(Args...)> {
  using type = typename caf::replies_to<Args...>::template with<R>;
};

template <class... Args>
struct old_signature<caf::result<void>(Args...)> {
  using type = caf::reacts_to<Args...>;
};

/// 1.1's mail builder over 0.17's send/delayed_send/request.
template <class Ptr, class... Ts>
class mail_017 {
public:
  mail_017(Ptr self, Ts... xs) : self_(self), xs_(std::move(xs)...) {}

  [[nodiscard]] mail_017 delay(caf::timespan d) && {
    delay_ = d;
    delayed_ = true;
    return std::move(*this);
  }

  template <class Handle>
  void send(const Handle& dst) && {
    std::apply(
      [&](auto&... xs) {
        if (delayed_)
          self_->delayed_send(dst, delay_, std::move(xs)...);
        else
          self_->send(dst, std::move(xs)...);
      },
      xs_);
  }

  template <class Handle>
  auto delegate(const Handle& dst) && {
    return std::apply([&](auto&... xs) { return self_->delegate(dst, std::move(xs)...); }, xs_);
  }

  template <class Handle, class Timeout>
  auto request(const Handle& dst, Timeout timeout) && {
    return std::apply(
      [&](auto&... xs) { return self_->request(dst, timeout, std::move(xs)...); }, xs_);
  }

private:
  Ptr self_;
  std::tuple<Ts...> xs_;
  caf::timespan delay_{};
  bool delayed_ = false;
};

template <class... Ts>
class anon_mail_017 {
public:
  explicit anon_mail_017(Ts... xs) : xs_(std::move(xs)...) {}

  [[nodiscard]] anon_mail_017 delay(caf::timespan d) && {
    delay_ = d;
    delayed_ = true;
    return std::move(*this);
  }

  template <class Handle>
  void send(const Handle& dst) && {
    std::apply(
      [&](auto&... xs) {
        if (delayed_)
          caf::delayed_anon_send(dst, delay_, std::move(xs)...);
        else
          caf::anon_send(dst, std::move(xs)...);
      },
      xs_);
  }

private:
  std::tuple<Ts...> xs_;
  caf::timespan delay_{};
  bool delayed_ = false;
};

} // namespace detail

template <class... Sigs>
using typed_actor = caf::typed_actor<typename detail::old_signature<Sigs>::type...>;

template <class Base, class... Sigs>
using extend_t = typename Base::template extend<typename detail::old_signature<Sigs>::type...>;

template <class Self, class... Ts>
auto mail(Self&& self, Ts&&... xs) {
  auto* ptr = &*self;
  return detail::mail_017<decltype(ptr), std::decay_t<Ts>...>{ptr, std::forward<Ts>(xs)...};
}

template <class... Ts>
auto anon_mail(Ts&&... xs) {
  return detail::anon_mail_017<std::decay_t<Ts>...>{std::forward<Ts>(xs)...};
}

#endif

/// The state of a stateful actor (0.17: the member `state`; 1.x: state()).
template <class Self>
auto& state_of(Self* self) {
#if CAF_MAJOR_VERSION >= 1
  return self->state();
#else
  return self->state;
#endif
}

/// One field of an inspected type: QSP_FIELD(x, member).
template <class T>
struct field_ref {
  const char* name;
  T* value;
};

template <class T>
field_ref<T> field(const char* name, T& value) {
  return {name, &value};
}

#define QSP_FIELD(x, member) ::qsp::field(#member, (x).member)

/// The body of an inspect overload: `return inspect_object(f, x, "qsp.t",
/// QSP_FIELD(x, a), ...);` (1.x: f.object(x).fields(...) by name; 0.17: the
/// fields in order after the type name).
template <class Inspector, class T, class... Fs>
auto inspect_object(Inspector& f, T& x, const char* type_name, field_ref<Fs>... fields) {
#if CAF_MAJOR_VERSION >= 1
  (void) type_name;
  return f.object(x).fields(f.field(fields.name, *fields.value)...);
#else
  (void) x;
  return f(caf::meta::type_name(type_name), *fields.value...);
#endif
}

#if CAF_MAJOR_VERSION >= 1
/// CAF 1.x keeps the meta objects in one process-wide table and grows it
/// without a lock: two threads registering a new block at once free the
/// same array twice.  add_type_blocks takes this lock around CAF's calls.
inline std::mutex& meta_objects_mutex() {
  static std::mutex mtx;
  return mtx;
}
#endif

/// Registers type-ID blocks: 0.17 adds them to the configuration, 1.x to
/// the process (once is enough; again is harmless).  Before the system exists.
/// Safe from several threads at once (each with its own configuration); on
/// 1.x a block that is new to the process must not be added while another
/// thread's actor system is running, since growing the table moves it.
template <class... Blocks>
void add_type_blocks(caf::actor_system_config& cfg) {
#if CAF_MAJOR_VERSION >= 1
  (void) cfg;
  std::lock_guard<std::mutex> guard{meta_objects_mutex()};
  caf::core::init_global_meta_objects();
  (caf::init_global_meta_objects<Blocks>(), ...);
#else
  (cfg.add_message_types<Blocks>(), ...);
#endif
}

/// Renders errors of `Enum` by `render(code, context)` (0.17: instead of
/// "error(12, 'qsp', ...)"; 1.x renders them by the enum's to_string).
template <class Enum, class Render>
void add_error_renderer(caf::actor_system_config& cfg, Render render) {
#if CAF_MAJOR_VERSION >= 1
  (void) cfg;
  (void) render;
#else
  cfg.add_error_category(caf::detail::error_factory<Enum>::category,
                         [render](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           return render(code, ctx);
                         });
#endif
}

/// Sets one of CAF's own options, named as 0.17 names it ("scheduler.policy");
/// 1.x puts them under "caf." and takes strings where 0.17 took atoms.
template <size_t N>
void set_caf_option(caf::actor_system_config& cfg, const std::string& key,
                    const char (&value)[N]) {
#if CAF_MAJOR_VERSION >= 1
  cfg.set("caf." + key, std::string{value});
#else
  cfg.set(key, caf::atom(value));
#endif
}

/// A command-line argument for CAF's own options as 0.17 names them
/// (--scheduler.policy=sharing): 1.x expects them under "caf."; anything
/// else is returned as is.
/// 0.17 also reads a value in double quotes as the string inside them
/// (--http.listen=""), which 1.x would take verbatim: the quotes go.
inline std::string caf_cli_arg(const std::string& arg) {
#if CAF_MAJOR_VERSION >= 1
  auto result = arg;
  if (auto eq = result.find('='); result.rfind("--", 0) == 0 && eq != std::string::npos
                                  && result.size() > eq + 3 && result[eq + 1] == '"'
                                  && result.back() == '"')
    result = result.substr(0, eq + 1) + result.substr(eq + 2, result.size() - eq - 3);
  for (const char* group : {"--scheduler.", "--logger.", "--work-stealing.", "--stream."})
    if (result.rfind(group, 0) == 0)
      return "--caf." + result.substr(2);
  return result;
#else
  return arg;
#endif
}

/// A configuration file in 0.17's INI form ([group] and key=value lines,
/// ';' comments) in 1.x's syntax (group { key = value }); values are the
/// same literals in both.
inline std::string ini_to_caf_config(std::istream& in) {
  std::string out;
  bool open = false;
  for (std::string line; std::getline(in, line);) {
    auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == ';' || line[b] == '#')
      continue;
    auto e = line.find_last_not_of(" \t\r");
    auto text = line.substr(b, e - b + 1);
    if (text.front() == '[' && text.back() == ']') {
      if (open)
        out += "}\n";
      out += text.substr(1, text.size() - 2) + " {\n";
      open = true;
    } else {
      out += text + "\n";
    }
  }
  if (open)
    out += "}\n";
  return out;
}

/// Parses the command line (`args`: argv[0] first) and the configuration
/// file it names with --config-file=PATH, written in 0.17's INI form on
/// either version (1.x's own syntax differs).
inline caf::error parse_config(caf::actor_system_config& cfg, std::vector<char*> args) {
#if CAF_MAJOR_VERSION >= 1
  std::string file;
  std::vector<std::string> rest;
  std::vector<std::string> program;
  if (!args.empty()) {
    program.emplace_back(args.front());
    args.erase(args.begin());
  }
  // An empty value (--http.listen="") 1.x's command line cannot take: it
  // goes into the configuration text instead, after the file's lines.
  std::string empties;
  for (auto* a : args) {
    std::string x{a};
    auto eq = x.find('=');
    if (x.rfind("--config-file=", 0) == 0)
      file = caf_cli_arg(x).substr(14);
    else if (x.rfind("--", 0) == 0 && eq != std::string::npos && x.substr(eq + 1) == "\"\"")
      empties += x.substr(2, eq - 2) + " = \"\"\n";
    else
      rest.push_back(std::move(x));
  }
  // (argv[0] as the program name, as parse(argc, argv) takes it.)
  std::vector<char*> argv;
  for (auto& x : program)
    argv.push_back(x.data());
  for (auto& x : rest)
    argv.push_back(x.data());
  auto argc = static_cast<int>(argv.size());
  if (file.empty() && empties.empty())
    return cfg.parse(argc, argv.data());
  std::string text;
  if (!file.empty()) {
    std::ifstream in{file};
    if (!in)
      return caf::make_error(caf::sec::cannot_open_file, "cannot open config file " + file);
    text = ini_to_caf_config(in);
  }
  std::istringstream conf{text + empties};
  return cfg.parse(argc, argv.data(), conf);
#else
  return cfg.parse(static_cast<int>(args.size()), args.data());
#endif
}

/// The command-line arguments CAF did not take (0.17: a member, 1.x: a function).
inline std::vector<std::string> remainder_of(const caf::actor_system_config& cfg) {
#if CAF_MAJOR_VERSION >= 1
  auto xs = cfg.remainder();
  return {xs.begin(), xs.end()};
#else
  return cfg.remainder;
#endif
}

/// An error as CAF renders it: 0.17 by the renderer registered for its
/// category (add_error_renderer), 1.x by its code enum's to_string.
inline std::string render_error(caf::actor_system& sys, const caf::error& err) {
#if CAF_MAJOR_VERSION >= 1
  (void) sys;
  return caf::to_string(err);
#else
  return sys.render(err);
#endif
}

/// The string view CAF's own functions take (0.17 has its own type).
#if CAF_MAJOR_VERSION >= 1
using caf_string_view = std::string_view;
#else
using caf_string_view = caf::string_view;
#endif

/// True if `x` is an error of the code enum `Enum` (0.17 names an error's
/// category by an atom, 1.x by the enum's type ID).
template <class Enum>
bool in_category(const caf::error& x) {
  // (CAF 0.17: category() of an empty error dereferences null.)
  if (!x)
    return false;
#if CAF_MAJOR_VERSION >= 1
  return x.category() == caf::type_id_v<Enum>;
#else
  return x.category() == caf::detail::error_factory<Enum>::category;
#endif
}

/// The monitors of one actor and the one handler their down events go to
/// (1.1 monitors with a callback each; 0.17 has one down handler per actor).
/// Keep it in the actor's state; install the handler once, before the first
/// monitor.  The handler gets the address of the actor that ended and why.
class down_watch {
public:
  using handler = std::function<void(const caf::actor_addr&, const caf::error&)>;

  template <class Self>
  void on_down(Self* self, handler f) {
    fn_ = std::make_shared<handler>(std::move(f));
#if CAF_MAJOR_VERSION < 1
    auto fn = fn_;
    self->set_down_handler([fn](caf::down_msg& msg) { (*fn)(msg.source, msg.reason); });
#else
    (void) self;
#endif
  }

  template <class Self, class Handle>
  void monitor(Self* self, const Handle& whom) {
#if CAF_MAJOR_VERSION >= 1
    auto addr = whom.address();
    auto& slot = watched_[addr];
    slot.dispose();
    // Runs in `self`'s context while it lives, so `this` (in its state) does.
    slot = self->monitor(whom, [this, addr](const caf::error& reason) {
      auto fn = fn_;
      watched_.erase(addr);
      if (fn && *fn)
        (*fn)(addr, reason);
    });
#else
    self->monitor(whom);
#endif
  }

  template <class Self>
  void demonitor(Self* self, const caf::actor_addr& whom) {
#if CAF_MAJOR_VERSION >= 1
    (void) self;
    auto i = watched_.find(whom);
    if (i != watched_.end()) {
      i->second.dispose();
      watched_.erase(i);
    }
#else
    self->demonitor(whom);
#endif
  }

private:
  std::shared_ptr<handler> fn_;
#if CAF_MAJOR_VERSION >= 1
  std::map<caf::actor_addr, caf::disposable> watched_;
#endif
};

/// The behavior `fs...`, with exit messages going to `on_exit` instead of
/// CAF's default (which ends the actor on any non-normal reason).
template <class Behavior, class Self, class OnExit, class... Fs>
Behavior with_exit_handler(Self* self, OnExit on_exit, Fs... fs) {
#if CAF_MAJOR_VERSION >= 1
  (void) self;
  return Behavior{std::move(fs)..., [on_exit](caf::exit_msg& msg) { on_exit(msg); }};
#else
  self->set_exit_handler([on_exit](caf::exit_msg& msg) { on_exit(msg); });
  return Behavior{std::move(fs)...};
#endif
}

} // namespace qsp
