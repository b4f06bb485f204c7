#!/usr/bin/env bash
# How long the startup checkpoint read blocks Redis on a big keyspace: the
# old read script (one EVAL that SCANs the whole keyspace inside the script,
# taken from `git show HEAD:redis/stores.cpp`) against the new read path (one
# atomic EVAL over meta + the known checkpoint keys, then an incremental
# client-side SCAN for stray keys), both taken verbatim from the sources.
#
#   bench/startup_scan.sh            1,000,000 unrelated keys, 16 partitions
#   KEYS=200000 PARTITIONS=64 bench/startup_scan.sh
#
# Starts its own redis-server on a free loopback port (never touches the
# shared one in .services/env) and stops it by PID at exit.  Bounded: the
# measurement itself is killed after BENCH_TIMEOUT seconds (default 300).
#
# Redis is single-threaded: while one command (an EVAL included) runs, no
# other client is served.  Reported per path:
#   wall      client-observed time of the step(s)
#   server    SLOWLOG durations (slowlog-log-slower-than 0): how long each
#             command held the server
#   max PING  worst round trip of a second client pinging every ~1 ms
#             meanwhile: what the rest of the world saw
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NKEYS=${KEYS:-1000000}
PARTITIONS=${PARTITIONS:-16}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
NS=bench_ns
TOPIC=bench.topic

if [ -f "$ROOT/.services/env" ]; then
  # Only to say which Redis this is NOT using.
  # shellcheck disable=SC1091
  . "$ROOT/.services/env"
  echo "shared test Redis (untouched): ${REDIS_HOST:-?}:${REDIS_PORT:-?}"
fi
command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v python3 >/dev/null \
  || { echo "needs redis-server, redis-cli and python3" >&2; exit 1; }

tmp=$(mktemp -d /tmp/qsp-startup-scan.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$tmp" \
  --logfile "$tmp/redis.log" --enable-debug-command local \
  --slowlog-log-slower-than 0 --slowlog-max-len 500000 &
pid=$!
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 100); do
  [ "$(cli PING 2>/dev/null || true)" = PONG ] && break
  sleep 0.1
done
[ "$(cli PING)" = PONG ] || { echo "redis-server did not start" >&2; exit 1; }
echo "private redis-server pid $pid on 127.0.0.1:$port ($(redis-server --version | awk '{print $3}'))"

# The keyspace: NKEYS unrelated string keys, meta, PARTITIONS checkpoints,
# and one stray checkpoint (a partition beyond the count).
cli DEBUG POPULATE "$NKEYS" filler 16 >/dev/null
cli HSET "$NS:meta" format_version 1 dispatch_topic "$TOPIC" partition_count "$PARTITIONS" \
  cluster_id c topic_id t >/dev/null
for p in $(seq 0 $((PARTITIONS - 1))); do
  cli HSET "$NS:checkpoint:$TOPIC:$p" format_version 1 dispatch_topic "$TOPIC" \
    partition_count "$PARTITIONS" cluster_id c topic_id t partition "$p" next_offset 100 >/dev/null
done
cli HSET "$NS:checkpoint:$TOPIC:$((PARTITIONS + 83))" next_offset 1 >/dev/null
echo "keyspace: $(cli DBSIZE) keys"

lua_of() { # <source text> -> the read_script Lua
  sed -n '/read_script = R"lua(/,/)lua";/p' | sed '1d;$d'
}
git -C "$ROOT" show HEAD:redis/stores.cpp | lua_of > "$tmp/old.lua"
lua_of < "$ROOT/redis/stores.cpp" > "$tmp/new.lua"
[ -s "$tmp/old.lua" ] && [ -s "$tmp/new.lua" ] || { echo "cannot extract the Lua scripts" >&2; exit 1; }
grep -q "'SCAN'" "$tmp/old.lua" || { echo "HEAD's read script has no SCAN: nothing to compare" >&2; exit 1; }

# (a) the old script through redis-cli EVAL, as the node ran it: wall time.
cli SLOWLOG RESET >/dev/null
t0=$(date +%s%N)
old_out=$(timeout "$BENCH_TIMEOUT" redis-cli -p "$port" EVAL "$(cat "$tmp/old.lua")" 1 "$NS:meta" "$NS:checkpoint:$TOPIC:*" | wc -l)
t1=$(date +%s%N)
old_cli_ms=$(( (t1 - t0) / 1000000 ))
echo "(a) old script via redis-cli EVAL: ${old_cli_ms} ms wall (Redis blocked throughout), ${old_out} reply lines"

# (b) both paths again from one client (a Python RESP client, no process per step) with a concurrent prober, and the new
# path's steps one by one.
timeout "$BENCH_TIMEOUT" python3 - "$port" "$NS" "$TOPIC" "$PARTITIONS" "$tmp/old.lua" "$tmp/new.lua" <<'PY'
import socket, sys, threading, time

