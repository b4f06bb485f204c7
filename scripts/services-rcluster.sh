# shellcheck shell=bash
# The Redis Cluster service set of scripts/services (start --redis-cluster) and
# its fault commands (rc-*); sourced by it, not run on its own.  Uses its
# helpers (STATE, HOST, KAFKA_CP, check_deps, pid_of, spawn, pick_ports,
# write_server_properties, format_kafka, spawn_kafka, kafka_ok, kafka_logdir,
# log, die, now, elapsed), stop_names of scripts/services-ha.sh and
# random_password, secret, secret_value of scripts/services-secure.sh.
#
# Set (all on free loopback ports, one state dir as for the other sets):
#   rcluster-1..6  redis-server (7.0) in Redis Cluster mode: nodes 1, 2, 3 are
#                  the primaries at start (slots 0-5460, 5461-10922,
#                  10923-16383), node 4 replicates node 1, node 5 node 2, node 6
#                  node 3 (the cluster is created with the three primaries only;
#                  each replica then meets it and is given its primary with
#                  CLUSTER REPLICATE, so the pairing is always this one).
#                  Each runs from <state>/rcluster-N/redis.conf (mode 600: it
#                  holds masterauth) with its own nodes.conf there and its own
#                  cluster bus port (cluster-port, picked like the others);
#                  cluster-node-timeout 3000 (QSP_RCLUSTER_NODE_TIMEOUT_MS; not
#                  below 2000: a starved 2-core box fails over spuriously),
#                  cluster-require-full-coverage yes,
#                  cluster-allow-replica-migration no (replicas stay where they
#                  were put), no persistence (save "", appendonly no,
#                  repl-diskless-sync yes with delay 0, repl-diskless-load
#                  swapdb: a replica never writes the primary's data to disk, so
#                  a restarted node always starts empty).  aclfile
#                  <state>/secrets/redis-cluster.acl: every `user` line of
#                  config/redis-acl.conf with >CHANGE-ME replaced by
#                  redis-node.password (the node's user in Redis Cluster mode is
#                  qsession-projection-cluster), and
#                  `user default on >ADMIN ~* &* +@all` (redis-admin.password);
#                  replicas authenticate to their primary as default
#                  (masteruser/masterauth).
#   rcluster-kafka one Kafka broker exactly like the default set's (single
#                  KRaft node, PLAINTEXT; the same functions write, format and
#                  start it).
#
# Readiness (start): every node answers, the cluster is created, and every
# node reports cluster_state:ok with all 16384 slots assigned and ok, knows
# six nodes and sees the pairing above; every replica's master_link_status is
# up; the broker answers like the default set's.
#
# State (besides env, logs/ and .lock):
#   topology             "rcluster" while the set is (being) started
#   rc-ports             NAME PORT lines: redis-N (client port), bus-N (cluster
#                        bus port) for N=1..6 and every added node, kafka, controller
#   rc-node-ids          N NODEID lines (CLUSTER MYID; kept by nodes.conf across
#                        restarts)
#   rc-cut               N P lines: replica N was cut off primary P (rc-cut-replica)
#   rcluster-N.pid rcluster-kafka.pid
#   rcluster-N/          redis.conf, nodes.conf
#   rcluster-kafka/      server.properties, data/
#   secrets/             redis-admin.password redis-node.password (mode 600),
#                        redis-cluster.acl
#   logs/                rcluster-N.log rcluster-N.out rcluster-kafka/kafka.log
#                        rcluster-kafka.out rcluster-kafka-format.log
#                        rcluster-create.log rcluster-reshard.log
#                        rcluster-add-node.log rcluster-del-node.log
#
# Fault commands (scripts/services rc-CMD ...; the set is found from the state
# dir's topology file; each waits, bounded, for its effect; exit 0 when done,
# 1 with a message on stderr otherwise; the env file's REDIS_PIDS is rewritten
# after every command that changes a process):
#   rc-kill ID         SIGKILL node ID (1-6), wait until it is gone.  Prints its pid.
#   rc-stop ID         SIGTERM (SIGCONT too, should it be SIGSTOPped), SIGKILL
#                      after QSP_STOP_TIMEOUT.  Prints its pid.
#   rc-start ID        start it again on its redis.conf and nodes.conf (same node
#                      id and ports; empty data).  Waits until it answers PING, its
#                      own view says cluster_state:ok and, if it is a replica, its
#                      link to its primary is up (QSP_START_TIMEOUT, default 60 s).
#                      Prints its new pid.  A primary restarted before a replica
#                      replaced it comes back as an EMPTY primary of its slots (no
#                      persistence) and its replica then syncs that empty data set;
#                      one that was replaced comes back as a replica of its successor.
#   rc-cut-replica ID  node ID must be a replica: SIGSTOP it, then, on its primary,
#                      CLIENT KILL the replication link (ADDR: the replica's side of
#                      the link, read before the stop; TYPE replica if that was not
#                      found), and wait until the primary no longer lists the
#                      replica.  The primary then acknowledges writes the replica
#                      never gets.  Prints the replica's pid.
#   rc-resume ID       SIGCONT node ID, wait until it answers PING.  Prints its pid.
#   rc-takeover ID     node ID must be a replica (a SIGSTOPped one is SIGCONTed
#                      first, and at once sent the command, before its own
#                      automatic failover could start): CLUSTER FAILOVER TAKEOVER.
#                      Waits (30 s) until it reports role master, cluster_state:ok
#                      from its own view, and every other answering node shows it
#                      as a master with slots.  Prints the id of the node it
#                      replaced.  A master is refused, except a replica that
#                      rc-cut-replica cut off and an automatic failover has
#                      promoted since (after its rc-resume): then it says so,
#                      succeeds and prints the primary it was cut off.
#   rc-failover ID     CLUSTER FAILOVER (graceful: its primary must answer) on
#                      replica ID once its link is up; waits (30 s) until ID is a
#                      master and the old primary a replica, sending it again every 6 s while ID is
#                      still that primary's replica (the masters refuse a vote
#                      for 2 x cluster-node-timeout after a failover of the same
#                      pair).  Prints the old primary's id.
#   rc-move-slots FROM_ID TO_ID COUNT
#                      once redis-cli --cluster check is clean (30 s), redis-cli
#                      --cluster reshard (as default) of COUNT slots from
#                      primary FROM to primary TO, keys included (log:
#                      logs/rcluster-reshard.log); waits (30 s) until
#                      redis-cli --cluster check is clean.  Prints the slots moved,
#                      as ranges ("0-99 200").
#   rc-move-slot SLOT TO_ID
#                      moves that one slot with its keys to primary TO: SETSLOT
#                      IMPORTING on TO, MIGRATING on the owner, MIGRATE (AUTH2
#                      default) of CLUSTER GETKEYSINSLOT batches of 100, then
#                      SETSLOT NODE on TO, the owner and every other node; waits
#                      (30 s) until every answering node names TO as its owner.
#                      Prints the number of keys moved (0, and nothing is done, if
#                      TO owns it already).  Keys with a newline in them are not
#                      supported.  Find a key's slot with CLUSTER KEYSLOT.
#   rc-cover-lost VIA_ID
#                      a shard lost (its primary and replicas down: rc-kill them):
#                      waits (30 s) until node VIA flags a master with slots as
#                      failed, then redis-cli --cluster fix
#                      --cluster-fix-with-unreachable-masters through VIA, which
#                      covers those slots again with the running primaries
#                      (ADDSLOTS, and it bumps their epochs; log:
#                      logs/rcluster-fix.log); waits (30 s) until VIA says
#                      cluster_state:ok.  Prints the slots covered, as ranges.
#                      The lost nodes stay in the cluster as failed: rc-start
#                      brings them back as masters without slots (their epochs
#                      are older), to be given slots with rc-move-slots.
#   rc-fix VIA_ID      redis-cli --cluster fix through node VIA (open slots, slots
#                      no node serves, nodes that disagree after lost nodes came
#                      back); waits (30 s) until redis-cli --cluster check is
#                      clean.
#   rc-role ID         prints "master", or "slave P" (P: the id of its primary, "?"
#                      if that is not a node of this set).  Exit 1 if the node is
#                      not running, SIGSTOPped or does not answer.
#
# Scaling out and in (added nodes get the ids 7, 8, 9, the lowest free one;
# an id is reused after rc-remove-primary; every rc-* command and `stop` take
# them like 1-6; REDIS_NODES, REDIS_NODE_IDS and REDIS_PIDS list them, the
# seed lists REDIS_CLUSTER_* stay nodes 1-6):
#   rc-new-node        starts a new empty redis-server in Redis Cluster mode on
#                      two free ports (client, bus) from the same redis.conf
#                      template and aclfile as nodes 1-6 (<state>/rcluster-N/),
#                      NOT in the cluster yet (it knows no other node); its lines
#                      go to rc-ports and rc-node-ids.  Waits until it answers
#                      PING.  Prints "N HOST:PORT".  (For a procedure that runs
#                      redis-cli --cluster add-node itself.)
#   rc-add-primary     rc-new-node, then redis-cli --cluster add-node (as default,
#                      through a running primary with slots; log:
#                      logs/rcluster-add-node.log); waits (30 s) until every
#                      answering node lists it as a master without fail/handshake
#                      flags, knows as many nodes as it does, and its own view says
#                      cluster_state:ok.  It serves no slots: move some with
#                      rc-move-slots or rc-move-slot.  Prints N.
#   rc-remove-primary ID [TO_ID]
#                      ID must be a primary without replicas (or a node that does
#                      not answer and serves no slots).  Moves all its slots with
#                      their keys to primary TO (default: the running primary with
#                      the fewest slots) as rc-move-slots does, then
#                      redis-cli --cluster del-node (log: logs/rcluster-del-node.log;
#                      a node that does not answer: CLUSTER FORGET on every other
#                      node) and waits (30 s) until no answering node lists it;
#                      then stops its process (as rc-stop), drops its lines from
#                      rc-ports and rc-node-ids and deletes <state>/rcluster-ID/
#                      (its logs stay).  Also cleans up after a procedure that ran
#                      del-node itself.  Prints the slots moved, as ranges ("" if
#                      none).

