// The engine's event journal and its invariant checker (testkit/engine.hpp
// lists the invariants): what the projection did, in order, and the checks
// run after every job or tick.
#include "testkit/engine.hpp"

#include <algorithm>
#include <cstdio>

namespace qsp::test {

// -- the journal -------------------------------------------------------------------

void engine::note(const std::string& what) {
  char stamp[32];
  auto ms = std::chrono::duration_cast<std::chrono::microseconds>(
              rt.now().time_since_epoch() - std::chrono::hours(1))
              .count();
  std::snprintf(stamp, sizeof stamp, "[%9.3f ms] ", static_cast<double>(ms) / 1000.0);
  journal_.push_back(stamp + what);
  for (unsigned char c : journal_.back())
    digest = (digest ^ c) * 1099511628211ull;
  if (journal_.size() > 5000)
    journal_.pop_front();
}

std::vector<std::string> engine::last_events(size_t n) const {
  auto from = journal_.size() > n ? journal_.size() - n : 0;
  return {journal_.begin() + static_cast<std::ptrdiff_t>(from), journal_.end()};
}

void engine::journal_world_events() {
  for (; events_journaled_ < world->events.size(); ++events_journaled_) {
    auto& e = world->events[events_journaled_];
    auto p = " partition " + std::to_string(e.partition);
    switch (e.what) {
      case fake_event::kind::fetched:
        if (polled_.count(e.partition) == 0 || e.offset > polled_[e.partition])
          note("fetched" + p + " up to " + std::to_string(e.offset));
        break;
      case fake_event::kind::assigned:
        note(e.partition < 0 ? std::string{"consumer assigned"}
                             : "assigned" + p + " from " + std::to_string(e.offset));
        break;
      case fake_event::kind::checkpoint:
        note("checkpoint" + p + " written: " + std::to_string(e.offset));
        break;
      case fake_event::kind::identity_start:
        note("identity read #" + std::to_string(e.offset) + " started");
        break;
      case fake_event::kind::identity:
        note("identity read #" + std::to_string(e.offset) + " answered");
        break;
      case fake_event::kind::identity_failed:
        note("identity read #" + std::to_string(e.offset) + " failed");
        break;
    }
  }
  for (; statuses_journaled_ < seen->size(); ++statuses_journaled_) {
    auto& s = (*seen)[statuses_journaled_];
    auto prev = statuses_journaled_ > 0 ? &(*seen)[statuses_journaled_ - 1] : nullptr;
    if (prev == nullptr || prev->state != s.state)
      note("state " + s.state
           + (s.last_error.empty() ? std::string{} : " (" + s.last_error + ")"));
    // The gate (what a pull sees) has a line of its own: in the clustered
    // modes it closes while this node's state stays ready.
    if (s.ready != (prev != nullptr && prev->ready)) {
      std::string held;
      if (!s.ready && s.state == "ready")
        for (auto& c : s.cluster)
          if (!c.ready)
            held += (held.empty() ? ": namespace not ready: " : "; ") + std::to_string(c.partition)
                    + ": " + c.why;
      note(s.ready ? std::string{"gate open"} : "gate closed" + held);
    }
  }
}

// -- invariants --------------------------------------------------------------------

void engine::check_invariants() {
  ++steps;
  on_check();
  if (!checks_on)
    return;
  std::lock_guard<std::recursive_mutex> g{world->mtx};
  journal_world_events();
  auto where = [](int32_t p, int64_t off) {
    return "partition " + std::to_string(p) + " offset " + std::to_string(off);
  };
  auto evicted_below = [&](const std::string& user, int32_t p) -> int64_t {
    auto u = evicted.find(user);
    if (u == evicted.end())
      return 0;
    auto i = u->second.find(p);
    return i == u->second.end() ? 0 : i->second;
  };
  // Checkpoints: monotone, within the stable log, nothing unprojected below.
  for (int32_t p = 0; p < world->partition_count(); ++p) {
    auto& fp = world->part(p);
    auto cp = world->checkpoint(p);
    if (!cp)
      continue;
    if (auto i = planted.find(p); i != planted.end() && i->second == *cp)
      continue;
    if (*cp > fp.lso())
      violation("[in the log] checkpoint of partition " + std::to_string(p) + " is "
                + std::to_string(*cp) + ", past the LSO " + std::to_string(fp.lso()));
    if (auto i = last_cp.find(p); i != last_cp.end() && *cp < i->second)
      violation("[monotone] checkpoint of partition " + std::to_string(p) + " went back from "
                + std::to_string(i->second) + " to " + std::to_string(*cp));
    last_cp[p] = *cp;
    auto stop = std::min(*cp, fp.end());
    // Incremental: what was judged intact stays so until Redis loses
    // something the kit injected (rebase() starts over) or changes (a
    // dropped score is caught by the monotone check).
    auto from = std::max(floor_of(p), fp.low);
    if (incremental && redis_now_same_history())
      from = std::max(from, std::min(lost_checked_[p], stop));
    lost_checked_[p] = stop;
    for (int64_t off = from; off < stop; ++off) {
      auto& e = fp.log[static_cast<size_t>(off)];
      if (e.kind != entry_kind::data || exempt.count({p, off}) > 0)
        continue;
      auto& d = decoded(p, off);
      if (!d) {
        violation("[nothing lost] checkpoint " + std::to_string(*cp)
                  + " passed the undecodable record at " + where(p, off));
        continue;
      }
      for (auto& r : d->recipients) {
        if (off < evicted_below(r, p))
          continue;
        if (in_hole(p, off, world->convs_prefix + r))
          continue;
        auto s = world->score(r, d->conversation_id);
        if (!s || *s < d->created_at)
          violation("[nothing lost] checkpoint " + std::to_string(*cp) + " passed "
                    + where(p, off) + " but " + r + "/" + d->conversation_id + " is "
                    + (s ? std::to_string(*s) : std::string{"absent"}) + ", want >= "
                    + std::to_string(d->created_at));
      }
    }
  }
  resets_seen_ = world->redis_resets;
  // Nothing invented: every stored score comes from a committed record.
  // Incremental: the allowed scores grow with the LSOs (rebuilt when a log
  // shrank or the topic changed), and Redis' sets are judged only after
  // Redis changed (a write or a reset since the last check).
  auto redis_now = std::make_pair(world->redis_writes(), world->redis_resets);
  bool redis_changed = !incremental || redis_now != redis_seen_ || sessions_dirty_;
  redis_seen_ = redis_now;
  sessions_dirty_ = false;
  bool rebuild = !incremental || allowed_topic_ != world->topic_id;
  for (auto& [p, upto] : allowed_upto_)
    if (p >= world->partition_count() || world->lso(p) < upto)
      rebuild = true;
  if (rebuild) {
    allowed_ = retired;
    allowed_upto_.clear();
    allowed_topic_ = world->topic_id;
    redis_changed = true;
  }
  for (int32_t p = 0; p < world->partition_count(); ++p) {
    auto& fp = world->part(p);
    auto& upto = allowed_upto_[p];
    for (int64_t off = upto; off < fp.lso(); ++off) {
      auto& e = fp.log[static_cast<size_t>(off)];
      if (e.kind != entry_kind::data)
        continue;
      if (auto& d = decoded(p, off))
        for (auto& r : d->recipients)
          allowed_[{r, d->conversation_id}].insert(d->created_at);
    }
    upto = std::max(upto, fp.lso());
  }
  if (redis_changed) {
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs) {
        auto i = allowed_.find({user, conv});
        if (i == allowed_.end() || i->second.count(score) == 0)
          violation("[nothing invented] stored " + user + "/" + conv + " = "
                    + std::to_string(score) + " is no committed record's created_at");
      }
    for (auto& [key, prev] : last_scores) {
      auto s = world->score(key.first, key.second);
      if ((!s && evicted.count(key.first) == 0) || (s && *s < prev))
        violation("[monotone] score of " + key.first + "/" + key.second + " dropped from "
                  + std::to_string(prev) + " to " + (s ? std::to_string(*s) : "absent"));
    }
    last_scores.clear();
    for (auto& [user, convs] : world->sessions)
      for (auto& [conv, score] : convs)
        last_scores[{user, conv}] = score;
  }
  // The identity fence, over the world's event log.
  for (; events_seen_ < world->events.size(); ++events_seen_) {
    auto& e = world->events[events_seen_];
    switch (e.what) {
      case fake_event::kind::assigned:
        // A whole new assignment (-1), or one partition added to it: a read
        // begun before covers nothing of what was (re)assigned.
        for (auto& [hp, h] : holes)
          if (e.partition < 0 || e.partition == hp)
            h.reassigned = true;
        if (e.partition < 0) {
          polled_.clear();
          verified_.clear();
          reads_.clear();
        } else {
          polled_.erase(e.partition);
          verified_.erase(e.partition);
          for (auto& [id, snap] : reads_)
            snap.erase(e.partition);
        }
        break;
      case fake_event::kind::fetched:
        polled_[e.partition] = std::max(polled_[e.partition], e.offset);
        break;
      case fake_event::kind::identity_start:
        reads_[e.offset] = polled_;
        break;
      case fake_event::kind::identity:
        // The answer covers what was fetched when the read began, not
        // what was fetched while it ran.  (Reads may overlap: each covers
        // its own start, so keep the furthest.)
        if (auto r = reads_.find(e.offset); r != reads_.end()) {
          for (auto& [p, off] : r->second)
            verified_[p] = std::max(verified_[p], off);
          reads_.erase(r);
        }
        break;
      case fake_event::kind::identity_failed:
        reads_.erase(e.offset);
        break;
      case fake_event::kind::checkpoint: {
        // A partition replayed after the shard failover: its hole is closed
        // (every ZADD below a checkpoint was confirmed first); judge it whole.
        if (auto h = holes.find(e.partition);
            h != holes.end() && h->second.reassigned && e.offset > h->second.below) {
          holes.erase(h);
          lost_checked_.erase(e.partition);
        }
        auto i = verified_.find(e.partition);
        if (i == verified_.end() || e.offset > i->second)
          violation("[identity fence] checkpoint of partition " + std::to_string(e.partition)
                    + " written to " + std::to_string(e.offset)
                    + " before an identity check that started after its records were "
                      "fetched (verified up to "
                    + (i == verified_.end() ? std::string{"nothing"} : std::to_string(i->second))
                    + ")");
        break;
      }
    }
  }
  // Readiness never opens before every partition reached H0.
  for (auto i = lso_at_start.begin(); i != lso_at_start.end();)
    if (i->first >= world->partition_count() || world->lso(i->first) < i->second)
      i = lso_at_start.erase(i); // the log shrank (truncation, recreation)
    else
      ++i;
  // The host's own invariants (the kit's add_invariant), named as these are.
  for (auto& h : host_invariants)
    if (h.check)
      if (auto broke = h.check(); !broke.empty())
        violation("[" + h.name + "] " + broke);
  if (state() != "ready") {
    rolled_back = false;
    rollback_unmet = false;
  }
  // The shard hole closes once the projection restarted and is ready again.

