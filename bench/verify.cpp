// qsp-bench-verify: after a benchmark run, checks that every recipient of
// every record below the node's checkpoints is projected.
//
//   qsp-bench-verify [--cluster] BOOTSTRAP TOPIC PARTITIONS REDIS_HOST REDIS_PORT NAMESPACE
//                    [CONVS_PREFIX]
//
// Reads each partition from offset 0 up to the node's checkpoint
// (NAMESPACE:checkpoint:TOPIC:P next_offset), decodes each record with the
// node's own decoder and asks Redis (pipelined ZSCORE) whether
// CONVS_PREFIX{user} holds the conversation with a score >= created_at (ZADD
// GT: a later record may have raised it).  Prints the number of records
// checked and, per partition, the offset ranges of records with a missing or
// lower entry.  Exit 0: nothing missing; 1: something is missing; 2: usage.
// A benchmark-side consistency check, not the product's audit command.
//
// --cluster: Redis Cluster mode.  REDIS_HOST:REDIS_PORT is a seed node; the
// slot map comes from its CLUSTER SLOTS (parsed by the node's own
// qsp::redis::parse_cluster_slots), every key is sent to the primary serving
// its slot (qsp::redis::key_slot), pipelined per primary.  The map must hold
// for the whole check (no resharding meanwhile): a MOVED/ASK is an error here.
// Either mode: QSP_BENCH_REDIS_USER and QSP_BENCH_REDIS_PASSWORD_FILE, when
// set, authenticate every connection (AUTH user password); the user needs
// HGET and ZSCORE on the keys (and CLUSTER SLOTS with --cluster).
// An error reply to any command is exit 2, naming it.
#include <librdkafka/rdkafka.h>
#include <hiredis/hiredis.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/dispatch.hpp"
#include "redis/cluster_map.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "qsp-bench-verify: %s\n", what.c_str());
  std::exit(2);
}

struct probe {
  int32_t partition;
  int64_t offset;
  int64_t created_at;
};

/// One Redis connection (the standalone server, or one primary) and the
/// probes sent on it whose replies are not read yet.
struct lane {
  redisContext* c = nullptr;
  std::string where;
  std::vector<probe> pending;
};

redisContext* connect(const std::string& host, int port) {
  timeval tv{10, 0};
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr || c->err)
    die("redis " + host + ":" + std::to_string(port) + ": "
        + std::string{c ? c->errstr : "cannot allocate"});
  redisSetTimeout(c, tv);
  const char* user = std::getenv("QSP_BENCH_REDIS_USER");
  const char* pwfile = std::getenv("QSP_BENCH_REDIS_PASSWORD_FILE");
  if (user != nullptr && *user != 0 && pwfile != nullptr && *pwfile != 0) {
    std::ifstream in{pwfile};
    std::string pw;
    if (!in || !std::getline(in, pw))
      die(std::string{"cannot read the password file "} + pwfile);
    while (!pw.empty() && (pw.back() == '\r' || pw.back() == '\n'))
      pw.pop_back();
    auto* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s %b", user, pw.data(), pw.size()));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR)
      die("redis " + host + ":" + std::to_string(port) + ": AUTH as " + user + " failed"
          + (r ? std::string{": "} + std::string{r->str, r->len} : std::string{}));
    freeReplyObject(r);
  }
  return c;
}

redisReply* command_or_die(lane& l, const std::string& what, redisReply* r) {
  if (r == nullptr)
    die("redis " + l.where + ": " + what + ": " + l.c->errstr);
  if (r->type == REDIS_REPLY_ERROR)
    die("redis " + l.where + ": " + what + ": " + std::string{r->str, r->len});
  return r;
}

} // namespace

