#include "core/replay.hpp"

#include <cstdio>
#include <cstdlib>

namespace qsp::core {

std::string quoted(std::string_view s) {
  std::string out{"\""};
  for (char c : s) {
    if (c == '"' || c == '\\')
      out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

namespace {

struct redis_member {
  std::string_view name;
  std::string_view raw_score;
  double score = 0;
};

} // namespace

void diff_user(const std::string& user, const std::string& key,
               const std::unordered_map<const std::string*, int64_t>& expected,
               const replay_model& m,
               const std::vector<std::pair<std::string_view, std::string_view>>& members,
               audit_findings& f) {
  f.users_checked += 1;
  f.entries_checked += expected.size();
  std::vector<redis_member> got;
  got.reserve(members.size());
  for (auto& [name, raw] : members) {
    redis_member rm{name, raw};
    rm.score = std::strtod(std::string{rm.raw_score}.c_str(), nullptr);
    got.push_back(rm);
  }
  f.members_read += got.size();
  size_t matched = 0;
  std::string name;
  for (auto& rm : got) {
    name.assign(rm.name);
    auto c = m.convs.find(name);
    auto e = c != m.convs.end() ? expected.find(&*c) : expected.end();
    if (e == expected.end()) {
      ++f.unknown;
      audit_findings::sample(f.unknown_samples, "user " + quoted(user) + " member " + quoted(rm.name)
                                            + " score " + std::string{rm.raw_score}
                                            + " (key " + quoted(key) + ")");
      continue;
    }
    ++matched;
    auto want = static_cast<double>(e->second);
    if (rm.score < want) {
      ++f.stale;
      audit_findings::sample(f.stale_samples, "user " + quoted(user) + " conversation "
                                          + quoted(rm.name) + ": redis "
                                          + std::string{rm.raw_score} + " < log "
                                          + std::to_string(e->second));
    } else if (rm.score > want) {
      ++f.ahead;
      audit_findings::sample(f.ahead_samples, "user " + quoted(user) + " conversation "
                                          + quoted(rm.name) + ": redis "
                                          + std::string{rm.raw_score} + " > log "
                                          + std::to_string(e->second));
    }
  }
  if (matched == expected.size())
    return;
  std::unordered_set<std::string_view> present;
  for (auto& rm : got)
    present.insert(rm.name);
  for (auto& [conv, score] : expected)
    if (!present.count(*conv)) {
      ++f.missing;
      audit_findings::sample(f.missing_samples, "user " + quoted(user) + " conversation "
                                            + quoted(*conv) + ": absent, log has "
                                            + std::to_string(score) + " (key " + quoted(key)
                                            + ")");
    }
}

} // namespace qsp::core
