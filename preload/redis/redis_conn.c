/* redis_conn.c - one Redis connection: connect, AUTH, SELECT, timeouts, scripts by EVALSHA.
 *
 * hiredis 0.14 has no TLS, so its redisContext is not used: commands are formatted by
 * redisFormatCommandArgv into an output buffer, written by transport.c (plain or TLS), and what
 * comes back is parsed by hiredis' own reply reader. */
#include "redis_conn.h"

#include "clock.h"
#include "redis_errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- time budgets ---------------------------------------------------------------------- */

static __thread int64_t budget_deadline_us; /* 0: no budget, each step has the full timeout */
/* A wait for Redis timed out within the budget (a reply, a write, a connect): its time went to
 * Redis. */
static __thread bool budget_redis_late;
/* The last call failed because its budget ran out before its request was written, with no wait
 * for Redis timed out in it: dbt_redis_take_unsent. */
static __thread bool unsent;

bool dbt_redis_take_unsent(void)
{
    bool u = unsent;
    unsent = false;
    return u;
}

int64_t dbt_redis_budget_begin(int64_t ms)
{
    int64_t saved = budget_deadline_us, d = dbt_now_us() + ms * 1000;
    if (!saved)
        budget_redis_late = false;
    if (!saved || d < saved)
        budget_deadline_us = d;
    return saved;
}

int64_t dbt_redis_budget_anew(int64_t ms)
{
    int64_t saved = budget_deadline_us;
    budget_deadline_us = dbt_now_us() + ms * 1000;
    budget_redis_late = false;
    return saved;
}

void dbt_redis_budget_end(int64_t saved)
{
    budget_deadline_us = saved;
    if (!saved)
        budget_redis_late = false;
}

/* What the next blocking step may take: the timeout, or what is left of the budget (0: spent). */
static int64_t step_ms(int64_t timeout_ms)
{
    if (!budget_deadline_us)
        return timeout_ms;
    int64_t left = (budget_deadline_us - dbt_now_us() + 999) / 1000;
    return left <= 0 ? 0 : left < timeout_ms ? left : timeout_ms;
}

static void set_err(char *err, const char *what, const char *detail);

/* The connection can no longer be used; why is kept for later calls. The one place a
 * connection breaks: its watch hears it here (its server may be the wrong one now). */
static void mark_broken(dbt_redis *r, const char *why)
{
    if (!r->broken) {
        snprintf(r->errstr, sizeof r->errstr, "%s", why && why[0] ? why : "connection lost");
        if (r->watch && r->watch->broken)
            r->watch->broken(r);
    }
    r->broken = true;
}

bool dbt_process_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* after the command's name, which may hold spaces */
    return paren && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

/* A wait on a connection to the host's relay that got nothing in time: the relay's speaker is
 * stopped (its calls are then given up at once and made directly: relay.h), or Redis is slow,
 * which a direct connection would wait for as well. */
static bool relay_stalled(const dbt_redis *r)
{
    return r->relayed && r->relay_pid > 0 && dbt_process_stopped(r->relay_pid);
}

/* What the next wait for the socket may take; 0 (err set, connection given up: replies may be
 * owed) when the budget is spent. */
static int64_t step(dbt_redis *r, char *err)
{
    int64_t ms = step_ms(r->timeout_ms);
    if (ms == 0) {
        set_err(err, "redis", "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)");
        r->stalled = relay_stalled(r); /* spent on a stopped relay: not Redis' doing */
        mark_broken(r, "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)");
    }
    return ms;
}

/* Writes what is appended. On a connection to the host's relay, a write that cannot finish looks
 * at the speaker once, half-way, as a wait for a reply does (fill): a stopped speaker reads
 * nothing, and the scripts a new connection loads (over 100 kB) fill the socket's buffer. */
