// The audit's replay model and diff (the `audit` subcommand, app/audit.cpp):
// the dispatch log replayed into user -> conversation -> max created_at, and
// one user's session set compared with it.  Pure: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/dispatch.hpp"

namespace qsp::core {

/// user -> conversation -> max created_at.  Conversation ids are interned in
/// `convs` (node-based: the pointers stay valid), so each distinct id is
/// stored once however many users share it; per (user, conversation) pair the
/// model costs a pointer, a score and the hash node (~50 bytes).
struct replay_model {
  std::unordered_set<std::string> convs;
  std::unordered_map<std::string, std::unordered_map<const std::string*, int64_t>> users;
  uint64_t entries = 0;

  void apply(const core::dispatch& d) {
    if (d.recipients.empty())
      return;
    const std::string* conv = &*convs.insert(d.conversation_id).first;
    for (auto& u : d.recipients) {
      auto [i, added] = users[u].try_emplace(conv, d.created_at);
      if (added)
        ++entries;
      else if (i->second < d.created_at)
        i->second = d.created_at;
    }
  }

  /// Rough size of the model in bytes (for the operator, not exact).
  uint64_t approx_bytes() const {
    uint64_t b = entries * 48;
    for (auto& c : convs)
      b += 48 + c.capacity();
    for (auto& [u, m] : users)
      b += 80 + u.capacity() + m.bucket_count() * 8;
    return b;
  }
};

/// What the diff found, with a few samples per kind.
struct audit_findings {
  uint64_t users_checked = 0, entries_checked = 0, members_read = 0;
  uint64_t missing = 0, stale = 0, unknown = 0, ahead = 0, unreadable_keys = 0;
  std::vector<std::string> missing_samples, stale_samples, unknown_samples, ahead_samples,
    unreadable_samples;

  static constexpr size_t max_samples = 10;
  static void sample(std::vector<std::string>& v, std::string line) {
    if (v.size() < max_samples)
      v.push_back(std::move(line));
  }
};

/// `s` in double quotes, with quotes, backslashes and control bytes escaped.
std::string quoted(std::string_view s);

/// Compares one user's session set (`members`: name and score as Redis
/// returned them, from ZRANGE ... WITHSCORES) with the model's entries for
/// the user: counts and samples missing, stale (lower score), ahead (higher)
/// and unknown members.
void diff_user(const std::string& user, const std::string& key,
               const std::unordered_map<const std::string*, int64_t>& expected,
               const replay_model& m,
               const std::vector<std::pair<std::string_view, std::string_view>>& members,
               audit_findings& f);

} // namespace qsp::core
