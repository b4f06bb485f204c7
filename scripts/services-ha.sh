# shellcheck shell=bash
# The replicated ("HA") service set of scripts/services; sourced by it, not run
# on its own.  Uses its helpers (STATE, HOST, pid_of, spawn, pick_ports,
# kafka_jvm_opts, log, die, now, elapsed, env_value).
#
# Set (all on free loopback ports, one state dir as for the default set):
#   redis-1..3     redis-server; redis-1 is the primary at start, redis-2 and
#                  redis-3 replicate from it.  No persistence (as the default
#                  set).  Each runs from <state>/redis-N/redis.conf, which
#                  Sentinel rewrites (CONFIG REWRITE) when it changes a role, so
#                  a restarted node keeps the role Sentinel gave it.
#   sentinel-1..3  Redis Sentinel monitoring master name $MASTER_NAME, quorum 2,
#                  down-after-milliseconds 2000, failover-timeout 10000.
#   kafka-1..3     Kafka KRaft nodes, each broker+controller, node ids 1..3, a
#                  three-voter dynamic quorum (format --initial-controllers);
#                  default.replication.factor=3, min.insync.replicas=2, the
#                  offsets/transaction/share-state topics RF 3 with min ISR 2,
#                  unclean.leader.election.enable=false (tests set it per topic).
#                  Each broker has a second listener, PROXIED, advertised at the
#                  port of a toxiproxy proxy in front of it, for clients that
#                  must reach the cluster through the fault proxy only.
#   toxiproxy      toxiproxy-server (.deps/bin, installed by scripts/bootstrap)
#                  with the proxies kafka-1..3 (listen: the PROXIED advertised
#                  port, upstream: the broker's PROXIED listener).  A client
#                  bootstrapping from KAFKA_PROXIED_BOOTSTRAP gets only those
#                  addresses in its metadata, so every byte between it and the
#                  cluster passes the proxy; the brokers among themselves, the
#                  controllers and every client of KAFKA_BOOTSTRAP do not.
#                  Tests add toxics (latency, reset_peer, timeout) through its
#                  HTTP API (TOXIPROXY_API) and create proxies of their own.
#
# State (besides the default layout's env, logs/ and .lock):
#   topology             "ha" while the set is (being) started
#   ha-ports             NAME PORT lines (redis-N, sentinel-N, kafka-N, controller-N,
#                        proxied-N (the broker's PROXIED listener), toxi-kafka-N (its
#                        proxy's port, advertised), toxiproxy (the HTTP API))
#   NAME.pid             one per process
#   redis-N/ sentinel-N/ working dirs with redis.conf / sentinel.conf
#   kafka-N/             server.properties and data/
#   logs/                redis-N.log sentinel-N.log kafka-N/kafka.log kafka-N.out toxiproxy.out
#                        kafka-N-format.log

HA_IDS=(1 2 3)
MASTER_NAME=${QSP_REDIS_MASTER_NAME:-qsp-primary}
# 2 s: a killed primary is failed over in ~3-5 s, well inside the tests'
# bounds, yet far above any pause a loaded 2-core machine gives a redis-server
# (a false failover would be a flaky test).  10 s: Sentinel's failover-timeout
# bounds a failover that got stuck (it is retried after 2x this) and the
# reconfiguration of the replicas; the Redis default (3 min) would stall a
# test for minutes after a failed attempt.
SENTINEL_DOWN_AFTER_MS=${QSP_SENTINEL_DOWN_AFTER_MS:-2000}
SENTINEL_FAILOVER_TIMEOUT_MS=${QSP_SENTINEL_FAILOVER_TIMEOUT_MS:-10000}
# Three JVMs and six Redis processes start on a shared 2-core machine.
HA_START_TIMEOUT=${QSP_START_TIMEOUT:-180}
TOXIPROXY_BIN=${QSP_TOXIPROXY:-$ROOT/.deps/bin/toxiproxy-server}

