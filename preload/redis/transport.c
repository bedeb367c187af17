/* transport.c - the bytes under one Redis connection: a socket, plain or TLS (OpenSSL). */
#include "transport.h"

#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- OpenSSL's exit ---------------------------------------------------------------------- */

/* OpenSSL frees itself in an atexit handler registered by whoever initialises it first (libpq,
 * when it connects). Our threads and our own exit handler (which gives permits back) may still
 * use a TLS session after that handler ran: a use after free inside someone else's exit. Taken
 * first, at load, the initialisation registers no such handler; the process' memory goes back
 * to the system at exit all the same. */
__attribute__((constructor)) static void openssl_without_atexit(void)
{
    (void)OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

/* ---- waiting ------------------------------------------------------------------------------ */

/* Waits until fd is ready for `events` or deadline_us passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline_us)
{
    for (;;) {
        int64_t left = deadline_us - dbt_now_us();
        int ms = left <= 0 ? 0 : (int)((left + 999) / 1000);
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, ms);
        if (n > 0)
            return 1; /* ready, or an error condition the next call reports */
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

static void say(char *err, size_t cap, const char *what)
{
    snprintf(err, cap, "%s", what);
}

/* ---- the socket under OpenSSL ------------------------------------------------------------ */

/* OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE on a socket the peer has
 * closed: ours says MSG_NOSIGNAL, as plain writes do, rather than mask the signal around every
 * SSL call (four system calls each time). The BIO's data is the descriptor. */
static int sock_write(BIO *b, const char *buf, int len)
{
    ssize_t n = send((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int sock_read(BIO *b, char *buf, int len)
{
    ssize_t n = recv((int)(intptr_t)BIO_get_data(b), buf, (size_t)len, 0);
    BIO_clear_retry_flags(b);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_read(b);
    return (int)n;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH; /* nothing is buffered here */
}

static int sock_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *sock_method;
static pthread_once_t sock_method_once = PTHREAD_ONCE_INIT;

static void make_sock_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dbthrottle socket");
    if (m && BIO_meth_set_write(m, sock_write) && BIO_meth_set_read(m, sock_read) &&
        BIO_meth_set_ctrl(m, sock_ctrl) && BIO_meth_set_create(m, sock_create))
        sock_method = m;
    else
        BIO_meth_free(m);
}

/* A BIO over fd that never raises SIGPIPE; NULL when OpenSSL cannot make one. */
static BIO *sock_bio(int fd)
{
    pthread_once(&sock_method_once, make_sock_method);
    BIO *b = sock_method ? BIO_new(sock_method) : NULL;
    if (b)
        BIO_set_data(b, (void *)(intptr_t)fd);
    return b;
}

/* ---- TLS contexts: one per process and setting of CA, certificate and key ------------------- */

typedef struct tls_ctx {
    struct tls_ctx *next;
    char *ca, *cert, *key;
    SSL_CTX *ctx;
} tls_ctx;

/* Held only to look up or add to the list (no I/O): a fork in another thread meanwhile is
 * covered by the atfork handlers below. Contexts live as long as the process. */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static tls_ctx *ctxs;
static pthread_once_t ctx_atfork_once = PTHREAD_ONCE_INIT;

static void ctx_lock(void)
{
    pthread_mutex_lock(&ctx_mu);
}

static void ctx_unlock(void)
{
    pthread_mutex_unlock(&ctx_mu);
}

static void ctx_atfork(void)
{
    pthread_atfork(ctx_lock, ctx_unlock, ctx_unlock);
}

static bool same(const char *a, const char *b)
{
    return a ? b && strcmp(a, b) == 0 : !b;
}

static SSL_CTX *find_ctx(const dbt_tls_files *f)
{
    for (tls_ctx *c = ctxs; c; c = c->next)
        if (same(c->ca, f->ca) && same(c->cert, f->cert) && same(c->key, f->key))
            return c->ctx;
    return NULL;
}

/* OpenSSL's reason for the last error of this thread, in words. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown error";
}

/* Called by OpenSSL when the server asks for a client certificate and we have none: noted, so
 * that a connection the server then closes can say why (see cert_refused). */
static int no_client_cert(SSL *s, X509 **x509, EVP_PKEY **pkey)
{
    (void)x509;
    (void)pkey;
    SSL_set_app_data(s, (char *)"asked");
    return 0;
}

static SSL_CTX *make_ctx(const dbt_tls_files *f, char *err, size_t cap)
{
    if (!f->cert != !f->key) {
        say(err, cap,
            "TLS: DBTHROTTLE_REDIS_CERT and DBTHROTTLE_REDIS_KEY go together: set both or "
            "neither");
        return NULL;
    }
    ERR_clear_error();
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    if (!c) {
        snprintf(err, cap, "TLS: cannot make a context: %s", ssl_reason());
        return NULL;
    }
    (void)SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    /* Always verified: a throttle whose coordinator can be impersonated is no throttle. */
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    /* A write that must wait is retried with the same bytes, not always at the same address. */
    SSL_CTX_set_mode(c, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read what the socket has in one recv(2), not a record's header and body in two: records
     * left whole in OpenSSL's buffer are not seen by poll(2), so every reader drains it
     * (dbt_transport_read with no wait reads until the socket is empty). */
    SSL_CTX_set_read_ahead(c, 1);
    if (f->ca) {
        struct stat st;
        int ok = 0;
        if (stat(f->ca, &st) != 0) {
            snprintf(err, cap, "TLS: cannot read DBTHROTTLE_REDIS_CA %.200s: %s", f->ca,
                     strerror(errno));
            goto fail;
        }
        ok = S_ISDIR(st.st_mode) ? SSL_CTX_load_verify_locations(c, NULL, f->ca)
                                 : SSL_CTX_load_verify_locations(c, f->ca, NULL);
        if (ok != 1) {
            snprintf(err, cap, "TLS: cannot load DBTHROTTLE_REDIS_CA %.200s: %s", f->ca,
                     ssl_reason());
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(c) != 1) {
        snprintf(err, cap, "TLS: cannot load the system's CA store: %s", ssl_reason());
        goto fail;
    }
    if (!f->cert)
        SSL_CTX_set_client_cert_cb(c, no_client_cert);
    if (f->cert) {
        if (SSL_CTX_use_certificate_chain_file(c, f->cert) != 1) {
            snprintf(err, cap, "TLS: cannot load DBTHROTTLE_REDIS_CERT %.200s: %s", f->cert,
                     ssl_reason());
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(c, f->key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(c) != 1) {
            snprintf(err, cap, "TLS: cannot load DBTHROTTLE_REDIS_KEY %.200s: %s", f->key,
                     ssl_reason());
            goto fail;
        }
    }
    return c;
fail:
    SSL_CTX_free(c);
    return NULL;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The context for f, made at its first use. Made outside the lock (it reads files); when two
 * threads race, the second one's is dropped. A context that cannot be made is not remembered:
 * the next connect reads the files again. */
static SSL_CTX *ctx_for(const dbt_tls_files *f, char *err, size_t cap)
{
    pthread_once(&ctx_atfork_once, ctx_atfork);
    pthread_mutex_lock(&ctx_mu);
    SSL_CTX *c = find_ctx(f);
    pthread_mutex_unlock(&ctx_mu);
    if (c)
        return c;
    SSL_CTX *made = make_ctx(f, err, cap);
    if (!made)
        return NULL;
    tls_ctx *e = calloc(1, sizeof *e);
    if (e) {
        e->ca = dup_or_null(f->ca);
        e->cert = dup_or_null(f->cert);
        e->key = dup_or_null(f->key);
    }
    if (!e || (f->ca && !e->ca) || (f->cert && !e->cert) || (f->key && !e->key)) {
        if (e) {
            free(e->ca);
            free(e->cert);
            free(e->key);
        }
        free(e);
        SSL_CTX_free(made);
        say(err, cap, "TLS: out of memory");
        return NULL;
    }
    e->ctx = made;
    pthread_mutex_lock(&ctx_mu);
    c = find_ctx(f);
    if (!c) {
        e->next = ctxs;
        ctxs = e;
        c = made;
        e = NULL;
    }
    pthread_mutex_unlock(&ctx_mu);
    if (e) {
        SSL_CTX_free(e->ctx);
        free(e->ca);
        free(e->cert);
        free(e->key);
        free(e);
    }
    return c;
}

/* What a failed SSL call means, as one line. Verification failures and the server's refusal of
 * our certificate say so in words redis_errors.c knows (configuration errors); a connection that
 * closes or resets keeps the plain socket's words (outages). */
static void ssl_failure(SSL *s, int rc, char *err, size_t cap)
{
    int e = SSL_get_error(s, rc);
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
        say(err, cap, "Server closed the connection");
        return;
    }
    if (e == SSL_ERROR_SYSCALL) {
        say(err, cap, strerror(errno));
        return;
    }
    unsigned long code = ERR_peek_last_error();
    int reason = ERR_GET_REASON(code);
    if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        say(err, cap, "Server closed the connection");
    } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        snprintf(err, cap, "TLS: certificate verify failed: %s",
                 X509_verify_cert_error_string(SSL_get_verify_result(s)));
    } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
        say(err, cap, "TLS: the server requires a client certificate (alert certificate required)");
    } else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
               reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN) {
        snprintf(err, cap, "TLS: the server refused our client certificate (%s)", ssl_reason());
    } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
               reason == SSL_R_UNKNOWN_PROTOCOL) {
        snprintf(err, cap, "TLS: the server does not speak TLS on this port (%s)", ssl_reason());
    } else {
        snprintf(err, cap, "TLS: %s", ssl_reason());
    }
}

/* Waits for what SSL call's result e asks for; false with a message when it is a failure or the
 * time is up. */
static bool ssl_wait(dbt_transport *t, int rc, int64_t deadline_us, const char *timeout_msg,
                     char *err, size_t cap)
{
    int e = SSL_get_error(t->ssl, rc);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
        ssl_failure(t->ssl, rc, err, cap);
        return false;
    }
    int w = wait_fd(t->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_us);
    if (w <= 0) {
        say(err, cap, w == 0 ? timeout_msg : strerror(errno));
        return false;
    }
    return true;
}

