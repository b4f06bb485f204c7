#include "testkit/world/ownership.hpp"

#include "testkit/world/world.hpp"

namespace qsp::test {

using sim::lock;

fake_world& simulated_ownership::world() { return static_cast<fake_world&>(*this); }

const fake_world& simulated_ownership::world() const {
  return static_cast<const fake_world&>(*this);
}

std::string simulated_ownership::owner_key(int32_t p) const {
  return owner_key(world().topic, p);
}

std::string simulated_ownership::owner_key(const std::string& t, int32_t p) const {
  return world().ns + ":owner:" + t + ":" + std::to_string(p);
}

core::owner_record simulated_ownership::owner(const std::string& t, int32_t p) const {
  lock g{mtx};
  core::owner_record o;
  auto& hashes = world().hashes;
  auto i = hashes.find(owner_key(t, p));
  if (i == hashes.end())
    return o;
  o.present = true;
  if (auto n = i->second.find("node"); n != i->second.end())
    o.node = n->second;
  if (auto e = i->second.find("epoch"); e != i->second.end())
    o.epoch = std::stoull(e->second);
  if (auto h = i->second.find("heartbeat_ms"); h != i->second.end())
    o.heartbeat_ms = std::stoll(h->second);
  return o;
}

void simulated_ownership::expire_statuses() {
  if (!now_ms)
    return;
  auto now = now_ms();
  auto& hashes = world().hashes;
  auto& expires_at = world().expires_at;
  for (auto i = expires_at.begin(); i != expires_at.end();) {
    if (i->second <= now) {
      hashes.erase(i->first);
      i = expires_at.erase(i);
    } else {
      ++i;
    }
  }
}

// -- the claim (the checkpoint store's script over the owner records) -----------------

caf::expected<uint64_t> fake_checkpoint_store::claim(const std::string& topic, int32_t partition,
                                                     const std::string& node, int64_t now_ms,
                                                     uint64_t mine) {
  lock g{w_->mtx};
  ++w_->calls.claims;
  if (auto err = w_->redis_gate("ownership claim script"))
    return err;
  // The claim script of redis/stores.cpp: core::decide_claim, atomically.
  auto key = w_->owner_key(topic, partition);
  auto stored = w_->owner(topic, partition);
  auto d = core::decide_claim(stored, node, mine);
  if (d.verdict == core::claim_verdict::fenced)
    return make_fenced(partition, "partition " + std::to_string(partition) + ": " + key
                                    + " names node \"" + stored.node + "\" with epoch "
                                    + std::to_string(stored.epoch) + " (this node \"" + node
                                    + "\" held epoch " + std::to_string(mine)
                                    + "): the partition moved to another node");
  fake_world::write_scope write{*w_};
  w_->note_key(key);
  auto& h = w_->hashes[key];
  if (d.verdict == core::claim_verdict::claim) {
    h["epoch"] = std::to_string(d.epoch);
    h["node"] = node;
  }
  h["heartbeat_ms"] = std::to_string(now_ms);
  return d.epoch;
}

// -- the cluster store ----------------------------------------------------------------

caf::expected<std::vector<owned_status>>
fake_cluster_store::publish(const std::string& topic, const std::string& node,
                            const std::vector<owned_status>& statuses,
                            std::chrono::milliseconds ttl, int64_t now_ms) {
  lock g{w_->mtx};
  ++w_->calls.publishes;
  if (auto err = w_->redis_gate("namespace status publish script"))
    return err;
  if (w_->before_publish)
    w_->before_publish(statuses);
  w_->expire_statuses();
  fake_world::write_scope write{*w_};
  std::vector<owned_status> fenced;
  for (auto& s : statuses) {
    auto suffix = topic + ":" + std::to_string(s.partition);
    if (auto c = core::check_owner(w_->owner(topic, s.partition), node, s.epoch); c != core::owner_check::ok) {
      auto f = s;
      f.state = c == core::owner_check::fenced ? "fenced" : "lost";
      fenced.push_back(std::move(f));
      continue;
    }
    w_->note_key(w_->ns + ":owner:" + suffix);
    w_->note_key(w_->ns + ":status:" + suffix);
    auto& o = w_->hashes[w_->ns + ":owner:" + suffix];
    o["heartbeat_ms"] = std::to_string(now_ms);
    if (w_->now_ms)
      w_->expires_at[w_->ns + ":status:" + suffix] = w_->now_ms() + ttl.count();
    w_->hashes[w_->ns + ":status:" + suffix] = core::hash_fields{
      {"node", node},
      {"epoch", std::to_string(s.epoch)},
      {"state", s.state},
      {"h0", std::to_string(s.h0)},
      {"next_offset", std::to_string(s.next_offset)},
      {"caught_up", s.caught_up ? "1" : "0"},
      {"heartbeat_ms", std::to_string(now_ms)}};
  }
  return fenced;
}

caf::expected<void> fake_cluster_store::release(const std::string& topic, const std::string& node,
                                                const std::map<int32_t, uint64_t>& partitions) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("namespace status release script"))
    return err;
  w_->expire_statuses();
  fake_world::write_scope write{*w_};
  for (auto& [p, e] : partitions) {
    auto key = w_->ns + ":status:" + topic + ":" + std::to_string(p);
    auto i = w_->hashes.find(key);
    if (i != w_->hashes.end() && i->second["node"] == node
        && i->second["epoch"] == std::to_string(e)) {
      w_->note_key(key);
      w_->hashes.erase(key);
    }
  }
  return {};
}

caf::expected<std::vector<cluster_partition>>
fake_cluster_store::view(const std::string& topic, int32_t partition_count) {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("namespace ownership view script"))
    return err;
  w_->expire_statuses();
  std::vector<cluster_partition> out;
  auto num = [](const core::hash_fields& h, const char* f, int64_t d) {
    auto i = h.find(f);
    return i == h.end() ? d : std::stoll(i->second);
  };
  for (int32_t p = 0; p < partition_count; ++p) {
    auto suffix = topic + ":" + std::to_string(p);
    auto o = w_->owner(topic, p);
    core::status_record st;
    if (auto i = w_->hashes.find(w_->ns + ":status:" + suffix); i != w_->hashes.end()) {
      st.present = true;
      st.node = i->second["node"];
      st.epoch = static_cast<uint64_t>(num(i->second, "epoch", 0));
      st.state = i->second["state"];
      st.h0 = num(i->second, "h0", -1);
      st.next_offset = num(i->second, "next_offset", -1);
      st.caught_up = i->second["caught_up"] == "1";
    }
    auto v = core::judge(o, st);
    out.push_back(cluster_partition{p, o.node, o.epoch, o.heartbeat_ms, v.live, st.state, st.h0, st.next_offset,
                                    st.caught_up, v.ready, v.why});
  }
  return out;
}

} // namespace qsp::test