rcli() { local port=$1; shift; timeout 5 redis-cli -h "$HOST" -p "$port" "$@" 2>/dev/null; }

ha_port() { awk -v n="$1" '$1 == n { print $2 }' "$STATE/ha-ports" 2>/dev/null || true; }

# ha_list PREFIX [id=] -> comma-separated HOST:PORT of PREFIX-1..3 (with "id=": 1=HOST:PORT,...)
ha_list() {
  local out=() i
  for i in "${HA_IDS[@]}"; do out+=("${2:+$i=}$HOST:$(ha_port "$1-$i")"); done
  local IFS=,; echo "${out[*]}"
}

ha_pids() {
  local out=() i pid
  for i in "${HA_IDS[@]}"; do
    pid=$(pid_of "$1-$i") || pid=-
    out+=("$i=$pid")
  done
  local IFS=,; echo "${out[*]}"
}

# ha_names [KIND...] -> the service names, by kind (default: sentinel kafka redis)
ha_names() {
  local kind i kinds=("$@")
  [ $# -gt 0 ] || kinds=(sentinel kafka redis)
  for kind in "${kinds[@]}"; do for i in "${HA_IDS[@]}"; do echo "$kind-$i"; done; done
}

ha_any_running() {
  local n
  for n in $(ha_names) toxiproxy; do pid_of "$n" >/dev/null && return 0; done
  return 1
}

is_ha_state() { [ "$(cat "$STATE/topology" 2>/dev/null)" = ha ]; }

# ---------------------------------------------------------------- probes
# The reason a probe failed, for the timeout message.
HA_WHY=

# replica_up PORT -> 0 if the node is a replica whose link to its primary is up
replica_up() {
  local info
  info=$(rcli "$1" INFO replication | tr -d '\r') || { HA_WHY="redis on port $1 does not answer"; return 1; }
  if ! grep -q '^master_link_status:up' <<<"$info"; then
    HA_WHY="replica on port $1: $(grep -E '^(role|master_port|master_link_status):' <<<"$info" | paste -sd' ')"
    return 1
  fi
}

# sentinel_master PORT -> HOST:PORT of the primary that sentinel names
sentinel_master() {
  local a=()
  mapfile -t a < <(rcli "$1" SENTINEL GET-MASTER-ADDR-BY-NAME "$MASTER_NAME")
  [ ${#a[@]} -eq 2 ] && [ -n "${a[1]}" ] || return 1
  echo "${a[0]}:${a[1]}"
}

# sentinel_ok PORT PRIMARY -> 0 if the sentinel names PRIMARY, knows both
# replicas and both other sentinels and sees the primary up
sentinel_ok() {
  local port=$1 want=$2 got fields
  got=$(sentinel_master "$port") || { HA_WHY="sentinel on port $port does not answer"; return 1; }
  if [ "$got" != "$want" ]; then HA_WHY="sentinel on port $port names $got, not $want"; return 1; fi
  fields=$(rcli "$port" SENTINEL MASTER "$MASTER_NAME" | paste - - | tr '\t' '=')
  local flags slaves others
  flags=$(sed -n 's/^flags=//p' <<<"$fields")
  slaves=$(sed -n 's/^num-slaves=//p' <<<"$fields")
  others=$(sed -n 's/^num-other-sentinels=//p' <<<"$fields")
  if [ "$flags" != master ] || [ "${slaves:-0}" -lt 2 ] || [ "${others:-0}" -lt 2 ]; then
    HA_WHY="sentinel on port $port: flags=$flags num-slaves=${slaves:-?} num-other-sentinels=${others:-?}"
    return 1
  fi
}

# broker_ok PORT -> 0 if that broker answers with group and transaction
# coordinators and the cluster lists all three brokers (registered, unfenced)
broker_ok() {
  HA_WHY=$("$DEVTOOL" probe "$HOST:$1" --coordinators --brokers=${#HA_IDS[@]} 2>&1) && return 0
  HA_WHY="broker on port $1: $HA_WHY"
  return 1
}

# toxi_api METHOD PATH [JSON] -> toxiproxy's answer (fails on an HTTP error)
toxi_api() {
  curl -sS --fail-with-body --max-time 5 -X "$1" -H 'Content-Type: application/json' \
       ${3:+--data "$3"} "http://$HOST:$(ha_port toxiproxy)$2"
}

# toxi_proxies_ok -> 0 if toxiproxy answers and has kafka-1..3, each enabled
toxi_proxies_ok() {
  local all i
  all=$(toxi_api GET /proxies 2>&1) || { HA_WHY="toxiproxy on port $(ha_port toxiproxy): $all"; return 1; }
  for i in "${HA_IDS[@]}"; do
    grep -q "\"name\":\"kafka-$i\"" <<<"$all" || { HA_WHY="toxiproxy has no proxy kafka-$i"; return 1; }
  done
}

# toxi_create_proxies: kafka-N listens on the advertised PROXIED port of
# broker N and forwards to its PROXIED listener
toxi_create_proxies() {
  local i out
  for i in "${HA_IDS[@]}"; do
    out=$(toxi_api POST /proxies "{\"name\":\"kafka-$i\",\"listen\":\"$HOST:$(ha_port "toxi-kafka-$i")\",\"upstream\":\"$HOST:$(ha_port "proxied-$i")\",\"enabled\":true}" 2>&1) \
      || ha_fail_start "toxiproxy did not create proxy kafka-$i: $out" "$STATE/logs/toxiproxy.out"
  done
}

# ---------------------------------------------------------------- config
write_redis_conf() {
  local i=$1 dir=$STATE/redis-$1
  cat >"$dir/redis.conf" <<EOF
# Generated by scripts/services start --ha.  Sentinel rewrites the replication
# lines when it changes this node's role; a restart keeps that role.
port $(ha_port "redis-$i")
bind $HOST
daemonize no
dir $dir
logfile $STATE/logs/redis-$i.log
save ""
appendonly no
repl-diskless-sync yes
repl-diskless-sync-delay 0
EOF
  [ "$i" = 1 ] || echo "replicaof $HOST $(ha_port redis-1)" >>"$dir/redis.conf"
}

write_sentinel_conf() {
  local i=$1 dir=$STATE/sentinel-$1
  cat >"$dir/sentinel.conf" <<EOF
# Generated by scripts/services start --ha; Sentinel rewrites it as it learns.
port $(ha_port "sentinel-$i")
bind $HOST
daemonize no
dir $dir
logfile $STATE/logs/sentinel-$i.log
sentinel monitor $MASTER_NAME $HOST $(ha_port redis-1) 2
sentinel down-after-milliseconds $MASTER_NAME $SENTINEL_DOWN_AFTER_MS
sentinel failover-timeout $MASTER_NAME $SENTINEL_FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $MASTER_NAME 1
EOF
}

write_ha_server_properties() {
  local i=$1 f=$STATE/kafka-$1/server.properties
  cat >"$f" <<EOF
# Generated by scripts/services start --ha; rewritten on every start.
process.roles=broker,controller
node.id=$i
listeners=PLAINTEXT://$HOST:$(ha_port "kafka-$i"),CONTROLLER://$HOST:$(ha_port "controller-$i"),PROXIED://$HOST:$(ha_port "proxied-$i")
# PROXIED: advertised at toxiproxy's proxy in front of it (network faults)
advertised.listeners=PLAINTEXT://$HOST:$(ha_port "kafka-$i"),PROXIED://$HOST:$(ha_port "toxi-kafka-$i")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=$(ha_list controller)
log.dirs=$STATE/kafka-$i/data

# three replicas, two in sync for an acks=all write
num.partitions=1
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
share.coordinator.state.topic.num.partitions=1

# test-friendly behaviour
auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
log.segment.delete.delay.ms=1000
# a killed broker is fenced (its leaderships move, it leaves the ISRs) after
# 3 s without a heartbeat instead of 9 s
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000

# small machine (three of these share two cores)
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
EOF
  if [ -n "${KAFKA_EXTRA_CONFIG:-}" ]; then
    printf '\n# KAFKA_EXTRA_CONFIG\n%s\n' "$KAFKA_EXTRA_CONFIG" >>"$f"
  fi
}

# ---------------------------------------------------------------- spawn
spawn_ha() {
  local name=$1 i=${1##*-}
  case $name in
    redis-*)
      # shellcheck disable=SC2086  # REDIS_EXTRA_ARGS is a whitespace-separated list
      spawn "$name" "$STATE/$name" "$STATE/logs/$name.out" \
        redis-server "$STATE/$name/redis.conf" ${REDIS_EXTRA_ARGS:-} ;;
    sentinel-*)
      spawn "$name" "$STATE/$name" "$STATE/logs/$name.out" \
        redis-server "$STATE/$name/sentinel.conf" --sentinel ;;
    kafka-*)
      local heap=${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}
      kafka_jvm_opts "$STATE/logs/$name"
      # shellcheck disable=SC2086  # KAFKA_HEAP_OPTS is a whitespace-separated list
      spawn "$name" "$STATE/$name" "$STATE/logs/$name.out" \
        java $heap "${KAFKA_JVM_OPTS[@]}" -cp "$KAFKA_CP" kafka.Kafka "$STATE/$name/server.properties" ;;
    toxiproxy)
      mkdir -p "$STATE/toxiproxy"
      spawn toxiproxy "$STATE/toxiproxy" "$STATE/logs/toxiproxy.out" \
        "$TOXIPROXY_BIN" -host "$HOST" -port "$(ha_port toxiproxy)" ;;
    *) die "unknown service $name" ;;
  esac
}

# node_ready NAME -> 0 once that one process answers (a broker: and all three
# are registered); used after a single restart
node_ready() {
  local port; port=$(ha_port "$1")
  case $1 in
    redis-*|sentinel-*) HA_WHY="$1 on port $port does not answer PING"
                        [ "$(rcli "$port" PING)" = PONG ] ;;
    kafka-*) broker_ok "$port" ;;
  esac
}