port, ns, topic, parts = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
old_lua, new_lua = open(sys.argv[5]).read(), open(sys.argv[6]).read()

class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")
    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()
    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+",): return rest.decode()
        if t == b"-": raise RuntimeError(rest.decode())
        if t == b":": return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0: return None
            data = self.f.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)

class Prober(threading.Thread):
    """PINGs every ~1 ms; max round trip while armed."""
    def __init__(self):
        super().__init__(daemon=True)
        self.c, self.stop, self.max, self.n = Conn(), False, 0.0, 0
    def run(self):
        while not self.stop:
            t = time.perf_counter(); self.c.cmd("PING"); d = time.perf_counter() - t
            self.max = max(self.max, d); self.n += 1
            time.sleep(0.001)
    def reset(self):
        self.max, self.n = 0.0, 0

def slowlog(c):
    entries = c.cmd("SLOWLOG", "GET", "-1")  # newest first
    return [(e[3][0].upper(), e[2]) for e in reversed(entries)]  # (command, us), oldest first

c = Conn()
probe = Prober(); probe.start(); time.sleep(0.2)
prefix = "%s:checkpoint:%s:" % (ns, topic)
pattern = prefix.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?").replace("[", "\\[").replace("]", "\\]") + "*"

# old
c.cmd("SLOWLOG", "RESET"); time.sleep(0.05); probe.reset()
t = time.perf_counter()
old = c.cmd("EVAL", old_lua, 1, ns + ":meta", pattern)
old_wall = time.perf_counter() - t
time.sleep(0.05)
old_ping = probe.max
old_server = max(us for cmd, us in slowlog(c) if cmd == "EVAL")
old_found = (len(old) - 2) // 3

# new
c.cmd("SLOWLOG", "RESET"); time.sleep(0.05); probe.reset()
known = [prefix + str(p) for p in range(parts)]
t = time.perf_counter()
atomic = c.cmd("EVAL", new_lua, 1 + len(known), ns + ":meta", *known, "meta")
t_atomic = time.perf_counter() - t
cursor, steps, strays, max_step, found = "0", 0, [], 0.0, (len(atomic) - 2) // 3
known_set = set(known)
t_scan0 = time.perf_counter()
while True:
    ts = time.perf_counter()
    cursor, keys = c.cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
    max_step = max(max_step, time.perf_counter() - ts)
    steps += 1
    s = [k for k in keys if k not in known_set]
    if s:
        r = c.cmd("EVAL", new_lua, len(s), *s, "keys")
        strays += [r[i] for i in range(0, len(r), 3)]
    if cursor == "0":
        break
t_scan = time.perf_counter() - t_scan0
new_wall = time.perf_counter() - t
time.sleep(0.05)
new_ping = probe.max
log = slowlog(c)
scans = [us for cmd, us in log if cmd == "SCAN"]
evals = [us for cmd, us in log if cmd == "EVAL"]
probe.stop = True

ms = lambda s: "%.1f" % (s * 1000)
print()
print("%-44s %12s %14s %12s" % ("", "wall (ms)", "server (ms)", "max PING"))
print("%-44s %12s %14s %12s" % ("old: one EVAL scanning the keyspace", ms(old_wall), "%.1f" % (old_server / 1000), ms(old_ping)))
print("%-44s %12s %14s %12s" % ("new: total (atomic EVAL + SCAN loop)", ms(new_wall), "%.1f (sum)" % ((sum(scans) + sum(evals)) / 1000), ms(new_ping)))
print("%-44s %12s %14s %12s" % ("new:   atomic EVAL (meta + %d known keys)" % parts, ms(t_atomic), "%.3f" % (evals[0] / 1000 if evals else 0), ""))
print("%-44s %12s %14s %12s" % ("new:   SCAN loop, %d steps (COUNT 1000)" % steps, ms(t_scan), "%.1f (sum)" % (sum(scans) / 1000), ""))
print("%-44s %12s %14s %12s" % ("new:   longest single SCAN step", ms(max_step), "%.3f" % (max(scans) / 1000 if scans else 0), ""))
if scans:
    q = sorted(scans)
    pct = lambda f: q[min(len(q) - 1, int(f * len(q)))] / 1000
    print("%-44s %12s %14s %12s" % ("new:   SCAN step p50 / p99", "", "%.3f / %.3f" % (pct(0.5), pct(0.99)), ""))
print("(CPU contention on the host inflates single steps: compare p99 and max)")
print()
print("checkpoint keys found: old %d, new %d known + %d stray (%s)" % (old_found, found, len(strays), ", ".join(strays)))
PY