static bool flush_out(dbt_redis *r, char *err)
{
    if (r->outlen == 0)
        return true;
    /* A budget spent before the request is written (with no reply owed on the connection, and
     * no wait for Redis timed out in it) went elsewhere: this process stopped or not scheduled
     * (SIGSTOP, a loaded machine) while it connected or built the call. The request, built
     * before, is not sent now (a renewal would name ids Redis may have forgotten since: design.md,
     * "a renewal built just before a stop"), but the failure is not Redis': the caller notes no
     * outage (dbt_redis_take_unsent). Before, a process stopped for 2 s while its renewal
     * connected took Redis for unreachable as it resumed, and in open mode ran its commands
     * unthrottled for the second that followed (make test's chaos seed 5). */
    if (budget_deadline_us && !budget_redis_late && r->npending == 0 &&
        step_ms(r->timeout_ms) == 0) {
        unsent = true;
        set_err(err, "redis",
                "the call's time ran out before it was sent (this process was stopped or not "
                "scheduled)");
        mark_broken(r, "the call's time ran out before it was sent");
        return false;
    }
    int64_t ms = step(r, err);
    if (ms == 0)
        return false;
    char e[160];
    int64_t first = r->relayed && ms > 1 ? ms / 2 : ms;
    size_t done = 0, more = 0;
    int w = dbt_transport_write_part(&r->t, r->out, r->outlen, first, &done, e, sizeof e);
    if (w == 0 && first < ms) {
        if (relay_stalled(r))
            r->stalled = true;
        else if ((w = dbt_transport_write_part(&r->t, r->out + done, r->outlen - done, ms - first,
                                               &more, e, sizeof e)) == 0)
            r->stalled = relay_stalled(r); /* stopped since the look half-way */
    }
    if (w != 1) {
        if (w == 0)
            budget_redis_late = true;
        if (w < 0)
            r->reset = errno == EPIPE || errno == ECONNRESET;
        else if (r->stalled)
            snprintf(e, sizeof e, "the host's relay is stopped");
        mark_broken(r, e); /* a command half written leaves it out of step */
        set_err(err, "redis", e);
        return false;
    }
    r->outlen = 0;
    return true;
}

static bool append_raw(dbt_redis *r, const char *cmd, size_t len)
{
    if (r->outlen + len > r->outcap) {
        size_t cap = r->outcap ? r->outcap : 1024;
        while (cap < r->outlen + len)
            cap *= 2;
        char *p = realloc(r->out, cap);
        if (!p)
            return false;
        r->out = p;
        r->outcap = cap;
    }
    memcpy(r->out + r->outlen, cmd, len);
    r->outlen += len;
    return true;
}

static bool append_argv(dbt_redis *r, int argc, const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
    bool ok = len >= 0 && append_raw(r, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return ok;
}

/* The next reply the reader has complete: 1 (*out set), 0 none yet, -1 a protocol error. */
static int parsed_reply(dbt_redis *r, redisReply **out)
{
    if (r->early) {
        *out = r->early;
        r->early = NULL;
        return 1;
    }
    void *v = NULL;
    if (redisReaderGetReply(r->reader, &v) != REDIS_OK) {
        mark_broken(r, r->reader->errstr);
        return -1;
    }
    *out = v;
    return v ? 1 : 0;
}

/* Reads from the socket into the reader, waiting at most ms: false when the connection broke
 * or nothing came (err set either way). On a connection to the host's relay, the wait looks at
 * the speaker once, half-way: a stopped one is not waited for any longer. */
static bool fill(dbt_redis *r, int64_t ms, char *err)
{
    char buf[16 * 1024], e[160];
    int64_t first = r->relayed && ms > 1 ? ms / 2 : ms;
    ssize_t n = dbt_transport_read(&r->t, buf, sizeof buf, first, e, sizeof e);
    if (n == 0 && first < ms) {
        if (relay_stalled(r))
            r->stalled = true;
        else if ((n = dbt_transport_read(&r->t, buf, sizeof buf, ms - first, e, sizeof e)) == 0)
            r->stalled = relay_stalled(r); /* stopped since the look half-way */
    }
    if (n < 0) {
        r->reset = errno == ECONNRESET || errno == EPIPE;
        r->ended = r->relayed && !r->reset;
    }
    if (n == 0 && ms > 0) {
        budget_redis_late = true;
        snprintf(e, sizeof e,
                 r->stalled ? "the host's relay is stopped" : "timed out waiting for a reply");
    }
    if (n <= 0) {
        if (ms > 0 || n < 0) {
            mark_broken(r, e); /* a reply that never came leaves it out of step */
            set_err(err, "redis", e);
        }
        return false;
    }
    if (redisReaderFeed(r->reader, buf, (size_t)n) != REDIS_OK) {
        mark_broken(r, r->reader->errstr);
        set_err(err, "redis", r->errstr);
        return false;
    }
    return true;
}

static void set_err(char *err, const char *what, const char *detail)
{
    snprintf(err, DBT_ERRLEN, "%.150s: %.300s", what, detail);
    /* One line, always: a Redis error text could in theory contain a newline. */
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* Describes the server without its password. */
static void where(const dbt_endpoint *ep, char *buf, size_t cap)
{
    if (ep->is_unix)
        snprintf(buf, cap, "redis unix:%s", ep->path);
    else
        snprintf(buf, cap, "redis %s:%d", ep->host, ep->port);
}

static const dbt_script *const all_scripts[] = {&dbt_script_acquire, &dbt_script_release,
                                                &dbt_script_cancel, &dbt_script_renew,
                                                &dbt_script_sample};
enum { NSCRIPTS = sizeof all_scripts / sizeof *all_scripts };

static redisReply *read_reply(dbt_redis *r, char *err);
static long format_eval(const dbt_script *s, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, char **out);

/* The minimum Redis the scripts run on: PEXPIRE ... NX came with 7.0. */
#define MIN_REDIS_MAJOR 7

bool dbt_redis_info_field(const char *info, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            size_t len = strcspn(p + n + 1, "\r\n");
            snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), p + n + 1);
            return true;
        }
    return false;
}

