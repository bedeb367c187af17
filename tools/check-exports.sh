#!/bin/sh
# check-exports.sh LIB - fails if LIB exports a symbol that is not an interposed libpq function.
set -eu
lib=$1
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -E '^(PQ[A-Za-z_]+|lo_[a-z_]+|dlsym|dlopen|_init|_fini)$' || true)
if [ -n "$bad" ]; then
    echo "check-exports: $lib exports symbols it should hide:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check-exports: $lib exports only interposed symbols"
# dlsym and dlopen must hand RTLD_NEXT lookups and plain opens to glibc as tail calls (an
# indirect jmp), so glibc sees the program as the caller (see preload/hooks_dlsym.c). An
# unoptimized build does not do that: refuse it rather than ship it.
for fn in dlsym dlopen; do
    if ! objdump -d --no-show-raw-insn "$lib" | awk "/<$fn>:/,/^\$/" | grep -q 'jmp  *\*%'; then
        echo "check-exports: $fn in $lib does not tail-call glibc (build with -O2)" >&2
        exit 1
    fi
done
echo "check-exports: dlsym and dlopen tail-call glibc"
