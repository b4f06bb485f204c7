#include "testkit/world/world.hpp"

#include <atomic>

namespace qsp::test {

using sim::failure;
using sim::lock;

namespace {

std::atomic<bool> worlds_as_unkind_as_redis{false};

} // namespace

void set_worlds_as_unkind_as_redis(bool on) { worlds_as_unkind_as_redis = on; }

bool worlds_are_unkind_as_redis() { return worlds_as_unkind_as_redis; }

fake_world::fake_world(int32_t partition_count) : simulated_broker(partition_count) {
  waits_as_the_product = worlds_as_unkind_as_redis;
  stamps_as_read = worlds_as_unkind_as_redis;
  registry_in_shard = worlds_as_unkind_as_redis;
}

// -- the projection's keys ----------------------------------------------------------

std::string fake_world::meta_key() const { return ns + ":meta"; }

std::string simulated_redis_cluster::registry_key() const {
  auto& w = static_cast<const fake_world&>(*this);
  return w.ns + ":primaries:" + w.topic;
}

std::string fake_world::checkpoint_prefix() const { return ns + ":checkpoint:" + topic + ":"; }

std::string fake_world::checkpoint_key(int32_t p) const {
  return checkpoint_prefix() + std::to_string(p);
}

bool fake_world::has_meta() const {
  lock g{mtx};
  return hashes.count(meta_key()) > 0;
}

std::optional<int64_t> fake_world::checkpoint(int32_t p) const {
  lock g{mtx};
  auto i = hashes.find(checkpoint_key(p));
  if (i == hashes.end())
    return std::nullopt;
  auto f = i->second.find(std::string{core::fields::next_offset});
  if (f == i->second.end())
    return std::nullopt;
  return core::parse_decimal(f->second);
}

std::map<int32_t, int64_t> fake_world::checkpoints() const {
  lock g{mtx};
  std::map<int32_t, int64_t> out;
  for (int32_t p = 0; p < partition_count(); ++p)
    if (auto cp = checkpoint(p))
      out[p] = *cp;
  return out;
}

void fake_world::put_meta(const core::identity& id) {
  lock g{mtx};
  hashes[meta_key()] = core::encode_meta(id);
}

void fake_world::put_checkpoint(const core::identity& id, int32_t p, int64_t next_offset) {
  lock g{mtx};
  hashes[checkpoint_key(p)] = core::encode_checkpoint(id, p, next_offset);
}

void fake_world::set_next_offset(int32_t p, int64_t next_offset) {
  lock g{mtx};
  hashes[checkpoint_key(p)][std::string{core::fields::next_offset}] = core::to_decimal(next_offset);
}

// -- factory -----------------------------------------------------------------------

caf::expected<std::unique_ptr<broker_inspector>> fake_port_factory::make_inspector() {
  lock g{w_->mtx};
  ++w_->calls.make_inspector;
  if (w_->make_inspector_fault.fire())
    return failure(w_->make_inspector_fault, ec::kafka_unavailable, "admin client");
  return std::unique_ptr<broker_inspector>{new fake_broker_inspector(w_)};
}

caf::expected<std::unique_ptr<checkpoint_store>> fake_port_factory::make_checkpoint_store() {
  lock g{w_->mtx};
  ++w_->calls.make_checkpoint_store;
  if (auto err = w_->redis_gate("connect", &w_->make_checkpoint_store_fault, false))
    return err;
  return std::unique_ptr<checkpoint_store>{new fake_checkpoint_store(w_)};
}

caf::expected<std::unique_ptr<session_store>> fake_port_factory::make_session_store() {
  lock g{w_->mtx};
  ++w_->calls.make_session_store;
  if (auto err = w_->redis_gate("connect", &w_->make_session_store_fault, false))
    return err;
  return std::unique_ptr<session_store>{new fake_session_store(w_)};
}

caf::expected<std::shared_ptr<dispatch_log>> fake_port_factory::make_dispatch_log() {
  lock g{w_->mtx};
  ++w_->calls.make_dispatch_log;
  if (w_->make_dispatch_log_fault.fire())
    return failure(w_->make_dispatch_log_fault, ec::kafka_unavailable, "consumer");
  return std::shared_ptr<dispatch_log>{std::make_shared<fake_dispatch_log>(w_)};
}

caf::expected<std::unique_ptr<cluster_store>> fake_port_factory::make_cluster_store() {
  lock g{w_->mtx};
  if (auto err = w_->redis_gate("connect", nullptr, false))
    return err;
  return std::unique_ptr<cluster_store>{std::make_unique<fake_cluster_store>(w_)};
}

std::shared_ptr<fake_world> make_world(int32_t partition_count) {
  return std::make_shared<fake_world>(partition_count);
}

std::shared_ptr<fake_port_factory> make_fake_ports(std::shared_ptr<fake_world> w) {
  return std::make_shared<fake_port_factory>(std::move(w));
}

} // namespace qsp::test