RC_BASE_IDS=(1 2 3 4 5 6)      # the set as started
RC_PRIMARY_IDS=(1 2 3)          # at start; node i+3 replicates node i
RC_EXTRA_IDS=(7 8 9)            # rc-new-node / rc-add-primary; reused after rc-remove-primary
# rc_load_ids: RC_IDS = the nodes of the set now: 1-6 and every added node
# rc-ports lists (rc-new-node adds its lines, rc-remove-primary drops them)
rc_load_ids() {
  RC_IDS=("${RC_BASE_IDS[@]}")
  local n
  for n in "${RC_EXTRA_IDS[@]}"; do
    if grep -q "^redis-$n " "$STATE/rc-ports" 2>/dev/null; then RC_IDS+=("$n"); fi
  done
}
rc_load_ids
RC_NODE_TIMEOUT_MS=${QSP_RCLUSTER_NODE_TIMEOUT_MS:-3000}
# Six Redis processes, a cluster creation and a JVM on a shared 2-core machine;
# it takes ~10 s.
RC_START_TIMEOUT=${QSP_START_TIMEOUT:-120}
RC_RESTART_TIMEOUT=${QSP_START_TIMEOUT:-60}
RC_FAULT_TIMEOUT=30
RC_USER=qsession-projection-cluster

is_rc_state() { [ "$(cat "$STATE/topology" 2>/dev/null)" = rcluster ]; }

rc_port() { awk -v n="$1" '$1 == n { print $2 }' "$STATE/rc-ports" 2>/dev/null || true; }
rc_nodeid() { awk -v n="$1" '$1 == n { print $2 }' "$STATE/rc-node-ids" 2>/dev/null || true; }
# rc_id_of_nodeid NODEID -> N ("?" if unknown)
rc_id_of_nodeid() { { cat "$STATE/rc-node-ids" 2>/dev/null || true; } | awk -v id="$1" 'BEGIN { r = "?" } $2 == id { r = $1 } END { print r }'; }
# rc_id_of_port PORT -> N ("?" if unknown)
rc_id_of_port() {
  local i
  for i in "${RC_IDS[@]}"; do [ "$(rc_port "redis-$i")" = "$1" ] && { echo "$i"; return; }; done
  echo "?"
}

# rc_names -> rcluster-N of every node of the set, and of any added node
# whose pid file is still there (stop stops it too)
rc_names() {
  local i
  for i in "${RC_IDS[@]}"; do echo "rcluster-$i"; done
  for i in "${RC_EXTRA_IDS[@]}"; do
    if [[ " ${RC_IDS[*]} " != *" $i "* ]] && [ -f "$STATE/rcluster-$i.pid" ]; then echo "rcluster-$i"; fi
  done
}

rc_any_running() {
  local n
  for n in $(rc_names) rcluster-kafka; do pid_of "$n" >/dev/null && return 0; done
  return 1
}

# rc_cli PORT ARGS... : redis-cli as default (the admin), bounded to 5 s; the
# password goes through the environment, never the command line.  Its status
# is always 0 (errexit): callers judge the answer, empty when there was none.
rc_cli() {
  local port=$1; shift
  REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 5 \
    redis-cli -h "$HOST" -p "$port" --user default --no-auth-warning "$@" 2>/dev/null || true
}

# rc_info PORT SECTION|CLUSTER -> INFO SECTION (CLUSTER: CLUSTER INFO), no CRs
rc_info() {
  if [ "$2" = CLUSTER ]; then rc_cli "$1" CLUSTER INFO | tr -d '\r'
  else rc_cli "$1" INFO "$2" | tr -d '\r'; fi
}
field() { sed -n "s/^$1://p" <<<"$2" | head -n1; }

# rc_stopped NAME -> 0 if that process of ours is SIGSTOPped
rc_stopped() {
  local pid; pid=$(pid_of "$1") || return 1
  [ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)" = T ]
}

