#include "tests/support/appender.hpp"

#include <chrono>

#include <gtest/gtest.h>

#include "kafka/producer.hpp"
#include "qsession/projection/types.hpp"

namespace qsp::test {

appender::appender(kafka::client_settings cfg, std::string topic, int partitions,
                   std::function<core::dispatch(int)> next, int max_rounds)
  : cfg_(std::move(cfg)),
    topic_(std::move(topic)),
    partitions_(partitions),
    next_(std::move(next)),
    max_rounds_(max_rounds),
    thread_([this] { loop(); }) {
}

appender::~appender() {
  stop();
}

void appender::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
  }
}

void appender::loop() {
  using namespace std::chrono_literals;
  auto p = kafka::producer::make(cfg_);
  if (!p) {
    ADD_FAILURE() << "appender: " << describe(p.error());
    return;
  }
  for (int round = 1; !stop_ && round <= max_rounds_; ++round) {
    for (int part = 0; part < partitions_; ++part) {
      if (!p->send(topic_, part, core::encode_json(next_(part)))) {
        ADD_FAILURE() << "appender: send failed";
        return;
      }
      ++sent_;
    }
    if (round % 10 == 0) {
      if (!p->flush()) {
        ADD_FAILURE() << "appender: flush failed";
        return;
      }
      std::this_thread::sleep_for(20ms); // the rate, not a synchronisation
    }
  }
  if (!p->flush())
    ADD_FAILURE() << "appender: final flush failed";
}

} // namespace qsp::test
