/* relay.c - the host relay's driver (relay.h): who speaks (a lock beside the socket), the
 * speaker's thread (an epoll loop over the clients' sockets and its two connections to Redis,
 * around relay_core.c's decisions), and a client's way to it.
 *
 * Files, in the user's own share directory (0700, the segment's): relay-<T>.lock, whose write
 * lock (fcntl: not inherited by a fork()ed child, let go by the kernel when the process ends) the
 * speaker holds, and relay-<T>.sock, the socket it listens on. T names the target (target_name). */
#include "relay.h"
#include "relay_core.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A client that does not read its replies (stopped) is closed past this much output. */
#define MAX_CLIENT_OUT (1u << 20)
/* A process that found no relay it could use tries again this long after, doubled at each
 * failure in a row up to RELAY_RETRY_MAX_US: a relay that keeps failing must not make the
 * process replace its connections every second. */
#define RELAY_RETRY_US     INT64_C(1000000)
#define RELAY_RETRY_MAX_US INT64_C(60000000)
/* A stalled relay is left alone for DBT_RELAY_SUSPECT_US, doubled at each stall in a row up to
 * this: a speaker stopped for long costs each client one half-timeout per period, not more. */
#define SUSPECT_MAX_US INT64_C(300000000)
/* Accepting stops this long when the process is out of file descriptors. */
#define ACCEPT_PAUSE_US INT64_C(1000000)
/* The relay's own error replies are said at most this often. */
#define OWN_ERROR_EVERY_US INT64_C(60000000)

/* epoll tags: a client's is its handle plus TAG_CLIENT. */
enum { TAG_LISTEN = 0, TAG_STOP = 1, TAG_LINK = 2 /* + dbt_relay_link */, TAG_CLIENT = 16 };
/* speaker_fds' slots: the listening socket, the epoll fd, the stop eventfd, then the clients'
 * (the connections to Redis are transport.c's to close in a child). */
enum { SLOT_LISTEN = 0, SLOT_EPOLL = 1, SLOT_STOP = 2, SLOT_CLIENT = 3 };

/* ---- the process' side ------------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    int dir;     /* the user's share directory, or -1 */
    int lock_fd; /* relay-<T>.lock, while this process looks at it or speaks (one fd: closing
                  * any fd of the file would let the process' lock go) */
    char target[17];
    bool speaking, refused; /* refused: the target is not relayed (a Cluster) */
    bool exiting;           /* dbt_relay_stop: no relay starts any more */
    pthread_t thread;
    const dbt_config *cfg; /* the speaker's: it reads it until proc.speaking turns false */
    pthread_cond_t ended;  /* broadcast when proc.speaking turns false */
    bool joinable;         /* thread was started and is neither joined nor detached yet */
    int stop_fd;           /* the speaker's eventfd: ends it */
    int64_t suspect_until; /* dbt_relay_suspect: connect directly until then */
    int64_t avoid_until;   /* dbt_relay_avoid: likewise */
    int suspects;          /* stalls in a row (dbt_relay_suspect), for the period's doubling */
    int retries;           /* connects in a row that found no relay it could use */
    int64_t drain_ms;      /* at exit, the relay answers what it read within this */
} proc = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .ended = PTHREAD_COND_INITIALIZER,
          .dir = -1,
          .lock_fd = -1,
          .stop_fd = -1};

/* Raised by each dbt_relay_suspect: relayed connections of an older one are given up. */
static _Atomic uint64_t relay_gen = 1;

/* base << n, at most max. */
static int64_t doubled(int64_t base, int n, int64_t max)
{
    int64_t v = base;
    for (int i = 0; i < n && v < max; i++)
        v *= 2;
    return v < max ? v : max;
}

void dbt_relay_suspect(void)
{
    pthread_mutex_lock(&proc.mu);
    int64_t period = doubled(DBT_RELAY_SUSPECT_US, proc.suspects++, SUSPECT_MAX_US);
    proc.suspect_until = dbt_now_us() + period;
    char target[17];
    snprintf(target, sizeof target, "%s", proc.target);
    pthread_mutex_unlock(&proc.mu);
    atomic_fetch_add(&relay_gen, 1);
    char effect[80];
    snprintf(effect, sizeof effect, "connecting directly to Redis for %lld s",
             (long long)(period / 1000000));
    dbt_field f[] = {DBT_S("target", target), DBT_S("effect", effect)};
    dbt_log(DBT_LOG_WARN, "host_relay_stalled", f, 2);
}

void dbt_relay_avoid(void)
{
    pthread_mutex_lock(&proc.mu);
    proc.avoid_until = dbt_now_us() + doubled(RELAY_RETRY_US, proc.retries, RELAY_RETRY_MAX_US);
    if (proc.retries < 16)
        proc.retries++;
    pthread_mutex_unlock(&proc.mu);
}

