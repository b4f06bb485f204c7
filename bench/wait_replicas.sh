#!/usr/bin/env bash
# The cost of redis.wait-replicas (docs/RELIABILITY.md, "WAIT for replicas"):
# `qsession-projection catch-up` of N dispatches from an empty Redis, with
# redis.wait-replicas 0 (no WAIT), 1 and 2, RUNS times each, interleaved, into
# a private primary with two replicas (real redis-servers on free loopback
# ports, no persistence, stopped by PID at the end).  Prints every run and the
# medians: wall time, the node's CPU (user+sys), checkpoint EVALs, WAIT calls
# and the primary's microseconds per WAIT (INFO commandstats: execution only,
# not the time WAIT blocks).  Then the round trip a WAIT adds, seen by a
# client: 2,000 x (SET; PING) against 2,000 x (SET; WAIT n 100), n = 1, 2,
# one redis-cli connection, each command waiting for its reply, 3 rounds.
#
#   bench/wait_replicas.sh [N] [RUNS] [BATCH]   (defaults 200000, 3, 5000)
#
# Needs a build (build/bin, or QSP_BIN_DIR) and a running Kafka of
# scripts/services (its env: QSP_SERVICES_ENV, else .services/env); the
# topic is created and deleted here.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${1:-200000}
RUNS=${2:-3}
BATCH=${3:-5000}
BIN=${QSP_BIN_DIR:-$ROOT/build/bin}
ENV_FILE=${QSP_SERVICES_ENV:-$ROOT/.services/env}
for b in qsession-projection qsp-devtool; do
  [[ -x $BIN/$b ]] || { echo "wait_replicas: build first ($BIN/$b missing)" >&2; exit 2; }
done
[[ -f $ENV_FILE ]] || { echo "wait_replicas: no services env ($ENV_FILE): scripts/services start" >&2; exit 2; }
BOOT=$(sed -n 's/^export KAFKA_BOOTSTRAP=//p' "$ENV_FILE")
[[ -n $BOOT ]] || { echo "wait_replicas: $ENV_FILE has no KAFKA_BOOTSTRAP" >&2; exit 2; }

work=$(mktemp -d /tmp/qsp-wait-replicas.XXXXXX)
read -r -a ports < <(python3 "$ROOT/scripts/kafka/ports.py" ports 3)
pids=()
topic=wait-replicas-$$
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$BIN/qsp-devtool" delete-topic "$BOOT" "$topic" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
cli() { redis-cli -h 127.0.0.1 -p "${ports[0]}" "$@"; }

for i in 0 1 2; do
  mkdir -p "$work/r$i"
  args=(--bind 127.0.0.1 --port "${ports[$i]}" --save "" --appendonly no --dir "$work/r$i"
        --logfile "$work/r$i/redis.log")
  (( i == 0 )) || args+=(--replicaof 127.0.0.1 "${ports[0]}")
  redis-server "${args[@]}" &
  pids+=($!)
done
for i in 1 2; do
  for _ in $(seq 200); do
    redis-cli -h 127.0.0.1 -p "${ports[$i]}" INFO replication 2>/dev/null | grep -q '^master_link_status:up' && break
    sleep 0.1
  done
  redis-cli -h 127.0.0.1 -p "${ports[$i]}" INFO replication | grep -q '^master_link_status:up' \
    || { echo "wait_replicas: replica on port ${ports[$i]} did not link" >&2; exit 1; }
done

"$BIN/qsp-devtool" create-topic "$BOOT" "$topic" 2 >/dev/null
"$BIN/qsp-devtool" produce "$BOOT" "$topic" 2 "$N" >/dev/null 2>&1

stat_of() { # COMMAND FIELD -> from INFO commandstats (0 if absent)
  cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:\(.*[:,]\)\{0,1\}$2=\([0-9.]*\).*/\2/p" | head -n1 | grep . || echo 0
}

printf '%-4s %-5s %-8s %-8s %-6s %-6s %s\n' run wait wall_s cpu_s evals waits us/wait
declare -A walls=() cpus=()
for run in $(seq "$RUNS"); do
  for w in 0 1 2; do
    cli FLUSHALL >/dev/null
    # the replicas have applied the flush before the clock starts
    cli WAIT 2 5000 >/dev/null
    cli CONFIG RESETSTAT >/dev/null
    ns=bench-$run-$w
    /usr/bin/time -f '%e %U %S' -o "$work/time" \
      "$BIN/qsession-projection" catch-up --projection.dispatch-topic="$topic" \
        --projection.partition-count=2 --projection.namespace="$ns" \
        --projection.convs-prefix="$ns:convs:" --projection.max-batch-records="$BATCH" \
        --kafka.bootstrap-servers="$BOOT" --redis.host=127.0.0.1 --redis.port="${ports[0]}" \
        --redis.wait-replicas="$w" --log.level=warn >"$work/out" 2>&1 \
      || { cat "$work/out" >&2; exit 1; }
    read -r wall user sys <"$work/time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    printf '%-4s %-5s %-8s %-8s %-6s %-6s %s\n' "$run" "$w" "$wall" "$cpu" \
      "$(stat_of eval calls)" "$(stat_of wait calls)" "$(stat_of wait usec_per_call)"
    walls[$w]+="$wall "; cpus[$w]+="$cpu "
  done
done
echo
echo "round trip per write, one client (us per SET + second command):"
for round in 1 2 3; do
  for second in "PING" "WAIT 1 100" "WAIT 2 100"; do
    for i in $(seq 2000); do echo "SET rtt:$i v"; echo "$second"; done >"$work/cmds"
    t0=$(date +%s%N); cli <"$work/cmds" >/dev/null; t1=$(date +%s%N)
    printf '  round %s  SET+%-11s %6d us\n' "$round" "$second" $(( (t1 - t0) / 2000 / 1000 ))
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo
echo "medians over $RUNS runs, $N dispatches, 2 partitions, batch $BATCH:"
for w in 0 1 2; do
  printf '  wait-replicas=%s  wall %s s  node cpu %s s\n' "$w" "$(median <<<"${walls[$w]}")" "$(median <<<"${cpus[$w]}")"
done