# rc_owner PORT SLOT -> the node id that owns SLOT in the view of the node on PORT
rc_owner() {
  rc_cli "$1" CLUSTER NODES | tr -d '\r' | awk -v s="$2" '
    $3 ~ /master/ { for (i = 9; i <= NF; i++) {
        if ($i ~ /^\[/) continue
        n = split($i, r, "-"); lo = r[1] + 0; hi = (n > 1 ? r[2] : r[1]) + 0
        if (s >= lo && s <= hi && !found) { print $1; found = 1 }
    } }'
}

# rc_slots PORT NODEID -> the slot ranges NODEID owns in the view of PORT ("" if none)
rc_slots() {
  rc_cli "$1" CLUSTER NODES | tr -d '\r' | awk -v id="$2" '
    $1 == id { out = ""; for (i = 9; i <= NF; i++) if ($i !~ /^\[/) out = out (out == "" ? "" : " ") $i; print out }'
}

# rc_expand RANGES... -> one slot per line
rc_expand() {
  local r
  for r in "$@"; do
    if [[ $r == *-* ]]; then seq "${r%-*}" "${r#*-}"; else echo "$r"; fi
  done
}

# rc_ranges -> the sorted slots on stdin as ranges on one line ("0-99 200")
rc_ranges() {
  sort -n | awk '
    NR == 1 { lo = hi = $1; next }
    $1 == hi + 1 { hi = $1; next }
    { out = out (out == "" ? "" : " ") (lo == hi ? lo : lo "-" hi); lo = hi = $1 }
    END { if (NR) print out (out == "" ? "" : " ") (lo == hi ? lo : lo "-" hi) }'
}

# ---------------------------------------------------------------- probes
RC_WHY=

# rc_node_ok N -> 0 if node N runs, is not SIGSTOPped and answers PING
rc_node_ok() {
  local name=rcluster-$1 port; port=$(rc_port "redis-$1")
  pid_of "$name" >/dev/null || { RC_WHY="$name is not running"; return 1; }
  ! rc_stopped "$name" || { RC_WHY="$name is SIGSTOPped"; return 1; }
  [ "$(rc_cli "$port" PING)" = PONG ] || { RC_WHY="$name on port $port does not answer PING"; return 1; }
}

# rc_cluster_ok N -> 0 if node N sees cluster_state:ok and every slot assigned and ok
rc_cluster_ok() {
  local port info; port=$(rc_port "redis-$1")
  info=$(rc_info "$port" CLUSTER)
  if [ "$(field cluster_state "$info")" != ok ] || [ "$(field cluster_slots_assigned "$info")" != 16384 ] \
     || [ "$(field cluster_slots_ok "$info")" != 16384 ]; then
    RC_WHY="rcluster-$1: $(grep -E '^cluster_(state|slots_assigned|slots_ok|known_nodes|size):' <<<"$info" | paste -sd' ')"
    return 1
  fi
}

# rc_link_up N -> 0 if node N is a replica whose link to its primary is up
rc_link_up() {
  local info; info=$(rc_info "$(rc_port "redis-$1")" replication)
  [ "$(field master_link_status "$info")" = up ] && return 0
  RC_WHY="rcluster-$1: $(grep -E '^(role|master_port|master_link_status):' <<<"$info" | paste -sd' ')"
  return 1
}

# rc_pairing_ok N -> 0 if node N's CLUSTER NODES shows six nodes: 1-3 masters
# with slots, node i+3 a replica of node i
rc_pairing_ok() {
  local nodes i want got
  nodes=$(rc_cli "$(rc_port "redis-$1")" CLUSTER NODES | tr -d '\r')
  [ "$(grep -c . <<<"$nodes")" = 6 ] || { RC_WHY="rcluster-$1 knows $(grep -c . <<<"$nodes") nodes, not 6"; return 1; }
  for i in "${RC_PRIMARY_IDS[@]}"; do
    got=$(awk -v id="$(rc_nodeid "$i")" '$1 == id { print ($3 ~ /master/ ? "master" : "not-master") }' <<<"$nodes")
    [ "$got" = master ] || { RC_WHY="rcluster-$1 does not see node $i as a master"; return 1; }
    want=$(rc_nodeid "$i")
    got=$(awk -v id="$(rc_nodeid $((i + 3)))" '$1 == id && $3 ~ /slave/ { print $4 }' <<<"$nodes")
    [ "$got" = "$want" ] || { RC_WHY="rcluster-$1 does not see node $((i + 3)) as a replica of node $i"; return 1; }
  done
}

# rc_check_clean PORT -> 0 if redis-cli --cluster check reports no problem
rc_check_clean() {
  local out
  out=$(REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 20 \
        redis-cli --user default --no-auth-warning --cluster check "$HOST:$1" 2>&1 \
        | sed 's/\x1b\[[0-9;]*m//g') || true   # it colours its output even into a pipe
  if grep -q '^\[OK\] All 16384 slots covered' <<<"$out" && ! grep -Eq '^\[(ERR|WARNING)\]' <<<"$out"; then
    return 0
  fi
  RC_WHY="redis-cli --cluster check: $(grep -E '^\[(ERR|WARNING)\]' <<<"$out" | head -n3 | paste -sd' ')"
  return 1
}

# ---------------------------------------------------------------- config
write_rc_acl() {
  local acl=$ROOT/config/redis-acl.conf node admin
  [ -s "$acl" ] || die "$acl is missing"
  node=$(secret_value redis-node.password); admin=$(secret_value redis-admin.password)
  (
    umask 077
    { grep '^user ' "$acl" | sed "s/>CHANGE-ME/>$node/g"
      echo "user default on >$admin ~* &* +@all"
    } >"$STATE/secrets/redis-cluster.acl"
  )
  grep -q "^user $RC_USER " "$STATE/secrets/redis-cluster.acl" \
    || die "$acl has no 'user $RC_USER' line"
}

write_rc_conf() {
  local i=$1 dir=$STATE/rcluster-$1
  (umask 077 && cat >"$dir/redis.conf" <<EOF
# Generated by scripts/services start --redis-cluster; rewritten on every
# fresh start.  Redis keeps this node's view of the cluster in nodes.conf.
port $(rc_port "redis-$i")
bind $HOST
daemonize no
dir $dir
logfile $STATE/logs/rcluster-$i.log
cluster-enabled yes
cluster-config-file nodes.conf
cluster-port $(rc_port "bus-$i")
cluster-node-timeout $RC_NODE_TIMEOUT_MS
cluster-require-full-coverage yes
cluster-allow-replica-migration no
save ""
appendonly no
repl-diskless-sync yes
repl-diskless-sync-delay 0
repl-diskless-load swapdb
aclfile $STATE/secrets/redis-cluster.acl
masteruser default
masterauth $(secret_value redis-admin.password)
EOF
  )
}

spawn_rc() {
  local name=rcluster-$1
  # shellcheck disable=SC2086  # REDIS_EXTRA_ARGS is a whitespace-separated list
  spawn "$name" "$STATE/$name" "$STATE/logs/$name.out" \
    redis-server "$STATE/$name/redis.conf" ${REDIS_EXTRA_ARGS:-}
}

# ---------------------------------------------------------------- env
rc_list() {   # rc_list [id=] [IDS...] -> HOST:PORT,... (with "id=": N=HOST:PORT,...)
  local tag=$1 out=() i; shift
  [ $# -gt 0 ] || set -- "${RC_IDS[@]}"
  for i in "$@"; do out+=("${tag:+$i=}$HOST:$(rc_port "redis-$i")"); done
  local IFS=,; echo "${out[*]}"
}

write_rc_env() {
  local out=() i pid s=$STATE/secrets
  for i in "${RC_IDS[@]}"; do pid=$(pid_of "rcluster-$i") || pid=-; out+=("$i=$pid"); done
  local pids; pids=$(IFS=,; echo "${out[*]}")
  out=(); for i in "${RC_IDS[@]}"; do out+=("$i=$(rc_nodeid "$i")"); done
  local ids; ids=$(IFS=,; echo "${out[*]}")
  cat >"$STATE/env.tmp" <<EOF
export QSP_SERVICES_TOPOLOGY=rcluster
export KAFKA_BOOTSTRAP=$HOST:$(rc_port kafka)
export KAFKA_PIDS=1=$(pid_of rcluster-kafka || echo -)
export REDIS_CLUSTER_NODES=$(rc_list "" "${RC_BASE_IDS[@]}")
export REDIS_CLUSTER_PRIMARIES=$(rc_list "" 1 2 3)
export REDIS_CLUSTER_REPLICAS=$(rc_list "" 4 5 6)
export REDIS_NODES=$(rc_list id)
export REDIS_NODE_IDS=$ids
export REDIS_PIDS=$pids
export REDIS_HOST=$HOST
export REDIS_PORT=$(rc_port redis-1)
export REDIS_USER=$RC_USER
export REDIS_PASSWORD_FILE=$s/redis-node.password
export REDIS_ADMIN_USER=default
export REDIS_ADMIN_PASSWORD_FILE=$s/redis-admin.password
EOF
  mv "$STATE/env.tmp" "$STATE/env"
}

# ---------------------------------------------------------------- stop
rc_stop() {
  local n pid pids=() deadline
  for n in $(rc_names) rcluster-kafka; do
    pid=$(pid_of "$n") || continue
    pids+=("$pid")
    # a SIGSTOPped node (rc-cut-replica) handles SIGTERM only once continued
    rc_stopped "$n" && kill -CONT "$pid" 2>/dev/null
  done
  # shellcheck disable=SC2046
  stop_names $(rc_names) rcluster-kafka
  # As secure_stop: wait (10 s) until they have left the process table, so
  # that their ports are free on return.
  deadline=$(( $(date +%s) + 10 ))
  for pid in "${pids[@]}"; do
    while [ -e "/proc/$pid" ] && [ "$(date +%s)" -lt "$deadline" ] \
          && [ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)" != Z ]; do
      sleep 0.05
    done
  done
  if is_rc_state; then rm -f "$STATE/env" "$STATE/topology"; fi
}

rc_fail_start() {
  local msg=$1 f; shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    printf '[services] ---- last lines of %s\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
  rc_stop
  die "start --redis-cluster failed: $msg (logs in $STATE/logs)"
}

# ---------------------------------------------------------------- start
rc_healthy() {
  local i
  pid_of rcluster-kafka >/dev/null && kafka_ok "$(rc_port kafka)" rcluster-kafka || return 1
  for i in "${RC_IDS[@]}"; do rc_node_ok "$i" && rc_cluster_ok "$i" || return 1; done
}

rc_start() {
  local t0 i n; t0=$(now)
  check_deps
  if pid_of redis >/dev/null || pid_of kafka >/dev/null; then
    die "$STATE holds a running default set; stop it first (scripts/services stop) or use another QSP_SERVICES_DIR"
  fi
  if is_ha_state && ha_any_running; then
    die "$STATE holds a running HA set (start --ha); stop it first or use another QSP_SERVICES_DIR"
  fi
  if is_secure_state && secure_any_running; then
    die "$STATE holds a running secured set (start --secure); stop it first or use another QSP_SERVICES_DIR"
  fi
  if is_rc_state && rc_any_running; then
    if rc_healthy; then
      log "already running: the Redis Cluster set in $STATE"
      cat "$STATE/env"
      return 0
    fi
    log "found a partial or unhealthy Redis Cluster set; restarting it (${RC_WHY:-${KAFKA_WHY:-a process is gone}})"
    rc_stop
  fi
  for n in $(rc_names) rcluster-kafka; do rm -f "$STATE/$n.pid"; done
  rm -f "$STATE/env" "$STATE/rc-ports" "$STATE/rc-node-ids" "$STATE/rc-cut"
  RC_IDS=("${RC_BASE_IDS[@]}")
  rm -rf "$STATE"/rcluster-[0-9] "$STATE/rcluster-kafka" "$STATE/secrets" "$STATE/logs"
  echo rcluster >"$STATE/topology"
  mkdir -p "$STATE/rcluster-kafka/data" "$STATE/logs/rcluster-kafka"
  (umask 077 && mkdir -p "$STATE/secrets")
  for i in "${RC_IDS[@]}"; do mkdir -p "$STATE/rcluster-$i"; done

  local ports=() k=0 nports=$(( 2 * ${#RC_IDS[@]} + 2 ))
  read -r -a ports < <(pick_ports "$nports")
  [ ${#ports[@]} -eq "$nports" ] || die "could not find free ports"
  for n in redis bus; do
    for i in "${RC_IDS[@]}"; do echo "$n-$i ${ports[$k]}" >>"$STATE/rc-ports"; k=$((k + 1)); done
  done
  echo "kafka ${ports[$k]}" >>"$STATE/rc-ports"; echo "controller ${ports[$((k + 1))]}" >>"$STATE/rc-ports"

  secret redis-admin.password "$(random_password)"
  secret redis-node.password "$(random_password)"
  write_rc_acl
  for i in "${RC_IDS[@]}"; do write_rc_conf "$i"; done
  write_server_properties "$(rc_port kafka)" "$(rc_port controller)" rcluster-kafka

  # Redis first: the nodes start while the JVM formats the storage.
  for i in "${RC_IDS[@]}"; do spawn_rc "$i"; done
  format_kafka rcluster-kafka \
    || rc_fail_start "formatting the Kafka storage failed" "$STATE/logs/rcluster-kafka-format.log"
  spawn_kafka rcluster-kafka

  local deadline
  deadline=$(awk -v a="$t0" -v t="$RC_START_TIMEOUT" 'BEGIN { printf "%d", a + t }')
  # rc_wait WHAT CMD...: until CMD succeeds (checking every process is there),
  # failing the start at the deadline
  rc_wait() {
    local what=$1; shift
    until "$@"; do
      for n in $(rc_names) rcluster-kafka; do
        pid_of "$n" >/dev/null || rc_fail_start "$n exited" "$STATE/logs/$n.log" "$STATE/logs/$n.out" \
                                   "$(kafka_logdir rcluster-kafka)/kafka.log"
      done
      [ "$(date +%s)" -lt "$deadline" ] \
        || rc_fail_start "not ready after ${RC_START_TIMEOUT}s: $what: ${RC_WHY:-$KAFKA_WHY}" \
             "$(kafka_logdir rcluster-kafka)/kafka.log" "$STATE/logs/rcluster-create.log"
      sleep 0.2
    done
  }
  rc_all() { local f=$1 j; for j in "${RC_IDS[@]}"; do "$f" "$j" || return 1; done; }
  rc_wait "nodes answering" rc_all rc_node_ok
  log "six Redis nodes answer ($(elapsed "$t0") s)"

  # The three primaries only (a deterministic slot split); the replicas join
  # below with the primary we give them.
  REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 60 \
    redis-cli --user default --no-auth-warning --cluster create \
      "$HOST:$(rc_port redis-1)" "$HOST:$(rc_port redis-2)" "$HOST:$(rc_port redis-3)" \
      --cluster-replicas 0 --cluster-yes >"$STATE/logs/rcluster-create.log" 2>&1 \
    || rc_fail_start "redis-cli --cluster create failed" "$STATE/logs/rcluster-create.log"
  for i in "${RC_IDS[@]}"; do
    n=$(rc_cli "$(rc_port "redis-$i")" CLUSTER MYID)
    [[ $n =~ ^[0-9a-f]{40}$ ]] || rc_fail_start "rcluster-$i gave no node id ('$n')"
    echo "$i $n" >>"$STATE/rc-node-ids"
  done
  for i in "${RC_PRIMARY_IDS[@]}"; do
    rc_cli "$(rc_port "redis-$((i + 3))")" CLUSTER MEET "$HOST" "$(rc_port "redis-$i")" "$(rc_port "bus-$i")" >/dev/null
  done
  # CLUSTER REPLICATE needs the primary known to the replica.
  rc_knows() {   # rc_knows R -> 0 once replica R knows its primary as a master
    local p=$(( $1 - 3 ))
    grep -q "^$(rc_nodeid "$p") .*master" <<<"$(rc_cli "$(rc_port "redis-$1")" CLUSTER NODES)" && return 0
    RC_WHY="rcluster-$1 does not know node $p yet"; return 1
  }
  local out
  for i in "${RC_PRIMARY_IDS[@]}"; do
    rc_wait "replica meeting its primary" rc_knows $((i + 3))
    out=$(rc_cli "$(rc_port "redis-$((i + 3))")" CLUSTER REPLICATE "$(rc_nodeid "$i")")
    [ "$out" = OK ] || rc_fail_start "CLUSTER REPLICATE on rcluster-$((i + 3)): ${out:-no answer}" "$STATE/logs/rcluster-$((i + 3)).log"
  done
  log "cluster created: primaries 1 2 3, replicas 4->1 5->2 6->3 ($(elapsed "$t0") s)"

  rc_ready() {
    local j
    for j in "${RC_IDS[@]}"; do rc_cluster_ok "$j" && rc_pairing_ok "$j" || return 1; done
    for j in "${RC_PRIMARY_IDS[@]}"; do rc_link_up $((j + 3)) || return 1; done
  }
  rc_wait "cluster state" rc_ready
  log "cluster_state:ok on every node, replicas linked ($(elapsed "$t0") s)"
  rc_wait "kafka" kafka_ok "$(rc_port kafka)" rcluster-kafka
  log "kafka answers on $HOST:$(rc_port kafka) ($(elapsed "$t0") s)"

  write_rc_env
  log "Redis Cluster set started in $(elapsed "$t0") s; env: $STATE/env"
  cat "$STATE/env"
}

# ---------------------------------------------------------------- status
rc_status() {
  local rc=0 i n pid port info role cinfo
  for i in "${RC_IDS[@]}"; do
    n=rcluster-$i; port=$(rc_port "redis-$i")
    if ! pid=$(pid_of "$n"); then echo "$n: not running${port:+ (port $port)}"; rc=3; continue; fi
    if rc_stopped "$n"; then echo "$n: running, pid $pid, $HOST:$port, SIGSTOPped"; rc=3; continue; fi
    info=$(rc_info "$port" replication)
    if [ -z "$info" ]; then echo "$n: running, pid $pid, $HOST:$port, not answering"; rc=3; continue; fi
    cinfo=$(rc_info "$port" CLUSTER)
    role=$(field role "$info")
    if [ "$role" = master ]; then
      # shellcheck disable=SC2046
      role="master of $(rc_expand $(rc_slots "$port" "$(rc_nodeid "$i")") | wc -l) slots, $(field connected_slaves "$info") replica(s)"
    else
      role="replica of node $(rc_id_of_port "$(field master_port "$info")"), link $(field master_link_status "$info")"
    fi
    echo "$n: running, pid $pid, $HOST:$port, $role, cluster_state:$(field cluster_state "$cinfo")"
    [ "$(field cluster_state "$cinfo")" = ok ] || rc=3
  done
  port=$(rc_port kafka)
  if ! pid=$(pid_of rcluster-kafka); then echo "rcluster-kafka: not running${port:+ (port $port)}"; rc=3
  elif kafka_ok "$port" rcluster-kafka; then echo "rcluster-kafka: running, pid $pid, $HOST:$port, answers"
  else echo "rcluster-kafka: running, pid $pid, $HOST:$port, not answering ($KAFKA_WHY)"; rc=3; fi
  [ -f "$STATE/env" ] && echo "env: $STATE/env"
  return $rc
}

# ---------------------------------------------------------------- faults
rc_check_state() {
  is_rc_state || die "$STATE holds no Redis Cluster set (scripts/services start --redis-cluster)"
}

# rc_target ID -> checks the state dir and the id
rc_target() {
  rc_check_state
  [[ ${1:-} =~ ^[1-9]$ ]] && [ -n "$(rc_port "redis-$1")" ] \
    || die "no such Redis Cluster node '${1:-}' (ids: ${RC_IDS[*]})"
}

# rc_until SECONDS WHAT CMD... : until CMD succeeds, at most SECONDS
rc_until() {
  local secs=$1 what=$2 deadline; shift 2
  deadline=$(awk -v a="$(now)" -v t="$secs" 'BEGIN { printf "%d", a + t }')
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what: not done after ${secs}s (${RC_WHY:-?})"
    sleep 0.1
  done
}

rc_role_of() {   # rc_role_of N -> master | slave (empty if it does not answer)
  field role "$(rc_info "$(rc_port "redis-$1")" replication)"
}

# rc_primary_of N -> the id of replica N's primary (from its INFO)
rc_primary_of() {
  rc_id_of_port "$(field master_port "$(rc_info "$(rc_port "redis-$1")" replication)")"
}

rc_signal_wait() {   # rc_signal_wait ACTION N  (kill | stop)
  local action=$1 name=rcluster-$2 pid deadline t0; t0=$(now)
  pid=$(pid_of "$name") || die "$name is not running"
  if [ "$action" = kill ]; then
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$(( $(date +%s) + 10 ))
  else
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    deadline=$(( $(date +%s) + STOP_TIMEOUT ))
  fi
  while pid_of "$name" >/dev/null || { [ -e "/proc/$pid" ] && [ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)" != Z ]; }; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      [ "$action" = kill ] && die "$name (pid $pid) still there 10 s after SIGKILL"
      log "$name (pid $pid) still up after ${STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$(( $(date +%s) + 10 )); action=kill
    fi
    sleep 0.05
  done
  rm -f "$STATE/$name.pid"
  rc_uncut "$2"
  log "$name (pid $pid) is gone ($(elapsed "$t0") s)"
  write_rc_env
  echo "$pid"
}

# rc_agreed N -> 0 if every other answering node sees node N without a
# fail/pfail flag and in the role N reports itself (a restarted node's stale
# nodes.conf may make it a master for a moment before it learns otherwise)
rc_agreed() {
  local i=$1 j id role flags; id=$(rc_nodeid "$1"); role=$(rc_role_of "$1")
  [ "$role" = slave ] || [ "$role" = master ] || { RC_WHY="rcluster-$i: no role"; return 1; }
  for j in "${RC_IDS[@]}"; do
    [ "$j" != "$i" ] && rc_node_ok "$j" || continue
    flags=$(rc_cli "$(rc_port "redis-$j")" CLUSTER NODES | tr -d '\r' | awk -v id="$id" '$1 == id { print $3 }')
    if [[ ,$flags, != *",$role,"* || $flags == *fail* ]]; then
      RC_WHY="rcluster-$j sees rcluster-$i as '${flags:-unknown}', it says $role"; return 1
    fi
  done
}

rc_restart() {
  local i=$1 name=rcluster-$1 pid t0; t0=$(now)
  if pid=$(pid_of "$name"); then log "$name already runs (pid $pid)"; echo "$pid"; return 0; fi
  command -v redis-server >/dev/null || die "redis-server not found"
  rm -f "$STATE/$name/dump.rdb"        # no persistence: a restarted node starts empty
  rc_uncut "$i"
  spawn_rc "$i"
  local deadline
  deadline=$(awk -v a="$t0" -v t="$RC_RESTART_TIMEOUT" 'BEGIN { printf "%d", a + t }')
  rc_restarted() {
    pid_of "$name" >/dev/null || die "$name exited; see $STATE/logs/$name.log $STATE/logs/$name.out"
    rc_node_ok "$i" && rc_cluster_ok "$i" && rc_agreed "$i" || return 1
    [ "$(rc_role_of "$i")" = master ] || rc_link_up "$i"
  }
  until rc_restarted; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$name not ready after ${RC_RESTART_TIMEOUT}s: $RC_WHY"
    sleep 0.1
  done
  pid=$(pid_of "$name")
  log "$name answers again on $HOST:$(rc_port "redis-$i") as $(rc_role_of "$i") (pid $pid, $(elapsed "$t0") s)"
  if [ "$(rc_role_of "$i")" = master ] && [ -n "$(rc_slots "$(rc_port "redis-$i")" "$(rc_nodeid "$i")")" ]; then
    log "note: $name is back as the primary of its slots, with no data (no replica replaced it while it was down)"
  fi
  write_rc_env
  echo "$pid"
}

rc_cut_replica() {
  local i=$1 name=rcluster-$1 pid p pport laddr out t0; t0=$(now)
  rc_node_ok "$i" || die "$RC_WHY"
  [ "$(rc_role_of "$i")" = slave ] || die "$name is not a replica (rc-role $i)"
  p=$(rc_primary_of "$i"); pport=$(rc_port "redis-$p")
  [ "$p" != "?" ] || die "$name replicates a node that is not of this set"
  # The replica's end of its replication link, as its primary sees it.
  laddr=$(rc_cli "$(rc_port "redis-$i")" CLIENT LIST TYPE master | tr -d '\r' \
          | sed -n 's/.* laddr=\([^ ]*\) .*/\1/p' | head -n1)
  pid=$(pid_of "$name")
  kill -STOP "$pid"
  rc_until 5 "SIGSTOP of $name" rc_stopped "$name"
  local how="TYPE replica"
  [ -z "$laddr" ] || how="ADDR $laddr"
  # shellcheck disable=SC2086  # $how is two words
  out=$(rc_cli "$pport" CLIENT KILL $how)
  log "$name (pid $pid) SIGSTOPped; CLIENT KILL $how on its primary rcluster-$p: ${out:-no answer}"
  # The primary no longer lists it (INFO replication: slaveN:ip=...,port=PORT,...).
  rc_unlisted() {
    ! rc_info "$pport" replication | grep -q "^slave[0-9]*:.*port=$(rc_port "redis-$i"),"
  }
  RC_WHY="rcluster-$p still lists $name"
  rc_until 10 "cutting $name off rcluster-$p" rc_unlisted
  log "rcluster-$p streams to $name no more ($(elapsed "$t0") s)"
  rc_uncut "$i"; echo "$i $p" >>"$STATE/rc-cut"
  echo "$pid"
}

# rc-cut (N P lines): replica N was cut off primary P by rc-cut-replica; the
# line goes with rc-takeover, rc-kill, rc-stop or rc-start of N
rc_uncut() {
  [ -f "$STATE/rc-cut" ] || return 0
  awk -v n="$1" '$1 != n' "$STATE/rc-cut" >"$STATE/rc-cut.tmp" && mv "$STATE/rc-cut.tmp" "$STATE/rc-cut"
}

rc_resume() {
  local i=$1 name=rcluster-$1 pid t0; t0=$(now)
  pid=$(pid_of "$name") || die "$name is not running"
  kill -CONT "$pid"
  rc_until 10 "resuming $name" rc_node_ok "$i"
  log "$name (pid $pid) continues and answers ($(elapsed "$t0") s)"
  echo "$pid"
}

# rc_owns_slots N -> 0 if node N is a master with slots in its own view and in
# that of every other answering node, and its own view is cluster_state:ok
rc_owns_slots() {
  local i=$1 j id; id=$(rc_nodeid "$1")
  [ "$(rc_role_of "$i")" = master ] || { RC_WHY="rcluster-$i: role $(rc_role_of "$i")"; return 1; }
  for j in "${RC_IDS[@]}"; do
    [ "$j" = "$i" ] || rc_node_ok "$j" || continue
    [ -n "$(rc_slots "$(rc_port "redis-$j")" "$id")" ] || { RC_WHY="rcluster-$j does not show rcluster-$i with slots"; return 1; }
  done
  rc_cluster_ok "$i"
}

rc_takeover() {
  local i=$1 name=rcluster-$1 pid p out t0; t0=$(now)
  pid=$(pid_of "$name") || die "$name is not running"
  if rc_stopped "$name"; then
    kill -CONT "$pid"
    log "$name (pid $pid) was SIGSTOPped: SIGCONT"
    rc_until 10 "resuming $name" rc_node_ok "$i"
  fi
  rc_node_ok "$i" || die "$RC_WHY"
  case $(rc_role_of "$i") in
    slave)
      p=$(rc_primary_of "$i")
      out=$(rc_cli "$(rc_port "redis-$i")" CLUSTER FAILOVER TAKEOVER)
      [ "$out" = OK ] || die "CLUSTER FAILOVER TAKEOVER on $name: ${out:-no answer}" ;;
    master)
      # Only a replica that rc-cut-replica cut off may have been promoted by
      # an automatic failover after its rc-resume; any other master is refused.
      p=$({ cat "$STATE/rc-cut" 2>/dev/null || true; } | awk -v n="$i" '$1 == n { p = $2 } END { print p }')
      [ -n "$p" ] || die "$name is a master, not a replica (rc-role $i)"
      [ -n "$(rc_slots "$(rc_port "redis-$i")" "$(rc_nodeid "$i")")" ] \
        || die "$name is a master without slots, not a replica"
      log "$name, cut off rcluster-$p by rc-cut-replica, already is a master with slots (an automatic failover came first)" ;;
    *) die "$name does not answer INFO" ;;
  esac
  rc_until "$RC_FAULT_TIMEOUT" "takeover by $name" rc_owns_slots "$i"
  rc_uncut "$i"
  log "$name is a master and owns its slots, cluster_state:ok ($(elapsed "$t0") s)"
  echo "${p:-?}"
}

rc_failover() {
  local i=$1 name=rcluster-$1 p out t0; t0=$(now)
  rc_node_ok "$i" || die "$RC_WHY"
  [ "$(rc_role_of "$i")" = slave ] || die "$name is not a replica (rc-role $i)"
  p=$(rc_primary_of "$i")
  [ "$p" != "?" ] || die "$name replicates a node that is not of this set"
  # A manual failover lapses after 5 s (CLUSTER_MF_TIMEOUT) if it gets no
  # votes, and the masters refuse a vote about a shard's primary for 2 x
  # cluster-node-timeout after they last voted about it (a failover of the
  # same pair just before, the other way: "can't vote about this master
  # before N milliseconds" in their logs); a replica that lost an election
  # starts the next no earlier than 4 x cluster-node-timeout after it.  So
  # while node ID is still a replica of the same primary, CLUSTER FAILOVER
  # is sent again every 6 s until the deadline, as an operator would.
  local attempts=0 last=0 sent
  rc_swapped() {
    if [ "$(rc_role_of "$i")" = slave ] && [ "$(rc_primary_of "$i")" = "$p" ] \
       && { [ "$attempts" -eq 0 ] || [ $(( $(date +%s) - last )) -ge 6 ]; }; then
      sent=$(rc_cli "$(rc_port "redis-$i")" CLUSTER FAILOVER)
      [ "$sent" = OK ] || { RC_WHY="CLUSTER FAILOVER on $name: ${sent:-no answer}"; return 1; }
      attempts=$((attempts + 1)); last=$(date +%s)
      [ "$attempts" -eq 1 ] || log "$name is still a replica of rcluster-$p: CLUSTER FAILOVER again (attempt $attempts; the masters refuse a vote about a primary for 2 x cluster-node-timeout after the last one)"
    fi
    rc_owns_slots "$i" || return 1
    [ "$(rc_role_of "$p")" = slave ] || { RC_WHY="rcluster-$p: role $(rc_role_of "$p")"; return 1; }
  }
  # A graceful failover starts once the replica holds its primary's offset,
  # and the primary answers its request (MFSTART) only from a node it sees
  # as its own replica: a primary demoted a moment ago is neither streaming
  # yet nor, on the new primary's cluster bus, its replica.
  rc_until "$RC_FAULT_TIMEOUT" "$name's link to rcluster-$p" rc_link_up "$i"
  rc_replica_seen() {
    local mine; mine=$(rc_cli "$(rc_port "redis-$p")" CLUSTER NODES | tr -d '\r' \
      | awk -v id="$(rc_nodeid "$i")" '$1 == id { print $3, $4 }')
    case $mine in
      *slave*" $(rc_nodeid "$p")") return 0 ;;
      *) RC_WHY="rcluster-$p sees $name as '${mine:-nothing}'"; return 1 ;;
    esac
  }
  rc_until "$RC_FAULT_TIMEOUT" "rcluster-$p seeing $name as its replica" rc_replica_seen
  out=$(rc_cli "$(rc_port "redis-$i")" CLUSTER FAILOVER)
  [ "$out" = OK ] || die "CLUSTER FAILOVER on $name: ${out:-no answer}"
  attempts=1; last=$(date +%s)
  log "CLUSTER FAILOVER sent to $name, $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%d", (b - a) * 1000 }') ms after the request"
  rc_until "$RC_FAULT_TIMEOUT" "failover to $name" rc_swapped
  log "$name is a master, rcluster-$p its replica ($(elapsed "$t0") s, $attempts CLUSTER FAILOVER(s))"
  echo "$p"
}

# rc-fix VIA: redis-cli --cluster fix through node VIA (open slots, slots
# no node serves, nodes that disagree), then the check must be clean.
rc_fix() {
  local via=$1 port t0; t0=$(now)
  rc_node_ok "$via" || die "$RC_WHY"
  port=$(rc_port "redis-$via")
  { yes yes 2>/dev/null || true; } | REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 300 \
    redis-cli --user default --no-auth-warning --cluster fix "$HOST:$port" \
      >>"$STATE/logs/rcluster-fix.log" 2>&1 \
    || die "redis-cli --cluster fix failed (log: $STATE/logs/rcluster-fix.log)"
  rc_until "$RC_FAULT_TIMEOUT" "the cluster check after the fix" rc_check_clean "$port"
  log "redis-cli --cluster fix through rcluster-$via: the check is clean ($(elapsed "$t0") s)"
}

rc_cover_lost() {
  local via=$1 port t0 lost; t0=$(now)
  rc_node_ok "$via" || die "$RC_WHY"
  [ "$(rc_role_of "$via")" = master ] || die "rcluster-$via is not a primary"
  port=$(rc_port "redis-$via")
  rc_failed_master() {
    lost=$(rc_cli "$port" CLUSTER NODES | tr -d '\r' | awk '
      $3 ~ /master/ && $3 ~ /fail/ && $3 !~ /fail\?/ && NF >= 9 {
        for (i = 9; i <= NF; i++) if ($i !~ /^\[/) out = out (out == "" ? "" : " ") $i }
      END { print out }')
    [ -n "$lost" ] || { RC_WHY="rcluster-$via flags no master with slots as failed"; return 1; }
  }
  rc_until "$RC_FAULT_TIMEOUT" "a failed master in rcluster-$via's view" rc_failed_master
  # It asks before it covers slots, even with --cluster-yes: answered yes.
  { yes yes 2>/dev/null || true; } | REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 300 \
    redis-cli --user default --no-auth-warning --cluster fix "$HOST:$port" \
      --cluster-fix-with-unreachable-masters >>"$STATE/logs/rcluster-fix.log" 2>&1 \
    || die "redis-cli --cluster fix failed (log: $STATE/logs/rcluster-fix.log)"
  rc_until "$RC_FAULT_TIMEOUT" "cluster_state:ok on rcluster-$via after the fix" rc_cluster_ok "$via"
  # shellcheck disable=SC2086
  lost=$(rc_expand $lost | rc_ranges)
  log "slots $lost of a lost shard covered again through rcluster-$via ($(elapsed "$t0") s)"
  echo "$lost"
}

rc_move_slots() {
  local from=$1 to=$2 count=$3 t0 before after fport; t0=$(now)
  rc_target "$from"; rc_target "$to"
  [[ $count =~ ^[1-9][0-9]*$ ]] && [ "$count" -le 16384 ] || die "rc-move-slots: COUNT must be 1..16384, not '$count'"
  [ "$from" != "$to" ] || die "rc-move-slots: FROM and TO are the same node"
  rc_node_ok "$from" || die "$RC_WHY"; rc_node_ok "$to" || die "$RC_WHY"
  [ "$(rc_role_of "$from")" = master ] || die "rcluster-$from is not a primary"
  [ "$(rc_role_of "$to")" = master ] || die "rcluster-$to is not a primary"
  fport=$(rc_port "redis-$from")
  # redis-cli refuses to reshard while the nodes disagree (a node just back,
  # not yet told that its old slots are served elsewhere): wait it out.
  rc_until "$RC_FAULT_TIMEOUT" "the cluster check before resharding" rc_check_clean "$fport"
  # shellcheck disable=SC2046
  before=$(rc_expand $(rc_slots "$fport" "$(rc_nodeid "$from")") | sort)   # comm: lexical order
  REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 300 \
    redis-cli --user default --no-auth-warning --cluster reshard "$HOST:$fport" \
      --cluster-from "$(rc_nodeid "$from")" --cluster-to "$(rc_nodeid "$to")" \
      --cluster-slots "$count" --cluster-yes >>"$STATE/logs/rcluster-reshard.log" 2>&1 \
    || die "redis-cli --cluster reshard failed: $(grep -E '^\[ERR\]|ERR|NOPERM' "$STATE/logs/rcluster-reshard.log" | tail -n3 | paste -sd' ') (log: $STATE/logs/rcluster-reshard.log)"
  rc_until "$RC_FAULT_TIMEOUT" "the cluster check after resharding" rc_check_clean "$fport"
  # shellcheck disable=SC2046
  after=$(rc_expand $(rc_slots "$fport" "$(rc_nodeid "$from")") | sort)
  local moved; moved=$(comm -23 <(echo "$before") <(echo "$after") | rc_ranges)
  log "moved $count slot(s) from rcluster-$from to rcluster-$to: $moved ($(elapsed "$t0") s)"
  echo "$moved"
}

rc_move_slot() {
  local slot=$1 to=$2 src from tport sport toid srcid out total=0 t0; t0=$(now)
  [[ $slot =~ ^[0-9]+$ ]] && [ "$slot" -le 16383 ] || die "rc-move-slot: SLOT must be 0..16383, not '$slot'"
  rc_target "$to"
  rc_node_ok "$to" || die "$RC_WHY"
  [ "$(rc_role_of "$to")" = master ] || die "rcluster-$to is not a primary"
  tport=$(rc_port "redis-$to"); toid=$(rc_nodeid "$to")
  srcid=$(rc_owner "$tport" "$slot")
  [ -n "$srcid" ] || die "no node owns slot $slot in rcluster-$to's view"
  if [ "$srcid" = "$toid" ]; then log "rcluster-$to owns slot $slot already"; echo 0; return 0; fi
  from=$(rc_id_of_nodeid "$srcid")
  [ "$from" != "?" ] || die "slot $slot belongs to $srcid, not a node of this set"
  rc_node_ok "$from" || die "$RC_WHY"
  sport=$(rc_port "redis-$from")
  out=$(rc_cli "$tport" CLUSTER SETSLOT "$slot" IMPORTING "$srcid")
  [ "$out" = OK ] || die "CLUSTER SETSLOT $slot IMPORTING on rcluster-$to: ${out:-no answer}"
  out=$(rc_cli "$sport" CLUSTER SETSLOT "$slot" MIGRATING "$toid")
  [ "$out" = OK ] || die "CLUSTER SETSLOT $slot MIGRATING on rcluster-$from: ${out:-no answer} (slot left importing on rcluster-$to: CLUSTER SETSLOT $slot STABLE there)"
  local keys=() batch k q round=0
  while [ $round -lt 100000 ]; do
    round=$((round + 1))
    mapfile -t keys < <(rc_cli "$sport" CLUSTER GETKEYSINSLOT "$slot" 100 | tr -d '\r')
    [ ${#keys[@]} -gt 0 ] && [ -n "${keys[0]}" ] || break
    # The password goes through stdin, not the command line: redis-cli reads
    # the command from there (quoted, as redis-cli parses it).
    batch="MIGRATE $HOST $tport \"\" 0 10000 AUTH2 default $(secret_value redis-admin.password) KEYS"
    for k in "${keys[@]}"; do
      q=${k//\\/\\\\}; q=${q//\"/\\\"}
      batch+=" \"$q\""
    done
    out=$(printf '%s\n' "$batch" | rc_cli "$sport" | tr -d '\r')
    case $out in
      OK|NOKEY) total=$((total + ${#keys[@]})) ;;
      *) die "MIGRATE of slot $slot from rcluster-$from to rcluster-$to: ${out:-no answer} (the slot stays migrating/importing; finish with CLUSTER SETSLOT $slot NODE)" ;;
    esac
  done
  # The destination first, then the source, then the other primaries (the
  # replicas learn it from them).
  local j
  for j in "$to" "$from"; do
    out=$(rc_cli "$(rc_port "redis-$j")" CLUSTER SETSLOT "$slot" NODE "$toid")
    [ "$out" = OK ] || die "CLUSTER SETSLOT $slot NODE $toid on rcluster-$j: ${out:-no answer}"
  done
  for j in "${RC_IDS[@]}"; do
    { [ "$j" != "$to" ] && [ "$j" != "$from" ] && rc_node_ok "$j" && [ "$(rc_role_of "$j")" = master ]; } || continue
    rc_cli "$(rc_port "redis-$j")" CLUSTER SETSLOT "$slot" NODE "$toid" >/dev/null || true
  done
  rc_agree() {
    local m
    for m in "${RC_IDS[@]}"; do
      rc_node_ok "$m" || continue
      [ "$(rc_owner "$(rc_port "redis-$m")" "$slot")" = "$toid" ] \
        || { RC_WHY="rcluster-$m names $(rc_owner "$(rc_port "redis-$m")" "$slot") for slot $slot"; return 1; }
    done
  }
  rc_until "$RC_FAULT_TIMEOUT" "every node naming rcluster-$to for slot $slot" rc_agree
  log "slot $slot moved from rcluster-$from to rcluster-$to with $total key(s) ($(elapsed "$t0") s)"
  echo "$total"
}

# ---------------------------------------------------------------- scale out / in
# rc_known_by J ID -> 0 if node J's CLUSTER NODES lists node id ID
rc_known_by() {
  rc_cli "$(rc_port "redis-$1")" CLUSTER NODES | tr -d '\r' | awk -v id="$2" '$1 == id { f = 1 } END { exit !f }'
}

# rc_new_node -> sets RC_NEW: a new redis-server of the set (the lowest free id
# of RC_EXTRA_IDS) on two free ports, from the same redis.conf template and
# aclfile, empty and alone (it knows no other node); its lines in rc-ports and
# rc-node-ids, the env rewritten
rc_new_node() {
  local i='' n t0 ports=() try id; t0=$(now)
  command -v redis-server >/dev/null || die "redis-server not found"
  for n in "${RC_EXTRA_IDS[@]}"; do
    if [[ " ${RC_IDS[*]} " != *" $n "* ]] && ! pid_of "rcluster-$n" >/dev/null; then i=$n; break; fi
  done
  [ -n "$i" ] || die "no free node id: ${RC_EXTRA_IDS[*]} are all in use (rc-remove-primary one first)"
  # Free now, and no port another node of the set (running or not) has.
  for try in 1 2 3 4 5 6 7 8 9 10; do
    read -r -a ports < <(pick_ports 2)
    [ ${#ports[@]} -eq 2 ] || die "could not find free ports"
    if ! awk '{ print $2 }' "$STATE/rc-ports" | grep -qxE "${ports[0]}|${ports[1]}"; then break; fi
    ports=()
  done
  [ ${#ports[@]} -eq 2 ] || die "could not find two ports unused by the set"
  rm -rf "${STATE:?}/rcluster-$i"; mkdir -p "$STATE/rcluster-$i"
  printf 'redis-%s %s\nbus-%s %s\n' "$i" "${ports[0]}" "$i" "${ports[1]}" >>"$STATE/rc-ports"
  RC_IDS+=("$i")
  write_rc_conf "$i"
  spawn_rc "$i"
  rc_alive_ok() {
    pid_of "rcluster-$1" >/dev/null || die "rcluster-$1 exited; see $STATE/logs/rcluster-$1.log $STATE/logs/rcluster-$1.out"
    rc_node_ok "$1"
  }
  rc_until 30 "rcluster-$i answering" rc_alive_ok "$i"
  id=$(rc_cli "${ports[0]}" CLUSTER MYID)
  [[ $id =~ ^[0-9a-f]{40}$ ]] || die "rcluster-$i gave no node id ('$id')"
  { awk -v n="$i" '$1 != n' "$STATE/rc-node-ids"; echo "$i $id"; } >"$STATE/rc-node-ids.tmp"
  mv "$STATE/rc-node-ids.tmp" "$STATE/rc-node-ids"
  write_rc_env
  log "rcluster-$i (node ${id:0:8}) answers on $HOST:${ports[0]}, bus port ${ports[1]}, pid $(pid_of "rcluster-$i"); not in the cluster yet ($(elapsed "$t0") s)"
  RC_NEW=$i
}

# rc_entry [BUT] -> a running, answering master with slots (not BUT), for redis-cli --cluster
rc_entry() {
  local j
  for j in "${RC_IDS[@]}"; do
    [ "$j" != "${1:-}" ] || continue
    rc_node_ok "$j" && [ "$(rc_role_of "$j")" = master ] \
      && [ -n "$(rc_slots "$(rc_port "redis-$j")" "$(rc_nodeid "$j")")" ] && { echo "$j"; return 0; }
  done
  return 1
}

# rc_joined N -> 0 if every answering node lists node N as a master without a
# fail, handshake or noaddr flag, and N itself sees cluster_state:ok and knows
# as many nodes as the others
rc_joined() {
  local i=$1 j id flags known mine; id=$(rc_nodeid "$1")
  rc_cluster_ok "$i" || return 1
  mine=$(field cluster_known_nodes "$(rc_info "$(rc_port "redis-$i")" CLUSTER)")
  for j in "${RC_IDS[@]}"; do
    [ "$j" != "$i" ] && rc_node_ok "$j" || continue
    flags=$(rc_cli "$(rc_port "redis-$j")" CLUSTER NODES | tr -d '\r' | awk -v id="$id" '$1 == id { print $3 }')
    if [[ ,$flags, != *",master,"* || $flags == *fail* || $flags == *handshake* || $flags == *noaddr* ]]; then
      RC_WHY="rcluster-$j sees rcluster-$i as '${flags:-unknown}'"; return 1
    fi
    known=$(field cluster_known_nodes "$(rc_info "$(rc_port "redis-$j")" CLUSTER)")
    [ "$known" = "$mine" ] || { RC_WHY="rcluster-$j knows $known nodes, rcluster-$i $mine"; return 1; }
  done
}

rc_add_primary() {
  local i e t0; t0=$(now)
  e=$(rc_entry) || die "no running primary with slots to join through"
  rc_new_node
  i=$RC_NEW
  REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 60 \
    redis-cli --user default --no-auth-warning --cluster add-node \
      "$HOST:$(rc_port "redis-$i")" "$HOST:$(rc_port "redis-$e")" >>"$STATE/logs/rcluster-add-node.log" 2>&1 \
    || die "redis-cli --cluster add-node of rcluster-$i failed (log: $STATE/logs/rcluster-add-node.log; rc-remove-primary $i cleans up)"
  rc_until "$RC_FAULT_TIMEOUT" "every node knowing rcluster-$i as a primary" rc_joined "$i"
  log "rcluster-$i (node $(rc_nodeid "$i" | cut -c1-8)) is a primary without slots; every node knows it ($(elapsed "$t0") s)"
  echo "$i"
}

# rc_forgotten N -> 0 if no answering node but N lists node N
rc_forgotten() {
  local j id; id=$(rc_nodeid "$1")
  for j in "${RC_IDS[@]}"; do
    [ "$j" != "$1" ] && rc_node_ok "$j" || continue
    if rc_known_by "$j" "$id"; then RC_WHY="rcluster-$j still knows rcluster-$1"; return 1; fi
  done
}

rc_remove_primary() {
  local i=$1 to=${2:-} id port slots count moved='' j best bestn k e t0; t0=$(now)
  [[ " ${RC_EXTRA_IDS[*]} ${RC_BASE_IDS[*]} " == *" $i "* ]] || die "no such node $i"
  id=$(rc_nodeid "$i"); port=$(rc_port "redis-$i")
  if rc_node_ok "$i"; then
    [ "$(rc_role_of "$i")" = master ] || die "rcluster-$i is not a primary (rc-role $i)"
    for j in "${RC_IDS[@]}"; do
      [ "$j" != "$i" ] && rc_node_ok "$j" || continue
      if rc_cli "$(rc_port "redis-$j")" CLUSTER NODES | tr -d '\r' | awk -v id="$id" '$4 == id { f = 1 } END { exit !f }'; then
        die "rcluster-$i has a replica (rcluster-$j): remove it first"
      fi
    done
    slots=$(rc_slots "$port" "$id")
    if [ -n "$slots" ]; then
      # shellcheck disable=SC2086
      count=$(rc_expand $slots | wc -l)
      if [ -z "$to" ]; then   # the running primary with the fewest slots
        bestn=99999
        for j in "${RC_IDS[@]}"; do
          [ "$j" != "$i" ] && rc_node_ok "$j" && [ "$(rc_role_of "$j")" = master ] || continue
          # shellcheck disable=SC2046
          k=$(rc_expand $(rc_slots "$port" "$(rc_nodeid "$j")") | wc -l)
          if [ "$k" -gt 0 ] && [ "$k" -lt "$bestn" ]; then best=$j; bestn=$k; fi
        done
        to=${best:-}
        [ -n "$to" ] || die "no other running primary with slots to give rcluster-$i's slots to"
      fi
      rc_target "$to"
      [ "$to" != "$i" ] || die "rc-remove-primary: TO is the node to remove"
      moved=$(rc_move_slots "$i" "$to" "$count") || die "moving rcluster-$i's slots to rcluster-$to failed"
    fi
  else
    log "rcluster-$i does not answer ($RC_WHY): only forgotten (a node with slots cannot be)"
    for j in "${RC_IDS[@]}"; do
      [ "$j" != "$i" ] && rc_node_ok "$j" || continue
      [ -z "$(rc_slots "$(rc_port "redis-$j")" "$id")" ] \
        || die "rcluster-$i is down and still serves slots in rcluster-$j's view: start it (rc-start $i) first"
    done
  fi
  if ! rc_forgotten "$i"; then
    if rc_node_ok "$i"; then
      e=$(rc_entry "$i") || die "no running primary with slots to remove rcluster-$i through"
      REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 60 \
        redis-cli --user default --no-auth-warning --cluster del-node "$HOST:$(rc_port "redis-$e")" "$id" \
          >>"$STATE/logs/rcluster-del-node.log" 2>&1 \
        || die "redis-cli --cluster del-node of rcluster-$i failed (log: $STATE/logs/rcluster-del-node.log)"
    else
      for j in "${RC_IDS[@]}"; do
        [ "$j" != "$i" ] && rc_node_ok "$j" || continue
        rc_cli "$(rc_port "redis-$j")" CLUSTER FORGET "$id" >/dev/null
      done
    fi
    rc_until "$RC_FAULT_TIMEOUT" "every node forgetting rcluster-$i" rc_forgotten "$i"
  fi
  if pid_of "rcluster-$i" >/dev/null; then rc_signal_wait stop "$i" >/dev/null; fi
  rm -f "$STATE/rcluster-$i.pid"
  awk -v n="$i" '$1 != "redis-" n && $1 != "bus-" n' "$STATE/rc-ports" >"$STATE/rc-ports.tmp" && mv "$STATE/rc-ports.tmp" "$STATE/rc-ports"
  awk -v n="$i" '$1 != n' "$STATE/rc-node-ids" >"$STATE/rc-node-ids.tmp" && mv "$STATE/rc-node-ids.tmp" "$STATE/rc-node-ids"
  rc_uncut "$i"
  rm -rf "${STATE:?}/rcluster-$i"
  rc_load_ids
  write_rc_env
  log "rcluster-$i (node ${id:0:8}) removed from the cluster and stopped${moved:+; its slots $moved went to rcluster-$to} ($(elapsed "$t0") s)"
  echo "$moved"
}

rc_role() {
  local i=$1 name=rcluster-$1 role
  rc_node_ok "$i" || die "$RC_WHY"
  role=$(rc_role_of "$i")
  case $role in
    master) echo master ;;
    slave)  echo "slave $(rc_primary_of "$i")" ;;
    *) die "$name does not answer INFO" ;;
  esac
}

# rc_fault CMD ARGS... : the rc-* commands
rc_fault() {
  local cmd=$1; shift
  case $cmd in
    rc-move-slots) rc_check_state
                   [ $# -eq 3 ] || die "usage: rc-move-slots FROM_ID TO_ID COUNT"
                   rc_move_slots "$@" ;;
    rc-move-slot)  rc_check_state
                   [ $# -eq 2 ] || die "usage: rc-move-slot SLOT TO_ID"
                   rc_move_slot "$@" ;;
    rc-new-node)   rc_check_state
                   [ $# -eq 0 ] || die "usage: rc-new-node"
                   rc_new_node; echo "$RC_NEW $HOST:$(rc_port "redis-$RC_NEW")" ;;
    rc-add-primary) rc_check_state
                   [ $# -eq 0 ] || die "usage: rc-add-primary"
                   rc_add_primary ;;
    rc-fix)        rc_check_state
                   [ $# -eq 1 ] || die "usage: rc-fix VIA_ID"
                   rc_target "$1"
                   rc_fix "$1" ;;
    rc-cover-lost) rc_check_state
                   [ $# -eq 1 ] || die "usage: rc-cover-lost VIA_ID"
                   rc_target "$1"
                   rc_cover_lost "$1" ;;
    rc-remove-primary) rc_check_state
                   [ $# -eq 1 ] || [ $# -eq 2 ] || die "usage: rc-remove-primary ID [TO_ID]"
                   rc_target "$1"
                   rc_remove_primary "$@" ;;
    *)
      rc_check_state
      [ $# -eq 1 ] || die "usage: $cmd ID"
      rc_target "$1"
      case $cmd in
        rc-kill)        rc_signal_wait kill "$1" ;;
        rc-stop)        rc_signal_wait stop "$1" ;;
        rc-start)       rc_restart "$1" ;;
        rc-cut-replica) rc_cut_replica "$1" ;;
        rc-resume)      rc_resume "$1" ;;
        rc-takeover)    rc_takeover "$1" ;;
        rc-failover)    rc_failover "$1" ;;
        rc-role)        rc_role "$1" ;;
        *) die "unknown command $cmd" ;;
      esac ;;
  esac
}