uint64_t dbt_relay_generation(void)
{
    return atomic_load(&relay_gen);
}

void dbt_relay_gone(uint64_t gen)
{
    atomic_compare_exchange_strong(&relay_gen, &gen, gen + 1);
}

/* The speaker's descriptors, for a fork()ed child to close: it has neither the thread nor the
 * lock, and must not keep the socket (lock-free: the child reads it whatever the thread did). */
static _Atomic int speaker_fds[SLOT_CLIENT + DBT_RELAY_MAX_CLIENTS];

static void track_fd(int slot, int fd)
{
    atomic_store(&speaker_fds[slot], fd + 1); /* 0: none */
}

static void child_after_fork(void)
{
    for (size_t i = 0; i < sizeof speaker_fds / sizeof speaker_fds[0]; i++) {
        int v = atomic_exchange(&speaker_fds[i], 0);
        if (v > 0)
            close(v - 1);
    }
    if (proc.lock_fd >= 0)
        close(proc.lock_fd); /* the child holds no lock of it: nothing is let go */
    pthread_mutex_init(&proc.mu, NULL);
    pthread_cond_init(&proc.ended, NULL);
    proc.lock_fd = -1;
    proc.speaking = proc.joinable = false; /* the parent's thread is not the child's */
    proc.stop_fd = -1;
}

/* A speaker that ended by itself (it met a Cluster's node) has no one
 * waiting for it: joined here before another starts or the process ends (proc.mu held; it no
 * longer needs the lock once proc.speaking is false, so the join is short). */
static void reap_ended_speaker(void)
{
    if (proc.joinable && !proc.speaking) {
        pthread_join(proc.thread, NULL);
        proc.joinable = false;
    }
}

__attribute__((constructor)) static void relay_init(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}

void dbt_relay_set_dir(int dirfd)
{
    pthread_mutex_lock(&proc.mu);
    bool first = proc.dir < 0;
    if (first)
        proc.dir = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    pthread_mutex_unlock(&proc.mu);
    if (first)
        atomic_fetch_add(&relay_gen, 1); /* the direct connections made until now may go */
}

bool dbt_relay_speaking(void)
{
    pthread_mutex_lock(&proc.mu);
    bool s = proc.speaking;
    pthread_mutex_unlock(&proc.mu);
    return s;
}

/* 16 hex digits of SHA-256 over what makes a target: two processes share a relay only when each
 * would connect to the same server, database and user with the same password and TLS files. The
 * password is hashed, never written. */
