// The projection's deterministic test kit (docs/TESTING.md): the real
// projection actors on CAF's deterministic scheduler, against a simulated
// Kafka dispatch log and a simulated Redis (standalone or Redis Cluster),
// with fault injection, a manual clock and invariants checked after every
// step.  No broker, no Redis, no sleeping: a host's test runs in
// milliseconds and replays exactly.
//
//   qsp::testkit::kit k;                      // 3 partitions, Redis standalone
//   k.produce(0, "conv-1", 1000, {"alice", "bob"});
//   k.start();
//   ASSERT_TRUE(k.run_until_ready()) << k.explain();   // the gate is open
//   auto front = spawn_my_front(k.system(), k.projection());
//   auto list = k.request<qsp::session_list>(front, my_pull_atom_v, "alice");
//   k.redis_freeze();
//   ASSERT_TRUE(k.run_until_state("dirty")) << k.explain();
//   k.redis_release();
//   ASSERT_TRUE(k.run_until_ready()) << k.explain();
//   EXPECT_TRUE(k.model_equals_redis()) << k.explain();
//
// Link qsession::projection_testkit.  Works with any test framework (the kit
// reports through return values and explain(), never by aborting).  Neither
// librdkafka nor hiredis is involved.
//
// This header includes the kit's two parts:
//   qsession/projection/testkit/kit.hpp       the kit (kit_options, kit);
//   qsession/projection/testkit/schedule.hpp  randomized schedules
//                                             (run_schedule, schedule_host).
#pragma once

#include "qsession/projection/testkit/kit.hpp"
#include "qsession/projection/testkit/schedule.hpp"
