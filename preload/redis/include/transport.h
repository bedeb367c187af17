/* transport.h - the bytes under one Redis connection: a socket, plain or TLS (OpenSSL).
 *
 * hiredis 0.14 (Debian 12's) has no TLS, so redis_conn.c keeps only hiredis' reply reader and
 * command formatter and moves bytes through this file. Every wait is a poll(2) bounded by the
 * caller's timeout: the socket is non-blocking, which TLS needs anyway (a readable socket may
 * hold only part of a TLS record). */
#ifndef DBT_TRANSPORT_H
#define DBT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The TLS files of a connection, as the settings name them; NULL = not set. */
typedef struct {
    const char *ca;   /* DBTHROTTLE_REDIS_CA: a PEM file or a directory; NULL = system store */
    const char *cert; /* DBTHROTTLE_REDIS_CERT: our certificate (chain), PEM */
    const char *key;  /* DBTHROTTLE_REDIS_KEY: its private key, PEM */
} dbt_tls_files;

typedef struct {
    int fd;             /* -1 when closed */
    struct ssl_st *ssl; /* NULL for a plain connection */
    /* The server asked for a client certificate we do not have, and has not answered since:
     * with TLS 1.3 it may refuse us only after the handshake, by closing the connection. */
    bool cert_unanswered;
    /* Plain connections: whether the server has said anything yet, and its address (a server
     * that resets the connection before its first word may be a TLS port: plain_refused). */
    bool heard;
    socklen_t peer_len;
    struct sockaddr_storage peer;
} dbt_transport;

/* Messages below are one line without a prefix (the caller adds "redis HOST:PORT: "). The words
 * of today's errors are kept: strerror's ("Connection refused"), getaddrinfo's ("Name or service
 * not known"), "Server closed the connection"; TLS failures start with "TLS: " (redis_errors.c
 * reads them). */

/* Connects to host:port (or the unix socket path when is_unix) within timeout_ms, close-on-exec,
 * TCP keepalive and TCP_NODELAY; with tls non-NULL, makes the TLS handshake too (the server's
 * certificate verified against tls->ca or the system store, and its name against host) within
 * the same time. False with a message in err (cap bytes). */
bool dbt_transport_connect(dbt_transport *t, bool is_unix, const char *host, int port,
                           const char *path, const dbt_tls_files *tls, int64_t timeout_ms,
                           char *err, size_t cap);

/* Writes all of buf, each wait for the socket at most timeout_ms. False with a message. */
bool dbt_transport_write(dbt_transport *t, const char *buf, size_t len, int64_t timeout_ms,
                         char *err, size_t cap);
/* The same, telling a wait that timed out (0: *written bytes went, the rest may be written
 * later) from a failure (-1, errno and a message set); 1 when all of buf went. Over TLS, all or
 * nothing: a timeout there is a failure. */
int dbt_transport_write_part(dbt_transport *t, const char *buf, size_t len, int64_t timeout_ms,
                             size_t *written, char *err, size_t cap);

/* Reads what is there, waiting at most timeout_ms for something (0: no wait). Returns the bytes
 * read (> 0), 0 when nothing came in time, -1 when the connection is closed or failed (err). */
ssize_t dbt_transport_read(dbt_transport *t, char *buf, size_t len, int64_t timeout_ms, char *err,
                           size_t cap);

/* Decrypted bytes that OpenSSL holds and poll(2) on the socket cannot see. */
bool dbt_transport_buffered(const dbt_transport *t);

/* Closes the socket. Never writes (no TLS close_notify): a fork child frees its parent's
 * connections this way without touching the parent's session. */
void dbt_transport_close(dbt_transport *t);

/* A fork()ed child closes its copy of every socket of the library that is tracked: each is from
 * its socket() until its close, unless its owner untracks it while a list of its own, which its
 * own after-fork handler closes, names it (and tracks it again when it lets it go, before the
 * close). Lock-free; any thread. */
void dbt_transport_track(const dbt_transport *t);
void dbt_transport_untrack(const dbt_transport *t);

#endif
