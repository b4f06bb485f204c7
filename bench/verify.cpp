// qsp-bench-verify: after a benchmark run, checks that every recipient of
// every record below the node's checkpoints is projected.
//
//   qsp-bench-verify BOOTSTRAP TOPIC PARTITIONS REDIS_HOST REDIS_PORT NAMESPACE [CONVS_PREFIX]
//
// Reads each partition from offset 0 up to the node's checkpoint
// (NAMESPACE:checkpoint:TOPIC:P next_offset), decodes each record with the
// node's own decoder and asks Redis (pipelined ZSCORE) whether
// CONVS_PREFIX{user} holds the conversation with a score >= created_at (ZADD
// GT: a later record may have raised it).  Prints the number of records
// checked and, per partition, the offset ranges of records with a missing or
// lower entry.  Exit 0: nothing missing; 1: something is missing; 2: usage.
// A benchmark-side consistency check, not the product's audit command.
#include <librdkafka/rdkafka.h>
#include <hiredis/hiredis.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dispatch.hpp"

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

} // namespace

int main(int argc, char** argv) {
  if (argc != 7 && argc != 8) {
    std::fprintf(stderr, "usage: qsp-bench-verify BOOTSTRAP TOPIC PARTITIONS REDIS_HOST REDIS_PORT "
                         "NAMESPACE [CONVS_PREFIX]\n");
    return 2;
  }
  std::string bootstrap = argv[1], topic = argv[2];
  int parts = std::atoi(argv[3]);
  std::string ns = argv[6], prefix = argc > 7 ? argv[7] : "convs:";

  timeval tv{10, 0};
  redisContext* rc = redisConnectWithTimeout(argv[4], std::atoi(argv[5]), tv);
  if (rc == nullptr || rc->err)
    die("redis: " + std::string{rc ? rc->errstr : "cannot allocate"});
  redisSetTimeout(rc, tv);
  std::vector<int64_t> end(static_cast<size_t>(parts), 0);
  for (int p = 0; p < parts; ++p) {
    auto key = ns + ":checkpoint:" + topic + ":" + std::to_string(p);
    auto* r = static_cast<redisReply*>(redisCommand(rc, "HGET %s next_offset", key.c_str()));
    if (r == nullptr)
      die(std::string{"redis: "} + rc->errstr);
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
  std::vector<probe> pending;
  int64_t probes = 0, missing = 0, undecodable = 0;
  auto flush = [&] {
    for (auto& pr : pending) {
      void* r = nullptr;
      if (redisGetReply(rc, &r) != REDIS_OK)
        die(std::string{"redis: "} + rc->errstr);
      auto* rep = static_cast<redisReply*>(r);
      bool ok = rep->type == REDIS_REPLY_STRING
                && std::strtoll(rep->str, nullptr, 10) >= pr.created_at;
      freeReplyObject(rep);
      if (!ok) {
        ++missing;
        bad[static_cast<size_t>(pr.partition)][static_cast<size_t>(pr.offset)] = true;
      }
    }
    pending.clear();
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
          redisAppendCommand(rc, "ZSCORE %b %b", key.data(), key.size(),
                             d.conversation_id.data(), d.conversation_id.size());
          pending.push_back(probe{m->partition, m->offset, d.created_at});
          ++probes;
        }
        if (pending.size() >= 20000)
          flush();
      }
    }
    rd_kafka_message_destroy(m);
  }
  flush();
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  redisFree(rc);

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
