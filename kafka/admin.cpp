#include "kafka/admin.hpp"

#include <charconv>
#include <memory>
#include <string_view>

#include "core/checkpoint.hpp"
#include "messages/types.hpp"

namespace qsp::kafka {

admin::admin(handle_ptr rk, int timeout_ms, std::shared_ptr<error_sink> errors)
  : rk_(std::move(rk)), timeout_ms_(timeout_ms), errors_(std::move(errors)) {}

caf::expected<std::unique_ptr<admin>> admin::make(const client_settings& cfg) {
  auto errors = std::make_shared<error_sink>();
  auto rk = make_handle(RD_KAFKA_PRODUCER, cfg, {}, {}, errors);
  if (!rk)
    return rk.error();
  return std::unique_ptr<admin>{new admin(std::move(*rk), cfg.timeout_ms, std::move(errors))};
}

caf::error admin::explain(caf::error e, const std::string& topic) {
  if (e.code() != static_cast<uint8_t>(ec::kafka_unavailable))
    return e;
  rd_kafka_poll(rk_.get(), 0); // serves error_cb
  std::string last;
  for (auto& x : errors_->take()) {
    if (auto final = final_client_error(x.err, x.last_text, "kafka", read_permission(topic)))
      return final;
    last = x.last_text;
  }
  if (last.empty())
    return e;
  auto& ctx = e.context();
  std::string text = ctx.size() == 1 && ctx.match_element<std::string>(0)
                       ? ctx.get_as<std::string>(0)
                       : describe(e);
  return caf::make_error(ec::kafka_unavailable, text + "; the client's last error: " + last);
}

caf::expected<broker_state> admin::identity(const std::string& topic) {
  auto r = identity_now(topic);
  if (!r)
    return explain(r.error(), topic);
  return r;
}

caf::expected<broker_state> admin::inspect(const std::string& topic) {
  auto r = inspect_now(topic);
  if (!r)
    return explain(r.error(), topic);
  return r;
}

void admin::interrupt() {
  waits_.interrupt();
}

caf::expected<std::string> admin::cluster_id() {
  // rd_kafka_clusterid cannot be interrupted; only tests call this.
  if (waits_.interrupted())
    return caf::make_error(ec::shutting_down, "cluster id: interrupted (stopping)");
  char* id = rd_kafka_clusterid(rk_.get(), timeout_ms_);
  if (id == nullptr)
    return caf::make_error(ec::kafka_unavailable,
                           "broker did not return a cluster id within "
                             + std::to_string(timeout_ms_) + " ms");
  std::string result{id};
  rd_kafka_mem_free(rk_.get(), id);
  return result;
}

caf::expected<broker_state> admin::identity_now(const std::string& topic) {
  // Two Metadata requests, in flight together, both answered by a broker
  // (rd_kafka_clusterid would answer from the client's metadata cache).
  queue_ptr cq{rd_kafka_queue_new(rk_.get())};
  queue_ptr tq{rd_kafka_queue_new(rk_.get())};
  auto copts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_DESCRIBECLUSTER, timeout_ms_);
  rd_kafka_DescribeCluster(rk_.get(), copts.get(), cq.get());
  const char* names[] = {topic.c_str()};
  auto* coll = rd_kafka_TopicCollection_of_topic_names(names, 1);
  auto topts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_DESCRIBETOPICS, timeout_ms_);
  rd_kafka_DescribeTopics(rk_.get(), coll, topts.get(), tq.get());
  rd_kafka_TopicCollection_destroy(coll);

  broker_state st;
  auto cev = await_result(
    waits_, cq.get(), timeout_ms_, "describe cluster",
    "a permission DescribeCluster should not need (the broker checks Describe on the cluster only "
    "when authorized operations are requested, and the node requests none): check the "
    "broker's authorizer");
  if (!cev)
    return cev.error();
  const char* cid = rd_kafka_DescribeCluster_result_cluster_id(
    rd_kafka_event_DescribeCluster_result(cev->get()));
  if (cid == nullptr || *cid == '\0')
    return caf::make_error(ec::kafka_unavailable, "describe cluster: the broker reported no cluster id");
  st.cluster_id = cid;

  auto ev = await_result(waits_, tq.get(), timeout_ms_, "describe topic " + topic,
                         read_permission(topic));
  if (!ev)
    return ev.error();
  auto* res = rd_kafka_event_DescribeTopics_result(ev->get());
  size_t n = 0;
  auto** topics = rd_kafka_DescribeTopics_result_topics(res, &n);
  if (n != 1)
    return caf::make_error(ec::kafka_unavailable, "describe topic " + topic + ": no result");
  if (auto* err = rd_kafka_TopicDescription_error(topics[0]);
      err != nullptr && rd_kafka_error_code(err) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    auto code = rd_kafka_error_code(err);
    std::string detail = rd_kafka_error_string(err);
    // Missing, or just created and not yet known to every broker: transient
    // (the caller retries; a topic that never appears keeps it not ready).
    if (code == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
      return caf::make_error(ec::kafka_unavailable,
                             "topic " + topic
                               + " does not exist on the broker (or its metadata is still "
                                 "propagating)");
    if (is_auth_error(code))
      return auth_error(code, "describe topic " + topic, detail, read_permission(topic));
    return caf::make_error(ec::kafka_unavailable, "describe topic " + topic + ": " + detail
                                                    + " (" + rd_kafka_err2name(code) + ")");
  }
  st.topic_id = topic_id_text(rd_kafka_TopicDescription_topic_id(topics[0]));
  size_t parts = 0;
  rd_kafka_TopicDescription_partitions(topics[0], &parts);
  st.partition_count = static_cast<int32_t>(parts);
  return st;
}

