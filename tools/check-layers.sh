#!/bin/sh
# check-layers.sh - the include paths enforce the layers (interpose -> sem -> redis -> base): each
# folder is compiled seeing only itself and, of the folders below it, their public faces (the
# headers in preload/LAYER/include/). A path in an #include could step around that
# ("../sem/pool.h"), so none is allowed in preload/, cli/, bench/ or tests/ (system headers such as
# <sys/...>, OpenSSL's <openssl/...> and Criterion's <criterion/...> aside).
set -eu
cd "$(dirname "$0")/.."
sources=$(find preload cli bench tests -name '*.[ch]' | sort)
# shellcheck disable=SC2086
bad=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*/' $sources |
    grep -v -E '#[[:space:]]*include[[:space:]]*<(sys|netinet|arpa|linux|openssl|criterion)/' || true)
if [ -n "$bad" ]; then
    echo "check-layers: an #include with a path steps around the layers' include paths:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check-layers: no #include in preload/, cli/, bench/ or tests/ names a path"

# An include names a header by its name alone, found along the include path: two headers of one
# name would be told apart by the order of the path, not by the include.
# shellcheck disable=SC2086
dup=$(for f in $sources; do case $f in *.h) echo "${f##*/} $f" ;; esac; done | sort |
    awk '$1 == prev { print "check-layers: two headers named " $1 ": " prevf " and " $2 }
         { prev = $1; prevf = $2 }')
if [ -n "$dup" ]; then
    echo "$dup" >&2
    exit 1
fi

# A folder's own headers (those of preload/LAYER/ itself, not of its include/; all of interpose/'s
# and cli/'s, which have no public face) are included only by the folder's own files and by the
# white-box tests the Makefile lists for it (WHITEBOX_<file> = <folders>): any other file that
# includes one fails here, in one line, before the compiler says "No such file".
owned=$(for d in preload/base preload/redis preload/sem preload/interpose cli; do
    for h in "$d"/*.h; do [ -e "$h" ] && echo "${h##*/} $d"; done
done)
whitebox=$(sed -n 's/^WHITEBOX_\([^ =]*\)[[:space:]]*=[[:space:]]*\(.*\)$/\1 \2/p' Makefile)
# shellcheck disable=SC2086
bad=$(grep -H -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $sources |
    sed 's/^\([^:]*\):\([0-9]*\):.*"\([^"]*\)".*/\1 \2 \3/' |
    awk -v owned="$owned" -v whitebox="$whitebox" '
        BEGIN {
            n = split(owned, o, "\n")
            for (i = 1; i <= n; i++) { split(o[i], f, " "); home[f[1]] = f[2] }
            n = split(whitebox, w, "\n")
            for (i = 1; i <= n; i++) {
                k = split(w[i], f, " ")
                for (j = 2; j <= k; j++) allowed[f[1] " " f[j]] = 1
            }
        }
        {
            file = $1; line = $2; h = $3
            if (!(h in home)) next
            dir = file; sub(/\/[^\/]*$/, "", dir)
            d = home[h]
            if (dir == d || ((file " " d) in allowed)) next
            face = (d ~ /^preload\/(base|redis|sem)$/) ? "its public face: " d "/include/" \
                : "it has no public face"
            printf "check-layers: %s:%s includes %s, internal to %s (%s); a white-box test says so in the Makefile: WHITEBOX_%s = %s\n", file, line, h, d, face, file, d
        }')
if [ -n "$bad" ]; then
    echo "$bad" >&2
    exit 1
fi
echo "check-layers: outside each layer, only its public face is included (but by the white-box tests)"

# Inside preload/interpose the hooks (hooks_*.c) are the top: they call the machinery below them
# (held.c, throttle.c, conn_registry.c, ...), never the other way round. So no other file there
# calls a function by a name we hook (hooks.def, dlsym, dlopen): that would be our hook, not
# libpq's or glibc's; the machinery reaches them through real.c (DBT_REAL, dbt_real_dlsym/_dlopen).
# Nor does it include a hook file's header. Comments are left out.
hooked=$(sed -n 's/^DBT_HOOK(\([A-Za-z0-9_]*\)).*/\1/p' preload/interpose/hooks.def | paste -sd '|' -)
bad=$(for f in $(ls preload/interpose/*.[ch] | grep -v '/hooks_'); do
    sed -e 's|/\*.*\*/||g' -e 's|/\*.*||' -e 's|^[[:space:]]*\*.*||' -e 's|//.*||' "$f" |
        grep -nE "(^|[^A-Za-z0-9_&(])($hooked|dlsym|dlopen)[[:space:]]*\(|#[[:space:]]*include[[:space:]]*\"hooks_" |
        sed "s|^|$f:|"
done)
if [ -n "$bad" ]; then
    echo "check-layers: below the hooks, preload/interpose calls a hooked function or includes a hook file:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check-layers: below the hooks, preload/interpose calls libpq only through real.c"
