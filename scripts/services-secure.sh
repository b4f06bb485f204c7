# shellcheck shell=bash
# The secured service set of scripts/services (start --secure); sourced by it,
# not run on its own.  Uses its helpers (STATE, HOST, DEVTOOL, KAFKA_SUPPORT,
# KAFKA_CP, check_deps, pid_of, spawn, pick_ports, kafka_jvm_opts, log, die,
# now, elapsed, env_value) and stop_names of scripts/services-ha.sh.
#
# Set (all on free loopback ports, one state dir as for the other sets):
#   tls/           a throwaway CA made with openssl at every fresh start (EC
#                  P-256, valid 2 days): ca.crt ca.key; server.crt server.key
#                  (CN localhost, SANs DNS:localhost and IP:127.0.0.1; Kafka
#                  and Redis both present it); wrong.crt wrong.key (same CA,
#                  CN and only SAN DNS:wrong.example: a hostname-verifying
#                  client must refuse it); kafka-server.pem and kafka-wrong.pem
#                  (key, certificate and CA in one file: the brokers' PEM
#                  keystores).  Keys are unencrypted PKCS#8 ("BEGIN PRIVATE
#                  KEY"), mode 600; Kafka 4.1 reads those from a PEM keystore
#                  file without ssl.key.password.
#   secrets/       random passwords, one per file, mode 600, made at every
#                  fresh start: kafka-admin.password kafka-node.password
#                  redis-admin.password redis-node.password; redis.acl
#   kafka-secure   Kafka 4.1 KRaft, one combined broker+controller node:
#                    SASL_SSL://127.0.0.1:P   SCRAM-SHA-512 only, server.crt;
#                                             inter-broker listener (as admin)
#                    WRONGNAME://127.0.0.1:P2 SASL_SSL as well, but presents
#                                             wrong.crt (listener.name.wrongname.
#                                             ssl.keystore.*); advertised as itself
#                    CONTROLLER://127.0.0.1:C PLAINTEXT (KRaft takes no SCRAM on a
#                                             controller listener: the credentials
#                                             live in the metadata log it serves)
#                  SCRAM-SHA-512 users admin and qsp-node are created at format
#                  time (kafka-storage format --add-scram).  StandardAuthorizer,
#                  allow.everyone.if.no.acl.found=false, super.users =
#                  User:admin;User:ANONYMOUS.  ANONYMOUS is the principal of the
#                  PLAINTEXT controller listener, through which this node's
#                  broker side registers and heartbeats (CLUSTER_ACTION, which
#                  no ACL can grant before the node is up).  So any client of
#                  KAFKA_CONTROLLER is a super user there: AclCommand or
#                  ConfigCommand with --bootstrap-controller and no credentials
#                  create ACLs and alter configs.  A loopback test set only;
#                  tests must not administer through that port.  In production
#                  the controller listener is SSL with client authentication
#                  and the brokers' certificate principal the super user (or
#                  SASL with PLAIN or GSSAPI), never PLAINTEXT with ANONYMOUS.
#                  qsp-node gets NO ACLs: a test grants exactly what it needs
#                  through the admin API.
#   redis-secure   redis-server with TLS only (port 0, tls-port T, server.crt,
#                  tls-ca-cert-file ca.crt, tls-auth-clients no: no client
#                  certificates), no persistence, aclfile secrets/redis.acl:
#                  the user line(s) of config/redis-acl.conf with >CHANGE-ME
#                  replaced by redis-node.password, and
#                  `user default on >ADMIN ~* &* +@all` (redis-admin.password).
#
# State (besides env, logs/ and .lock):
#   topology                   "secure" while the set is (being) started
#   secure-ports               NAME PORT lines (kafka, wrongname, controller, redis)
#   kafka-secure.pid redis-secure.pid
#   kafka-secure/              server.properties (holds the admin password; 600), data/
#   redis-secure/              Redis working dir
#   kafka-admin.properties     librdkafka form (security.protocol, sasl.mechanism,
#                              sasl.username, sasl.password, ssl.ca.location):
#                              qsp-devtool ... -F <state>/kafka-admin.properties
#   kafka-admin-client.properties  the same for Kafka's Java clients and tools
#                              (--command-config)
#   logs/                      kafka-secure/kafka.log kafka-secure.out
#                              kafka-secure-format.log redis-secure.log openssl.log
#
# Readiness: Redis answers PING over TLS (CA-verified) as user default; the
# broker answers qsp-devtool probe --coordinators over SASL_SSL as admin (so
# __consumer_offsets and __transaction_state exist up front), and the
# WRONGNAME listener answers a Metadata request as admin once hostname
# verification is off.

