// qsp-bench-latency: append-to-projected latency of a running node.
//
//   qsp-bench-latency BOOTSTRAP TOPIC PARTITIONS REDIS_HOST REDIS_PORT NAMESPACE EXPECTED TIMEOUT_S
//                     [WARMUP_S]
//
// 1. Takes the base offsets (high watermarks) of every partition, polls the
//    node's checkpoint keys `NAMESPACE:checkpoint:TOPIC:P` (HGET next_offset,
//    one pipelined round trip for all partitions, every ~1 ms) and prints
//    "observing ..." once it has the first answer: start the producer then.
//    Every time a checkpoint moves from a to b, the offsets [a, b) count as
//    projected at that moment (the checkpoint is written only after every ZADD
//    of the batch was acknowledged).
// 2. Stops once EXPECTED records past the base offsets are covered, or after
//    TIMEOUT_S seconds.
// 3. Reads the covered records back from Kafka and takes each one's record
//    timestamp (CreateTime: the producer's clock when it appended the record,
//    in ms).  Latency = observation time of the covering checkpoint - record
//    timestamp.
// 4. Prints key=value lines: counts, mean, p50, p90, p99, p99.9, max (ms) and
//    the p99 of every 5-second window (by record timestamp).  Records stamped
//    within WARMUP_S (default 0) of the first one are left out of the figures
//    (their p99 is printed apart): a fresh producer process holds its first
//    ~0.5 s of records while it connects and acquires its idempotent
//    producer id, which is the producer's start-up, not the projection.
// 5. For the breakdown, a plain consumer of its own (same client settings as
//    the node's: read_committed, default fetch settings) reads the topic live
//    during the run: record timestamp -> received by that consumer is the
//    producer + broker share ("kafka_*" figures); the rest is the node
//    (fetch queue, idle poll, decode, ZADDs, checkpoint) and the 1-ms polling.
//
// Resolution: record timestamps are whole milliseconds (truncated, so the
// figures are biased up by ~0.5 ms on average) and the poll interval adds
// up to ~1 ms (0.5 ms on average).  Producer, node and this tool share one clock.
#include <librdkafka/rdkafka.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::system_clock;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           clock_type::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "qsp-bench-latency: %s\n", what.c_str());
  std::exit(1);
}

struct coverage {
  int64_t from, to;  // offsets [from, to)
  int64_t at_us;     // when the checkpoint was seen at `to`
};

rd_kafka_t* make_consumer(const std::string& bootstrap) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const char* k, const char* v) {
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
      die(std::string{"kafka property "} + k + ": " + err);
  };
  set("bootstrap.servers", bootstrap.c_str());
  set("client.id", "qsp-bench-latency");
  set("group.id", "qsp-bench-latency");
  set("enable.auto.commit", "false");
  set("enable.auto.offset.store", "false");
  set("isolation.level", "read_committed");
  set("log_level", "3");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
  if (rk == nullptr)
    die(std::string{"cannot create a consumer: "} + err);
  rd_kafka_poll_set_consumer(rk);
  return rk;
}

