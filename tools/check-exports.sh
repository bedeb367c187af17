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