static bool is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static int connect_one(int family, const struct sockaddr *sa, socklen_t len, int64_t deadline_us);
static void untrack_fd(int fd);

static void close_probe(int fd)
{
    if (fd >= 0) {
        untrack_fd(fd);
        close(fd);
    }
}

/* A second connection to the server of fd, with a PING on its way: the socket, or -1. */
static int ping_beside(int fd, int64_t deadline_us)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
        return -1;
    int p = connect_one(peer.ss_family, (struct sockaddr *)&peer, len, deadline_us);
    if (p >= 0 && send(p, "PING\r\n", 6, MSG_NOSIGNAL | MSG_DONTWAIT) != 6) {
        close_probe(p);
        p = -1;
    }
    return p;
}

/* Waits for the server's first answer to our ClientHello: 1 when it comes, 0 when the time is
 * up, -1 on an error (errno), -2 when the server does not speak TLS (err set).
 *
 * A plain Redis takes the hello for the start of an inline command and waits, for ever, for its
 * line end (which it looks for with strchr: the NUL in the hello's length hides any), where a
 * TLS server answers within a round trip; a stalled server of either kind answers nothing. So a
 * server silent after probe_at is asked, on a second connection, a plain PING: a Redis that
 * speaks no TLS on this port answers it (+PONG, -NOAUTH ...): a configuration error. A TLS
 * server answers it with an alert or a reset, a stalled one not at all: the handshake goes on
 * waiting until the deadline, an outage if nothing comes. */