caf::expected<std::vector<int64_t>>
admin::list_offsets(const std::string& topic, int partitions, rd_kafka_OffsetSpec_t spec,
                    rd_kafka_IsolationLevel_t isolation) {
  std::vector<int32_t> which;
  for (int32_t p = 0; p < partitions; ++p)
    which.push_back(p);
  auto got = kafka::list_offsets(rk_.get(), waits_, timeout_ms_, "list offsets of " + topic, topic,
                                 which, {{spec, isolation}});
  if (!got)
    return got.error();
  std::vector<int64_t> out;
  for (auto& [p, offset] : got->front()) {
    if (offset < 0)
      return caf::make_error(ec::kafka_unavailable, "list offsets of " + topic + ": partition "
                                                      + std::to_string(p) + " missing");
    out.push_back(offset);
  }
  return out;
}

caf::expected<admin::topic_configs> admin::configs(const std::string& topic) {
  queue_ptr q{rd_kafka_queue_new(rk_.get())};
  auto* res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  auto opts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, timeout_ms_);
  rd_kafka_DescribeConfigs(rk_.get(), &res, 1, opts.get(), q.get());
  rd_kafka_ConfigResource_destroy(res);
  auto what = "describe configs of " + topic;
  auto permission = "DescribeConfigs on topic " + topic;
  auto ev = await_result(waits_, q.get(), timeout_ms_, what, permission);
  if (!ev)
    return ev.error();
  size_t n = 0;
  auto** rs = rd_kafka_DescribeConfigs_result_resources(
    rd_kafka_event_DescribeConfigs_result(ev->get()), &n);
  topic_configs out;
  for (size_t i = 0; i < n; ++i) {
    if (auto code = rd_kafka_ConfigResource_error(rs[i])) {
      const char* text = rd_kafka_ConfigResource_error_string(rs[i]);
      std::string detail = text != nullptr ? text : rd_kafka_err2str(code);
      if (is_auth_error(code))
        return auth_error(code, what, detail, permission);
      return caf::make_error(ec::kafka_unavailable, what + ": " + detail + " ("
                                                      + rd_kafka_err2name(code) + ")");
    }
    size_t m = 0;
    auto** entries = rd_kafka_ConfigResource_configs(rs[i], &m);
    for (size_t j = 0; j < m; ++j) {
      std::string name = rd_kafka_ConfigEntry_name(entries[j]);
      const char* v = rd_kafka_ConfigEntry_value(entries[j]);
      if (name == "retention.ms" && v != nullptr) {
        // -1 (retain forever) is a valid value.
        std::string_view text{v};
        int64_t parsed = 0;
        auto [end, errc] = std::from_chars(text.data(), text.data() + text.size(), parsed);
        if (errc != std::errc{} || end != text.data() + text.size())
          return caf::make_error(ec::kafka_unavailable,
                                 what + ": retention.ms is not a number: " + std::string{text});
        out.retention_ms = parsed;
      } else if (name == "cleanup.policy" && v != nullptr) {
        out.cleanup_policy = v;
      }
    }
  }
  return out;
}