SECURE_DAYS=2

is_secure_state() { [ "$(cat "$STATE/topology" 2>/dev/null)" = secure ]; }

secure_port() { awk -v n="$1" '$1 == n { print $2 }' "$STATE/secure-ports" 2>/dev/null || true; }

secure_any_running() { pid_of kafka-secure >/dev/null || pid_of redis-secure >/dev/null; }

# random_password -> 32 random alphanumeric (hex) characters
random_password() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

# secret NAME VALUE: <state>/secrets/NAME, mode 600
secret() { (umask 077 && printf '%s\n' "$2" >"$STATE/secrets/$1"); }
secret_value() { head -n1 "$STATE/secrets/$1" 2>/dev/null; }

# ---------------------------------------------------------------- probes
SECURE_WHY=

secure_redis_ok() {
  local port=${1:-$(secure_port redis)} out
  out=$(REDISCLI_AUTH=$(secret_value redis-admin.password) timeout 5 \
        redis-cli --tls --cacert "$STATE/tls/ca.crt" -h "$HOST" -p "$port" --user default \
                  --no-auth-warning PING 2>&1) || true
  [ "$out" = PONG ] && return 0
  SECURE_WHY="redis on TLS port $port: ${out:-no answer}"
  return 1
}

secure_kafka_ok() {
  local port=${1:-$(secure_port kafka)} wport=${2:-$(secure_port wrongname)}
  SECURE_WHY=$("$DEVTOOL" probe "$HOST:$port" --coordinators -F "$STATE/kafka-admin.properties" 2>&1) \
    || { SECURE_WHY="kafka on SASL_SSL port $port: $SECURE_WHY"; return 1; }
  SECURE_WHY=$("$DEVTOOL" probe "$HOST:$wport" -F "$STATE/kafka-admin.properties" \
                 -X ssl.endpoint.identification.algorithm=none 2>&1) \
    || { SECURE_WHY="kafka on WRONGNAME port $wport: $SECURE_WHY"; return 1; }
}

# ---------------------------------------------------------------- TLS
# secure_cert NAME CN SAN: NAME.key (unencrypted PKCS#8) and NAME.crt signed by the CA
secure_cert() {
  local t=$STATE/tls name=$1 cn=$2 san=$3
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$t/$name.key" -out "$t/$name.csr" -subj "/CN=$cn" 2>>"$STATE/logs/openssl.log" || return 1
  printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth,clientAuth" \
      >"$t/$name.ext"
  openssl x509 -req -in "$t/$name.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" \
      -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days "$SECURE_DAYS" \
      -extfile "$t/$name.ext" -out "$t/$name.crt" 2>>"$STATE/logs/openssl.log" || return 1
  rm -f "$t/$name.csr" "$t/$name.ext"
  # The broker's PEM keystore: private key, then the certificate chain.
  cat "$t/$name.key" "$t/$name.crt" "$t/ca.crt" >"$t/kafka-$name.pem"
}

secure_make_tls() {
  local t=$STATE/tls
  command -v openssl >/dev/null || die "openssl not found (Debian package openssl)"
  (umask 077 && mkdir -p "$t")
  # (a subshell for the umask; errexit does not apply left of ||: each step checks)
  (
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$t/ca.key" -out "$t/ca.crt" -days "$SECURE_DAYS" -subj "/CN=qsp-services test CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        2>>"$STATE/logs/openssl.log" \
      && secure_cert server localhost "DNS:localhost,IP:127.0.0.1" \
      && secure_cert wrong wrong.example "DNS:wrong.example"
  ) || { cat "$STATE/logs/openssl.log" >&2; die "making the test certificates failed"; }
  chmod 644 "$t/ca.crt" "$t/server.crt" "$t/wrong.crt"
}

# ---------------------------------------------------------------- config
secure_jaas() {
  echo "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$1\" password=\"$2\";"
}

