#!/usr/bin/env bash
# scripts/services without any service running (no process is started): the
# answers of status, the fault commands and option parsing on empty, default,
# HA, secured and Redis Cluster state dirs.  Usage: services_cli_test.sh <repo>
set -uo pipefail
SERVICES=$1/scripts/services
dir=$(mktemp -d /tmp/qsp-services-cli.XXXXXX)
trap 'rm -rf "$dir"' EXIT
export QSP_SERVICES_DIR=$dir
fails=0

# expect RC PATTERN ARGS... : `scripts/services ARGS` exits RC and its output
# (stdout and stderr) matches the extended regex PATTERN
expect() {
  local want=$1 pattern=$2 out rc; shift 2
  out=$("$SERVICES" "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
    printf 'FAIL: services %s: exit %s (want %s), output:\n%s\n(want /%s/)\n' "$*" "$rc" "$want" "$out" "$pattern"
    fails=$((fails + 1))
  else
    printf 'ok: services %s -> %s\n' "$*" "$rc"
  fi
}

# A state dir without an env file (as after stop): not running, exit 3.
expect 3 '^redis: not running' status
expect 3 '^kafka: not running' status
expect 1 "unknown option '--bogus' \(only --ha, --secure or --redis-cluster\)" start --bogus
expect 1 "unknown option '--redis-clustr' \(only --ha, --secure or --redis-cluster\)" restart --redis-clustr
expect 1 "holds no Redis Cluster set \(scripts/services start --redis-cluster\)" rc-kill 1
expect 1 "holds no Redis Cluster set" rc-role 1
expect 1 "holds no Redis Cluster set" rc-move-slots 1 2 10
expect 1 "holds no Redis Cluster set" rc-move-slot 0 1
expect 1 "holds no HA set" kill-broker 1
expect 1 "holds no HA set" start-redis primary
# The default set's Redis alone (no ID): nothing to stop or start here.
expect 1 "redis is not running \(start first\)" stop-redis
expect 1 "no default set here \(start first\)" start-redis
expect 0 '' stop
# start --ha without the fault proxy: a clear error before anything starts.
QSP_DEVTOOL=/bin/true QSP_TOXIPROXY=$dir/no-toxiproxy-server \
  expect 1 "no-toxiproxy-server is missing: the HA set's fault proxy \(run scripts/bootstrap" start --ha
[ -e "$dir/ha-ports" ] && { echo "FAIL: start --ha without toxiproxy picked ports"; fails=$((fails + 1)); }
expect 0 '' stop

# An HA state dir whose processes are gone.
echo ha >"$dir/topology"
expect 3 '^redis-1: not running$' status          # no ports recorded yet
printf '%s\n' "redis-1 1" "redis-2 2" "redis-3 3" "sentinel-1 4" "sentinel-2 5" "sentinel-3 6" \
  "kafka-1 7" "kafka-2 8" "kafka-3 9" "controller-1 10" "controller-2 11" "controller-3 12" >"$dir/ha-ports"
expect 3 '^redis-1: not running \(port 1\)' status
expect 3 '^sentinel-3: not running \(port 6\)' status
expect 3 '^kafka-2: not running \(port 8\)' status
expect 3 '^toxiproxy: not running$' status
# A stale toxiproxy pid file naming a process that is not ours: not signalled.
echo $$ >"$dir/toxiproxy.pid"
expect 3 '^toxiproxy: not running$' status
expect 1 "kafka: no such node '7' \(ids: 1 2 3\)" kill-broker 7
expect 1 "redis: no such node 'x' \(ids: 1 2 3 or primary\)" kill-redis x
expect 1 "kafka-1 is not running" kill-broker 1
expect 1 "no sentinel answers; cannot tell the primary" kill-redis primary
# A stale pid file that names a process which is not ours is never signalled.
echo $$ >"$dir/kafka-1.pid"
expect 1 "kafka-1 is not running" kill-broker 1
expect 0 '' stop
[ -e "$dir/toxiproxy.pid" ] && { echo "FAIL: stop left toxiproxy's stale pid file"; fails=$((fails + 1)); }
[ -e "$dir/topology" ] && { echo "FAIL: stop left the topology marker"; fails=$((fails + 1)); }

# start --secure without the readiness probe tool: a clear error before anything starts.
QSP_DEVTOOL=$dir/no-devtool \
  expect 1 "no-devtool is missing: the secured set's readiness probe needs it" start --secure
[ -e "$dir/secure-ports" ] && { echo "FAIL: start --secure without the probe picked ports"; fails=$((fails + 1)); }

# A secured state dir whose processes are gone.
echo secure >"$dir/topology"
expect 3 '^redis-secure: not running$' status      # no ports recorded yet
printf '%s\n' "kafka 1" "wrongname 2" "controller 3" "redis 4" >"$dir/secure-ports"
expect 3 '^redis-secure: not running \(TLS port 4\)' status
expect 3 '^kafka-secure: not running \(SASL_SSL port 1\)' status
# Stale pid files naming a process that is not ours: not signalled, not running.
echo $$ >"$dir/kafka-secure.pid"; echo $$ >"$dir/redis-secure.pid"
expect 3 '^kafka-secure: not running' status
expect 0 '' stop
[ -e "$dir/kafka-secure.pid" ] && { echo "FAIL: stop left kafka-secure's stale pid file"; fails=$((fails + 1)); }
[ -e "$dir/topology" ] && { echo "FAIL: stop left the secured topology marker"; fails=$((fails + 1)); }

# A Redis Cluster state dir whose processes are gone.
echo rcluster >"$dir/topology"
expect 3 '^rcluster-1: not running$' status       # no ports recorded yet
expect 3 '^rcluster-kafka: not running$' status
expect 1 "no such Redis Cluster node '1' \(ids: 1 2 3 4 5 6\)" rc-kill 1
for i in 1 2 3 4 5 6; do printf 'redis-%s %s\nbus-%s %s\n' "$i" "$i" "$i" $((i + 10)); done >"$dir/rc-ports"
printf '%s\n' "kafka 20" "controller 21" >>"$dir/rc-ports"
expect 3 '^rcluster-1: not running \(port 1\)' status
expect 3 '^rcluster-6: not running \(port 6\)' status
expect 3 '^rcluster-kafka: not running \(port 20\)' status
expect 1 "no such Redis Cluster node '7' \(ids: 1 2 3 4 5 6\)" rc-kill 7
expect 1 "no such Redis Cluster node 'x'" rc-role x
expect 1 "usage: rc-kill ID" rc-kill
expect 1 "usage: rc-move-slots FROM_ID TO_ID COUNT" rc-move-slots 1 2
expect 1 "usage: rc-move-slot SLOT TO_ID" rc-move-slot 5
expect 1 "rc-move-slots: COUNT must be 1..16384, not 'x'" rc-move-slots 1 2 x
expect 1 "rc-move-slots: FROM and TO are the same node" rc-move-slots 2 2 5
expect 1 "rc-move-slot: SLOT must be 0..16383, not '16384'" rc-move-slot 16384 1
for c in rc-kill rc-stop rc-cut-replica rc-resume rc-takeover rc-failover rc-role; do
  expect 1 "rcluster-3 is not running" "$c" 3
done
expect 1 "rcluster-2 is not running" rc-move-slots 2 1 5
expect 1 "rcluster-4 is not running" rc-move-slot 0 4
# Stale pid files naming a process that is not ours: not signalled, not running.
echo $$ >"$dir/rcluster-2.pid"; echo $$ >"$dir/rcluster-kafka.pid"
expect 3 '^rcluster-2: not running \(port 2\)' status
expect 1 "rcluster-2 is not running" rc-kill 2
expect 1 "rcluster-2 is not running" rc-stop 2
# The other sets' commands: rcluster has no default broker, no HA set.
expect 1 "holds no HA set" kill-broker 1
expect 0 '' stop
[ -e "$dir/rcluster-2.pid" ] && { echo "FAIL: stop left rcluster-2's stale pid file"; fails=$((fails + 1)); }
[ -e "$dir/rcluster-kafka.pid" ] && { echo "FAIL: stop left rcluster-kafka's stale pid file"; fails=$((fails + 1)); }
[ -e "$dir/topology" ] && { echo "FAIL: stop left the Redis Cluster topology marker"; fails=$((fails + 1)); }
expect 1 "holds no Redis Cluster set" rc-start 1

[ $fails = 0 ] && echo "all passed"
exit $((fails > 0))
