#!/bin/sh
# configure.sh - prints what the build needs to know of this machine, as make variables (the
# Makefile keeps it in $(BUILD)/config.mk). Run after tools/install-deps.sh build: pkg-config and
# the compiler can only answer once the packages are installed. CC names the compiler.
set -eu
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
command -v "$CC" >/dev/null 2>&1 || { echo "configure: no C compiler named '$CC'" >&2; exit 1; }
hiredis_cflags=$($PKG_CONFIG --cflags hiredis) ||
    { echo "configure: pkg-config does not know hiredis (libhiredis-dev)" >&2; exit 1; }
# hiredis is linked statically and its symbols hidden (--exclude-libs), so a host program that
# uses another hiredis version never has its calls bound to ours, nor ours to its.
hiredis_a=$($CC -print-file-name=libhiredis.a)
[ -f "$hiredis_a" ] || { echo "configure: $CC finds no libhiredis.a (libhiredis-dev)" >&2; exit 1; }
libpq_cflags=$($PKG_CONFIG --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
[ -f "${libpq_cflags#-I}/libpq-fe.h" ] || [ -f /usr/include/postgresql/libpq-fe.h ] ||
    { echo "configure: libpq-fe.h not found (libpq-dev)" >&2; exit 1; }
# The HTTP server of dbthrottle exporter (the command only; the library never links it).
microhttpd_libs=$($PKG_CONFIG --libs libmicrohttpd) ||
    { echo "configure: pkg-config does not know libmicrohttpd (libmicrohttpd-dev)" >&2; exit 1; }
cat <<MK
# Written by tools/configure.sh for CC=$CC; make remakes it when the install script changes.
HIREDIS_CFLAGS := $hiredis_cflags
HIREDIS_A := $hiredis_a
LIBPQ_CFLAGS := $libpq_cflags
MICROHTTPD_LIBS := $microhttpd_libs
MK