/* What INFO says that makes the server unfit for the pool's keys: a maxmemory-policy that may
 * evict keys with a TTL (every dbthrottle key has one, so an evicted holders set over-admits),
 * or a version older than the scripts need. */
static void check_info(dbt_redis *r, const char *info, int64_t sent_us)
{
    char v[64];
    (void)dbt_redis_info_field(info, "redis_version", r->version, sizeof r->version);
    char now_us[32], uptime_s[32];
    if (dbt_redis_info_field(info, "run_id", r->run_id, sizeof r->run_id) &&
        dbt_redis_info_field(info, "server_time_usec", now_us, sizeof now_us) &&
        dbt_redis_info_field(info, "uptime_in_seconds", uptime_s, sizeof uptime_s)) {
        r->started_ms = strtoll(now_us, NULL, 10) / 1000 - strtoll(uptime_s, NULL, 10) * 1000;
        r->clock_ahead_ms = strtoll(now_us, NULL, 10) / 1000 - sent_us / 1000;
        r->clock_at_us = sent_us;
    }
    if (dbt_redis_info_field(info, "maxmemory_policy", v, sizeof v) &&
        (strncmp(v, "allkeys-", 8) == 0 || strncmp(v, "volatile-", 9) == 0))
        snprintf(r->server_problem, sizeof r->server_problem,
                 "Redis' maxmemory-policy is %.40s, which may evict the pool's keys (each has a "
                 "TTL) and over-admit: set maxmemory-policy noeviction in Redis",
                 v);
    else if (atoi(r->version) < MIN_REDIS_MAJOR)
        snprintf(r->server_problem, sizeof r->server_problem,
                 "Redis %.20s is older than 7.0, which the scripts need: upgrade Redis or fix "
                 "DBTHROTTLE_REDIS_URL",
                 r->version[0] ? r->version : "(version unknown)");
    r->cluster_node = dbt_redis_info_field(info, "cluster_enabled", v, sizeof v) && v[0] == '1';
}

/* Whether INFO's error reply (err, from read_reply) says INFO is not available to this user:
 * the ACL denies it, or Redis' rename-command took it away. */
static bool info_unavailable(const char *err)
{
    const char *reply = dbt_redis_error_reply(err);
    return reply && (strncmp(reply, "NOPERM ", 7) == 0 ||
                     strncmp(reply, "ERR unknown command 'INFO'", 26) == 0 ||
                     strncmp(reply, "ERR unknown command 'info'", 26) == 0);
}

/* SCRIPT LOAD of the scripts whose bit is set in `missing`, pipelined, and their replies. */
static bool load_scripts(dbt_redis *r, unsigned missing, char *err)
{
    for (int i = 0; i < NSCRIPTS; i++) {
        if (!(missing & (1u << i)))
            continue;
        const char *argv[] = {"SCRIPT", "LOAD", all_scripts[i]->body};
        size_t lens[] = {6, 4, all_scripts[i]->len};
        if (!append_argv(r, 3, argv, lens)) {
            set_err(err, "redis", "out of memory");
            return false;
        }
    }
    bool ok = true;
    for (int i = 0; i < NSCRIPTS; i++) {
        if (!(missing & (1u << i)))
            continue;
        redisReply *rep = read_reply(r, err);
        if (!rep)
            return false;
        if (rep->type != REDIS_REPLY_STRING || strcmp(rep->str, all_scripts[i]->sha) != 0) {
            snprintf(err, DBT_ERRLEN, "redis: SCRIPT LOAD %s returned an unexpected SHA1",
                     all_scripts[i]->name);
            ok = false;
        }
        freeReplyObject(rep);
    }
    return ok;
}