caf::expected<broker_state> admin::inspect_now(const std::string& topic) {
  auto st = identity_now(topic);
  if (!st)
    return st;
  auto cfgs = configs(topic);
  if (!cfgs)
    return cfgs.error();
  st->retention_ms = cfgs->retention_ms;
  st->cleanup_policy = std::move(cfgs->cleanup_policy);
  auto n = st->partition_count;
  auto low = list_offsets(topic, n, RD_KAFKA_OFFSET_SPEC_EARLIEST, RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED);
  if (!low)
    return low.error();
  // Under read_committed the latest offset is the last stable offset: the
  // right H0, since records of a transaction still open are not committed.
  auto lso = list_offsets(topic, n, RD_KAFKA_OFFSET_SPEC_LATEST, RD_KAFKA_ISOLATION_LEVEL_READ_COMMITTED);
  if (!lso)
    return lso.error();
  auto hw = list_offsets(topic, n, RD_KAFKA_OFFSET_SPEC_LATEST, RD_KAFKA_ISOLATION_LEVEL_READ_UNCOMMITTED);
  if (!hw)
    return hw.error();
  for (size_t p = 0; p < static_cast<size_t>(n); ++p) {
    st->marks.push_back(core::watermarks{(*low)[p], (*lso)[p]});
    st->true_high.push_back((*hw)[p]);
  }
  return st;
}

caf::expected<void>
admin::create_topic(const std::string& topic, int partitions,
                    const std::vector<std::pair<std::string, std::string>>& configs,
                    int replication_factor) {
  char err[512];
  auto* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, err, sizeof(err));
  if (nt == nullptr)
    return caf::make_error(ec::invalid_config, "create topic " + topic + ": " + err);
  for (auto& [k, v] : configs)
    if (auto e = rd_kafka_NewTopic_set_config(nt, k.c_str(), v.c_str())) {
      rd_kafka_NewTopic_destroy(nt);
      return caf::make_error(ec::invalid_config, "create topic " + topic + ": config " + k + "="
                                                   + v + ": " + rd_kafka_err2str(e));
    }
  queue_ptr q{rd_kafka_queue_new(rk_.get())};
  auto opts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout_ms_);
  rd_kafka_AdminOptions_set_operation_timeout(opts.get(), timeout_ms_, err, sizeof(err));
  rd_kafka_CreateTopics(rk_.get(), &nt, 1, opts.get(), q.get());
  rd_kafka_NewTopic_destroy(nt);
  auto ev = await_result(waits_, q.get(), timeout_ms_, "create topic " + topic, "Create on the topic or cluster");
  if (!ev)
    return ev.error();
  size_t n = 0;
  auto** rs = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev->get()), &n);
  for (size_t i = 0; i < n; ++i)
    if (auto e = rd_kafka_topic_result_error(rs[i]))
      return kafka_error(e, "create topic " + topic);
  return {};
}

caf::expected<void> admin::delete_topic(const std::string& topic) {
  char err[512];
  auto* dt = rd_kafka_DeleteTopic_new(topic.c_str());
  queue_ptr q{rd_kafka_queue_new(rk_.get())};
  auto opts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_DELETETOPICS, timeout_ms_);
  rd_kafka_AdminOptions_set_operation_timeout(opts.get(), timeout_ms_, err, sizeof(err));
  rd_kafka_DeleteTopics(rk_.get(), &dt, 1, opts.get(), q.get());
  rd_kafka_DeleteTopic_destroy(dt);
  auto ev = await_result(waits_, q.get(), timeout_ms_, "delete topic " + topic, "Delete on the topic");
  if (!ev)
    return ev.error();
  size_t n = 0;
  auto** rs = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev->get()), &n);
  for (size_t i = 0; i < n; ++i)
    if (auto e = rd_kafka_topic_result_error(rs[i]))
      return kafka_error(e, "delete topic " + topic);
  return {};
}

caf::expected<void> admin::delete_records(const std::string& topic, int32_t partition,
                                          int64_t before) {
  char err[512];
  auto* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), partition)->offset = before;
  auto* dr = rd_kafka_DeleteRecords_new(list);
  rd_kafka_topic_partition_list_destroy(list);
  queue_ptr q{rd_kafka_queue_new(rk_.get())};
  auto opts = make_admin_options(rk_.get(), RD_KAFKA_ADMIN_OP_DELETERECORDS, timeout_ms_);
  rd_kafka_AdminOptions_set_operation_timeout(opts.get(), timeout_ms_, err, sizeof(err));
  rd_kafka_DeleteRecords(rk_.get(), &dr, 1, opts.get(), q.get());
  rd_kafka_DeleteRecords_destroy(dr);
  auto ev = await_result(waits_, q.get(), timeout_ms_, "delete records of " + topic, "Delete on the topic");
  if (!ev)
    return ev.error();
  auto* offs = rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(ev->get()));
  for (int i = 0; offs != nullptr && i < offs->cnt; ++i)
    if (offs->elems[i].err)
      return kafka_error(offs->elems[i].err, "delete records of " + topic);
  return {};
}

} // namespace qsp::kafka