write_secure_server_properties() {
  local f=$STATE/kafka-secure/server.properties t=$STATE/tls
  local jaas; jaas=$(secure_jaas admin "$(secret_value kafka-admin.password)")
  (umask 077 && cat >"$f" <<EOF
# Generated by scripts/services start --secure; rewritten on every start.
process.roles=broker,controller
node.id=1
listeners=SASL_SSL://$HOST:$(secure_port kafka),WRONGNAME://$HOST:$(secure_port wrongname),CONTROLLER://$HOST:$(secure_port controller)
advertised.listeners=SASL_SSL://$HOST:$(secure_port kafka),WRONGNAME://$HOST:$(secure_port wrongname)
listener.security.protocol.map=SASL_SSL:SASL_SSL,WRONGNAME:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=$HOST:$(secure_port controller)
log.dirs=$STATE/kafka-secure/data

# SASL: SCRAM-SHA-512 only (users created by kafka-storage format --add-scram)
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas
listener.name.wrongname.scram-sha-512.sasl.jaas.config=$jaas

# TLS: PEM files; unencrypted PKCS#8 keys (no ssl.key.password needed)
ssl.keystore.type=PEM
ssl.keystore.location=$t/kafka-server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$t/ca.crt
ssl.client.auth=none
ssl.endpoint.identification.algorithm=https
listener.name.wrongname.ssl.keystore.type=PEM
listener.name.wrongname.ssl.keystore.location=$t/kafka-wrong.pem

# Authorization.  User:ANONYMOUS is the PLAINTEXT controller listener's
# principal (this node's broker side registers through it); in production the
# controller listener is SSL with an mTLS super-user principal instead.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false

# single node
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1

# test-friendly behaviour
auto.create.topics.enable=false
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
log.segment.delete.delay.ms=1000

# small machine
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
broker.heartbeat.interval.ms=500
EOF
  )
  if [ -n "${KAFKA_EXTRA_CONFIG:-}" ]; then
    printf '\n# KAFKA_EXTRA_CONFIG\n%s\n' "$KAFKA_EXTRA_CONFIG" >>"$f"
  fi
}

write_secure_client_properties() {
  local pw; pw=$(secret_value kafka-admin.password)
  (
    umask 077
    cat >"$STATE/kafka-admin.properties" <<EOF
# librdkafka properties of the secured set's admin (qsp-devtool -F FILE)
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=admin
sasl.password=$pw
ssl.ca.location=$STATE/tls/ca.crt
EOF
    cat >"$STATE/kafka-admin-client.properties" <<EOF
# Java client properties of the secured set's admin (--command-config FILE)
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$(secure_jaas admin "$pw")
ssl.truststore.type=PEM
ssl.truststore.location=$STATE/tls/ca.crt
EOF
  )
}

write_secure_redis_acl() {
  local acl=$ROOT/config/redis-acl.conf node admin
  [ -s "$acl" ] || die "$acl is missing"
  node=$(secret_value redis-node.password); admin=$(secret_value redis-admin.password)
  (
    umask 077
    { grep '^user ' "$acl" | sed "s/>CHANGE-ME/>$node/g"
      echo "user default on >$admin ~* &* +@all"
    } >"$STATE/secrets/redis.acl"
  )
  grep -q '^user qsession-projection ' "$STATE/secrets/redis.acl" \
    || die "$acl has no 'user qsession-projection' line"
}

# ---------------------------------------------------------------- spawn
spawn_secure() {
  case $1 in
    redis-secure)
      # shellcheck disable=SC2086  # REDIS_EXTRA_ARGS is a whitespace-separated list
      spawn redis-secure "$STATE/redis-secure" "$STATE/logs/redis-secure.out" \
        redis-server --port 0 --tls-port "$(secure_port redis)" --bind "$HOST" \
          --tls-cert-file "$STATE/tls/server.crt" --tls-key-file "$STATE/tls/server.key" \
          --tls-ca-cert-file "$STATE/tls/ca.crt" --tls-auth-clients no \
          --aclfile "$STATE/secrets/redis.acl" \
          --save "" --appendonly no --dir "$STATE/redis-secure" --daemonize no \
          --logfile "$STATE/logs/redis-secure.log" ${REDIS_EXTRA_ARGS:-} ;;
    kafka-secure)
      local heap=${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}
      kafka_jvm_opts "$STATE/logs/kafka-secure"
      # shellcheck disable=SC2086  # KAFKA_HEAP_OPTS is a whitespace-separated list
      spawn kafka-secure "$STATE/kafka-secure" "$STATE/logs/kafka-secure.out" \
        java $heap "${KAFKA_JVM_OPTS[@]}" -cp "$KAFKA_CP" kafka.Kafka "$STATE/kafka-secure/server.properties" ;;
    *) die "unknown service $1" ;;
  esac
}