  if (state() == "ready") {
    for (auto& [p, target] : h0) {
      auto cp = world->checkpoint(p);
      if (target > 0 && (!cp || *cp < target))
        violation("[ready implies H0] ready while partition " + std::to_string(p) + " is at "
                  + (cp ? std::to_string(*cp) : std::string{"<absent>"}) + " < H0 "
                  + std::to_string(target));
    }
    for (auto& ps : seen->back().partitions) {
      auto cp = world->checkpoint(ps.partition);
      if (ps.h0 > 0 && ps.next_offset < ps.h0)
        violation("[ready implies H0] ready while partition " + std::to_string(ps.partition)
                  + " reports next_offset " + std::to_string(ps.next_offset) + " < H0 "
                  + std::to_string(ps.h0));
      if (ps.h0 > 0 && !rolled_back && (!cp || *cp < ps.h0))
        violation("[ready implies H0] ready while partition " + std::to_string(ps.partition)
                  + "'s checkpoint is " + (cp ? std::to_string(*cp) : std::string{"<absent>"})
                  + " < H0 " + std::to_string(ps.h0));
      if (auto i = lso_at_start.find(ps.partition); i != lso_at_start.end() && ps.h0 < i->second)
        violation("[ready implies H0] partition " + std::to_string(ps.partition) + "'s H0 "
                  + std::to_string(ps.h0) + " is below the LSO " + std::to_string(i->second)
                  + " it had when the projection was started");
    }
  }
}

} // namespace qsp::test