int main(int argc, char** argv) {
  bool cluster = argc > 1 && std::strcmp(argv[1], "--cluster") == 0;
  if (cluster) {
    --argc;
    ++argv;
  }
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: qsp-bench-verify [--cluster] BOOTSTRAP TOPIC PARTITIONS "
                         "REDIS_HOST REDIS_PORT NAMESPACE [CONVS_PREFIX]\n");
    return 2;
  }
  std::string bootstrap = argv[1], topic = argv[2];
  int parts = std::atoi(argv[3]);
  std::string ns = argv[6], prefix = argc > 7 ? argv[7] : "convs:";

  // The lanes: one (standalone), or one per primary of the slot map.
  std::vector<lane> lanes;
  qsp::redis::slot_map map;
  {
    lane seed{connect(argv[4], std::atoi(argv[5])), std::string{argv[4]} + ":" + argv[5], {}};
    if (!cluster) {
      lanes.push_back(std::move(seed));
    } else {
      auto* r = command_or_die(seed, "CLUSTER SLOTS",
                               static_cast<redisReply*>(redisCommand(seed.c, "CLUSTER SLOTS")));
      auto m = qsp::redis::parse_cluster_slots(r, argv[4]);
      freeReplyObject(r);
      redisFree(seed.c);
      if (!m)
        die("CLUSTER SLOTS: " + caf::to_string(m.error()));
      map = std::move(*m);
      if (!map.full_coverage())
        die("the slot map does not cover every slot");
      for (auto& sh : map.shards())
        lanes.push_back(lane{connect(sh.primary.host, sh.primary.port), sh.primary.address(), {}});
    }
  }
  auto lane_of = [&](const std::string& k) -> lane& {
    if (!cluster)
      return lanes[0];
    int i = map.shard_of(qsp::redis::key_slot(k));
    if (i < 0)
      die("no primary serves the slot of " + k);
    return lanes[static_cast<size_t>(i)];
  };

  std::vector<int64_t> end(static_cast<size_t>(parts), 0);
  for (int p = 0; p < parts; ++p) {
    auto key = ns + ":checkpoint:" + topic + ":" + std::to_string(p);
    auto& l = lane_of(key);
    auto* r = command_or_die(l, "HGET " + key,
                             static_cast<redisReply*>(
                                 redisCommand(l.c, "HGET %s next_offset", key.c_str())));
    if (r->type == REDIS_REPLY_STRING)
      end[static_cast<size_t>(p)] = std::atoll(r->str);
    freeReplyObject(r);
  }

  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()},
                      {"group.id", "qsp-bench-verify"}, {"enable.auto.commit", "false"},
                      {"isolation.level", "read_committed"}, {"log_level", "3"}})
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
      die(std::string{"kafka property "} + k + ": " + err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
  if (rk == nullptr)
    die(std::string{"kafka: "} + err);
  rd_kafka_poll_set_consumer(rk);
  auto* list = rd_kafka_topic_partition_list_new(parts);
  int64_t total = 0;
  for (int p = 0; p < parts; ++p)
    if (end[static_cast<size_t>(p)] > 0) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = 0;
      total += end[static_cast<size_t>(p)];
    }
  if (auto e = rd_kafka_assign(rk, list))
    die(std::string{"assign: "} + rd_kafka_err2str(e));
  rd_kafka_topic_partition_list_destroy(list);

  // Per partition: a bitmap of bad offsets, filled from the ZSCORE answers.
  std::vector<std::vector<bool>> bad(static_cast<size_t>(parts));
  for (int p = 0; p < parts; ++p)
    bad[static_cast<size_t>(p)].assign(static_cast<size_t>(end[static_cast<size_t>(p)]), false);
  int64_t probes = 0, missing = 0, undecodable = 0;
  size_t in_flight = 0;
  auto flush = [&] {
    for (auto& l : lanes) {
      for (auto& pr : l.pending) {
        void* r = nullptr;
        if (redisGetReply(l.c, &r) != REDIS_OK)
          die("redis " + l.where + ": " + l.c->errstr);
        auto* rep = command_or_die(l, "ZSCORE", static_cast<redisReply*>(r));
        bool ok = rep->type == REDIS_REPLY_STRING
                  && std::strtoll(rep->str, nullptr, 10) >= pr.created_at;
        freeReplyObject(rep);
        if (!ok) {
          ++missing;
          bad[static_cast<size_t>(pr.partition)][static_cast<size_t>(pr.offset)] = true;
        }
      }
      l.pending.clear();
    }
    in_flight = 0;
  };

  qsp::core::json_decoder dec;
  qsp::core::dispatch d;
  std::string why, key;
  int64_t read = 0, idle = 0;
  while (read < total && idle < 300) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) {
      ++idle;
      continue;
    }
    idle = 0;
    auto P = static_cast<size_t>(m->partition);
    if (!m->err && m->offset < end[P]) {
      ++read;
      if (!dec.decode({static_cast<const char*>(m->payload), m->len}, d, why)) {
        ++undecodable;
      } else {
        for (auto& u : d.recipients) {
          key.assign(prefix).append(u);
          auto& l = lane_of(key);
          redisAppendCommand(l.c, "ZSCORE %b %b", key.data(), key.size(),
                             d.conversation_id.data(), d.conversation_id.size());
          l.pending.push_back(probe{m->partition, m->offset, d.created_at});
          ++probes;
          ++in_flight;
        }
        if (in_flight >= 20000)
          flush();
      }
    }
    rd_kafka_message_destroy(m);
  }
  flush();
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  for (auto& l : lanes)
    redisFree(l.c);

  std::printf("records=%" PRId64 " of=%" PRId64 " probes=%" PRId64 " missing=%" PRId64
              " undecodable=%" PRId64 "\n",
              read, total, probes, missing, undecodable);
  int64_t bad_records = 0;
  for (int p = 0; p < parts; ++p) {
    auto& b = bad[static_cast<size_t>(p)];
    std::string ranges;
    int shown = 0;
    for (size_t i = 0; i < b.size();) {
      if (!b[i]) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < b.size() && b[j])
        ++j;
      bad_records += static_cast<int64_t>(j - i);
      if (shown++ < 20)
        ranges += " [" + std::to_string(i) + "," + std::to_string(j) + ")";
      i = j;
    }
    if (!ranges.empty())
      std::printf("partition %d: records with missing entries at offsets%s%s\n", p, ranges.c_str(),
                  shown > 20 ? " ..." : "");
  }
  std::printf("bad_records=%" PRId64 "\n", bad_records);
  return read == total && missing == 0 && undecodable == 0 ? 0 : 1;
}
