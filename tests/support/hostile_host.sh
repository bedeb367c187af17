#!/bin/sh
# hostile_host.sh COMMAND... - runs COMMAND as on a machine where dbthrottle is installed and
# configured: an /etc/dbthrottle.conf that breaks every process that reads it (an unknown setting:
# the library refuses every command, a configuration load fails), and a HOME whose ~/.psqlrc
# breaks psql's output and its session, and whose other dotfiles name no server of the tests'.
# make check runs its suites under it: a test that reads a file of the machine's own (rather than
# one of its temp dir) fails here instead of only on a machine with the .deb installed.
# tests/support/lib.sh and tests/support/config_load.h keep the suites out of both.
#
# /etc/dbthrottle.conf exists only in a private mount namespace (unshare -m), where /etc is an
# overlay whose upper layer is a tmpfs, as in tests/package/deb.sh: this machine's /etc is never
# written. That needs root and overlayfs; without them COMMAND runs with the hostile HOME only,
# and says so (nothing then proves that the suites read no installed file).
set -u
[ $# -gt 0 ] || { echo "usage: hostile_host.sh COMMAND..." >&2; exit 2; }
dir=$(mktemp -d /tmp/dbt-hostile-XXXXXX)
trap 'rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM
mkdir "$dir/ovl" "$dir/home"
# A setting no version knows: every process that reads the file refuses its configuration, whatever
# its environment says (a bad value the environment replaces would be no error).
cat >"$dir/dbthrottle.conf" <<'CONF'
# Put here by tests/support/hostile_host.sh: a test read the machine's installed configuration.
a_test_read_the_installed_file = yes
CONF
# psql runs ~/.psqlrc before its -c commands: a line of output more, and a search_path where no
# function or table of the tests is found (nor can any be made).
cat >"$dir/home/.psqlrc" <<'RC'
\echo 'a test read the ~/.psqlrc of the user running it (tests/support/hostile_host.sh)'
set search_path = a_test_read_the_users_psqlrc;
RC
printf '[dbt_svc]\nhost=192.0.2.1\n' >"$dir/home/.pg_service.conf"
printf '*:*:*:*:read-by-a-test\n' >"$dir/home/.pgpass"
chmod 600 "$dir/home/.pgpass"

# In the namespace: the overlay, the file, then COMMAND (exit 77 before it when a mount fails).
in_ns='d=$1
shift
mount -t tmpfs tmpfs "$d/ovl" && mkdir "$d/ovl/up" "$d/ovl/wk" &&
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$d/ovl/up,workdir=$d/ovl/wk" /etc &&
    cp "$d/dbthrottle.conf" /etc/dbthrottle.conf || exit 77
touch "$d/in-namespace"
exec "$@"'
# The hostile HOME needs nothing of the machine; DBTHROTTLE_CONFIG unset, as on a machine where
# nobody set it.
unset DBTHROTTLE_CONFIG
HOME=$dir/home
export HOME
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null; then
    unshare -m --propagation private sh -c "$in_ns" hostile_host "$dir" "$@"
    rc=$?
    [ -e "$dir/in-namespace" ] && exit $rc
fi
echo "hostile_host.sh: no private mount namespace with an overlaid /etc here (root and overlayfs" \
    "needed): $* runs with the hostile HOME but no /etc/dbthrottle.conf" >&2
"$@"
