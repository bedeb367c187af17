#!/bin/sh
# install-deps.sh [build|test] [PACKAGE...] - installs the Debian packages that dbthrottle needs,
# when some are missing; does nothing when all are present. `build`: what `make` needs to compile
# the library and the command; `test` (the default): also the servers, checkers and clients the
# tests, the demo and the benches use (prometheus for its promtool, which checks what the
# exporter prints: tests/cli/exporter.sh; build-essential, debhelper, dpkg-dev and fakeroot for
# `make deb`, which tests/package/deb.sh runs). Extra packages may follow (make bench asks for
# pgbouncer). Everything `make test` needs is in `test`, so it is installed at the start, never
# in the middle of a run.
set -eu
build="gcc make pkg-config binutils python3 libhiredis-dev libpq-dev libssl-dev libmicrohttpd-dev"
test="$build clang libcriterion-dev redis-server postgresql postgresql-client clang-format valgrind \
python3 python3-psycopg2 python3-psycopg ruby-pg libdbd-pg-perl php-cli php-pgsql tmux iproute2 \
libclang-rt-14-dev groff-base man-db ca-certificates strace procps redis-sentinel openssl curl prometheus \
build-essential debhelper dpkg-dev fakeroot"
case "${1:-test}" in
build) pkgs=$build; [ $# -gt 0 ] && shift ;;
test) pkgs=$test; [ $# -gt 0 ] && shift ;;
*) pkgs= ;;
esac
pkgs="$pkgs $*"
missing=
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: missing Debian packages:$missing"
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=sudo
    else
        echo "install-deps: run as root: apt-get install -y$missing" >&2
        exit 1
    fi
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
# A machine that just booted may be running its own apt (apt-daily, unattended-upgrades): wait for
# dpkg's lock instead of failing at once, and try a failed download once more.
apt_opts="-q -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3"
try=1
# shellcheck disable=SC2086
until $SUDO apt-get $apt_opts update && $SUDO apt-get $apt_opts install -y --no-install-recommends $missing; do
    [ "$try" -ge 2 ] && { echo "install-deps: apt-get failed twice; install by hand: apt-get install -y$missing" >&2; exit 1; }
    try=$((try + 1))
    echo "install-deps: apt-get failed; trying again in 10 s" >&2
    sleep 10
done
# The packaged servers must not run as system services for our tests: tests start their own.
# Only those installed just now (a server the machine already ran is left as it was).
for svc in $missing; do
    case "$svc" in
    redis-server | redis-sentinel | postgresql | pgbouncer | prometheus)
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
            $SUDO systemctl disable --now --quiet "$svc" || true
        fi
        ;;
    esac
done
