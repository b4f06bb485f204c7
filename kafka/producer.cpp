#include "kafka/producer.hpp"

#include "messages/types.hpp"

namespace qsp::kafka {

namespace {

caf::error from(rd_kafka_error_t* err, const std::string& what) {
  if (err == nullptr)
    return caf::none;
  auto e = caf::make_error(ec::kafka_unavailable, what + ": " + rd_kafka_error_string(err));
  rd_kafka_error_destroy(err);
  return e;
}

} // namespace

caf::expected<producer> producer::make(const client_settings& cfg,
                                       const std::string& transactional_id) {
  std::vector<std::pair<std::string, std::string>> fixed{{"enable.idempotence", "true"}};
  if (!transactional_id.empty())
    fixed.emplace_back("transactional.id", transactional_id);
  auto rk = make_handle(RD_KAFKA_PRODUCER, cfg, fixed,
                        {{"linger.ms", "5"}, {"batch.num.messages", "10000"}});
  if (!rk)
    return rk.error();
  if (!transactional_id.empty())
    if (auto err = from(rd_kafka_init_transactions(rk->get(), cfg.timeout_ms), "init transactions"))
      return err;
  return producer{std::move(*rk), cfg.timeout_ms};
}

caf::expected<void> producer::send(const std::string& topic, int32_t partition,
                                   std::string_view value) {
  for (;;) {
    auto err = rd_kafka_producev(rk_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                                 RD_KAFKA_V_PARTITION(partition),
                                 RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(rk_.get(), 50);
      continue;
    }
    if (err)
      return kafka_error(err, "produce to " + topic);
    rd_kafka_poll(rk_.get(), 0);
    return {};
  }
}

caf::expected<void> producer::flush() {
  if (auto err = rd_kafka_flush(rk_.get(), timeout_ms_ * 6))
    return kafka_error(err, "flush");
  return {};
}

caf::expected<void> producer::begin() {
  if (auto err = from(rd_kafka_begin_transaction(rk_.get()), "begin transaction"))
    return err;
  return {};
}

caf::expected<void> producer::commit() {
  if (auto err = from(rd_kafka_commit_transaction(rk_.get(), timeout_ms_), "commit transaction"))
    return err;
  return {};
}

caf::expected<void> producer::abort() {
  if (auto err = from(rd_kafka_abort_transaction(rk_.get(), timeout_ms_), "abort transaction"))
    return err;
  return {};
}

} // namespace qsp::kafka
