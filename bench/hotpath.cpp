// qsp-bench-hotpath: the node's per-record work in one thread, stage by
// stage, without Kafka, CAF scheduling or Redis in the way: decoding the
// realistic envelopes into batches (json_decoder::decode_append), the
// writer's coalescing (writer_state::coalesce) and, with a RESP server to
// talk to (qsp-bench-resp-sink), formatting and sending the ZADDs and
// counting their replies (redis_session_store::send + confirm).  Each stage
// is timed in thread CPU time (CLOCK_THREAD_CPUTIME_ID, so kernel time of
// the sends counts and other processes on the box do not) over the same
// records, best of --rounds, and reported in ns per dispatch: the figure to
// compare levers by (docs/PERFORMANCE.md, "Each lever").  The records are
// the ones `qsp-devtool produce --realistic` writes (same generators, same
// seed), split into the same per-partition batches the node forms.
//
// Usage: qsp-bench-hotpath [--dispatches N] [--partitions P] [--batch B]
//                          [--rounds R] [--sink-port PORT]
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "actors/redis_writer.hpp"
#include "app/workload.hpp"
#include "core/dispatch.hpp"
#include "qsession/projection/types.hpp"
#include "redis/stores.hpp"

namespace {

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The generators of app/devtool.cpp (produce): the records here are the
// ones scripts/bench produces.
using qsp::workload::add_envelope;
using qsp::workload::zipf;

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "qsp-bench-hotpath: %s\nusage: qsp-bench-hotpath [--dispatches N] [--partitions P] "
               "[--batch B] [--rounds R] [--sink-port PORT]\n",
               why);
  std::exit(2);
}

long long number_arg(const std::string& a, size_t prefix) {
  char* end = nullptr;
  long long v = std::strtoll(a.c_str() + prefix, &end, 10);
  if (end == a.c_str() + prefix || *end != '\0' || v <= 0)
    usage(("not a positive number: " + a).c_str());
  return v;
}

} // namespace