/* INFO, and which scripts Redis lacks (SCRIPT EXISTS), in one pipelined round trip; then those
 * it lacks are loaded (a second round trip, after Redis started or flushed its scripts, or for a
 * user whose ACL has no SCRIPT EXISTS: all of them, as before). The scripts are loaded on the
 * connection before its first use: a fire-and-forget release must not meet a NOSCRIPT that nobody
 * would read until the connection is used again. Asking first, rather than loading all, spares
 * each connection some 300 KB (the four scripts' text, to hash in Redis and, in a data centre, a
 * few round trips of TCP slow start): a one-shot psql opens two. */
static bool load_all_scripts(dbt_redis *r, char *err)
{
    const char *info_argv[] = {"INFO"};
    const char *exists_argv[2 + NSCRIPTS] = {"SCRIPT", "EXISTS"};
    for (int i = 0; i < NSCRIPTS; i++)
        exists_argv[2 + i] = all_scripts[i]->sha;
    if (!append_argv(r, 1, info_argv, NULL) || !append_argv(r, 2 + NSCRIPTS, exists_argv, NULL)) {
        set_err(err, "redis", "out of memory");
        return false;
    }
    int64_t sent_us = dbt_now_us(); /* before the write: Redis reads its clock after it */
    redisReply *info = read_reply(r, err);
    if (info && info->type == REDIS_REPLY_STRING) {
        check_info(r, info->str, sent_us);
    } else if (dbt_redis_broken(r)) {
        freeReplyObject(info);
        return false;
    } else if (!info) {
        /* An error reply. Only a user who may not run INFO (NOPERM) or a Redis that renamed it
         * away goes on unverified; any other error (LOADING, BUSY, ...) is this connect's
         * failure, an outage like any other, classified by the caller: never skip the policy
         * check for it. */
        if (!info_unavailable(err))
            return false;
        r->info_refused = true;
    }
    freeReplyObject(info);
    char exists_err[DBT_ERRLEN];
    redisReply *exists = read_reply(r, exists_err);
    if (!exists && dbt_redis_broken(r)) {
        snprintf(err, DBT_ERRLEN, "%s", exists_err);
        return false;
    }
    unsigned missing = (1u << NSCRIPTS) - 1; /* an error (NOPERM: an older ACL): load them all */
    if (exists && exists->type == REDIS_REPLY_ARRAY && exists->elements == NSCRIPTS)
        for (int i = 0; i < NSCRIPTS; i++)
            if (exists->element[i]->type == REDIS_REPLY_INTEGER && exists->element[i]->integer == 1)
                missing &= ~(1u << i);
    freeReplyObject(exists);
    return !missing || load_scripts(r, missing, err);
}

dbt_redis *dbt_redis_open(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                          const char *password, char *err)
{
    char who[300];
    where(ep, who, sizeof who);
    int64_t ms = step_ms(cfg->redis_timeout_ms);
    if (ms == 0) {
        set_err(err, who, "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)");
        return NULL;
    }
    dbt_redis *r = calloc(1, sizeof *r);
    if (!r || !(r->reader = redisReaderCreate())) {
        free(r);
        set_err(err, who, "out of memory");
        return NULL;
    }
    r->t.fd = -1;
    r->timeout_ms = cfg->redis_timeout_ms;
    snprintf(r->who, sizeof r->who, "%s", who);
    r->route.slot = -1; /* made for no slot until the routing layer says */
    if (!ep->is_unix) {
        snprintf(r->node_host, sizeof r->node_host, "%s", ep->host);
        r->node_port = ep->port;
    }
    dbt_tls_files tls = {cfg->redis_ca, cfg->redis_cert, cfg->redis_key};
    char e[DBT_ERRLEN];
    if (!dbt_transport_connect(&r->t, ep->is_unix, ep->host, ep->port, ep->path,
                               cfg->redis.tls ? &tls : NULL, ms, e, sizeof e)) {
        budget_redis_late = true; /* the time went to a server that did not take the connection */
        set_err(err, who, e);
        dbt_redis_free(r);
        return NULL;
    }
    if (password) {
        char msg[DBT_ERRLEN];
        redisReply *rep;
        if (user) {
            const char *argv[] = {"AUTH", user, password};
            rep = dbt_redis_command(r, 3, argv, NULL, msg);
        } else {
            const char *argv[] = {"AUTH", password};
            rep = dbt_redis_command(r, 2, argv, NULL, msg);
        }
        if (!rep) {
            /* Redis' AUTH errors never echo the password; say which step failed. */
            char m2[DBT_ERRLEN];
            snprintf(m2, sizeof m2, "AUTH failed: %.300s", msg);
            set_err(err, who, m2);
            dbt_redis_free(r);
            return NULL;
        }
        freeReplyObject(rep);
    }
    return r;
}

