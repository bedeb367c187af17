#!/bin/sh
# tls.sh - certificates for the rediss:// tests, made with openssl in a directory of the test's
# own. Sourced (tls_make_certs DIR), or run: sh tests/support/tls.sh DIR. Makes, in DIR:
#   ca.crt            the CA the tests trust (DBTHROTTLE_REDIS_CA, Redis' tls-ca-cert-file)
#   server.crt/.key   for 127.0.0.1 and localhost, signed by ca.crt
#   expired.crt/.key  the same names, valid only in 2020 (openssl ca -startdate/-enddate: 3.0's
#                     x509 cannot date a certificate in the past)
#   wronghost.crt/.key  signed by ca.crt for wrong.example only
#   otherca.crt       a CA that signed none of them (a wrong DBTHROTTLE_REDIS_CA)
#   client.crt/.key   a client certificate signed by ca.crt

tls_make_certs() {
    (
        set -eu
        d=$1
        mkdir -p "$d"
        cd "$d"
        q() { "$@" >/dev/null 2>&1 || { echo "tls.sh: failed: $*" >&2; exit 1; }; }
        q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 30 \
            -subj "/CN=dbthrottle test CA"
        q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout otherca.key -out otherca.crt -days 30 \
            -subj "/CN=dbthrottle other CA"
        # sign NAME SAN [EXT]: NAME.key and NAME.crt, signed by ca.crt for SAN, valid 30 days.
        sign() {
            printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$2" "${3:-serverAuth}" >"$1.ext"
            q openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1"
            q openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
                -days 30 -extfile "$1.ext" -out "$1.crt"
        }
        sign server "DNS:localhost,IP:127.0.0.1"
        sign wronghost "DNS:wrong.example"
        sign client "DNS:client" clientAuth
        # The expired one: `openssl ca` takes any dates, given a CA database of its own.
        mkdir -p expired-ca
        : >expired-ca/index.txt
        cat >expired-ca/ca.cnf <<CNF
[ca]
default_ca = expired
[expired]
database = expired-ca/index.txt
new_certs_dir = expired-ca
serial = expired-ca/serial
default_md = sha256
policy = anything
copy_extensions = copy
x509_extensions = ext
[anything]
commonName = supplied
[ext]
subjectAltName = DNS:localhost,IP:127.0.0.1
extendedKeyUsage = serverAuth
CNF
        echo 01 >expired-ca/serial
        q openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout expired.key -out expired.csr -subj "/CN=expired"
        q openssl ca -batch -config expired-ca/ca.cnf -cert ca.crt -keyfile ca.key \
            -startdate 20200101000000Z -enddate 20200201000000Z -in expired.csr -out expired.crt
        chmod 600 ./*.key
    )
}

if [ "${0##*/}" = tls.sh ] && [ $# -eq 1 ]; then
    tls_make_certs "$1"
fi
