#!/usr/bin/env bash
# The runtime Debian package end to end (cmake/package.cmake), run by CTest:
#   package_test.sh BUILD_DIR SOURCE_DIR VERSION
# 1. builds it with cpack into a scratch dir: qsession-projection_<VERSION>_amd64.deb
# 2. checks its control data (name, version, architecture, dependencies, the
#    conffile, the maintainer scripts) and its exact file list
# 3. installs it into a scratch root with a scratch dpkg database
#    (`dpkg --root=... --unpack`: no container, no maintainer script runs)
# 4. runs the packaged node from that root: --help, `verify` against the test
#    services (scripts/services; QSP_SERVICES_ENV or SOURCE_DIR/.services/env)
#    for a fresh topic (exit 0) and with a wrong partition count (exit 3), and
#    the shipped conffile (parses, names its secrets under /etc/qsession-projection)
# 5. lints it: lintian errors and warnings fail the test (none are overridden);
#    informational tags are printed.
set -euo pipefail

BUILD=${1:?usage: package_test.sh BUILD_DIR SOURCE_DIR VERSION}
SRC=${2:?usage: package_test.sh BUILD_DIR SOURCE_DIR VERSION}
VERSION=${3:?usage: package_test.sh BUILD_DIR SOURCE_DIR VERSION}
NAME=qsession-projection
WORK=$BUILD/package-test
ROOT=$WORK/root

failures=0
ok() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; failures=$((failures + 1)); }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
# expect DESCRIPTION COMMAND...: the command must succeed
expect() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }
contains() { [[ $1 == *"$2"* ]]; }

for tool in cpack dpkg dpkg-deb lintian; do
  command -v "$tool" >/dev/null || die "$tool not found (scripts/bootstrap installs it)"
done
env_file=${QSP_SERVICES_ENV:-$SRC/.services/env}
[ -r "$env_file" ] || die "cannot read $env_file: start the services with scripts/services start"
REDIS_HOST=$(sed -n 's/^\(export \)\{0,1\}REDIS_HOST=//p' "$env_file")
REDIS_PORT=$(sed -n 's/^\(export \)\{0,1\}REDIS_PORT=//p' "$env_file")
KAFKA_BOOTSTRAP=$(sed -n 's/^\(export \)\{0,1\}KAFKA_BOOTSTRAP=//p' "$env_file")
[ -n "$REDIS_PORT" ] && [ -n "$KAFKA_BOOTSTRAP" ] || die "$env_file lacks REDIS_PORT or KAFKA_BOOTSTRAP"
REDIS_HOST=${REDIS_HOST:-127.0.0.1}

rm -rf "$WORK"
mkdir -p "$WORK"