static bool target_name(const dbt_config *cfg, char out[17])
{
    const dbt_redis_url *u = &cfg->redis;
    char port[16], db[16];
    snprintf(port, sizeof port, "%d", u->port);
    snprintf(db, sizeof db, "%d", u->db);
    const char *parts[] = {"dbthrottle relay 1",
                           u->is_unix ? "unix"
                           : u->tls   ? "tls"
                                      : "tcp",
                           u->is_unix ? u->path : u->host,
                           port,
                           db,
                           u->user,
                           u->password,
                           cfg->redis_ca,
                           cfg->redis_cert,
                           cfg->redis_key};
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    bool ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    for (size_t i = 0; ok && i < sizeof parts / sizeof parts[0]; i++) {
        const char *p = parts[i] ? parts[i] : "";
        unsigned char present = parts[i] != NULL;
        /* each part with its length: no two lists of parts hash the same text */
        uint64_t n = strlen(p);
        ok = EVP_DigestUpdate(c, &present, 1) && EVP_DigestUpdate(c, &n, sizeof n) &&
             EVP_DigestUpdate(c, p, n);
    }
    ok = ok && EVP_DigestFinal_ex(c, md, &mdlen) && mdlen >= 8;
    EVP_MD_CTX_free(c);
    for (int i = 0; ok && i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return ok;
}

/* The name of the target's file of this kind ("sock" or "lock") in the share directory. */
typedef struct {
    char s[64];
} relay_name;

static relay_name file_name(const char *kind)
{
    relay_name n;
    snprintf(n.s, sizeof n.s, "relay-%s.%s", proc.target, kind);
    return n;
}

/* The socket's address, through /proc/self/fd/<dir>: short whatever the directory's path. */
static bool sock_addr(int dir, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n =
        snprintf(a->sun_path, sizeof a->sun_path, "/proc/self/fd/%d/%s", dir, file_name("sock").s);
    return n > 0 && (size_t)n < sizeof a->sun_path;
}

/* Whether relay-<T>.lock names the file fd is open on (proc.mu held). */
static bool lock_named(int fd)
{
    struct stat named, open_file;
    return fstatat(proc.dir, file_name("lock").s, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
           fstat(fd, &open_file) == 0 && named.st_dev == open_file.st_dev &&
           named.st_ino == open_file.st_ino;
}

/* Opens relay-<T>.lock (proc.mu held): the user's own regular file, or -1. Kept open between
 * calls, and looked at again each time: a speaker that stops unlinks it (stop_listening), so that
 * the directory is left empty, and a file the name no longer leads to locks nothing. */
static int lock_file(void)
{
    if (proc.lock_fd >= 0 && lock_named(proc.lock_fd))
        return proc.lock_fd;
    if (proc.lock_fd >= 0)
        close(proc.lock_fd); /* not speaking (a speaker does not look): no lock of ours goes */
    proc.lock_fd = -1;
    int fd = openat(proc.dir, file_name("lock").s, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
                    (st.st_mode & 077))) {
        close(fd);
        fd = -1;
    }
    return proc.lock_fd = fd;
}

/* ---- the speaker's thread ------------------------------------------------------------------ */

typedef struct {
    const dbt_config *cfg;
    int ep, listen_fd, stop_fd;
    dbt_relay *core;
    dbt_redis *link[2];
    int64_t retry_at[2];
    int64_t up_since[2];    /* when each link was made */
    int brief[2];           /* breaks in a row that came at once (dbt_relay_reconnect_after) */
    int64_t waiting_since;  /* the command connection's oldest reply is due since (0: none) */
    char run_id[41];        /* the server the relay last spoke to (INFO's run_id) */
    int64_t accept_paused;  /* out of descriptors: accepting again from then (0: accepting) */
    int max_clients;        /* what the process' descriptor limit leaves room for */
    long long own_errors;   /* the core's count when last said */
    int64_t own_error_said; /* when */
    int cfd[DBT_RELAY_MAX_CLIENTS];
    bool want_out[DBT_RELAY_MAX_CLIENTS];
    int nc; /* handles below this may be in use */
    bool stopping;
} speaker;

static void close_client(speaker *s, int c)
{
    epoll_ctl(s->ep, EPOLL_CTL_DEL, s->cfd[c], NULL);
    track_fd(SLOT_CLIENT + c, -1);
    close(s->cfd[c]); /* input it did not read resets the client's connection: never sent */
    s->cfd[c] = -1;
    dbt_relay_close(s->core, c);
}

/* Connection l broke: its clients with a call in flight are closed (dbt_relay_link_lost), and l
 * is connected again: at once if it stood (as a direct client connects again at its next call:
 * with DBTHROTTLE_REDIS_TIMEOUT=200ms, the calls that came after a restart, or after this
 * process was stopped, waited out their whole time for the pause) unless it keeps breaking as
 * soon as made (dbt_relay_reconnect_after), after DBT_RELAY_RECONNECT_US if it was not up. */
static void lose_link(speaker *s, dbt_relay_link l, const char *why)
{
    bool stood = s->link[l] != NULL;
    int64_t now = dbt_now_us();
    if (s->link[l]) {
        epoll_ctl(s->ep, EPOLL_CTL_DEL, s->link[l]->t.fd, NULL);
        dbt_redis_free(s->link[l]);
        s->link[l] = NULL;
        dbt_field f[] = {DBT_S("link", l == DBT_RELAY_CMD ? "commands" : "listening"),
                         DBT_S("reason", why),
                         DBT_S("effect", "its clients connect again (or directly)")};
        dbt_log(DBT_LOG_WARN, "host_relay_link_lost", f, 3);
    }
    dbt_relay_link_lost(s->core, l);
    s->retry_at[l] = now + (stood ? dbt_relay_reconnect_after(now - s->up_since[l], &s->brief[l])
                                  : DBT_RELAY_RECONNECT_US);
    if (l == DBT_RELAY_CMD)
        s->waiting_since = 0;
}

/* Connects link l (AUTH, SELECT, the server checked: dbt_redis_ready). A Cluster's node is not
 * relayed: the relay stops, and every process connects directly. The connect blocks the loop
 * (within DBTHROTTLE_REDIS_TIMEOUT): its clients wait meanwhile, and may take it for a stall. */
static void connect_link(speaker *s, dbt_relay_link l, int64_t now)
{
    char err[DBT_ERRLEN];
    dbt_endpoint ep = {.is_unix = s->cfg->redis.is_unix,
                       .host = s->cfg->redis.host,
                       .port = s->cfg->redis.port,
                       .path = s->cfg->redis.path};
    dbt_redis *r = dbt_redis_ready(
        s->cfg, dbt_redis_open(s->cfg, &ep, s->cfg->redis.user, s->cfg->redis.password, err), err);
    if (r && r->cluster_node) {
        dbt_redis_free(r);
        dbt_log(DBT_LOG_INFO, "host_relay_not_for_cluster", NULL, 0);
        pthread_mutex_lock(&proc.mu);
        proc.refused = true;
        pthread_mutex_unlock(&proc.mu);
        s->stopping = true;
        return;
    }
    if (!r) {
        dbt_relay_link_lost(s->core, l); /* what waited for it fails: its clients are closed */
        s->retry_at[l] = now + DBT_RELAY_RECONNECT_US;
        return;
    }
    /* Another server than the one the relay last spoke to (or one whose INFO was refused: it
     * cannot be told): its clients read the era again (dbt_relay_server_changed), and the other
     * connection, if still on the old one, goes too. */
    if (!r->run_id[0] || strcmp(r->run_id, s->run_id) != 0) {
        bool first = !s->run_id[0] && !s->link[!l];
        snprintf(s->run_id, sizeof s->run_id, "%s", r->run_id);
        if (!first) {
            if (s->link[!l])
                lose_link(s, (dbt_relay_link)!l, "Redis is another server now");
            dbt_relay_server_changed(s->core);
        }
    }
    s->link[l] = r;
    s->up_since[l] = now;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LINK + (uint64_t)l};
    epoll_ctl(s->ep, EPOLL_CTL_ADD, r->t.fd, &ev);
    dbt_relay_link_ready(s->core, l, now);
}

