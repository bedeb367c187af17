#!/bin/sh
# gen-exports.sh DEF DIR - from the hook list DEF (preload/interpose/hooks.def) writes
#   DIR/hooks.list   the hooked libpq functions, one name a line (read by tools/check-exports.sh
#                    and the integration test)
#   DIR/exports.map  the version script: those names, dlsym and dlopen global, all else local
# The list is read through the C preprocessor ($CC -E), as the dlsym table reads it, so both see
# the same names.
set -eu
def=$1
dir=$2
${CC:-cc} -E -P -x c -D'DBT_HOOK(name)=name' "$def" | tr -s ' \t' '\n\n' | sed '/^$/d' >"$dir/hooks.list.tmp"
bad=$(grep -v -E '^[A-Za-z_][A-Za-z0-9_]*$' "$dir/hooks.list.tmp" || true)
if [ -n "$bad" ] || [ ! -s "$dir/hooks.list.tmp" ]; then
    echo "gen-exports: $def: not one DBT_HOOK(name) a line: ${bad:-empty list}" >&2
    exit 1
fi
dup=$(sort "$dir/hooks.list.tmp" | uniq -d)
if [ -n "$dup" ]; then
    echo "gen-exports: $def lists twice: $dup" >&2
    exit 1
fi
{
    echo "/* Made by tools/gen-exports.sh from $def: the only symbols libdbthrottle.so exports."
    echo " * Everything else, hiredis included, stays hidden. */"
    echo "{"
    echo "  global:"
    sed 's/.*/    &;/' "$dir/hooks.list.tmp"
    echo "    dlsym;"
    echo "    dlopen;"
    echo "  local: *;"
    echo "};"
} >"$dir/exports.map.tmp"
mv "$dir/hooks.list.tmp" "$dir/hooks.list"
mv "$dir/exports.map.tmp" "$dir/exports.map"