# ---------------------------------------------------------------- env
write_ha_env() {
  local primary replicas
  primary=${1:-$(env_value REDIS_PORT)}
  replicas=${2:-$(env_value REDIS_REPLICAS)}
  cat >"$STATE/env.tmp" <<EOF
export QSP_SERVICES_TOPOLOGY=ha
export REDIS_HOST=$HOST
export REDIS_PORT=$primary
export REDIS_MASTER_NAME=$MASTER_NAME
export REDIS_SENTINELS=$(ha_list sentinel)
export REDIS_REPLICAS=$replicas
export REDIS_NODES=$(ha_list redis id)
export KAFKA_BOOTSTRAP=$(ha_list kafka)
export KAFKA_BROKERS=$(ha_list kafka id)
export KAFKA_CONTROLLERS=$(ha_list controller id)
export KAFKA_PROXIED_BOOTSTRAP=$(ha_list toxi-kafka)
export KAFKA_PROXIES=$(ha_list toxi-kafka id)
export TOXIPROXY_API=$HOST:$(ha_port toxiproxy)
export TOXIPROXY_PID=$(pid_of toxiproxy || echo -)
export REDIS_PIDS=$(ha_pids redis)
export SENTINEL_PIDS=$(ha_pids sentinel)
export KAFKA_PIDS=$(ha_pids kafka)
EOF
  mv "$STATE/env.tmp" "$STATE/env"
}

