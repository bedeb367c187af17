#!/bin/sh
# check-exports.sh LIB LIST - fails unless LIB's dynamic exports are exactly the hooked libpq
# functions named in LIST ($(BUILD)/gen/hooks.list, made from preload/interpose/hooks.def) plus
# dlsym and dlopen: no more (a leak of our internals or hiredis), no fewer (a hook the program
# would never reach). A PQ or lo_ function LIB defines but LIST misses is reported too: marked
# HOOK but unlisted, it stays hidden.
set -eu
lib=$1
list=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{ cat "$list"; echo dlsym; echo dlopen; } | sort >"$tmp/want"
nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -E '^(_init|_fini)$' | sort >"$tmp/have"
status=0
extra=$(comm -13 "$tmp/want" "$tmp/have")
missing=$(comm -23 "$tmp/want" "$tmp/have")
if [ -n "$extra" ]; then
    echo "check-exports: $lib exports symbols that are not in $list:" $extra >&2
    status=1
fi
if [ -n "$missing" ]; then
    echo "check-exports: $lib does not export hooks that $list names:" $missing >&2
    status=1
fi
# The full symbol table (absent when stripped) shows the hidden ones: the library does not link
# libpq, so every PQ/lo_ function defined in it is ours.
# Functions only (T, t) with plain names: clang names a hook's static locals "PQexec.dbt_slot_".
nm --defined-only "$lib" 2>/dev/null | awk '$2 ~ /^[Tt]$/ && $3 ~ /^(PQ|lo_)[A-Za-z0-9_]*$/ {print $3}' |
    sort -u >"$tmp/defined"
unlisted=$(comm -23 "$tmp/defined" "$tmp/want")
if [ -n "$unlisted" ]; then
    echo "check-exports: $lib defines libpq functions that $list does not name:" $unlisted >&2
    status=1
fi
[ $status -eq 0 ] || exit 1
echo "check-exports: $lib exports exactly the $(wc -l <"$list") hooks of $list, dlsym and dlopen"
# dlsym and dlopen must hand RTLD_NEXT lookups and plain opens to glibc as tail calls (an
# indirect jmp), so glibc sees the program as the caller (see preload/interpose/hooks_dlsym.c).
# An unoptimized build does not do that: refuse it rather than ship it.
for fn in dlsym dlopen; do
    if ! objdump -d --no-show-raw-insn "$lib" | awk "/<$fn>:/,/^\$/" | grep -q 'jmp  *\*%'; then
        echo "check-exports: $fn in $lib does not tail-call glibc (build with -O2)" >&2
        exit 1
    fi
done
echo "check-exports: dlsym and dlopen tail-call glibc"