static int first_answer(int fd, int64_t probe_at, int64_t deadline_us, char *err, size_t cap)
{
    int w = wait_fd(fd, POLLIN, probe_at);
    if (w != 0)
        return w;
    int probe = ping_beside(fd, deadline_us);
    for (;;) {
        int64_t left = deadline_us - dbt_now_us();
        struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = probe, .events = POLLIN}};
        int n = poll(pfd, probe >= 0 ? 2 : 1, left <= 0 ? 0 : (int)((left + 999) / 1000));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || pfd[0].revents) {
            int e = errno;
            close_probe(probe);
            errno = e;
            return n < 0 ? -1 : n == 0 ? 0 : 1;
        }
        char got[64];
        ssize_t k = recv(probe, got, sizeof got - 1, MSG_DONTWAIT);
        close_probe(probe);
        probe = -1;
        /* TLS records start with their type, 20 to 24 (an alert: 21); a reset or a close says
         * nothing either way. */
        if (k > 0 && !(got[0] >= 20 && got[0] <= 24)) {
            size_t text = 0; /* what it said, up to the first byte that is not text */
            while (text < (size_t)k && got[text] >= 0x20 && got[text] < 0x7f)
                text++;
            snprintf(err, cap,
                     "TLS: the server does not speak TLS on this port (it answers a plain PING: "
                     "\"%.*s\")",
                     (int)text, got);
            return -2;
        }
    }
}