static void flush_link(speaker *s, dbt_relay_link l)
{
    dbt_relay_buf *b = dbt_relay_link_out(s->core, l);
    if (b->len == b->off || !s->link[l])
        return;
    char err[DBT_ERRLEN];
    if (!dbt_transport_write(&s->link[l]->t, b->p + b->off, b->len - b->off,
                             s->cfg->redis_timeout_ms, err, sizeof err)) {
        lose_link(s, l, err);
        return;
    }
    dbt_relay_buf_consumed(b, b->len - b->off);
    if (l == DBT_RELAY_CMD && s->waiting_since == 0)
        s->waiting_since = dbt_now_us();
}

static void read_link(speaker *s, dbt_relay_link l)
{
    char buf[16384], err[DBT_ERRLEN];
    for (;;) {
        dbt_redis *r = s->link[l];
        if (!r)
            return;
        ssize_t n = dbt_transport_read(&r->t, buf, sizeof buf, 0, err, sizeof err);
        if (n < 0) {
            lose_link(s, l, err);
            return;
        }
        if (n == 0)
            return;
        if (redisReaderFeed(r->reader, buf, (size_t)n) != REDIS_OK) {
            lose_link(s, l, "a reply that is not RESP");
            return;
        }
        void *rep = NULL;
        while (s->link[l] && redisReaderGetReply(r->reader, &rep) == REDIS_OK && rep) {
            bool ok = dbt_relay_reply(s->core, l, rep, dbt_now_us());
            rep = NULL;
            if (!ok) {
                lose_link(s, l, "a reply nothing was asked for");
                return;
            }
            if (l == DBT_RELAY_CMD)
                s->waiting_since = dbt_relay_count(s->core).pending ? dbt_now_us() : 0;
        }
    }
}

/* The relay's own commands (its wake list's RPUSH and PEXPIRE) refused: said at warn, once a
 * minute at most (an ACL without them, say: a client then waits for a BLPOP's own timeout). */
static void say_own_errors(speaker *s, int64_t now)
{
    dbt_relay_counts n = dbt_relay_count(s->core);
    if (n.own_errors == s->own_errors ||
        (s->own_error_said && now - s->own_error_said < OWN_ERROR_EVERY_US))
        return;
    char count[24];
    snprintf(count, sizeof count, "%lld", n.own_errors - s->own_errors);
    dbt_field f[] = {DBT_S("error", n.own_error), DBT_S("count", count),
                     DBT_S("effect", "a waiter whose list the relay could not add may wait for "
                                     "its BLPOP's timeout")};
    dbt_log(DBT_LOG_WARN, "host_relay_command_refused", f, 3);
    s->own_errors = n.own_errors;
    s->own_error_said = now;
}

static void flush_client(speaker *s, int c)
{
    dbt_relay_buf *b = dbt_relay_client_out(s->core, c);
    while (b->len > b->off) {
        ssize_t n = send(s->cfd[c], b->p + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            close_client(s, c);
            return;
        }
        dbt_relay_buf_consumed(b, (size_t)n);
    }
    bool pending = b->len > b->off;
    if ((pending && b->len - b->off > MAX_CLIENT_OUT) ||
        (!pending && dbt_relay_doomed(s->core, c))) {
        close_client(s, c);
        return;
    }
    if (pending != s->want_out[c] && !s->stopping) {
        s->want_out[c] = pending;
        struct epoll_event ev = {.events = EPOLLIN | (pending ? EPOLLOUT : 0u),
                                 .data.u64 = TAG_CLIENT + (uint64_t)c};
        epoll_ctl(s->ep, EPOLL_CTL_MOD, s->cfd[c], &ev);
    }
}