# ---------------------------------------------------------------- env
write_secure_env() {
  local s=$STATE/secrets
  cat >"$STATE/env.tmp" <<EOF
export QSP_SERVICES_TOPOLOGY=secure
export KAFKA_BOOTSTRAP=$HOST:$(secure_port kafka)
export KAFKA_WRONG_NAME_BOOTSTRAP=$HOST:$(secure_port wrongname)
export KAFKA_CONTROLLER=$HOST:$(secure_port controller)
export KAFKA_SECURITY_PROTOCOL=SASL_SSL
export KAFKA_SASL_MECHANISM=SCRAM-SHA-512
export KAFKA_CA_FILE=$STATE/tls/ca.crt
export KAFKA_ADMIN_USER=admin
export KAFKA_ADMIN_PASSWORD_FILE=$s/kafka-admin.password
export KAFKA_NODE_USER=qsp-node
export KAFKA_NODE_PASSWORD_FILE=$s/kafka-node.password
export KAFKA_ADMIN_PROPERTIES=$STATE/kafka-admin.properties
export KAFKA_ADMIN_CLIENT_PROPERTIES=$STATE/kafka-admin-client.properties
export REDIS_HOST=$HOST
export REDIS_PORT=$(secure_port redis)
export REDIS_TLS=1
export REDIS_CA_FILE=$STATE/tls/ca.crt
export REDIS_SERVER_NAME=localhost
export REDIS_USER=qsession-projection
export REDIS_PASSWORD_FILE=$s/redis-node.password
export REDIS_ADMIN_USER=default
export REDIS_ADMIN_PASSWORD_FILE=$s/redis-admin.password
export TLS_DIR=$STATE/tls
export KAFKA_PIDS=1=$(pid_of kafka-secure || echo -)
export REDIS_PIDS=1=$(pid_of redis-secure || echo -)
EOF
  mv "$STATE/env.tmp" "$STATE/env"
}

# ---------------------------------------------------------------- stop
secure_stop() {
  local n pid pids=() deadline
  for n in kafka-secure redis-secure; do pid=$(pid_of "$n") && pids+=("$pid"); done
  stop_names kafka-secure redis-secure
  # pid_of stops matching a process on its way out (its command line goes with
  # its main thread) while its other threads still finish: wait (up to 10 s)
  # until it has left the process table, so that its ports are free on return.
  deadline=$(( $(date +%s) + 10 ))
  for pid in "${pids[@]}"; do
    while [ -e "/proc/$pid" ] && [ "$(date +%s)" -lt "$deadline" ] \
          && [ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)" != Z ]; do
      sleep 0.05
    done
  done
  if is_secure_state; then rm -f "$STATE/env" "$STATE/topology"; fi
}

secure_fail_start() {
  local msg=$1 f; shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    printf '[services] ---- last lines of %s\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
  secure_stop
  die "start --secure failed: $msg (logs in $STATE/logs)"
}

# ---------------------------------------------------------------- start
secure_healthy() {
  pid_of kafka-secure >/dev/null && pid_of redis-secure >/dev/null \
    && secure_redis_ok && secure_kafka_ok
}