int main(int argc, char** argv) {
  long long n = 1000000, partitions = 3, batch = 5000, rounds = 5, sink_port = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--dispatches=", 0) == 0)
      n = number_arg(a, 13);
    else if (a.rfind("--partitions=", 0) == 0)
      partitions = number_arg(a, 13);
    else if (a.rfind("--batch=", 0) == 0)
      batch = number_arg(a, 8);
    else if (a.rfind("--rounds=", 0) == 0)
      rounds = number_arg(a, 9);
    else if (a.rfind("--sink-port=", 0) == 0)
      sink_port = number_arg(a, 12);
    else
      usage(("unknown argument " + a).c_str());
  }
  // The records, per partition, as produce writes them (seed 1), back to back
  // in one buffer per partition like the payloads of a fetch response.
  std::vector<std::string> logs(static_cast<size_t>(partitions));
  std::vector<std::vector<std::string_view>> values(static_cast<size_t>(partitions));
  std::vector<std::vector<size_t>> ends(static_cast<size_t>(partitions));
  {
    std::mt19937_64 rng{1};
    zipf users{100000, 0.9};
    std::uniform_int_distribution<uint64_t> convs{0, 999999};
    std::uniform_int_distribution<int> fanout{1, 5};
    std::mt19937_64 envelope_rng{1 ^ 0x9e3779b97f4a7c15ull};
    const long long epoch_ms = 1764800000000;
    qsp::core::dispatch d;
    for (long long i = 0; i < n; ++i) {
      d.conversation_id = "c-" + std::to_string(convs(rng));
      d.created_at = epoch_ms + i;
      d.recipients.clear();
      for (int r = fanout(rng); r > 0; --r)
        d.recipients.push_back("u" + std::to_string(users(rng)));
      auto value = qsp::core::encode_json(d);
      add_envelope(value, i, envelope_rng, "u" + std::to_string(users(envelope_rng)));
      auto& log = logs[static_cast<size_t>(i % partitions)];
      log += value;
      ends[static_cast<size_t>(i % partitions)].push_back(log.size());
    }
    for (size_t p = 0; p < logs.size(); ++p)
      for (size_t k = 0, begin = 0; k < ends[p].size(); begin = ends[p][k++])
        values[p].push_back(std::string_view{logs[p]}.substr(begin, ends[p][k] - begin));
  }
  // Stage 1: decode into batches of `batch` records per partition, as the
  // consumers do (one arena per batch, sized like the previous one).
  std::vector<qsp::partition_batch> batches;
  qsp::core::json_decoder decoder;
  std::string why;
  double best_decode = 1e300;
  for (long long r = 0; r < rounds; ++r) {
    batches.clear();
    double t0 = thread_seconds();
    for (size_t p = 0; p < values.size(); ++p) {
      size_t hint_text = 0, hint_records = 0, hint_recipients = 0;
      for (size_t i = 0; i < values[p].size(); i += static_cast<size_t>(batch)) {
        qsp::partition_batch b;
        b.partition = static_cast<int32_t>(p);
        b.records.text.reserve(hint_text);
        b.records.records.reserve(hint_records);
        b.records.recipients.reserve(hint_recipients);
        size_t end = std::min(values[p].size(), i + static_cast<size_t>(batch));
        for (size_t k = i; k < end; ++k)
          if (!decoder.decode_append(values[p][k], b.records, why)) {
            std::fprintf(stderr, "qsp-bench-hotpath: record rejected: %s\n", why.c_str());
            return 1;
          }
        hint_text = b.records.text.size();
        hint_records = b.records.records.size();
        hint_recipients = b.records.recipients.size();
        batches.push_back(std::move(b));
      }
    }
    best_decode = std::min(best_decode, thread_seconds() - t0);
  }
  // Stage 2: coalescing, batch by batch, with the writer's scratch reused.
  qsp::writer_state ws;
  double best_coalesce = 1e300;
  size_t zadds = 0, members = 0;
  for (long long r = 0; r < rounds; ++r) {
    zadds = members = 0;
    double t0 = thread_seconds();
    for (auto& b : batches) {
      auto& ups = ws.coalesce(b);
      zadds += ups.size();
      for (auto& u : ups)
        members += u.count;
    }
    best_coalesce = std::min(best_coalesce, thread_seconds() - t0);
  }
  // Stage 3: the ZADDs formatted, sent and their replies counted.
  double best_send = -1;
  if (sink_port > 0) {
    qsp::redis::settings s;
    s.host = "127.0.0.1";
    s.port = static_cast<uint16_t>(sink_port);
    auto store = qsp::redis::redis_session_store::open(s);
    if (!store) {
      std::fprintf(stderr, "qsp-bench-hotpath: %s\n", qsp::describe(store.error()).c_str());
      return 1;
    }
    best_send = 1e300;
    for (long long r = 0; r < rounds; ++r) {
      double spent = 0;
      for (auto& b : batches) {
        auto& ups = ws.coalesce(b);
        double t0 = thread_seconds();
        if (auto ok = (*store)->send(ups); !ok) {
          std::fprintf(stderr, "qsp-bench-hotpath: send: %s\n", qsp::describe(ok.error()).c_str());
          return 1;
        }
        // A wait >= 0 takes the integer fast path, as the writer does.
        auto done = (*store)->confirm(ups.size(), std::chrono::milliseconds{10000});
        if (!done || !*done) {
          std::fprintf(stderr, "qsp-bench-hotpath: confirm failed\n");
          return 1;
        }
        spent += thread_seconds() - t0;
      }
      best_send = std::min(best_send, spent);
    }
  }
  auto per = [n](double s) { return s * 1e9 / static_cast<double>(n); };
  std::printf("dispatches=%lld batches=%zu zadds=%zu members=%zu\n", n, batches.size(), zadds,
              members);
  std::printf("decode_ns=%.1f coalesce_ns=%.1f", per(best_decode), per(best_coalesce));
  if (best_send >= 0)
    std::printf(" send_ns=%.1f", per(best_send));
  std::printf("  (per dispatch, thread CPU, best of %lld)\n", rounds);
  return 0;
}