static bool handshake(dbt_transport *t, const char *host, SSL_CTX *ctx, int64_t deadline_us,
                      char *err, size_t cap)
{
    ERR_clear_error();
    t->ssl = SSL_new(ctx);
    BIO *bio = t->ssl ? sock_bio(t->fd) : NULL;
    if (!bio) {
        snprintf(err, cap, "TLS: %s", ssl_reason());
        return false;
    }
    SSL_set_bio(t->ssl, bio, bio);
    /* The certificate must name the host of the URL: an IP address as an IP SAN, a name as a DNS
     * SAN (also sent as SNI, for servers behind a TLS proxy). */
    bool ok = is_ip_literal(host)
                  ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host) == 1
                  : SSL_set_tlsext_host_name(t->ssl, host) == 1 && SSL_set1_host(t->ssl, host) == 1;
    if (!ok) {
        snprintf(err, cap, "TLS: cannot check the name %.200s: %s", host, ssl_reason());
        return false;
    }
    /* A server still silent after a quarter of the time may be a plain Redis (first_answer). */
    int64_t now = dbt_now_us();
    int64_t probe_at = now + (deadline_us - now) / 4;
    for (;;) {
        ERR_clear_error();
        int rc = SSL_connect(t->ssl);
        if (rc == 1)
            break;
        if (SSL_get_error(t->ssl, rc) == SSL_ERROR_WANT_READ && BIO_number_read(bio) == 0) {
            int w = first_answer(t->fd, probe_at, deadline_us, err, cap);
            if (w == 1)
                continue;
            if (w == 0)
                say(err, cap, "TLS: handshake timed out");
            else if (w == -1)
                say(err, cap, strerror(errno));
            return false;
        }
        if (!ssl_wait(t, rc, deadline_us, "TLS: handshake timed out", err, cap))
            return false;
    }
    t->cert_unanswered = SSL_get_app_data(t->ssl) != NULL;
    return true;
}

/* TLS 1.3 ends the handshake before the server has checked our certificate: a server that
 * requires one we did not send says so with an alert right after, then closes. Our first command
 * may be on its way by then, and the reset it causes can discard the alert: a connection closed
 * or reset before the first reply, after the server asked for a certificate we lack, is taken
 * for that refusal. */
static void cert_refused(dbt_transport *t, char *err, size_t cap)
{
    if (t->cert_unanswered &&
        (strcmp(err, "Server closed the connection") == 0 ||
         strcmp(err, strerror(ECONNRESET)) == 0 || strcmp(err, strerror(EPIPE)) == 0))
        snprintf(err, cap,
                 "TLS: the server requires a client certificate (it asked for one, none is set, "
                 "and it closed the connection)");
}

/* ---- sockets a fork()ed child closes ------------------------------------------------------- */

