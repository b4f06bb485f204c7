// A small producer for the demo, the tests and the benchmarks (the product
// itself never produces).  Optionally transactional.
#pragma once

#include <string>
#include <string_view>

#include "kafka/client.hpp"

namespace qsp::kafka {

class producer {
public:
  /// `transactional_id` empty: idempotent, non-transactional producer.
  static caf::expected<producer> make(const client_settings& cfg,
                                      const std::string& transactional_id = {});

  caf::expected<void> send(const std::string& topic, int32_t partition, std::string_view value);
  /// Waits until every message is acknowledged.
  caf::expected<void> flush();
  caf::expected<void> begin();
  caf::expected<void> commit();
  caf::expected<void> abort();

private:
  producer(handle_ptr rk, int timeout_ms) : rk_(std::move(rk)), timeout_ms_(timeout_ms) {}
  handle_ptr rk_;
  int timeout_ms_;
};

} // namespace qsp::kafka
