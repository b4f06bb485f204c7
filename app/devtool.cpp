// qsp-devtool: topic management and a demo dispatch producer for local runs,
// the README's run command and benchmarks.  Not part of the node.
//
//   qsp-devtool create-topic BOOTSTRAP TOPIC PARTITIONS
//   qsp-devtool delete-topic BOOTSTRAP TOPIC
//   qsp-devtool produce BOOTSTRAP TOPIC PARTITIONS COUNT [RATE_PER_S] [SEED]
//       COUNT 0 with a RATE: produce until SIGTERM/SIGINT.  Users are drawn
//       Zipf-like from 100k, conversations from 1M, 1–5 recipients.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"

namespace {

volatile std::sig_atomic_t stop_requested = 0;

int fail(const caf::error& e) {
  std::fprintf(stderr, "qsp-devtool: %s\n", qsp::describe(e).c_str());
  return 1;
}

/// Draws ranks in [0, n) with P(k) ~ 1/(k+1)^s, by inverting a continuous approximation.
class zipf {
public:
  zipf(double n, double s) : n_(n), s_(s) {}
  template <class Rng>
  uint64_t operator()(Rng& rng) {
    std::uniform_real_distribution<double> u{0, 1};
    double x = u(rng);
    double one_minus_s = 1 - s_;
    double v = std::pow(x * (std::pow(n_ + 1, one_minus_s) - 1) + 1, 1 / one_minus_s) - 1;
    return static_cast<uint64_t>(std::min(v, n_ - 1));
  }

private:
  double n_, s_;
};

} // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: qsp-devtool create-topic|delete-topic|produce BOOTSTRAP TOPIC ...\n");
    return 2;
  }
  std::string cmd = argv[1];
  qsp::kafka::client_settings cs;
  cs.bootstrap_servers = argv[2];
  cs.client_id = "qsp-devtool";
  std::string topic = argv[3];
  if (cmd == "create-topic" || cmd == "delete-topic") {
    auto admin = qsp::kafka::admin::make(cs);
    if (!admin)
      return fail(admin.error());
    auto r = cmd == "create-topic"
               ? (*admin)->create_topic(topic, argc > 4 ? std::stoi(argv[4]) : 1)
               : (*admin)->delete_topic(topic);
    return r ? 0 : fail(r.error());
  }
  if (cmd != "produce" || argc < 6) {
    std::fprintf(stderr, "qsp-devtool: bad command\n");
    return 2;
  }
  int partitions = std::stoi(argv[4]);
  long long count = std::stoll(argv[5]);
  double rate = argc > 6 ? std::stod(argv[6]) : 0;
  uint64_t seed = argc > 7 ? std::stoull(argv[7]) : 1;
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  auto prod = qsp::kafka::producer::make(cs);
  if (!prod)
    return fail(prod.error());
  std::mt19937_64 rng{seed};
  zipf users{100000, 0.9};
  std::uniform_int_distribution<uint64_t> convs{0, 999999};
  std::uniform_int_distribution<int> fanout{1, 5};
  auto t0 = std::chrono::steady_clock::now();
  auto epoch_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  qsp::core::dispatch d;
  for (long long i = 0; (count == 0 || i < count) && !stop_requested; ++i) {
    d.conversation_id = "c-" + std::to_string(convs(rng));
    d.created_at = epoch_ms + i;
    d.recipients.clear();
    for (int r = fanout(rng); r > 0; --r)
      d.recipients.push_back("u" + std::to_string(users(rng)));
    auto value = qsp::core::encode_json(d);
    if (auto ok = prod->send(topic, static_cast<int32_t>(i % partitions), value); !ok)
      return fail(ok.error());
    if (rate > 0) {
      auto due = t0 + std::chrono::duration<double>(static_cast<double>(i + 1) / rate);
      std::this_thread::sleep_until(due);
    }
  }
  if (auto ok = prod->flush(); !ok)
    return fail(ok.error());
  return 0;
}