/* The library's sockets that no owner with an after-fork handler names: those being connected
 * (the handshake runs without any lock, so a fork in another thread may come meanwhile), those
 * let go and not yet closed, and those of owners that keep none (a Sentinel query). A fork()ed
 * child closes its copies of them: before, a child forked while its parent's threads connected
 * kept a copy of each such socket for its whole life, unknown to its code. A pool's connections
 * (sem/pool.c, listener.c) are closed by the pool's own after-fork handler instead, and taken
 * out of here once the pool names them (dbt_transport_untrack). Lock-free: the child's handler
 * must take no lock, and owners untrack under their own. fd + 1 per entry, 0 free. */
#define TRACKED_MAX 64
static atomic_int tracked[TRACKED_MAX];
static pthread_once_t tracked_once = PTHREAD_ONCE_INIT;

static void close_tracked_in_child(void)
{
    for (int i = 0; i < TRACKED_MAX; i++) {
        int v = atomic_exchange(&tracked[i], 0);
        if (v > 0)
            close(v - 1);
    }
}

static void tracked_atfork(void)
{
    pthread_atfork(NULL, NULL, close_tracked_in_child);
}

static void track_fd(int fd)
{
    if (fd < 0)
        return;
    pthread_once(&tracked_once, tracked_atfork);
    for (int i = 0; i < TRACKED_MAX; i++) {
        int free_entry = 0;
        if (atomic_compare_exchange_strong(&tracked[i], &free_entry, fd + 1))
            return;
    }
    /* Full (more than 64 connects at once): a fork now leaves the child a copy, as before. */
}

static void untrack_fd(int fd)
{
    if (fd < 0)
        return;
    for (int i = 0; i < TRACKED_MAX; i++) {
        int mine = fd + 1;
        if (atomic_compare_exchange_strong(&tracked[i], &mine, 0))
            return;
    }
}

void dbt_transport_track(const dbt_transport *t)
{
    track_fd(t->fd);
}

void dbt_transport_untrack(const dbt_transport *t)
{
    untrack_fd(t->fd);
}

/* ---- connecting ---------------------------------------------------------------------------- */

/* A non-blocking connect to one address within the deadline: the socket, or -1 (errno set). */
static int connect_one(int family, const struct sockaddr *sa, socklen_t len, int64_t deadline_us)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    track_fd(fd);
    if (connect(fd, sa, len) != 0) {
        if (errno != EINPROGRESS) {
            int e = errno;
            untrack_fd(fd);
            close(fd);
            errno = e;
            return -1;
        }
        int w = wait_fd(fd, POLLOUT, deadline_us);
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (w == 0)
            soerr = ETIMEDOUT;
        else if (w < 0)
            soerr = errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr) {
            untrack_fd(fd);
            close(fd);
            errno = soerr;
            return -1;
        }
    }
    return fd;
}

/* Probes a peer that went away without a word (a host cut off): the kernel gives up on the
 * connection after about 30 s of silence instead of never. */
static void keep_alive(int fd)
{
    int on = 1, idle = 15, intvl = 5, cnt = 3;
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/* IPv4 first, then IPv6 (as hiredis 0.14 did); every address in turn, within the deadline. */
static int connect_tcp(const char *host, int port, int64_t deadline_us, char *err, size_t cap)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rv = getaddrinfo(host, service, &hints, &res);
    if (rv != 0) {
        hints.ai_family = AF_INET6;
        rv = getaddrinfo(host, service, &hints, &res);
    }
    if (rv != 0) {
        say(err, cap, rv == EAI_SYSTEM ? strerror(errno) : gai_strerror(rv));
        return -1;
    }
    int fd = -1, last = ECONNREFUSED;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = connect_one(a->ai_family, a->ai_addr, a->ai_addrlen, deadline_us);
        if (fd < 0)
            last = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        say(err, cap, strerror(last));
        return -1;
    }
    keep_alive(fd);
    return fd;
}

static int connect_unix(const char *path, int64_t deadline_us, char *err, size_t cap)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) {
        say(err, cap, "the unix socket path is too long");
        return -1;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = connect_one(AF_UNIX, (struct sockaddr *)&a, sizeof a, deadline_us);
    if (fd < 0)
        say(err, cap, strerror(errno));
    return fd;
}