static void accept_clients(speaker *s, int64_t now)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                /* The connection stays queued and the socket readable: stop watching it a
                 * while rather than spin (its client meets a stall, and connects directly). */
                epoll_ctl(s->ep, EPOLL_CTL_DEL, s->listen_fd, NULL);
                s->accept_paused = now + ACCEPT_PAUSE_US;
            }
            return;
        }
        struct ucred cr;
        socklen_t len = sizeof cr;
        /* The directory is the user's own already; a peer of another uid (root aside, who may
         * do anything) is refused all the same. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.uid != geteuid() ||
            dbt_relay_count(s->core).clients >= s->max_clients) {
            close(fd); /* refused, or full: it connects directly */
            continue;
        }
        int c = dbt_relay_open(s->core);
        if (c < 0) {
            close(fd);
            continue;
        }
        s->cfd[c] = fd;
        s->want_out[c] = false;
        if (c >= s->nc)
            s->nc = c + 1;
        track_fd(SLOT_CLIENT + c, fd);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_CLIENT + (uint64_t)c};
        epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev);
    }
}

static void read_client(speaker *s, int c)
{
    char buf[16384];
    for (;;) {
        ssize_t n = recv(s->cfd[c], buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            close_client(s, c);
            return;
        }
        if (!dbt_relay_input(s->core, c, buf, (size_t)n, dbt_now_us()))
            return; /* doomed: its last words are written, then it is closed */
    }
}

/* Writes what is due everywhere, and closes the doomed clients once written. */
static void flush_all(speaker *s)
{
    flush_link(s, DBT_RELAY_CMD);
    flush_link(s, DBT_RELAY_LISTEN);
    for (int c = 0; c < s->nc; c++)
        if (s->cfd[c] >= 0)
            flush_client(s, c);
}

/* The relay stops taking clients: its socket goes (newcomers elect the next speaker at once) and
 * the lock with it (the lock file's fd closed), and its clients' input is not read any more:
 * what it read is answered, what it did not read resets their connections when it closes them
 * (a call never sent, made again at once: dbt_redis_undelivered). */
static void stop_listening(speaker *s)
{
    if (s->listen_fd < 0)
        return;
    epoll_ctl(s->ep, EPOLL_CTL_DEL, s->listen_fd, NULL);
    track_fd(SLOT_LISTEN, -1);
    close(s->listen_fd);
    s->listen_fd = -1;
    for (int c = 0; c < s->nc; c++)
        if (s->cfd[c] >= 0)
            epoll_ctl(s->ep, EPOLL_CTL_DEL, s->cfd[c], NULL);
    pthread_mutex_lock(&proc.mu);
    (void)unlinkat(proc.dir, file_name("sock").s, 0);
    if (proc.lock_fd >= 0) {
        /* Unlinked while still held, so that the last speaker leaves nothing behind: a process
         * that opened it before takes a lock on it that it finds unnamed (become_speaker). */
        (void)unlinkat(proc.dir, file_name("lock").s, 0);
        close(proc.lock_fd); /* lets the lock go */
        proc.lock_fd = -1;
    }
    pthread_mutex_unlock(&proc.mu);
}