dbt_redis *dbt_redis_open_blind(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                                const char *password, char *err)
{
    if (cfg->redis.tls) {
        /* A TLS handshake is answered by the server itself: nothing is written before it. */
        set_err(err, "redis", "not over TLS");
        return NULL;
    }
    dbt_redis *r = dbt_redis_open(cfg, ep, NULL, NULL, err);
    if (!r)
        return NULL;
    char db[16];
    snprintf(db, sizeof db, "%d", cfg->redis.db);
    const char *auth[] = {"AUTH", user ? user : password, password};
    const char *select[] = {"SELECT", db};
    if ((password && !append_argv(r, user ? 3 : 2, auth, NULL)) ||
        (cfg->redis.db != 0 && !append_argv(r, 2, select, NULL))) {
        set_err(err, "redis", "out of memory");
        dbt_redis_free(r);
        return NULL;
    }
    return r;
}

bool dbt_redis_append_eval(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, char *err)
{
    char *cmd = NULL;
    long len = format_eval(s, nkeys, keys, nargs, args, &cmd);
    if (len < 0) {
        set_err(err, "redis", "cannot format the command");
        return false;
    }
    bool ok = append_raw(r, cmd, (size_t)len);
    if (!ok)
        set_err(err, "redis", "out of memory");
    redisFreeCommand(cmd);
    return ok;
}

dbt_redis *dbt_redis_ready(const dbt_config *cfg, dbt_redis *r, char *err)
{
    if (!r)
        return NULL;
    const char *who = r->who;
    char msg[DBT_ERRLEN];
    if (cfg->redis.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->redis.db);
        const char *argv[] = {"SELECT", db};
        redisReply *rep = dbt_redis_command(r, 2, argv, NULL, msg);
        if (!rep) {
            char m2[DBT_ERRLEN];
            snprintf(m2, sizeof m2, "SELECT %d failed: %.300s", cfg->redis.db, msg);
            set_err(err, who, m2);
            dbt_redis_free(r);
            return NULL;
        }
        freeReplyObject(rep);
    }
    /* Every script there before the connection is used (load_all_scripts). */
    if (!load_all_scripts(r, msg)) {
        set_err(err, who, msg);
        dbt_redis_free(r);
        return NULL;
    }
    return r;
}

void dbt_redis_free(dbt_redis *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->npending; i++)
        redisFreeCommand(r->pending[i].cmd);
    dbt_transport_close(&r->t);
    if (r->reader)
        redisReaderFree(r->reader);
    freeReplyObject(r->early);
    free(r->out);
    free(r);
}

void dbt_redis_adopt(dbt_redis *r)
{
    if (r)
        dbt_transport_untrack(&r->t);
}

void dbt_redis_disown(dbt_redis *r)
{
    if (r)
        dbt_transport_track(&r->t);
}

bool dbt_redis_undelivered(const dbt_redis *r)
{
    return r->relayed && r->broken && r->reset;
}

bool dbt_redis_broken(const dbt_redis *r)
{
    return r->broken;
}

static void forget_pending(dbt_redis *r);

void dbt_redis_give_up(dbt_redis *r, const char *why, bool owe_pending)
{
    if (owe_pending)
        forget_pending(r);
    mark_broken(r, why);
}

