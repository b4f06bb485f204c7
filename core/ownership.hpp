// This node's side of docs/DESIGN.md §12: which partitions it owns, the epoch of
// each claim, and what a report about one of them means.  Pure and
// single-threaded: the supervisor asks it and decides dirty, refused or
// ready from the answers (the rules used to be spread through the
// supervisor, and three bugs came from that).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace qsp::core {

class ownership {
public:
  /// `clustered`: owner records are kept (every mode but `all`); `fixed`:
  /// the set never changes (`all`, `static`), so a partition that moved
  /// away is a configuration error, not a handover.
  ownership(bool clustered, bool fixed) : clustered_(clustered), fixed_(fixed) {}

  bool clustered() const { return clustered_; }
  const std::set<int32_t>& owned() const { return owned_; }
  bool owns(int32_t p) const { return owned_.count(p) > 0; }
  /// The epoch of this node's claim on `p`, if it holds one (never inserts).
  std::optional<uint64_t> epoch(int32_t p) const;
  /// Every claim held: partition -> epoch (a subset of owned()).
  const std::map<int32_t, uint64_t>& epochs() const { return epochs_; }

  /// Adds partitions (the start set, or an assign); answers the new ones.
  std::vector<int32_t> assign(const std::vector<int32_t>& parts);

  struct released {
    std::vector<int32_t> dropped;          ///< were owned, are not any more
    std::map<int32_t, uint64_t> claims;    ///< of those, the ones claimed (their statuses go)
  };
  /// Removes partitions (a revoke), with their claims.
  released revoke(const std::vector<int32_t>& parts);

  /// A claim a verification made or confirmed: recorded only while `p` is
  /// still owned (a revoke may have raced the verification), and never
  /// replaced by an older epoch.
  void claimed(int32_t p, uint64_t epoch);

  /// What a heartbeat said of the claim (p, epoch) it tried to publish.
  enum class report { stale, moved, lost };
  /// stale: this node no longer holds that claim (the partition was revoked,
  /// or re-claimed with another epoch since the heartbeat started): ignore
  /// it.  Otherwise `moved` or `lost`, as the store found it.
  report judge_report(int32_t p, uint64_t epoch, bool moved) const;

  /// `p` moved to another node.  A fixed set must refuse (true: two
  /// nodes list it, or a cluster owns the namespace); a changing set gives
  /// the partition up (false) and the group or host assigns it elsewhere.
  bool moved_away(int32_t p);

  // A lost claim (check_owner's `lost`) is kept as it is: the next
  // verification re-claims above it and above every epoch it sees.

private:
  bool clustered_;
  bool fixed_;
  std::set<int32_t> owned_;
  std::map<int32_t, uint64_t> epochs_;
};

} // namespace qsp::core
