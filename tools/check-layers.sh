#!/bin/sh
# check-layers.sh - the include paths enforce the layers (interpose -> sem -> redis -> base): each
# folder is compiled seeing only itself and the folders below it. A path in an #include could
# step around that ("../sem/sem_client.h"), so none is allowed in preload/ (system headers such as
# <sys/...> and OpenSSL's <openssl/...> aside).
set -eu
cd "$(dirname "$0")/.."
bad=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*/' preload/*/*.[ch] |
    grep -v -E '#[[:space:]]*include[[:space:]]*<(sys|netinet|arpa|linux|openssl)/' || true)
if [ -n "$bad" ]; then
    echo "check-layers: an #include with a path steps around the layers' include paths:" >&2
    echo "$bad" >&2
    exit 1
fi
echo "check-layers: no #include in preload/ names a path"

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