# -- 1. build ----------------------------------------------------------------------
if ! (cd "$WORK" && cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$WORK/out") \
     >"$WORK/cpack.log" 2>&1; then
  cat "$WORK/cpack.log" >&2
  die "cpack -G DEB failed"
fi
deb=$WORK/out/${NAME}_${VERSION}_amd64.deb
[ -f "$deb" ] || { ls -l "$WORK/out" >&2; die "cpack did not write $(basename "$deb")"; }
ok "cpack built $(basename "$deb") ($(stat -c %s "$deb") bytes)"

# -- 2. control data and file list -------------------------------------------------
expect "Package: $NAME" test "$(dpkg-deb -f "$deb" Package)" = "$NAME"
expect "Version: $VERSION" test "$(dpkg-deb -f "$deb" Version)" = "$VERSION"
expect "Architecture: amd64" test "$(dpkg-deb -f "$deb" Architecture)" = amd64
depends=$(dpkg-deb -f "$deb" Depends)
# Shared libraries through dpkg-shlibdeps; librdkafka and hiredis are static.
for dep in adduser libcaf-core0.17 libspdlog1.10-fmt9 libfmt9 libcpp-httplib0.11 libssl3 libstdc++6; do
  expect "Depends names $dep" contains "$depends" "$dep"
done
for dep in rdkafka hiredis; do
  expect "Depends does not name $dep (linked statically)" eval '! contains "$depends" "$dep"'
done
dpkg-deb -e "$deb" "$WORK/control"
expect "conffiles lists exactly the production config" \
  test "$(cat "$WORK/control/conffiles")" = "/etc/$NAME/production.conf"
for script in postinst prerm postrm; do
  expect "$script is an executable sh script" test -x "$WORK/control/$script"
  expect "$script parses (sh -n)" sh -n "$WORK/control/$script"
done

# The maintainer scripts' logic, against logging stand-ins for the commands
# they call (nothing touches this machine's users, dpkg database or systemd):
# a first configure creates the user and both statoverrides; a second one,
# with the user and the overrides present, repeats neither; purge removes the
# overrides.
stubs=$WORK/stubs
mkdir -p "$stubs"
for cmd in adduser deb-systemd-helper deb-systemd-invoke systemctl; do
  printf '#!/bin/sh\necho "%s $*" >>"$STUB_LOG"\n' "$cmd" >"$stubs/$cmd"
done
# getent/dpkg-statoverride --list answer from STUB_USER / STUB_OVERRIDES.
printf '#!/bin/sh\n[ -n "$STUB_USER" ]\n' >"$stubs/getent"
cat >"$stubs/dpkg-statoverride" <<'EOF'
#!/bin/sh
echo "dpkg-statoverride $*" >>"$STUB_LOG"
[ "$1" != --list ] || [ -n "$STUB_OVERRIDES" ]
EOF
chmod +x "$stubs"/*
run_script() { # run_script LOG USER OVERRIDES SCRIPT ARGS...
  local log=$1 user=$2 overrides=$3 script=$4; shift 4
  : >"$log"
  STUB_LOG=$log STUB_USER=$user STUB_OVERRIDES=$overrides PATH="$stubs:$PATH" \
    sh "$WORK/control/$script" "$@"
}
expect "postinst configure (first install) exits 0" run_script "$WORK/first.log" "" "" postinst configure
first=$(cat "$WORK/first.log")
expect "first configure creates the system user qsession" \
  grep -q '^adduser --system --group .*--home /nonexistent .* qsession$' "$WORK/first.log"
expect "first configure makes /etc/$NAME root:qsession 0750" \
  contains "$first" "dpkg-statoverride --update --add root qsession 0750 /etc/$NAME"$'\n'
expect "first configure makes the conffile root:qsession 0640" \
  contains "$first" "dpkg-statoverride --update --add root qsession 0640 /etc/$NAME/production.conf"$'\n'
expect "first configure does not enable or start the unit" eval '! grep -Eq "helper enable|invoke (start|restart)" "$WORK/first.log"'
expect "postinst configure (again) exits 0" run_script "$WORK/again.log" yes yes postinst configure 0.2.0
expect "a second configure neither re-creates the user nor re-adds overrides" \
  eval '! grep -Eq "^adduser|--add" "$WORK/again.log"'
expect "postrm purge exits 0" run_script "$WORK/purge.log" yes yes postrm purge
expect "purge removes both statoverrides" \
  test "$(grep -c '^dpkg-statoverride --remove' "$WORK/purge.log")" = 2

cat >"$WORK/files.expected" <<EOF
./etc/$NAME/production.conf
./lib/systemd/system/$NAME.service
./usr/bin/$NAME
./usr/share/doc/$NAME/CLUSTER.md
./usr/share/doc/$NAME/OPERATIONS.md
./usr/share/doc/$NAME/PERFORMANCE.md
./usr/share/doc/$NAME/README.md
./usr/share/doc/$NAME/RELIABILITY.md
./usr/share/doc/$NAME/changelog.gz
./usr/share/doc/$NAME/copyright
./usr/share/doc/$NAME/examples/redis-acl.conf
./usr/share/man/man1/$NAME.1.gz
EOF
dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | LC_ALL=C sort >"$WORK/files.actual"
if diff -u "$WORK/files.expected" "$WORK/files.actual" >"$WORK/files.diff"; then
  ok "file list: binary, conffile, unit, manual page, docs; nothing of the library's dev install"
else
  cat "$WORK/files.diff" >&2
  fail "file list differs from the expected one (diff above: - expected, + packaged)"
fi

# -- 3. install into a scratch root ------------------------------------------------
mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates"
: >"$ROOT/var/lib/dpkg/status"
# --unpack runs no maintainer script here (the package has no preinst); the
# dependencies are the host's, hence --force-depends.
if ! dpkg --root="$ROOT" --force-depends --force-not-root --unpack "$deb" >"$WORK/dpkg.log" 2>&1; then
  cat "$WORK/dpkg.log" >&2
  die "dpkg --root=$ROOT --unpack failed"
fi
status=$(dpkg --root="$ROOT" -s "$NAME")
expect "dpkg database: $NAME $VERSION unpacked" \
  contains "$status" "Status: install ok unpacked"$'\n'
expect "dpkg database: production.conf registered as a conffile" \
  contains "$status" "Conffiles:"$'\n'" /etc/$NAME/production.conf "
# A conffile waits as .dpkg-new until the package is configured.
conf=$ROOT/etc/$NAME/production.conf.dpkg-new
expect "the conffile is unpacked as a conffile (.dpkg-new)" test -f "$conf"
expect "the conffile is config/production.conf" cmp -s "$conf" "$SRC/config/production.conf"
expect "the ACL example is config/redis-acl.conf" \
  cmp -s "$ROOT/usr/share/doc/$NAME/examples/redis-acl.conf" "$SRC/config/redis-acl.conf"

unit=$ROOT/lib/systemd/system/$NAME.service
expect "the unit is config/$NAME.service" cmp -s "$unit" "$SRC/config/$NAME.service"
# The unit's paths must be the package's: ExecStart's binary and config file,
# and ReadOnlyPaths.
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
read -r exec_bin exec_args <<<"$exec_start"
expect "ExecStart's binary $exec_bin is the packaged one" test "$exec_bin" = "/usr/bin/$NAME" -a -x "$ROOT$exec_bin"
exec_conf=$(grep -o -- '--config-file=[^ ]*' <<<"$exec_args" | cut -d= -f2-)
expect "ExecStart's config file $exec_conf is the conffile" \
  test "$exec_conf" = "/etc/$NAME/production.conf"
expect "ExecStart runs the node: run" test "${exec_args%% *}" = run
ro=$(sed -n 's/^ReadOnlyPaths=//p' "$unit")
expect "ReadOnlyPaths $ro is the package's config dir" test "$ro" = "/etc/$NAME" -a -d "$ROOT$ro"
expect "the unit runs as the user postinst creates" \
  grep -qx 'User=qsession' "$unit"
expect "postinst creates that user" grep -q 'user=qsession$' "$WORK/control/postinst"

doc=$ROOT/usr/share/doc/$NAME
expect "changelog.gz's newest entry is $VERSION" \
  test "$(gzip -dc "$doc/changelog.gz" | head -n1)" = "$NAME ($VERSION) unstable; urgency=medium"
copyright=$(cat "$doc/copyright")
for notice in "Salvatore Sanfilippo" "Magnus Edenhill" "LICENSE.lz4" "/usr/share/common-licenses/Apache-2.0"; do
  expect "copyright carries the static libraries' notices: $notice" contains "$copyright" "$notice"
done

# -- 4. the packaged node ------------------------------------------------------------
bin=$ROOT/usr/bin/$NAME
libs=$(ldd "$bin" 2>&1) || true
expect "ldd: every shared library resolves" eval '! contains "$libs" "not found"'
expect "ldd: librdkafka and hiredis are linked statically" eval '! grep -Eq "rdkafka|hiredis" <<<"$libs"'

help_rc=0
help=$("$bin" --help 2>&1) || help_rc=$?
expect "--help exits 0" test "$help_rc" = 0
expect "--help lists verify and the options" eval 'contains "$help" "  verify " && contains "$help" "--projection.dispatch-topic"'
# Every subcommand --help lists has its entry in the manual page.
man=$(gzip -dc "$ROOT/usr/share/man/man1/$NAME.1.gz")
commands=$(sed -n '/^commands:/,/^$/p' <<<"$help" | sed -n 's/^  \([a-z-]\{1,\}\)  .*/\1/p')
[ -n "$commands" ] || fail "found no subcommand in --help"
for c in $commands; do
  expect "the manual page documents '$c'" grep -qx "\\.B $c" <<<"$man"
done

topic=pkgtest-$$-$RANDOM
created=
cleanup() { [ -z "$created" ] || "$BUILD/bin/qsp-devtool" delete-topic "$KAFKA_BOOTSTRAP" "$topic" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$BUILD/bin/qsp-devtool" create-topic "$KAFKA_BOOTSTRAP" "$topic" 3 >/dev/null || die "cannot create topic $topic"
created=1
node_args=(--projection.dispatch-topic="$topic" --projection.namespace="pkgtest_ns_$topic"
           --projection.convs-prefix="pkgtest_convs_$topic:" --kafka.bootstrap-servers="$KAFKA_BOOTSTRAP"
           --redis.host="$REDIS_HOST" --redis.port="$REDIS_PORT" --http.listen=off)
run_node() { # run_node RC_VAR OUT_VAR ERR_VAR ARGS...: runs the packaged node
  local -n _rc=$1 _out=$2 _err=$3; shift 3
  _rc=0
  "$bin" "$@" >"$WORK/node.out" 2>"$WORK/node.err" || _rc=$?
  _out=$(cat "$WORK/node.out"); _err=$(cat "$WORK/node.err")
}
run_node rc out err verify "${node_args[@]}" --projection.partition-count=3
if [ "$rc" = 0 ] && contains "$out" "verdict: would start" \
   && [ "$(grep -Ec '^[0-2] .* bootstrap$' <<<"$out")" = 3 ]; then
  ok "verify from the package: fresh 3-partition topic, exit 0, every partition bootstraps"
else
  fail "verify from the package (exit $rc, expected 0 and 3 bootstrap rows): $out $err"
fi
run_node rc out err verify "${node_args[@]}" --projection.partition-count=4
if [ "$rc" = 3 ] && contains "$err" "partition_count"; then
  ok "verify from the package: wrong partition count refused, exit 3, naming partition_count"
else
  fail "verify with a wrong partition count (exit $rc, expected 3 naming partition_count): $out $err"
fi
# The shipped conffile parses; what stops the node is its first secret, which
# the template expects next to it.
run_node rc out err verify --config-file="$conf"
if [ "$rc" = 2 ] && contains "$err" "/etc/$NAME/kafka-password"; then
  ok "the conffile parses and names its secret /etc/$NAME/kafka-password (exit 2)"
else
  fail "verify --config-file=<conffile> (exit $rc, expected 2 naming /etc/$NAME/kafka-password): $err"
fi

# -- 5. lintian ------------------------------------------------------------------------
lintian_rc=0
lintian --fail-on error,warning --display-info --tag-display-limit 0 "$deb" \
  >"$WORK/lintian.log" 2>&1 || lintian_rc=$?
grep -v 'running with root privileges is not recommended' "$WORK/lintian.log" || true
if [ "$lintian_rc" = 0 ]; then
  ok "lintian: no error, no warning"
else
  fail "lintian reported errors or warnings (exit $lintian_rc, above)"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed; the scratch files are in $WORK" >&2
  exit 1
fi
rm -rf "$WORK"
echo "package test passed"