static void *speak(void *arg)
{
    speaker *s = arg;
    int64_t drain_until = 0;
    int64_t half_timeout = s->cfg->redis_timeout_ms * 500;
    for (;;) {
        int64_t now = dbt_now_us();
        for (int l = 0; l < 2 && !s->stopping; l++)
            if (!s->link[l] && now >= s->retry_at[l])
                connect_link(s, (dbt_relay_link)l, now);
        if (s->accept_paused && now >= s->accept_paused && !s->stopping) {
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
            epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &ev);
            s->accept_paused = 0;
        }
        if (s->stopping && drain_until == 0) {
            stop_listening(s);
            drain_until = now + s->cfg->redis_timeout_ms * 1000;
        }
        if (s->waiting_since && now - s->waiting_since > s->cfg->redis_timeout_ms * 1000)
            lose_link(s, DBT_RELAY_CMD, "no reply within DBTHROTTLE_REDIS_TIMEOUT");
        dbt_relay_tick(s->core, now);
        flush_all(s);
        say_own_errors(s, now);
        if (drain_until && (dbt_relay_count(s->core).pending == 0 || now >= drain_until))
            break;
        int64_t next = dbt_relay_next_deadline(s->core);
        for (int l = 0; l < 2; l++)
            if (!s->link[l] && s->retry_at[l] < next)
                next = s->retry_at[l];
        if (s->accept_paused && s->accept_paused < next)
            next = s->accept_paused;
        if (drain_until && drain_until < next)
            next = drain_until;
        int wait_ms = next == INT64_MAX ? 1000 : next <= now ? 0 : (int)((next - now) / 1000 + 1);
        if (wait_ms > 1000)
            wait_ms = 1000;
        struct epoll_event evs[64];
        int64_t before = dbt_now_us();
        int n = epoll_wait(s->ep, evs, 64, wait_ms);
        /* Back after far longer than it slept (this process was stopped, or starved): its
         * clients have given their calls up (half of DBTHROTTLE_REDIS_TIMEOUT) and made them
         * directly. Nothing they sent is acted on now, late: the connections to Redis are
         * dropped with what they still had to send, and every client is closed, what it sent
         * unread (a reset: never sent). */
        if (dbt_now_us() - before > (int64_t)wait_ms * 1000 + half_timeout) {
            lose_link(s, DBT_RELAY_CMD, "this process was stopped or not scheduled");
            lose_link(s, DBT_RELAY_LISTEN, "this process was stopped or not scheduled");
            for (int c = 0; c < s->nc; c++)
                if (s->cfd[c] >= 0)
                    close_client(s, c);
            continue;
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_LISTEN) {
                accept_clients(s, dbt_now_us());
            } else if (tag == TAG_STOP) {
                uint64_t v;
                if (read(s->stop_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                    v = 0;
                s->stopping = true;
            } else if (tag < TAG_CLIENT) {
                read_link(s, (dbt_relay_link)(tag - TAG_LINK));
            } else if (s->cfd[tag - TAG_CLIENT] >= 0 && !s->stopping &&
                       (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
                read_client(s, (int)(tag - TAG_CLIENT));
            }
        }
    }
    stop_listening(s);
    for (int c = 0; c < s->nc; c++)
        if (s->cfd[c] >= 0)
            close_client(s, c);
    for (int l = 0; l < 2; l++)
        if (s->link[l])
            dbt_redis_free(s->link[l]);
    dbt_relay_free(s->core);
    track_fd(SLOT_EPOLL, -1);
    close(s->ep);
    pthread_mutex_lock(&proc.mu);
    proc.speaking = false; /* s->cfg is not read after this: dbt_relay_forget_config */
    pthread_cond_broadcast(&proc.ended);
    proc.stop_fd = -1;
    track_fd(SLOT_STOP, -1);
    close(s->stop_fd);
    pthread_mutex_unlock(&proc.mu);
    free(s);
    return NULL;
}

/* How many clients the process' descriptor limit leaves room for: half of its soft limit, less
 * a margin, so the host program keeps the rest (its own files and sockets come first). */
static int client_room(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 2 > (rlim_t)DBT_RELAY_MAX_CLIENTS + 32)
        return DBT_RELAY_MAX_CLIENTS;
    long room = (long)(rl.rlim_cur / 2) - 32;
    return room > 0 ? (int)room : 0;
}

/* This process takes the lock and starts its relay (proc.mu held). False: another speaks, or the
 * relay could not be set up. */
static bool become_speaker(const dbt_config *cfg)
{
    reap_ended_speaker();
    int room = client_room();
    int lfd = lock_file();
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (room < 8 || lfd < 0 || fcntl(lfd, F_SETLK, &fl) != 0)
        return false;
    if (!lock_named(lfd)) {
        /* Unlinked by the speaker that stopped between our open and our lock: a lock on that file
         * is nobody's. Direct this time; the next look opens the file of the name. */
        close(lfd);
        proc.lock_fd = -1;
        return false;
    }
    speaker *s = calloc(1, sizeof *s);
    if (s)
        s->listen_fd = s->ep = s->stop_fd = -1;
    char wake[128];
    snprintf(wake, sizeof wake, "%s{dbthrottle-relay}:wake:%s.%d", cfg->key_prefix, proc.target,
             (int)getpid());
    dbt_relay_conf conf = {.user = cfg->redis.user,
                           .password = cfg->redis.password,
                           .db = cfg->redis.db,
                           .wake_key = wake};
    struct sockaddr_un a;
    bool ok = s && (s->core = dbt_relay_new(&conf)) && sock_addr(proc.dir, &a);
    if (ok) {
        s->cfg = cfg;
        s->max_clients = room;
        s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        s->ep = epoll_create1(EPOLL_CLOEXEC);
        s->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        for (int c = 0; c < DBT_RELAY_MAX_CLIENTS; c++)
            s->cfd[c] = -1;
        (void)unlinkat(proc.dir, file_name("sock").s, 0); /* a dead speaker's */
        ok = s->listen_fd >= 0 && s->ep >= 0 && s->stop_fd >= 0 &&
             bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             listen(s->listen_fd, 128) == 0;
    }
    if (ok) {
        struct epoll_event l = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
        struct epoll_event st = {.events = EPOLLIN, .data.u64 = TAG_STOP};
        ok = epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &l) == 0 &&
             epoll_ctl(s->ep, EPOLL_CTL_ADD, s->stop_fd, &st) == 0;
    }
    if (ok) {
        track_fd(SLOT_LISTEN, s->listen_fd);
        track_fd(SLOT_EPOLL, s->ep);
        track_fd(SLOT_STOP, s->stop_fd);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        ok = pthread_create(&proc.thread, NULL, speak, s) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (!ok) {
        track_fd(SLOT_LISTEN, -1);
        track_fd(SLOT_EPOLL, -1);
        track_fd(SLOT_STOP, -1);
        if (s) {
            if (s->listen_fd >= 0) {
                close(s->listen_fd);
                (void)unlinkat(proc.dir, file_name("sock").s, 0);
            }
            if (s->ep >= 0)
                close(s->ep);
            if (s->stop_fd >= 0)
                close(s->stop_fd);
            dbt_relay_free(s->core);
            free(s);
        }
        (void)unlinkat(proc.dir, file_name("lock").s, 0); /* held: as a stopping speaker does */
        close(proc.lock_fd);                              /* lets the lock go */
        proc.lock_fd = -1;
        return false;
    }
    proc.speaking = proc.joinable = true;
    proc.cfg = cfg;
    proc.stop_fd = s->stop_fd;
    proc.drain_ms = cfg->redis_timeout_ms;
    dbt_field f[] = {DBT_S("target", proc.target)};
    dbt_log(DBT_LOG_INFO, "host_relay_speaking", f, 1);
    return true;
}

