#include "kafka/group_member.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace qsp::kafka {

namespace {

struct member_core {
  group_member_config cfg;
  group_events events;
  std::atomic<bool> leaving{false};
};

std::vector<int32_t> partitions_of(const member_core& core,
                                   const rd_kafka_topic_partition_list_t* parts) {
  std::vector<int32_t> out;
  for (int i = 0; i < parts->cnt; ++i)
    if (core.cfg.topic == parts->elems[i].topic)
      out.push_back(parts->elems[i].partition);
  return out;
}

void on_rebalance(member_core& core, rd_kafka_t* rk, rd_kafka_resp_err_t err,
                  rd_kafka_topic_partition_list_t* parts) {
  bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  auto ps = partitions_of(core, parts);
  auto log = core.cfg.client.logs;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    // Part of the group's bookkeeping only: assigned at the log end and
    // paused, so this handle fetches nothing.  The projection's own consumer
    // starts each partition from its checkpoint.
    for (int i = 0; i < parts->cnt; ++i)
      parts->elems[i].offset = RD_KAFKA_OFFSET_END;
    if (cooperative) {
      if (auto* e = rd_kafka_incremental_assign(rk, parts)) {
        if (log)
          log->error("group {}: incremental assign failed: {}", core.cfg.group_id,
                     rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
      }
    } else {
      rd_kafka_assign(rk, parts);
    }
    rd_kafka_pause_partitions(rk, parts);
    if (!ps.empty() && !core.leaving)
      core.events.assigned(ps);
    return;
  }
  if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
    bool lost = rd_kafka_assignment_lost(rk) != 0;
    // The group hands them on only after this returns: the projection
    // stops them first (its reply comes once no checkpoint can follow).
    if (!ps.empty()) {
      auto t0 = std::chrono::steady_clock::now();
      core.events.revoked(ps, lost);
      if (log)
        log->info("group {}: revocation of {} partition(s){} acknowledged after {} ms",
                  core.cfg.group_id, ps.size(), lost ? " (lost)" : "",
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count());
    }
    if (cooperative) {
      if (auto* e = rd_kafka_incremental_unassign(rk, parts))
        rd_kafka_error_destroy(e);
    } else {
      rd_kafka_assign(rk, nullptr);
    }
    return;
  }
  if (log)
    log->error("group {}: rebalance error: {}", core.cfg.group_id, rd_kafka_err2str(err));
  if (!ps.empty())
    core.events.revoked(ps, true);
  rd_kafka_assign(rk, nullptr);
}

/// ownership = group joins the group (Read on it) and reads the topic's
/// metadata to assign it (Read on the topic covers that).
std::string member_permission(const member_core& core) {
  return "Read on group " + core.cfg.group_id + " (ownership = group joins it) and "
         + read_permission(core.cfg.topic);
}

void run(std::shared_ptr<member_core> core, handle_ptr rk, std::shared_ptr<error_sink> errors) {
  auto* h = rk.get();
  while (!core->leaving) {
    if (auto* m = rd_kafka_consumer_poll(h, 100)) {
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF
          && is_auth_error(m->err)) {
        core->events.failed(auth_error(m->err, "consumer group " + core->cfg.group_id,
                                       rd_kafka_message_errstr(m), member_permission(*core)));
        core->leaving = true;
      }
      rd_kafka_message_destroy(m);
    }
    char reason[512];
    if (rd_kafka_fatal_error(h, reason, sizeof(reason)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      core->events.failed(caf::make_error(
        ec::kafka_read, "consumer group " + core->cfg.group_id + ": fatal error: " + reason));
      break;
    }
    for (auto& e : errors->take())
      if (is_auth_error(e.err)) {
        core->events.failed(auth_error(e.err, "consumer group " + core->cfg.group_id,
                                       e.last_text, member_permission(*core)));
        core->leaving = true;
      }
  }
  // Leaves the group: the revocation callback runs once more, then the
  // survivors rebalance without waiting for the session timeout.
  rd_kafka_consumer_close(h);
}

class member final : public group_membership {
public:
  explicit member(std::shared_ptr<member_core> core) : core_(std::move(core)) {}
  ~member() override { leave(); }
  void leave() override { core_->leaving = true; }

private:
  std::shared_ptr<member_core> core_;
};

} // namespace

caf::expected<std::unique_ptr<group_membership>> make_group_member(group_member_config cfg,
                                                                   group_events events) {
  auto core = std::make_shared<member_core>();
  core->cfg = std::move(cfg);
  core->events = std::move(events);
  auto errors = std::make_shared<error_sink>();
  auto client = core->cfg.client;
  client.group_in_use = true;
  client.client_id += "-member";
  // A member learns of a rebalance from its next heartbeat: a cooperative
  // handover takes two rounds, and in the second the members that gave
  // nothing up (the joining one among them) rejoin only at their next
  // heartbeat, so the interval is part of how long moved partitions stay
  // closed.  100 ms (a sixtieth of the default session timeout, at most
  // 500 ms for long ones) costs ten small requests a second per member;
  // kafka.properties may set heartbeat.interval.ms otherwise.
  auto heartbeat = std::clamp(core->cfg.session_timeout_ms / 60, 100, 500);
  std::weak_ptr<member_core> weak = core;
  auto rk = make_handle(
    RD_KAFKA_CONSUMER, client,
    {{"group.id", core->cfg.group_id},
     {"partition.assignment.strategy", "cooperative-sticky"},
     {"enable.auto.commit", "false"},
     {"enable.auto.offset.store", "false"},
     {"auto.offset.reset", "error"}},
    {{"session.timeout.ms", std::to_string(core->cfg.session_timeout_ms)},
     {"heartbeat.interval.ms", std::to_string(heartbeat)},
     {"queued.max.messages.kbytes", "64"}},
    errors,
    [weak](rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* parts) {
      if (auto c = weak.lock())
        on_rebalance(*c, rk, err, parts);
    });
  if (!rk)
    return rk.error();
  // The handle holds the projection's I/O token until it is destroyed; the
  // settings kept here must not (a shutdown waits for the token).
  core->cfg.client.keepalive.reset();
  rd_kafka_poll_set_consumer(rk->get());
  auto* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, core->cfg.topic.c_str(), RD_KAFKA_PARTITION_UA);
  auto err = rd_kafka_subscribe(rk->get(), list);
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
    return kafka_error(err, "subscribing to " + core->cfg.topic + " in group "
                              + core->cfg.group_id);
  std::thread{run, core, std::move(*rk), std::move(errors)}.detach();
  return std::unique_ptr<group_membership>{std::make_unique<member>(std::move(core))};
}

} // namespace qsp::kafka
