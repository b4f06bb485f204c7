#!/usr/bin/env bash
# scripts/run-local after a refusal (issue 42): the node stays up in state
# refused (/readyz), SIGTERM to the script stops it (what Ctrl-C does on a
# terminal; a script started with & here ignores SIGINT, and bash cannot
# trap a signal ignored on entry), the script
# exits with the node's 3, keeps the services up with their data, and
# prints the runbook's `verify`, pointed at them, which then runs (and
# refuses with the same problem).  Its own services in a temp dir, a demo
# topic of 3 partitions and a node configured for 4 (the refusal).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
dir=$(mktemp -d /tmp/qsp-run-local.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
fail() { echo "FAIL: $*"; echo "--- run-local output:"; cat "$dir/out" || true; exit 1; }
script=
cleanup() {
  [[ -n $script ]] && kill -TERM "$script" 2>/dev/null && wait "$script" 2>/dev/null || true
  QSP_SERVICES_DIR=$dir/services scripts/services stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
QSP_SERVICES_DIR=$dir/services DEMO_TOPIC=run-local-test DEMO_BACKLOG=50 DEMO_RATE=5 \
  HTTP_LISTEN=127.0.0.1:$port QSP_RUN_LOCAL_ARGS=--projection.partition-count=4 \
  scripts/run-local >"$dir/out" 2>&1 &
script=$!
refused=
for _ in $(seq 1 240); do   # bounded: 120 s
  if curl -s "127.0.0.1:$port/readyz" | grep -q '"state":"refused"'; then refused=1; break; fi
  kill -0 "$script" 2>/dev/null || break
  sleep 0.5
done
[[ -n $refused ]] || fail "no /readyz in state refused within 120 s"
curl -s "127.0.0.1:$port/readyz" | grep -q 'partition_count' || fail "/readyz last_error does not name partition_count"
kill -TERM "$script"
rc=0; wait "$script" || rc=$?
script=
[[ $rc -eq 3 ]] || fail "run-local exited $rc, not the node's 3"
grep -q "the node refused (exit 3); the services stay up" "$dir/out" || fail "no refusal notice"
. "$dir/services/env"
[[ $(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" PING) == PONG ]] || fail "Redis was stopped"
verify=$(sed -n '/the node refused/,$p' "$dir/out" | grep -m1 'qsession-projection verify ' | sed 's/^ *//')
[[ -n $verify ]] || fail "no verify command printed"
vrc=0; eval "$verify" >"$dir/verify" 2>&1 || vrc=$?
[[ $vrc -eq 3 ]] || { cat "$dir/verify"; fail "the printed verify exited $vrc, not 3"; }
grep -q 'partition_count' "$dir/verify" || { cat "$dir/verify"; fail "verify does not name partition_count"; }
echo "run-local kept the services after the refusal, exited 3; the printed verify refused too"