void dbt_relay_stop(void)
{
    pthread_mutex_lock(&proc.mu);
    proc.exiting = true;
    bool speaking = proc.speaking;
    pthread_t th = proc.thread;
    int64_t drain_ms = proc.drain_ms;
    uint64_t one = 1;
    /* Under the lock: the thread closes its eventfd only after clearing proc.stop_fd. */
    bool told = speaking && write(proc.stop_fd, &one, sizeof one) == sizeof one;
    reap_ended_speaker();
    bool join = told && proc.joinable;
    if (proc.joinable && !join)
        pthread_detach(th); /* not told (no eventfd to write): it ends with the process */
    proc.joinable = false;  /* joined or detached below: once, whoever calls again */
    pthread_mutex_unlock(&proc.mu);
    if (!join)
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += drain_ms * 1000000 + 10000000; /* and 10 ms to close */
    until.tv_sec += until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    /* Still draining (blocked in a connect to a Redis that does not answer, or starved): the
     * process ends without it, and a detached thread is not a leaked one. */
    if (pthread_timedjoin_np(th, NULL, &until) != 0)
        pthread_detach(th);
}

void dbt_relay_forget_config(const dbt_config *cfg)
{
    pthread_mutex_lock(&proc.mu);
    if (proc.speaking && proc.cfg == cfg) {
        uint64_t one = 1;
        /* Under the lock: the thread closes its eventfd only after clearing proc.stop_fd. */
        if (write(proc.stop_fd, &one, sizeof one) == sizeof one)
            while (proc.speaking)
                pthread_cond_wait(&proc.ended, &proc.mu);
    }
    reap_ended_speaker();
    pthread_mutex_unlock(&proc.mu);
}

/* ---- a client's side ----------------------------------------------------------------------- */

static __thread bool connect_stalled; /* a stall met by this thread's dbt_relay_connect */

void dbt_relay_broken(dbt_redis *r)
{
    if (!r->relayed)
        return;
    if (r->stalled) {
        connect_stalled = true;
        if (r->route.relay_gen == dbt_relay_generation())
            dbt_relay_suspect(); /* once per generation, not once per stalled connection */
    } else if (r->reset || r->ended) {
        dbt_relay_gone(r->route.relay_gen);
    }
}

static const dbt_redis_watch relay_watch = {.broken = dbt_relay_broken};

/* A connect that found no relay it could use: the next waits longer (RELAY_RETRY_US doubled). */
static void relay_failed(void)
{
    pthread_mutex_lock(&proc.mu);
    if (proc.retries < 16)
        proc.retries++;
    pthread_mutex_unlock(&proc.mu);
}

