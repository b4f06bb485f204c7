// One generation of the pipeline: what the verifier hands to the writer, and
// the kill switch that interrupts every blocking call of its actors.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "messages/log.hpp"
#include "ports/ports.hpp"

namespace qsp {

/// What one generation (one run of the startup sequence) hands from the
/// verifier to the writer: the single checkpoint connection and the consumer.
/// Filled by the verifier, used by the writer only after the verifier answered.
/// Also the generation's kill switch: abort() interrupts every blocking Redis
/// call of its actors, from any thread (the supervisor calls it whenever the
/// generation ends, so no detached child stays blocked in I/O).
struct generation {
  std::shared_ptr<port_factory> ports;
  std::shared_ptr<checkpoint_store> checkpoints;
  std::shared_ptr<dispatch_log> log;
  /// The verifier's broker inspector, then the identity fence's.
  std::shared_ptr<broker_inspector> broker;
  /// The projection's log (every line tagged with topic and namespace).
  log_ptr logs;

  /// Interrupts every tracked store now and every store tracked later.
  void abort();
  bool aborted() const;
  /// Registers a store for abort() (interrupted at once if already aborted).
  template <class Store>
  void track(const std::shared_ptr<Store>& store) {
    std::weak_ptr<Store> weak = store;
    add_hook([weak] {
      if (auto s = weak.lock())
        s->interrupt();
    });
  }

private:
  void add_hook(std::function<void()> hook);
  mutable std::mutex mtx_;
  bool aborted_ = false;
  std::vector<std::function<void()>> hooks_;
};

} // namespace qsp