bool dbt_transport_connect(dbt_transport *t, bool is_unix, const char *host, int port,
                           const char *path, const dbt_tls_files *tls, int64_t timeout_ms,
                           char *err, size_t cap)
{
    *t = (dbt_transport){.fd = -1, .ssl = NULL, .cert_unanswered = false, .heard = false};
    /* The TLS context first, and outside the time given: it is made once per process, by local
     * work that waits on no server (reading the system's CA store took 0.2 s here, over a
     * second with 8 processes starting at once), and a handshake left no time by it timed out
     * before its first byte was sent: an outage, for a server that was never asked. */
    SSL_CTX *ctx = NULL;
    if (tls && !(ctx = ctx_for(tls, err, cap)))
        return false;
    int64_t deadline_us = dbt_now_us() + timeout_ms * 1000;
    t->fd = is_unix ? connect_unix(path, deadline_us, err, cap)
                    : connect_tcp(host, port, deadline_us, err, cap);
    if (t->fd < 0)
        return false;
    if (ctx && !handshake(t, is_unix ? "localhost" : host, ctx, deadline_us, err, cap)) {
        dbt_transport_close(t);
        return false;
    }
    t->peer_len = sizeof t->peer;
    if (getpeername(t->fd, (struct sockaddr *)&t->peer, &t->peer_len) != 0)
        t->peer_len = 0;
    return true;
}

/* A plain connection the server reset or closed before its first word, as a TLS-only port does
 * to the first command (OpenSSL takes it for a bad record and Redis drops the connection): so
 * does a server that restarts, or a proxy with no backend. A second connection tells them apart
 * by a TLS record: a handshake record of 257 bytes of no NUL, ending with a line end. A TLS
 * server answers it with an alert (or a handshake record); a plain Redis with "-ERR unknown
 * command" at once (it reads the line as an inline command); anything else with nothing we take
 * for TLS. When TLS answers, err says so (a configuration error, redis_errors.c); otherwise it
 * keeps the words of the close (an outage). */