double pct(const std::vector<double>& sorted, double q) {
  if (sorted.empty())
    return 0;
  auto i = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 9 && argc != 10) {
    std::fprintf(stderr, "usage: qsp-bench-latency BOOTSTRAP TOPIC PARTITIONS REDIS_HOST "
                         "REDIS_PORT NAMESPACE EXPECTED TIMEOUT_S [WARMUP_S]\n");
    return 2;
  }
  std::string bootstrap = argv[1], topic = argv[2];
  int parts = std::atoi(argv[3]);
  std::string redis_host = argv[4];
  int redis_port = std::atoi(argv[5]);
  std::string ns = argv[6];
  int64_t expected = std::atoll(argv[7]);
  double timeout_s = std::atof(argv[8]);
  double warmup_s = argc > 9 ? std::atof(argv[9]) : 0;
  if (parts <= 0 || expected <= 0 || timeout_s <= 0)
    die("PARTITIONS, EXPECTED and TIMEOUT_S must be > 0");

  rd_kafka_t* rk = make_consumer(bootstrap);
  std::vector<int64_t> base(static_cast<size_t>(parts));
  for (int p = 0; p < parts; ++p) {
    int64_t lo = 0, hi = 0;
    if (auto e = rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &lo, &hi, 10000))
      die("watermarks of partition " + std::to_string(p) + ": " + rd_kafka_err2str(e));
    base[static_cast<size_t>(p)] = hi;
  }

  timeval tv{5, 0};
  redisContext* rc = redisConnectWithTimeout(redis_host.c_str(), redis_port, tv);
  if (rc == nullptr || rc->err)
    die("redis: " + std::string{rc ? rc->errstr : "cannot allocate"});
  redisSetTimeout(rc, tv);
  std::vector<std::string> keys;
  for (int p = 0; p < parts; ++p)
    keys.push_back(ns + ":checkpoint:" + topic + ":" + std::to_string(p));

  // One pipelined round trip: the next_offset of every partition (-1: absent).
  std::vector<int64_t> seen(static_cast<size_t>(parts));
  auto poll = [&] {
    for (auto& k : keys)
      redisAppendCommand(rc, "HGET %b next_offset", k.data(), k.size());
    for (int p = 0; p < parts; ++p) {
      void* r = nullptr;
      if (redisGetReply(rc, &r) != REDIS_OK)
        die(std::string{"redis: "} + rc->errstr);
      auto* rep = static_cast<redisReply*>(r);
      seen[static_cast<size_t>(p)] = rep->type == REDIS_REPLY_STRING ? std::atoll(rep->str) : -1;
      freeReplyObject(rep);
    }
  };

  poll();
  std::vector<int64_t> cur(static_cast<size_t>(parts));
  int64_t behind = 0;
  for (size_t p = 0; p < cur.size(); ++p) {
    cur[p] = std::max(seen[p], base[p]);
    behind += std::max<int64_t>(0, base[p] - std::max<int64_t>(seen[p], 0));
  }
  std::vector<std::vector<coverage>> events(static_cast<size_t>(parts));
  int64_t base_sum = 0;
  for (auto b : base)
    base_sum += b;
  std::printf("observing topic=%s partitions=%d base_offsets=%" PRId64 " node_behind=%" PRId64 "\n",
              topic.c_str(), parts, base_sum, behind);
  std::fflush(stdout);

  // The live reference consumer (breakdown).
  std::atomic<bool> stop_live{false};
  std::vector<std::pair<int64_t, double>> live;  // record timestamp, ms until received
  live.reserve(static_cast<size_t>(expected));
  std::thread live_reader{[&] {
    rd_kafka_t* lk = make_consumer(bootstrap);
    auto* l = rd_kafka_topic_partition_list_new(parts);
    for (int p = 0; p < parts; ++p)
      rd_kafka_topic_partition_list_add(l, topic.c_str(), p)->offset = base[static_cast<size_t>(p)];
    rd_kafka_assign(lk, l);
    rd_kafka_topic_partition_list_destroy(l);
    while (!stop_live.load() && static_cast<int64_t>(live.size()) < expected) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(lk, 100);
      if (m == nullptr)
        continue;
      if (!m->err) {
        rd_kafka_timestamp_type_t tt;
        int64_t ts = rd_kafka_message_timestamp(m, &tt);
        live.emplace_back(ts, static_cast<double>(now_us()) / 1000.0 - static_cast<double>(ts));
      }
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(lk);
    rd_kafka_destroy(lk);
  }};

  auto t_start = now_us();
  auto deadline = t_start + static_cast<int64_t>(timeout_s * 1e6);
  int64_t covered = 0, polls = 0;
  while (covered < expected && now_us() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(1000));
    poll();
    ++polls;
    auto t = now_us();
    for (size_t p = 0; p < cur.size(); ++p)
      if (seen[p] > cur[p]) {
        events[p].push_back(coverage{cur[p], seen[p], t});
        covered += seen[p] - cur[p];
        cur[p] = seen[p];
      }
  }
  auto t_end = now_us();
  redisFree(rc);
  stop_live = true;
  live_reader.join();

  // Read the covered records back for their timestamps.
  auto* list = rd_kafka_topic_partition_list_new(parts);
  int64_t to_read = 0;
  for (int p = 0; p < parts; ++p) {
    auto P = static_cast<size_t>(p);
    if (cur[P] > base[P]) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = base[P];
      to_read += cur[P] - base[P];
    }
  }
  if (auto e = rd_kafka_assign(rk, list))
    die(std::string{"assign: "} + rd_kafka_err2str(e));
  rd_kafka_topic_partition_list_destroy(list);
  std::vector<size_t> next_event(static_cast<size_t>(parts), 0);
  std::vector<std::pair<int64_t, double>> samples;  // record timestamp, latency ms
  samples.reserve(static_cast<size_t>(to_read));
  int64_t read = 0, first_ts = -1;
  auto read_deadline = now_us() + 120 * 1000000LL;
  while (read < to_read && now_us() < read_deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 200);
    if (m == nullptr)
      continue;
    if (m->err) {
      rd_kafka_message_destroy(m);
      continue;
    }
    auto P = static_cast<size_t>(m->partition);
    if (m->offset >= base[P] && m->offset < cur[P]) {
      auto& ev = events[P];
      auto& i = next_event[P];
      while (i < ev.size() && ev[i].to <= m->offset)
        ++i;
      if (i < ev.size() && ev[i].from <= m->offset) {
        rd_kafka_timestamp_type_t tt;
        int64_t ts = rd_kafka_message_timestamp(m, &tt);
        double ms = static_cast<double>(ev[i].at_us) / 1000.0 - static_cast<double>(ts);
        samples.emplace_back(ts, ms);
        if (first_ts < 0 || ts < first_ts)
          first_ts = ts;
      }
      ++read;
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);

  std::vector<double> sorted, warm;
  std::map<int64_t, std::vector<double>> windows;  // 5-s window (by timestamp) -> latencies
  auto warm_end = first_ts + static_cast<int64_t>(warmup_s * 1000);
  for (auto& [ts, ms] : samples) {
    if (ts < warm_end) {
      warm.push_back(ms);
      continue;
    }
    sorted.push_back(ms);
    windows[(ts - warm_end) / 5000].push_back(ms);
  }
  std::sort(sorted.begin(), sorted.end());
  std::sort(warm.begin(), warm.end());
  // QSP_LATENCY_SAMPLES=FILE: every sample as "timestamp_ms latency_ms", for plots.
  if (const char* dump = std::getenv("QSP_LATENCY_SAMPLES"))
    if (FILE* f = std::fopen(dump, "w")) {
      for (auto& [ts, ms] : samples)
        std::fprintf(f, "%" PRId64 " %.2f\n", ts, ms);
      std::fclose(f);
      if (FILE* k = std::fopen((std::string{dump} + ".kafka").c_str(), "w")) {
        for (auto& [ts, ms] : live)
          std::fprintf(k, "%" PRId64 " %.2f\n", ts, ms);
        std::fclose(k);
      }
    }
  double sum = 0;
  for (double v : sorted)
    sum += v;
  double secs = static_cast<double>(t_end - t_start) / 1e6;
  std::printf("expected=%" PRId64 " covered=%" PRId64 " measured=%zu warmup=%zu warmup_p99_ms=%.2f"
              " polls=%" PRId64 " observe_seconds=%.1f poll_interval_ms=%.2f\n",
              expected, covered, sorted.size(), warm.size(), pct(warm, 0.99), polls, secs,
              polls > 0 ? secs * 1000.0 / static_cast<double>(polls) : 0.0);
  std::printf("latency_mean_ms=%.2f latency_p50_ms=%.2f latency_p90_ms=%.2f latency_p99_ms=%.2f "
              "latency_p999_ms=%.2f latency_max_ms=%.2f latency_min_ms=%.2f\n",
              sorted.empty() ? 0.0 : sum / static_cast<double>(sorted.size()), pct(sorted, 0.5),
              pct(sorted, 0.9), pct(sorted, 0.99), pct(sorted, 0.999),
              sorted.empty() ? 0.0 : sorted.back(), sorted.empty() ? 0.0 : sorted.front());
  std::vector<double> kafka;
  for (auto& [ts, ms] : live)
    if (ts >= warm_end)
      kafka.push_back(ms);
  std::sort(kafka.begin(), kafka.end());
  std::printf("kafka_measured=%zu kafka_p50_ms=%.2f kafka_p90_ms=%.2f kafka_p99_ms=%.2f "
              "kafka_p999_ms=%.2f kafka_max_ms=%.2f\n",
              kafka.size(), pct(kafka, 0.5), pct(kafka, 0.9), pct(kafka, 0.99), pct(kafka, 0.999),
              kafka.empty() ? 0.0 : kafka.back());
  std::string w;
  for (auto& [k, v] : windows) {
    std::sort(v.begin(), v.end());
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%.1f", w.empty() ? "" : ",", pct(v, 0.99));
    w += buf;
  }
  std::printf("window_p99_ms=%s\n", w.c_str());
  return covered >= expected ? 0 : 3;
}
