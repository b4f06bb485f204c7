// Helpers for integration tests against the real services started by
// scripts/services (addresses in .services/env).  Each test uses its own
// topic, namespace and key prefix.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dispatch.hpp"
#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "redis/connection.hpp"

namespace qsp::test {

struct services {
  std::string redis_host;
  uint16_t redis_port = 0;
  std::string kafka_bootstrap;
};

/// Reads QSP_SERVICES_ENV or the repo's .services/env; aborts the test run
/// with a clear message when the services are not running.
const services& env();

/// A name unique to this process and call: prefix-<pid>-<n>.
std::string unique_name(const std::string& prefix);

kafka::client_settings kafka_client();
redis::settings redis_settings(const std::string& ns, const std::string& convs_prefix);

/// A connection for checks and direct edits.
std::unique_ptr<redis::connection> redis_conn();
/// Runs a command and returns the reply as text (integers in decimal), or "ERR:<msg>".
std::string redis_cmd(redis::connection& c, const std::vector<std::string>& argv);
/// A sorted set as member -> score.
std::map<std::string, int64_t> zset(redis::connection& c, const std::string& key);

struct cli_result {
  int rc = -1;
  std::string out;
  std::string err;
};

/// Runs build/bin/qsession-projection with `args` and waits for it.
cli_result run_cli(const std::vector<std::string>& args);

/// Starts the node in the background; returns its pid.  Output goes to `log_path`.
int spawn_cli(const std::vector<std::string>& args, const std::string& log_path);
/// Waits for a child started with spawn_cli; returns its exit code (128+sig if killed).
int wait_cli(int pid);

/// The common flags for a test's topic/namespace.
std::vector<std::string> node_args(const std::string& topic, int partitions, const std::string& ns,
                                   const std::string& convs_prefix);

/// The expected content of every convs:{user}: user -> conv -> max created_at.
using model = std::map<std::string, std::map<std::string, int64_t>>;
void apply(model& m, const core::dispatch& d);

/// Reads back every user of `m` from Redis and returns what differs (empty: equal).
std::vector<std::string> diff_with_redis(const model& m, const std::string& convs_prefix);

/// A deterministic dispatch number `i` (users u0..u{users-1}).
core::dispatch make_dispatch(uint64_t i, int users = 50);

/// Creates a topic and waits until its metadata is visible.
void create_topic(const std::string& topic, int partitions);

} // namespace qsp::test