static void plain_refused(dbt_transport *t, int64_t timeout_ms, char *err, size_t cap)
{
    if (t->ssl || t->heard || t->peer_len == 0 || timeout_ms <= 0)
        return;
    t->heard = true; /* asked once per connection */
    int64_t deadline_us = dbt_now_us() + timeout_ms * 1000;
    int p = connect_one(t->peer.ss_family, (struct sockaddr *)&t->peer, t->peer_len, deadline_us);
    if (p < 0)
        return;
    char hello[5 + 257];
    memcpy(hello, "\x16\x03\x01\x01\x01", 5);
    memset(hello + 5, 'A', 255);
    memcpy(hello + 5 + 255, "\r\n", 2);
    unsigned char got[2];
    ssize_t n = 0;
    if (send(p, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof hello &&
        wait_fd(p, POLLIN, deadline_us) > 0)
        n = recv(p, got, sizeof got, MSG_DONTWAIT);
    close_probe(p);
    if (n == 2 && (got[0] == 21 || got[0] == 22) && got[1] == 3) {
        char was[128];
        snprintf(was, sizeof was, "%s", err);
        snprintf(err, cap, "TLS: the server speaks TLS on this port (%s before its first reply)",
                 was);
    }
}

/* ---- moving bytes --------------------------------------------------------------------------- */

#define WRITE_TIMED_OUT "timed out sending a command"
#define READ_TIMED_OUT  "timed out waiting for a reply"

int dbt_transport_write_part(dbt_transport *t, const char *buf, size_t len, int64_t timeout_ms,
                             size_t *written, char *err, size_t cap)
{
    *written = 0;
    if (t->ssl) {
        /* All or nothing: SSL_write must be called again with the same bytes after a wait. */
        bool ok = true;
        int64_t deadline_us = dbt_now_us() + timeout_ms * 1000;
        size_t off = 0;
        while (ok && off < len) {
            size_t n = len - off > INT32_MAX ? INT32_MAX : len - off;
            ERR_clear_error();
            int rc = SSL_write(t->ssl, buf + off, (int)n);
            if (rc > 0) {
                off += (size_t)rc;
                deadline_us = dbt_now_us() + timeout_ms * 1000;
            } else {
                ok = ssl_wait(t, rc, deadline_us, WRITE_TIMED_OUT, err, cap);
            }
        }
        if (!ok)
            cert_refused(t, err, cap);
        *written = ok ? len : 0;
        return ok ? 1 : -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(t->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            *written = off;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(t->fd, POLLOUT, dbt_now_us() + timeout_ms * 1000);
            if (w > 0)
                continue;
            if (w == 0) {
                say(err, cap, WRITE_TIMED_OUT);
                return 0;
            }
            say(err, cap, strerror(errno));
            return -1;
        }
        int e = n == 0 ? EPIPE : errno;
        say(err, cap, n == 0 ? "Server closed the connection" : strerror(errno));
        plain_refused(t, timeout_ms, err, cap);
        errno = e;
        return -1;
    }
    return 1;
}

bool dbt_transport_write(dbt_transport *t, const char *buf, size_t len, int64_t timeout_ms,
                         char *err, size_t cap)
{
    size_t written;
    return dbt_transport_write_part(t, buf, len, timeout_ms, &written, err, cap) == 1;
}

ssize_t dbt_transport_read(dbt_transport *t, char *buf, size_t len, int64_t timeout_ms, char *err,
                           size_t cap)
{
    int64_t deadline_us = dbt_now_us() + timeout_ms * 1000;
    if (t->ssl) {
        ssize_t got = -1;
        /* As for a plain socket, poll first when nothing is here yet: one recv(2) saved. */
        if (timeout_ms > 0 && !SSL_has_pending(t->ssl)) {
            int w = wait_fd(t->fd, POLLIN, deadline_us);
            if (w == 0)
                return 0;
            if (w < 0) {
                say(err, cap, strerror(errno));
                return -1;
            }
        }
        for (;;) {
            ERR_clear_error();
            int rc = SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
            if (rc > 0) {
                got = rc;
                t->cert_unanswered = false;
                break;
            }
            int e = SSL_get_error(t->ssl, rc);
            if (timeout_ms == 0 && (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)) {
                got = 0;
                break;
            }
            if (!ssl_wait(t, rc, deadline_us, READ_TIMED_OUT, err, cap)) {
                /* Timed out: nothing came in time (0); anything else broke the connection. */
                got = strcmp(err, READ_TIMED_OUT) == 0 ? 0 : -1;
                if (got < 0)
                    cert_refused(t, err, cap);
                break;
            }
        }
        return got;
    }
    /* With time to wait, poll first: right after a command its reply is seldom there yet. */
    bool polled = timeout_ms == 0;
    for (;;) {
        if (!polled) {
            int w = wait_fd(t->fd, POLLIN, deadline_us);
            if (w == 0)
                return 0;
            if (w < 0) {
                say(err, cap, strerror(errno));
                return -1;
            }
            polled = true;
        }
        ssize_t n = recv(t->fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            t->heard = true;
            return n;
        }
        if (n == 0) {
            say(err, cap, "Server closed the connection");
            plain_refused(t, timeout_ms, err, cap);
            errno = 0; /* an end, not a reset: what was written was read (redis_conn.c) */
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (timeout_ms == 0)
                return 0;
            polled = false;
            continue;
        }
        say(err, cap, strerror(errno));
        if (errno == ECONNRESET)
            plain_refused(t, timeout_ms, err, cap);
        return -1;
    }
}

bool dbt_transport_buffered(const dbt_transport *t)
{
    return t->ssl && SSL_pending(t->ssl) > 0;
}

void dbt_transport_close(dbt_transport *t)
{
    if (t->ssl) {
        /* No SSL_shutdown: it would write close_notify, and the session may be a fork parent's.
         * Redis takes a connection closed without one as any other close. */
        SSL_free(t->ssl);
        t->ssl = NULL;
    }
    if (t->fd >= 0) {
        /* Before the close: the number, once free, may be another's socket in a fork's child. */
        untrack_fd(t->fd);
        close(t->fd);
    }
    t->fd = -1;
}