secure_start() {
  local t0; t0=$(now)
  check_deps
  [ -x "$DEVTOOL" ] || die "$DEVTOOL is missing: the secured set's readiness probe needs it (cmake --build --preset default --target qsp-devtool)"
  if pid_of redis >/dev/null || pid_of kafka >/dev/null; then
    die "$STATE holds a running default set; stop it first (scripts/services stop) or use another QSP_SERVICES_DIR"
  fi
  if is_ha_state && ha_any_running; then
    die "$STATE holds a running HA set (start --ha); stop it first or use another QSP_SERVICES_DIR"
  fi
  if is_secure_state && secure_any_running; then
    if secure_healthy; then
      log "already running: the secured set in $STATE"
      cat "$STATE/env"
      return 0
    fi
    log "found a partial or unhealthy secured set; restarting it (${SECURE_WHY:-a process is gone})"
    secure_stop
  fi
  rm -f "$STATE/kafka-secure.pid" "$STATE/redis-secure.pid" "$STATE/env" "$STATE/secure-ports" \
        "$STATE/kafka-admin.properties" "$STATE/kafka-admin-client.properties"
  rm -rf "$STATE/kafka-secure" "$STATE/redis-secure" "$STATE/tls" "$STATE/secrets" "$STATE/logs"
  echo secure >"$STATE/topology"
  mkdir -p "$STATE/kafka-secure/data" "$STATE/redis-secure" "$STATE/logs/kafka-secure"
  (umask 077 && mkdir -p "$STATE/secrets")

  local ports=() k=0 n
  read -r -a ports < <(pick_ports 4)
  [ ${#ports[@]} -eq 4 ] || die "could not find free ports"
  for n in kafka wrongname controller redis; do echo "$n ${ports[$k]}" >>"$STATE/secure-ports"; k=$((k + 1)); done

  secure_make_tls
  secret kafka-admin.password "$(random_password)"
  secret kafka-node.password "$(random_password)"
  secret redis-admin.password "$(random_password)"
  secret redis-node.password "$(random_password)"
  write_secure_redis_acl
  write_secure_server_properties
  write_secure_client_properties
  log "certificates, secrets and configs written ($(elapsed "$t0") s)"

  # Redis first: it starts while the JVM formats the storage.
  spawn_secure redis-secure

  # Fresh KRaft storage (single-node dynamic quorum, as the default set) with
  # the two SCRAM users.
  local cluster_id
  cluster_id=$(python3 "$KAFKA_SUPPORT/ports.py" uuid)
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
      "-Dlog4j2.configurationFile=$KAFKA_SUPPORT/log4j2.xml" "-Dkafka.logs.dir=$STATE/logs/kafka-secure" \
      -cp "$KAFKA_CP" kafka.tools.StorageTool format --standalone \
      -t "$cluster_id" -c "$STATE/kafka-secure/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$(secret_value kafka-admin.password)]" \
      --add-scram "SCRAM-SHA-512=[name=qsp-node,password=$(secret_value kafka-node.password)]" \
      >"$STATE/logs/kafka-secure-format.log" 2>&1 \
    || secure_fail_start "formatting the Kafka storage failed" "$STATE/logs/kafka-secure-format.log"

  spawn_secure kafka-secure

  local deadline redis_up=0 kafka_up=0
  deadline=$(awk -v a="$t0" -v t="$START_TIMEOUT" 'BEGIN { printf "%d", a + t }')
  while :; do
    if [ $redis_up = 0 ]; then
      pid_of redis-secure >/dev/null \
        || secure_fail_start "redis-server exited" "$STATE/logs/redis-secure.log" "$STATE/logs/redis-secure.out"
      secure_redis_ok && { redis_up=1; log "redis answers on TLS $HOST:$(secure_port redis) ($(elapsed "$t0") s)"; }
    fi
    if [ $kafka_up = 0 ]; then
      pid_of kafka-secure >/dev/null \
        || secure_fail_start "the Kafka broker exited" "$STATE/logs/kafka-secure/kafka.log" "$STATE/logs/kafka-secure.out"
      secure_kafka_ok && { kafka_up=1; log "kafka answers on SASL_SSL $HOST:$(secure_port kafka) ($(elapsed "$t0") s)"; }
    fi
    [ $redis_up = 1 ] && [ $kafka_up = 1 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      secure_fail_start "not ready after ${START_TIMEOUT}s: $SECURE_WHY" "$STATE/logs/kafka-secure/kafka.log" \
        "$STATE/logs/kafka-secure.out" "$STATE/logs/redis-secure.log"
    fi
    sleep 0.25
  done

  write_secure_env
  log "secured set started in $(elapsed "$t0") s: redis pid $(cat "$STATE/redis-secure.pid")," \
      "kafka pid $(cat "$STATE/kafka-secure.pid"); env: $STATE/env"
  cat "$STATE/env"
}

# ---------------------------------------------------------------- status
secure_status() {
  local rc=0 pid port
  port=$(secure_port redis)
  if ! pid=$(pid_of redis-secure); then echo "redis-secure: not running${port:+ (TLS port $port)}"; rc=3
  elif secure_redis_ok; then echo "redis-secure: running, pid $pid, TLS $HOST:$port, answers PING"
  else echo "redis-secure: running, pid $pid, not answering ($SECURE_WHY)"; rc=3; fi
  port=$(secure_port kafka)
  if ! pid=$(pid_of kafka-secure); then echo "kafka-secure: not running${port:+ (SASL_SSL port $port)}"; rc=3
  elif secure_kafka_ok; then
    echo "kafka-secure: running, pid $pid, SASL_SSL $HOST:$port, WRONGNAME $HOST:$(secure_port wrongname), controller $HOST:$(secure_port controller), answers"
  else echo "kafka-secure: running, pid $pid, not answering ($SECURE_WHY)"; rc=3; fi
  [ -f "$STATE/env" ] && echo "env: $STATE/env"
  return $rc
}
