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