bool dbt_redis_closed(dbt_redis *r)
{
    if (dbt_redis_broken(r))
        return true;
    if (r->npending > 0)
        return false; /* replies are owed: data waiting is normal, and read later */
    if (r->early || dbt_transport_buffered(&r->t) || r->reader->pos < r->reader->len) {
        mark_broken(r, "unexpected data from Redis");
        return true;
    }
    char c;
    ssize_t n = recv(r->t.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    /* closed (0), unasked-for data (> 0), or a socket error */
    mark_broken(r, "Server closed the connection");
    return true;
}

/* Reads one reply (writing what is appended first). Returns NULL and sets err on I/O errors
 * and on error replies. */
static redisReply *read_reply(dbt_redis *r, char *err)
{
    if (r->broken) {
        set_err(err, "redis", r->errstr);
        return NULL;
    }
    if (!flush_out(r, err))
        return NULL;
    redisReply *rep = NULL;
    for (;;) {
        int got = parsed_reply(r, &rep);
        if (got < 0) {
            set_err(err, "redis", r->errstr);
            return NULL;
        }
        if (got > 0)
            break;
        int64_t ms = step(r, err);
        if (ms == 0 || !fill(r, ms, err))
            return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        set_err(err, "redis", rep->str);
        if (strncmp(rep->str, "READONLY", 8) == 0) {
            /* Writing to a replica: the master moved. The connection is given up (READONLY stays
             * an outage: redis_errors.c), and its watch told (a master to find again). */
            mark_broken(r, rep->str);
        }
        /* A reply that its watch says is for another server (MOVED): the connection is never
         * used again. */
        if (r->watch && r->watch->misrouted && r->watch->misrouted(r, rep->str))
            mark_broken(r, rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

static bool is_noscript(const char *err)
{
    return strstr(err, "NOSCRIPT") != NULL;
}

bool dbt_redis_load_script(dbt_redis *r, const dbt_script *s, char *err)
{
    const char *argv[] = {"SCRIPT", "LOAD", s->body};
    size_t lens[] = {6, 4, s->len};
    redisReply *rep = dbt_redis_command(r, 3, argv, lens, err);
    if (!rep)
        return false;
    bool ok = rep->type == REDIS_REPLY_STRING && strcmp(rep->str, s->sha) == 0;
    if (!ok)
        snprintf(err, DBT_ERRLEN, "redis: SCRIPT LOAD %s returned an unexpected SHA1", s->name);
    freeReplyObject(rep);
    return ok;
}

/* Appends what repairs a command that met NOSCRIPT: SCRIPT LOAD, then the same EVALSHA, written
 * together. Redis runs the two back to back (both in one read of the connection), so that another
 * client's SCRIPT FLUSH rarely falls between them; when one does, the repair is tried again. Not
 * an EVAL of the body: the ACLs of docs/operations.md grant EVALSHA and SCRIPT LOAD only. False
 * (nothing appended) when memory is short. */
static bool append_repair(dbt_redis *r, const dbt_script *s, const char *cmd, size_t len)
{
    const char *argv[] = {"SCRIPT", "LOAD", s->body};
    size_t lens[] = {6, 4, s->len};
    size_t before = r->outlen;
    if (append_argv(r, 3, argv, lens) && append_raw(r, cmd, len))
        return true;
    r->outlen = before;
    return false;
}

/* How often a command that meets NOSCRIPT is repaired before its NOSCRIPT is its failure. Only
 * a SCRIPT FLUSH between the two commands of a try fails it, and that window is not closed:
 * Redis reads a ~50 KB SCRIPT LOAD to its end and may serve other clients before it reads the
 * EVALSHA behind it (MULTI would close it, but the documented ACLs do not grant it). Under a
 * flush every millisecond on a loaded machine 3 tries failed about 1 call in 800; each try is
 * one round trip, within the call's one DBTHROTTLE_REDIS_TIMEOUT. */
enum { NOSCRIPT_TRIES = 16 };

/* Sends a command that met NOSCRIPT again (append_repair), and reads its reply. */
static redisReply *repair_noscript(dbt_redis *r, const dbt_script *s, const char *cmd, size_t len,
                                   char *err)
{
    redisReply *rep = NULL;
    for (int i = 0; i < NOSCRIPT_TRIES && !rep && !dbt_redis_broken(r); i++) {
        if (i > 0 && !is_noscript(err))
            break;
        if (!append_repair(r, s, cmd, len)) {
            set_err(err, "redis", "out of memory");
            break;
        }
        /* SCRIPT LOAD's reply: its failure is told by the command's own NOSCRIPT. */
        redisReply *loaded = read_reply(r, err);
        if (loaded)
            freeReplyObject(loaded);
        if (!dbt_redis_broken(r))
            rep = read_reply(r, err);
    }
    return rep;
}

/* Which script a pending command runs: its SHA1 sits at a fixed place in the formatted text. */
static const dbt_script *script_of(const char *cmd)
{
    for (int i = 0; i < NSCRIPTS; i++)
        if (strstr(cmd, all_scripts[i]->sha))
            return all_scripts[i];
    return NULL;
}

/* A fire-and-forget command failed, or may not have run: its caller learns it by its tag. */
static void note_failed(dbt_redis *r, char *tag)
{
    if (tag[0] && r->nfailed < DBT_MAX_PENDING)
        memcpy(r->failed[r->nfailed++], tag, DBT_REDIS_TAG_LEN);
    tag[0] = '\0';
}

int dbt_redis_take_failed(dbt_redis *r, char (*tags)[DBT_REDIS_TAG_LEN], int cap)
{
    int n = r->nfailed < cap ? r->nfailed : cap;
    memcpy(tags, r->failed, (size_t)n * sizeof r->failed[0]);
    r->nfailed = 0;
    return n;
}

/* The connection is given up with replies owed: their commands may not have run. */
static void forget_pending(dbt_redis *r)
{
    for (int i = 0; i < r->npending; i++) {
        redisFreeCommand(r->pending[i].cmd);
        note_failed(r, r->pending[i].tag);
    }
    r->npending = 0;
}

/* Adds a command whose reply will be read later; cmd NULL = a reply to skip (SCRIPT LOAD). */
static void add_pending(dbt_redis *r, char *cmd, size_t len, const char *tag)
{
    r->pending[r->npending].cmd = cmd;
    r->pending[r->npending].len = len;
    snprintf(r->pending[r->npending].tag, DBT_REDIS_TAG_LEN, "%s", tag ? tag : "");
    r->npending++;
}

/* Reads the replies of the first n fire-and-forget commands. One that met NOSCRIPT (SCRIPT
 * FLUSH, a restart behind a proxy) is sent again after a SCRIPT LOAD, both appended to the
 * connection: their replies come after anything already sent, and are read later. Returns
 * false when any of them failed otherwise (message in err). */
static bool read_pending(dbt_redis *r, int n, char *err)
{
    bool ok = true;
    struct {
        char *cmd;
        size_t len;
        char tag[DBT_REDIS_TAG_LEN];
    } again[DBT_MAX_PENDING];
    int nagain = 0;
    for (int i = 0; i < n; i++) {
        char *cmd = r->pending[i].cmd;
        redisReply *rep = read_reply(r, err);
        if (rep) {
            freeReplyObject(rep);
            r->pending[i].tag[0] = '\0';
        } else if (cmd && !dbt_redis_broken(r) && is_noscript(err)) {
            again[nagain].cmd = cmd;
            again[nagain].len = r->pending[i].len;
            memcpy(again[nagain].tag, r->pending[i].tag, DBT_REDIS_TAG_LEN);
            r->pending[i].tag[0] = '\0';
            nagain++;
            r->pending[i].cmd = NULL; /* now owned by again[] */
            continue;
        } else {
            ok = false;
            note_failed(r, r->pending[i].tag); /* an error reply (OOM, BUSY, ...), or none */
        }
        redisFreeCommand(cmd);
        r->pending[i].cmd = NULL;
        if (dbt_redis_broken(r)) {
            for (int j = 0; j < nagain; j++) {
                redisFreeCommand(again[j].cmd);
                note_failed(r, again[j].tag);
            }
            forget_pending(r);
            return false;
        }
    }
    r->npending -= n;
    memmove(&r->pending[0], &r->pending[n], (size_t)r->npending * sizeof r->pending[0]);
    for (int j = 0; j < nagain; j++) {
        const dbt_script *s = script_of(again[j].cmd);
        if (!s || r->npending + 2 > DBT_MAX_PENDING ||
            !append_repair(r, s, again[j].cmd, again[j].len)) {
            redisFreeCommand(again[j].cmd);
            note_failed(r, again[j].tag);
            ok = false;
            continue;
        }
        add_pending(r, NULL, 0, NULL);
        add_pending(r, again[j].cmd, again[j].len, again[j].tag);
    }
    return ok;
}

static bool drain_unguarded(dbt_redis *r, char *err)
{
    bool ok = true;
    /* Once for the replies, then for what a NOSCRIPT made us send again (repair_noscript's
     * tries). */
    for (int round = 0; round < 1 + NOSCRIPT_TRIES && r->npending > 0 && !dbt_redis_broken(r);
         round++)
        ok = read_pending(r, r->npending, err) && ok;
    if (r->npending > 0) {
        /* Replies still owed on a live connection would be read as the answers to later
         * commands: the connection is out of step, so it is never used again. */
        forget_pending(r);
        mark_broken(r, "replies still owed");
        ok = false;
    }
    return ok && !dbt_redis_broken(r);
}

/* Sends what is appended, reads the replies of earlier fire-and-forget commands (they come
 * first), then this command's reply. One round trip, even with releases in flight. */
static redisReply *finish_command(dbt_redis *r, char *err)
{
    char derr[DBT_ERRLEN];
    if (r->npending > 0 && !read_pending(r, r->npending, derr) && dbt_redis_broken(r)) {
        snprintf(err, DBT_ERRLEN, "%s", derr);
        return NULL;
    }
    /* A release that failed is not this command's failure: the lease covers it. */
    return read_reply(r, err);
}

redisReply *dbt_redis_command(dbt_redis *r, int argc, const char **argv, const size_t *lens,
                              char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return NULL;
    }
    if (!append_argv(r, argc, argv, lens)) {
        set_err(err, "redis", "out of memory");
        return NULL;
    }
    return finish_command(r, err);
}

/* Formats EVALSHA sha nkeys keys... args... (a renewal may carry thousands of ids). */
static long format_eval(const dbt_script *s, int nkeys, const char *const *keys, int nargs,
                        const char *const *args, char **out)
{
    enum { SMALL = 32 };
    const char *small[SMALL];
    int argc = 3 + nkeys + nargs;
    const char **argv = argc <= SMALL ? small : malloc((size_t)argc * sizeof *argv);
    if (!argv)
        return -1;
    char nk[16];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = s->sha;
    argv[n++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[n++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[n++] = args[i];
    int len = redisFormatCommandArgv(out, argc, argv, NULL);
    if (argv != small)
        free(argv);
    return len < 0 ? -1 : len;
}

redisReply *dbt_redis_eval(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return NULL;
    }
    char *cmd = NULL;
    long len = format_eval(s, nkeys, keys, nargs, args, &cmd);
    if (len < 0) {
        set_err(err, "redis", "cannot format the command");
        return NULL;
    }
    redisReply *rep = NULL;
    if (!append_raw(r, cmd, (size_t)len)) {
        set_err(err, "redis", "out of memory");
    } else {
        rep = finish_command(r, err);
        if (!rep && !dbt_redis_broken(r) && is_noscript(err)) {
            /* Whatever a NOSCRIPT among the releases made us send again comes first. */
            char derr[DBT_ERRLEN];
            (void)dbt_redis_drain(r, derr);
            rep = dbt_redis_broken(r) ? NULL : repair_noscript(r, s, cmd, (size_t)len, err);
        }
    }
    redisFreeCommand(cmd);
    return rep;
}

bool dbt_redis_eval_nowait(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, const char *tag, char *err)
{
    /* Room for this one, and for a SCRIPT LOAD and a resend should it meet NOSCRIPT. */
    if (r->npending + 3 > DBT_MAX_PENDING)
        (void)dbt_redis_drain(r, err); /* a failed release is not this one's failure */
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return false;
    }
    char *cmd = NULL;
    long len = format_eval(s, nkeys, keys, nargs, args, &cmd);
    if (len < 0) {
        set_err(err, "redis", "cannot format the command");
        return false;
    }
    if (!append_raw(r, cmd, (size_t)len)) {
        set_err(err, "redis", "out of memory");
        redisFreeCommand(cmd);
        return false;
    }
    /* Push it onto the socket now; only the reply is left for later. */
    if (!flush_out(r, err)) {
        redisFreeCommand(cmd);
        return false;
    }
    add_pending(r, cmd, (size_t)len, tag);
    return true;
}

bool dbt_redis_drain(dbt_redis *r, char *err)
{
    return drain_unguarded(r, err);
}

/* ---- for the listener ------------------------------------------------------------------- */

int dbt_redis_fd(const dbt_redis *r)
{
    return r->t.fd;
}

bool dbt_redis_readable_now(dbt_redis *r)
{
    if (r->early || dbt_transport_buffered(&r->t))
        return true;
    /* Bytes the reader holds may be a whole reply, or only part of one (then poll waits for
     * the rest): parse to know. */
    if (r->reader->pos < r->reader->len) {
        void *v = NULL;
        if (redisReaderGetReply(r->reader, &v) != REDIS_OK)
            return true; /* the protocol error is for dbt_redis_next_reply to report */
        r->early = v;
    }
    return r->early != NULL;
}

bool dbt_redis_append(dbt_redis *r, int argc, const char **argv, const size_t *lens, char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return false;
    }
    if (!append_argv(r, argc, argv, lens)) {
        set_err(err, "redis", "out of memory");
        return false;
    }
    return true;
}

bool dbt_redis_flush(dbt_redis *r, char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return false;
    }
    return flush_out(r, err);
}

bool dbt_redis_read_available(dbt_redis *r, char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->errstr);
        return false;
    }
    /* Until the socket (and TLS) has nothing more: a TLS record holds at most 16 kB. */
    while (fill(r, 0, err))
        ;
    return !dbt_redis_broken(r);
}

int dbt_redis_next_reply(dbt_redis *r, redisReply **out, char *err)
{
    *out = NULL;
    int got = parsed_reply(r, out);
    if (got < 0)
        set_err(err, "redis", r->errstr);
    return got;
}
