// The test kit's calls on the simulated world (qsession/projection/testkit/
// kit.hpp): the dispatch log (Kafka), Redis and Redis Cluster mode.
#include "testkit/kit_impl.hpp"

namespace qsp::testkit {

// -- the dispatch log ----------------------------------------------------------------

int64_t kit::produce(int32_t p, const std::string& conversation, int64_t created_at,
                     const std::vector<std::string>& recipients) {
  lock g{d_->world->mtx};
  auto off = d_->world->append(p, conversation, created_at, recipients);
  d_->note("produce partition " + std::to_string(p) + " offset " + std::to_string(off));
  return off;
}

int64_t kit::produce_raw(int32_t p, const std::string& value) {
  lock g{d_->world->mtx};
  auto off = d_->world->append_raw(p, value);
  d_->note("produce raw record at partition " + std::to_string(p) + " offset "
           + std::to_string(off));
  return off;
}

int64_t kit::begin_transaction(int32_t p) {
  lock g{d_->world->mtx};
  auto txn = d_->world->begin_txn(p);
  d_->note("begin transaction " + std::to_string(txn) + " on partition " + std::to_string(p));
  return txn;
}

int64_t kit::produce_in(int32_t p, int64_t txn, const std::string& conversation,
                        int64_t created_at, const std::vector<std::string>& recipients) {
  lock g{d_->world->mtx};
  core::dispatch d;
  d.conversation_id = conversation;
  d.created_at = created_at;
  d.recipients = recipients;
  auto off = d_->world->append_txn(p, txn, d);
  d_->note("produce in transaction " + std::to_string(txn) + " at partition "
           + std::to_string(p) + " offset " + std::to_string(off));
  return off;
}

int64_t kit::commit(int32_t p, int64_t txn) {
  lock g{d_->world->mtx};
  d_->note("commit transaction " + std::to_string(txn));
  return d_->world->commit_txn(p, txn);
}

int64_t kit::abort(int32_t p, int64_t txn) {
  lock g{d_->world->mtx};
  d_->note("abort transaction " + std::to_string(txn));
  return d_->world->abort_txn(p, txn);
}

void kit::delete_records(int32_t p, int64_t before) {
  lock g{d_->world->mtx};
  d_->note("delete records of partition " + std::to_string(p) + " below " + std::to_string(before));
  // Retention past records the projection had checkpointed keeps them in
  // the model (Redis holds what they gave); past others it does not.
  auto cp = d_->world->checkpoint(p);
  auto low = d_->world->part(p).low;
  if (low < before) {
    if (cp && *cp >= before && (d_->retained.count(p) != 0 || low == 0))
      d_->retained.insert(p);
    else
      d_->retained.erase(p);
  }
  d_->world->truncate(p, before);
}

void kit::recreate_topic() {
  lock g{d_->world->mtx};
  d_->note("recreate the topic");
  for (int32_t p = 0; p < d_->world->partition_count(); ++p)
    d_->retire(p, 0);
  d_->world->recreate_topic();
}

void kit::add_partitions(int32_t n) {
  lock g{d_->world->mtx};
  d_->note("add " + std::to_string(n) + " partitions");
  // Before the first start the settings' count follows the topic (unless
  // the test set one of its own); after it, it is what the node was
  // configured with, and the added partitions are refused.
  bool follows = d_->starts == 0 && d_->settings.partition_count == d_->world->partition_count();
  d_->world->add_partitions(n);
  if (follows)
    d_->settings.partition_count = d_->world->partition_count();
}

void kit::unclean_truncate(int32_t p, int64_t to) {
  lock g{d_->world->mtx};
  d_->note("unclean leader election: partition " + std::to_string(p) + " truncated to "
           + std::to_string(to));
  d_->retire(p, to);
  d_->world->unclean_truncate(p, to);
}

void kit::broker_down() {
  lock g{d_->world->mtx};
  d_->note("broker down");
  d_->world->broker_down = true;
}

void kit::broker_up() {
  lock g{d_->world->mtx};
  d_->note("broker up");
  d_->world->broker_down = false;
}

void kit::broker_slow(caf::timespan delay) {
  lock g{d_->world->mtx};
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(delay).count();
  d_->note("broker delivers records after " + std::to_string(ms) + " ms");
  d_->world->broker_delay_ms = ms;
}

void kit::broker_errors(int64_t n) {
  lock g{d_->world->mtx};
  d_->note("broker: the next " + std::to_string(n) + " requests fail");
  d_->world->broker_errors(n);
}

int64_t kit::log_start(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->part(p).low;
}

int64_t kit::log_end(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->end(p);
}

int64_t kit::last_stable_offset(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->lso(p);
}

int32_t kit::partition_count() const {
  lock g{d_->world->mtx};
  return d_->world->partition_count();
}

// -- Redis ---------------------------------------------------------------------------

void kit::redis_down() {
  lock g{d_->world->mtx};
  d_->note("Redis down");
  d_->world->redis_down = true;
}

void kit::redis_up() {
  lock g{d_->world->mtx};
  d_->note("Redis up");
  d_->world->redis_down = false;
}

void kit::redis_freeze() {
  lock g{d_->world->mtx};
  d_->note("Redis frozen");
  d_->world->redis_frozen = true;
}

void kit::redis_release() {
  lock g{d_->world->mtx};
  d_->note("Redis released");
  d_->world->redis_frozen = false;
}

void kit::redis_error_reply() {
  lock g{d_->world->mtx};
  d_->note("Redis: the next ZADD gets an error reply");
  d_->world->reply_error_fault.arm(1);
}

size_t kit::redis_failover(size_t writes) {
  lock g{d_->world->mtx};
  auto n = d_->world->redis_rollback(writes);
  d_->note("Redis failover: " + std::to_string(n) + " writes rolled back");
  d_->rebase();
  d_->rolled_back = d_->state() == "ready";
  d_->rollback_unmet = d_->rolled_back && n > 0;
  return n;
}

size_t kit::redis_writes() const {
  lock g{d_->world->mtx};
  return d_->world->redis_writes();
}

bool kit::redis_evict(const std::string& key) {
  lock g{d_->world->mtx};
  auto& w = *d_->world;
  auto& prefix = d_->settings.convs_prefix;
  if (key.compare(0, prefix.size(), prefix) == 0) {
    auto user = key.substr(prefix.size());
    for (int32_t p = 0; p < w.partition_count(); ++p)
      d_->evicted[user][p] = w.end(p);
  }
  auto gone = w.evict(key);
  d_->note("evict " + key + (gone ? "" : " (no such key)"));
  d_->rebase();
  return gone;
}

std::vector<std::string> kit::redis_keys() const {
  lock g{d_->world->mtx};
  return d_->world->keys();
}

std::optional<int64_t> kit::checkpoint(int32_t p) const {
  lock g{d_->world->mtx};
  return d_->world->checkpoint(p);
}

std::optional<int64_t> kit::score(const std::string& user, const std::string& conversation) const {
  lock g{d_->world->mtx};
  return d_->world->score(user, conversation);
}

std::map<std::string, std::map<std::string, int64_t>> kit::redis_sessions() const {
  lock g{d_->world->mtx};
  return d_->world->sessions;
}

void kit::redis_moved() {
  lock g{d_->world->mtx};
  d_->note("Redis Cluster: the next ZADD batch meets a MOVED");
  d_->world->moved_fault.arm(1);
}

void kit::redis_ask() {
  lock g{d_->world->mtx};
  d_->note("Redis Cluster: the next ZADD batch meets an ASK");
  d_->world->ask_fault.arm(1);
}

size_t kit::redis_shard_failover(int32_t shard, size_t writes, bool reset) {
  lock g{d_->world->mtx};
  auto n = d_->world->shard_failover(shard, writes, reset);
  d_->note("Redis Cluster: shard " + std::to_string(shard) + " failed over"
           + (writes == 0 ? std::string{" gracefully"} : std::string{}) + ", "
           + std::to_string(n) + " writes rolled back"
           + (reset ? std::string{} : std::string{", unnoticed until the next write there"}));
  if (n > 0)
    d_->shard_rolled_back(shard, reset);
  return n;
}

int32_t kit::redis_shard_of_namespace() const {
  lock g{d_->world->mtx};
  return d_->world->shard_of(d_->world->meta_key());
}

int32_t kit::redis_add_primary() {
  lock g{d_->world->mtx};
  auto i = d_->world->add_primary();
  d_->note("Redis Cluster: a primary joined as shard " + std::to_string(i));
  return i;
}

int32_t kit::redis_move_slots(int32_t from, int32_t to, int32_t count) {
  lock g{d_->world->mtx};
  auto n = d_->world->move_slots(from, to, count);
  d_->note("Redis Cluster: " + std::to_string(n) + " slots moved from shard " + std::to_string(from)
           + " to shard " + std::to_string(to));
  if (n > 0)
    d_->world->moved_fault.arm(1);
  return n;
}

int32_t kit::redis_reshard_lowest(int32_t from, int32_t to, int32_t count) {
  lock g{d_->world->mtx};
  auto n = d_->world->move_slots(from, to, count, true);
  d_->note("Redis Cluster: " + std::to_string(n) + " slots resharded (lowest first) from shard "
           + std::to_string(from) + " to shard " + std::to_string(to));
  if (n > 0)
    d_->world->moved_fault.arm(1);
  return n;
}

size_t kit::redis_shard_restart_from_disk(int32_t shard, size_t writes, bool rdb) {
  lock g{d_->world->mtx};
  auto n = d_->world->shard_restart_from_disk(shard, writes, rdb);
  d_->note("Redis Cluster: shard " + std::to_string(shard) + " restarted from its "
           + (rdb ? "RDB" : "AOF") + ", " + std::to_string(n) + " writes lost");
  // A new history whatever it lost: the copies' judgement changes.
  d_->shard_rolled_back(shard, n > 0);
  return n;
}

bool kit::redis_shard_flushall(int32_t shard) {
  lock g{d_->world->mtx};
  bool ok = d_->world->shard_flushall(shard);
  d_->note("Redis Cluster: FLUSHALL on shard " + std::to_string(shard)
           + (ok ? std::string{} : std::string{" refused (it serves the namespace's slot)"}));
  if (ok)
    d_->shard_rolled_back(shard, false);  // (no connection resets)
  return ok;
}

void kit::redis_spend_epoch() {
  lock g{d_->world->mtx};
  d_->world->spend_epoch();
  d_->note("Redis Cluster: an election spent an epoch");
}

void kit::redis_epoch_collision(int32_t a, int32_t b) {
  lock g{d_->world->mtx};
  d_->world->epoch_collision(a, b);
  d_->note("Redis Cluster: shards " + std::to_string(a) + " and " + std::to_string(b)
           + " collided on a configuration epoch");
}

bool kit::redis_shard_lost_and_covered(int32_t shard, int32_t to, bool bump) {
  lock g{d_->world->mtx};
  auto& shards = d_->world->cluster.shards;
  auto lost = shard >= 0 && static_cast<size_t>(shard) < shards.size()
                ? shards[static_cast<size_t>(shard)].slots
                : std::string{};
  bool ok = shard != to && d_->world->shard_lost_and_covered(shard, to, bump);
  d_->note("Redis Cluster: shard " + std::to_string(shard)
           + (ok ? " lost, its slots covered again by shard " + std::to_string(to)
                     + (bump ? " (BUMPEPOCH)" : " (ADDSLOTS alone)")
                 : std::string{" not lost (it serves the namespace's slot)"}));
  if (ok) {
    // Its slots' keys are gone (a loss only replay can repair), wherever
    // those slots are served now.
    d_->slots_lost(lost);
    d_->rolled_back = d_->state() == "ready";
    d_->rollback_unmet = d_->rolled_back;
    d_->world->moved_fault.arm(1);
  }
  return ok;
}

bool kit::redis_remove_primary(int32_t shard) {
  lock g{d_->world->mtx};
  bool ok = d_->world->remove_primary(shard);
  d_->note("Redis Cluster: shard " + std::to_string(shard)
           + (ok ? " emptied and removed" : " not removed (it serves the namespace's slot)"));
  if (ok)
    d_->world->moved_fault.arm(1);
  return ok;
}

bool kit::redis_shard_restart_empty(int32_t shard) {
  lock g{d_->world->mtx};
  bool ok = d_->world->shard_restart_empty(shard);
  d_->note("Redis Cluster: shard " + std::to_string(shard)
           + (ok ? " restarted without its data" : " not restarted (it serves the namespace's slot)"));
  if (ok) {
    d_->shard_failed_over(shard);
    d_->rolled_back = d_->state() == "ready";
  }
  return ok;
}

bool kit::redis_shard_copy_current(int32_t shard) const {
  lock g{d_->world->mtx};
  return d_->world->shard_copy_current(shard);
}

bool kit::redis_cluster_settled() const {
  lock g{d_->world->mtx};
  for (size_t i = 0; i < d_->world->cluster.shards.size(); ++i)
    if (!d_->world->shard_copy_current(static_cast<int32_t>(i)))
      return false;
  return d_->holes.empty();
}

int32_t kit::redis_shard_count() const {
  lock g{d_->world->mtx};
  return static_cast<int32_t>(d_->world->cluster.shards.size());
}

} // namespace qsp::testkit