# ---------------------------------------------------------------- stop
# stop_names NAME... : SIGTERM to each that is ours, wait up to STOP_TIMEOUT,
# then SIGKILL; removes the pid files
stop_names() {
  local name pid names=() deadline alive
  for name in "$@"; do
    if pid=$(pid_of "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      names+=("$name")
      log "stopping $name (pid $pid)"
    elif [ -f "$STATE/$name.pid" ]; then
      log "$name is not running (stale pid file removed)"
    fi
  done
  deadline=$(( $(date +%s) + STOP_TIMEOUT ))
  while [ ${#names[@]} -gt 0 ]; do
    alive=0
    for name in "${names[@]}"; do pid_of "$name" >/dev/null && alive=1; done
    [ $alive = 0 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      for name in "${names[@]}"; do
        if pid=$(pid_of "$name"); then
          log "$name (pid $pid) still up after ${STOP_TIMEOUT}s, sending SIGKILL"
          kill -KILL "$pid" 2>/dev/null || true
        fi
      done
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  for name in "$@"; do rm -f "$STATE/$name.pid"; done
}

ha_stop() {
  local i s=() rest=()
  for i in "${HA_IDS[@]}"; do s+=("sentinel-$i"); rest+=("kafka-$i" "redis-$i"); done
  # Sentinels first: they would otherwise fail over a primary being stopped.
  stop_names "${s[@]}"
  stop_names "${rest[@]}" toxiproxy
  rm -f "$STATE/env" "$STATE/topology"
}

# ---------------------------------------------------------------- start
ha_fail_start() {
  local msg=$1 f; shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    printf '[services] ---- last lines of %s\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
  ha_stop
  die "start --ha failed: $msg (logs in $STATE/logs)"
}

# 0 if every process of the set runs, every Redis answers, the sentinels
# agree on one primary and every broker answers
ha_healthy() {
  local n want=
  for n in $(ha_names); do pid_of "$n" >/dev/null || return 1; done
  for n in "${HA_IDS[@]}"; do [ "$(rcli "$(ha_port "redis-$n")" PING)" = PONG ] || return 1; done
  for n in "${HA_IDS[@]}"; do
    local got; got=$(sentinel_master "$(ha_port "sentinel-$n")") || return 1
    [ -z "$want" ] && want=$got
    [ "$got" = "$want" ] || return 1
  done
  for n in "${HA_IDS[@]}"; do broker_ok "$(ha_port "kafka-$n")" || return 1; done
  pid_of toxiproxy >/dev/null && toxi_proxies_ok
}

ha_start() {
  local t0 i; t0=$(now)
  check_deps
  [ -x "$DEVTOOL" ] || die "$DEVTOOL is missing: the HA set's readiness probe needs it (cmake --build --preset default --target qsp-devtool)"
  [ -x "$TOXIPROXY_BIN" ] || die "$TOXIPROXY_BIN is missing: the HA set's fault proxy (run scripts/bootstrap; QSP_TOXIPROXY names another binary)"
  command -v curl >/dev/null || die "curl not found; run scripts/bootstrap (Debian package curl)"
  if pid_of redis >/dev/null || pid_of kafka >/dev/null; then
    die "$STATE holds a running default set; stop it first (scripts/services stop) or use another QSP_SERVICES_DIR"
  fi
  if is_ha_state && ha_any_running; then
    if ha_healthy; then
      log "already running: the HA set in $STATE"
      cat "$STATE/env"
      return 0
    fi
    log "found a partial or unhealthy HA set; restarting it"
    ha_stop
  fi
  for i in $(ha_names) toxiproxy; do rm -f "$STATE/$i.pid"; done
  rm -f "$STATE/env" "$STATE/ha-ports"
  rm -rf "$STATE"/redis-[0-9] "$STATE"/sentinel-[0-9] "$STATE"/kafka-[0-9] "$STATE/toxiproxy" "$STATE/logs"
  echo ha >"$STATE/topology"

  local ports=()
  read -r -a ports < <(pick_ports $(( 6 * ${#HA_IDS[@]} + 1 )))
  [ ${#ports[@]} -eq $(( 6 * ${#HA_IDS[@]} + 1 )) ] || die "could not find free ports"
  local k=0 kind
  for kind in redis sentinel kafka controller proxied toxi-kafka; do
    for i in "${HA_IDS[@]}"; do echo "$kind-$i ${ports[$k]}" >>"$STATE/ha-ports"; k=$((k + 1)); done
  done
  echo "toxiproxy ${ports[$k]}" >>"$STATE/ha-ports"
  mkdir -p "$STATE/logs"
  for i in "${HA_IDS[@]}"; do
    mkdir -p "$STATE/redis-$i" "$STATE/sentinel-$i" "$STATE/kafka-$i/data" "$STATE/logs/kafka-$i"
    write_redis_conf "$i"
    write_sentinel_conf "$i"
    write_ha_server_properties "$i"
  done

  # Redis first (primary, then the replicas), and the sentinels as soon as
  # both replicas are linked (their first INFO of the primary then lists both;
  # the next comes 10 s later): they find each other while the JVMs format.
  for i in "${HA_IDS[@]}"; do spawn_ha "redis-$i"; done
  local tries=0
  until replica_up "$(ha_port redis-2)" && replica_up "$(ha_port redis-3)"; do
    tries=$((tries + 1)); [ $tries -lt 40 ] || break     # else the loop below spawns them
    sleep 0.25
  done
  [ $tries -lt 40 ] && for i in "${HA_IDS[@]}"; do spawn_ha "sentinel-$i"; done

  # Fresh KRaft storage, a three-voter dynamic quorum: every node is formatted
  # with the same --initial-controllers list (id@host:port:directory-id).
  local cluster_id voters=() dir_id fpids=()
  cluster_id=$(python3 "$KAFKA_SUPPORT/ports.py" uuid)
  for i in "${HA_IDS[@]}"; do
    dir_id=$(python3 "$KAFKA_SUPPORT/ports.py" uuid)
    voters+=("$i@$HOST:$(ha_port "controller-$i"):$dir_id")
  done
  local initial; initial=$(IFS=,; echo "${voters[*]}")
  for i in "${HA_IDS[@]}"; do
    # shellcheck disable=SC2086  # KAFKA_FORMAT_EXTRA is a whitespace-separated list
    java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        "-Dlog4j2.configurationFile=$KAFKA_SUPPORT/log4j2.xml" "-Dkafka.logs.dir=$STATE/logs/kafka-$i" \
        -cp "$KAFKA_CP" kafka.tools.StorageTool format --initial-controllers "$initial" \
        -t "$cluster_id" -c "$STATE/kafka-$i/server.properties" ${KAFKA_FORMAT_EXTRA:-} \
        >"$STATE/logs/kafka-$i-format.log" 2>&1 &
    fpids+=($!)
  done
  for i in "${!fpids[@]}"; do
    wait "${fpids[$i]}" || ha_fail_start "formatting the storage of kafka-$((i + 1)) failed" \
                                       "$STATE/logs/kafka-$((i + 1))-format.log"
  done
  for i in "${HA_IDS[@]}"; do spawn_ha "kafka-$i"; done
  # The fault proxy in front of the PROXIED listeners (a Go binary: up in
  # well under a second, while the JVMs start).
  spawn_ha toxiproxy
  local tries=0
  until toxi_api GET /version >/dev/null 2>&1; do
    pid_of toxiproxy >/dev/null || ha_fail_start "toxiproxy exited" "$STATE/logs/toxiproxy.out"
    tries=$((tries + 1)); [ $tries -lt 100 ] || ha_fail_start "toxiproxy does not answer on port $(ha_port toxiproxy)" "$STATE/logs/toxiproxy.out"
    sleep 0.1
  done
  toxi_create_proxies
  log "toxiproxy answers on $HOST:$(ha_port toxiproxy) with proxies kafka-1..3 ($(elapsed "$t0") s)"

  local deadline primary="$HOST:$(ha_port redis-1)" pending n
  deadline=$(awk -v a="$t0" -v t="$HA_START_TIMEOUT" 'BEGIN { printf "%d", a + t }')
  declare -A up=()
  while :; do
    pending=0
    for n in $(ha_names); do
      [ -n "${up[$n]:-}" ] && continue
      if [ ! -f "$STATE/$n.pid" ]; then pending=1; continue; fi   # sentinels: not spawned yet
      pid_of "$n" >/dev/null || ha_fail_start "$n exited" "$STATE/logs/$n.log" "$STATE/logs/$n.out" \
                                           "$STATE/logs/$n/kafka.log"
      local ok=1
      case $n in
        redis-1)    [ "$(rcli "$(ha_port "$n")" PING)" = PONG ] || { ok=0; HA_WHY="$n does not answer PING"; } ;;
        redis-*)    replica_up "$(ha_port "$n")" || ok=0 ;;
        sentinel-*) sentinel_ok "$(ha_port "$n")" "$primary" || ok=0 ;;
        kafka-*)    broker_ok "$(ha_port "$n")" || ok=0 ;;
      esac
      if [ $ok = 1 ]; then up[$n]=1; log "$n answers on $HOST:$(ha_port "$n") ($(elapsed "$t0") s)"
      else pending=1; WHY_LAST=$HA_WHY; fi
    done
    # Sentinels once both replicas are linked (if they were not before).
    if [ -n "${up[redis-2]:-}" ] && [ -n "${up[redis-3]:-}" ] && [ ! -f "$STATE/sentinel-1.pid" ]; then
      for i in "${HA_IDS[@]}"; do spawn_ha "sentinel-$i"; done
      pending=1
    fi
    [ $pending = 0 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      local logs=()
      for n in $(ha_names); do [ -n "${up[$n]:-}" ] || logs+=("$STATE/logs/$n.log" "$STATE/logs/$n/kafka.log"); done
      ha_fail_start "not ready after ${HA_START_TIMEOUT}s: ${WHY_LAST:-?}" "${logs[@]}"
    fi
    sleep 0.25
  done

  write_ha_env "$(ha_port redis-1)" "$HOST:$(ha_port redis-2),$HOST:$(ha_port redis-3)"
  log "HA set started in $(elapsed "$t0") s; env: $STATE/env"
  cat "$STATE/env"
}

# ---------------------------------------------------------------- status
ha_status() {
  local rc=0 n pid port info role
  for n in $(ha_names redis sentinel kafka); do
    port=$(ha_port "$n")
    if ! pid=$(pid_of "$n"); then echo "$n: not running${port:+ (port $port)}"; rc=3; continue; fi
    case $n in
      redis-*)
        info=$(rcli "$port" INFO replication | tr -d '\r')
        if [ -z "$info" ]; then echo "$n: running, pid $pid, $HOST:$port, not answering"; rc=3; continue; fi
        role=$(sed -n 's/^role://p' <<<"$info")
        if [ "$role" = master ]; then
          echo "$n: running, pid $pid, $HOST:$port, master, $(sed -n 's/^connected_slaves:/replicas: /p' <<<"$info")"
        else
          echo "$n: running, pid $pid, $HOST:$port, replica of port $(sed -n 's/^master_port://p' <<<"$info"), link $(sed -n 's/^master_link_status://p' <<<"$info")"
        fi ;;
      sentinel-*)
        if role=$(sentinel_master "$port"); then echo "$n: running, pid $pid, $HOST:$port, names $MASTER_NAME = $role"
        else echo "$n: running, pid $pid, $HOST:$port, not answering"; rc=3; fi ;;
      kafka-*)
        if broker_ok "$port"; then echo "$n: running, pid $pid, $HOST:$port, answers (3 brokers registered)"
        else echo "$n: running, pid $pid, $HOST:$port, not ready ($HA_WHY)"; rc=3; fi ;;
    esac
  done
  if ! pid=$(pid_of toxiproxy); then echo "toxiproxy: not running"; rc=3
  elif toxi_proxies_ok; then echo "toxiproxy: running, pid $pid, API $HOST:$(ha_port toxiproxy), proxies kafka-1..3"
  else echo "toxiproxy: running, pid $pid, not ready ($HA_WHY)"; rc=3; fi
  [ -f "$STATE/env" ] && echo "env: $STATE/env"
  return $rc
}

# ---------------------------------------------------------------- faults
# ha_target KIND ID -> the service name; ID "primary" (kind redis) is the node
# the sentinels currently name
ha_target() {
  local kind=$1 id=${2:-}
  is_ha_state || die "$STATE holds no HA set (scripts/services start --ha)"
  if [ "$kind" = redis ] && [ "$id" = primary ]; then
    local i addr
    for i in "${HA_IDS[@]}"; do
      addr=$(sentinel_master "$(ha_port "sentinel-$i")") && break
    done
    [ -n "${addr:-}" ] || die "no sentinel answers; cannot tell the primary"
    for i in "${HA_IDS[@]}"; do
      [ "$addr" = "$HOST:$(ha_port "redis-$i")" ] && { echo "redis-$i"; return; }
    done
    die "the sentinels name $addr, which is not a node of this set"
  fi
  local ids="${HA_IDS[*]}"; [ "$kind" = redis ] && ids="$ids or primary"
  [[ $id =~ ^[1-9]$ ]] && [ -n "$(ha_port "$kind-$id")" ] || die "$kind: no such node '$id' (ids: $ids)"
  echo "$kind-$id"
}

# ha_fault ACTION KIND ID: kill (SIGKILL, wait until gone), stop (SIGTERM:
# a broker's controlled shutdown; SIGKILL after QSP_STOP_TIMEOUT), start (same
# config, data and port; waits until it answers)
ha_fault() {
  local action=$1 kind=$2 name pid t0 deadline
  t0=$(now)
  name=$(ha_target "$kind" "${3:-}")
  case $action in
    kill|stop)
      pid=$(pid_of "$name") || die "$name is not running"
      if [ "$action" = kill ]; then
        kill -KILL "$pid" 2>/dev/null || true
        deadline=$(( $(date +%s) + 10 ))
      else
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$(( $(date +%s) + STOP_TIMEOUT ))
      fi
      while pid_of "$name" >/dev/null; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
          [ "$action" = kill ] && die "$name (pid $pid) still there 10 s after SIGKILL"
          log "$name (pid $pid) still up after ${STOP_TIMEOUT}s, sending SIGKILL"
          kill -KILL "$pid" 2>/dev/null || true
          deadline=$(( $(date +%s) + 10 )); action=kill
        fi
        sleep 0.05
      done
      rm -f "$STATE/$name.pid"
      log "$name (pid $pid) is gone ($(elapsed "$t0") s)" ;;
    start)
      if pid=$(pid_of "$name"); then log "$name already runs (pid $pid)"; return 0; fi
      check_deps
      spawn_ha "$name"
      deadline=$(awk -v a="$t0" -v t="$HA_START_TIMEOUT" 'BEGIN { printf "%d", a + t }')
      until node_ready "$name"; do
        pid_of "$name" >/dev/null || die "$name exited; see $STATE/logs/$name.log $STATE/logs/$name.out $STATE/logs/$name/kafka.log"
        [ "$(date +%s)" -lt "$deadline" ] || die "$name not ready after ${HA_START_TIMEOUT}s: $HA_WHY"
        sleep 0.25
      done
      log "$name answers again on $HOST:$(ha_port "$name") (pid $(pid_of "$name"), $(elapsed "$t0") s)" ;;
  esac
  write_ha_env
}