dbt_redis *dbt_relay_connect(const dbt_config *cfg, int64_t *retry_us, bool *stalled, char *err)
{
    *retry_us = 0;
    *stalled = connect_stalled = false;
    if (!cfg->host_relay || !cfg->host_share || cfg->redis.nsentinels > 0)
        return NULL;
    int64_t now = dbt_now_us();
    pthread_mutex_lock(&proc.mu);
    if (proc.refused || proc.exiting ||
        (proc.dir >= 0 && !proc.target[0] && !target_name(cfg, proc.target))) {
        pthread_mutex_unlock(&proc.mu);
        return NULL;
    }
    if (proc.dir < 0 || now < proc.suspect_until || now < proc.avoid_until) {
        /* Not yet: the host's segment names the directory soon; a stalled relay is tried again
         * once its suspicion ends, one that kept breaking once its avoidance does. */
        *retry_us = proc.dir < 0                            ? INT64_MAX
                    : proc.suspect_until > proc.avoid_until ? proc.suspect_until
                                                            : proc.avoid_until;
        pthread_mutex_unlock(&proc.mu);
        return NULL;
    }
    bool speaks = proc.speaking;
    if (!speaks) {
        /* Somebody holds the lock (F_GETLK does not see this process' own): it speaks. */
        int lfd = lock_file();
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (lfd < 0 || fcntl(lfd, F_GETLK, &fl) != 0) {
            pthread_mutex_unlock(&proc.mu);
            return NULL;
        }
        /* A speaker stopped (^Z on a psql of the workers' user, a debugger) would accept the
         * connection into its socket's backlog and answer nothing: the first call would wait
         * half of DBTHROTTLE_REDIS_TIMEOUT before going direct, again at each suspect period's
         * end. Seen stopped, it is not tried: direct now, looked at again later. */
        if (fl.l_type != F_UNLCK && fl.l_pid > 0 && dbt_process_stopped(fl.l_pid)) {
            *retry_us = now + doubled(RELAY_RETRY_US, proc.retries, RELAY_RETRY_MAX_US);
            pthread_mutex_unlock(&proc.mu);
            relay_failed();
            return NULL;
        }
        if (fl.l_type == F_UNLCK && become_speaker(cfg)) {
            /* Its own first call does not wait for the relay it just started: the relay makes
             * its two connections to Redis one after the other, round trips each, before it
             * sends a call on (1.2 s with Redis 150 ms away, past a 1 s DBTHROTTLE_REDIS_TIMEOUT:
             * cancel_ends_wait). It connects directly this time, as with the relay off, and
             * through the relay from a second later (dbt_redis_outdated). Other processes queue
             * on the socket meanwhile: a host's processes that start together still make the
             * relay's two connections and this one's, not one each. */
            *retry_us = now + RELAY_RETRY_US;
            pthread_mutex_unlock(&proc.mu);
            return NULL;
        }
        speaks = fl.l_type != F_UNLCK;
    }
    struct sockaddr_un a;
    bool have = speaks && sock_addr(proc.dir, &a);
    /* If no relay can be used now (the lock lost to another that has not bound its socket yet,
     * or the relay full or failing): direct this time, and through the relay later
     * (dbt_redis_outdated): a second later, doubled at each failure in a row. */
    *retry_us = now + doubled(RELAY_RETRY_US, proc.retries, RELAY_RETRY_MAX_US);
    pthread_mutex_unlock(&proc.mu);
    if (!have) {
        relay_failed();
        return NULL;
    }
    /* The relay speaks plain RESP over its socket, whatever it speaks to Redis. Each wait looks
     * at the speaker half-way (redis_conn.c): a stopped one leaves the rest of the time to the
     * same step made directly. */
    dbt_config plain = *cfg;
    plain.redis.tls = false;
    dbt_endpoint ep = {.is_unix = true, .path = a.sun_path};
    uint64_t gen = dbt_relay_generation();
    dbt_redis *r = dbt_redis_open(&plain, &ep, NULL, NULL, err);
    if (!r) {
        relay_failed();
        return NULL;
    }
    r->relayed = true;
    r->route.relay_gen = gen;
    r->watch = &relay_watch;
    struct ucred cr;
    socklen_t crlen = sizeof cr;
    if (getsockopt(r->t.fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0)
        r->relay_pid = cr.pid;
    if (cfg->redis.password) {
        char msg[DBT_ERRLEN];
        const char *user = cfg->redis.user, *pw = cfg->redis.password;
        const char *argv[] = {"AUTH", user ? user : pw, pw};
        redisReply *rep = dbt_redis_command(r, user ? 3 : 2, argv, NULL, msg);
        if (!rep) {
            snprintf(err, DBT_ERRLEN, "%.150s: AUTH failed: %.300s", r->who, msg);
            dbt_redis_free(r);
            *stalled = connect_stalled;
            relay_failed();
            return NULL;
        }
        freeReplyObject(rep);
    }
    if ((r = dbt_redis_ready(cfg, r, err)) == NULL) {
        *stalled = connect_stalled;
        relay_failed();
        return NULL;
    }
    *retry_us = 0;
    pthread_mutex_lock(&proc.mu);
    proc.retries = proc.suspects = 0; /* it answered: the next failure waits the least again */
    pthread_mutex_unlock(&proc.mu);
    return r;
}
