/* redis_conn.c - one Redis connection: connect, AUTH, SELECT, timeouts, scripts by EVALSHA. */
#include "redis_conn.h"

#include "clock.h"
#include "cluster.h"
#include "redis_errors.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* hiredis 0.14 writes with write(2): a write to a socket Redis has closed raises SIGPIPE, whose
 * default action kills the host program. Around every call that may write, SIGPIPE is blocked in
 * this thread and, if one was raised (and was not already pending), consumed; the mask is then
 * restored. The same technique libpq uses. */
void dbt_sigpipe_block(dbt_sigpipe_guard *g)
{
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &g->old);
}

void dbt_sigpipe_restore(dbt_sigpipe_guard *g)
{
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (!g->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static struct timeval tv_of(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* ---- time budgets ---------------------------------------------------------------------- */

static __thread int64_t budget_deadline_us; /* 0: no budget, each step has the full timeout */

int64_t dbt_redis_budget_begin(int64_t ms)
{
    int64_t saved = budget_deadline_us, d = dbt_now_us() + ms * 1000;
    if (!saved || d < saved)
        budget_deadline_us = d;
    return saved;
}

void dbt_redis_budget_end(int64_t saved)
{
    budget_deadline_us = saved;
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

/* Gives the socket the timeout of the next step; false (err set, connection given up) when the
 * budget is spent. Only re-arms when the change is worth two setsockopt calls, so the common
 * case, one command well within its budget, costs no system call. */
static bool arm(dbt_redis *r, char *err)
{
    int64_t want = step_ms(r->timeout_ms);
    if (want == 0) {
        set_err(err, "redis", "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)");
        if (!r->ctx->err)
            r->ctx->err = REDIS_ERR_IO; /* replies may be owed: never reuse it */
        return false;
    }
    int64_t diff = want > r->armed_ms ? want - r->armed_ms : r->armed_ms - want;
    if (diff > r->armed_ms / 8 + 2) {
        struct timeval tv = {.tv_sec = (time_t)(want / 1000),
                             .tv_usec = (suseconds_t)(want % 1000) * 1000};
        if (redisSetTimeout(r->ctx, tv) == REDIS_OK)
            r->armed_ms = want;
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
                                                &dbt_script_cancel, &dbt_script_renew};
enum { NSCRIPTS = sizeof all_scripts / sizeof *all_scripts };

static redisReply *read_reply(dbt_redis *r, char *err);

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
static void check_info(dbt_redis *r, const char *info)
{
    char v[64];
    (void)dbt_redis_info_field(info, "redis_version", r->version, sizeof r->version);
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

/* INFO and every script, in one pipelined round trip. */
static bool load_all_scripts(dbt_redis *r, char *err)
{
    const char *info_argv[] = {"INFO"};
    if (redisAppendCommandArgv(r->ctx, 1, info_argv, NULL) != REDIS_OK) {
        set_err(err, "redis", r->ctx->errstr);
        return false;
    }
    for (int i = 0; i < NSCRIPTS; i++) {
        const char *argv[] = {"SCRIPT", "LOAD", all_scripts[i]->body};
        size_t lens[] = {6, 4, all_scripts[i]->len};
        if (redisAppendCommandArgv(r->ctx, 3, argv, lens) != REDIS_OK) {
            set_err(err, "redis", r->ctx->errstr);
            return false;
        }
    }
    redisReply *info = read_reply(r, err);
    if (info && info->type == REDIS_REPLY_STRING) {
        check_info(r, info->str);
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
    bool ok = true;
    for (int i = 0; i < NSCRIPTS; i++) {
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

static redisReply *simple(dbt_redis *r, char *err, int argc, const char **argv)
{
    return dbt_redis_command(r, argc, argv, NULL, err);
}

/* Connects to ep; `full`: SELECT, INFO and the scripts too (else a probe: AUTH only). */
static dbt_redis *connect_unguarded(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                                    const char *password, bool full, char *err)
{
    char who[300];
    where(ep, who, sizeof who);
    int64_t ms = step_ms(cfg->redis_timeout_ms);
    if (ms == 0) {
        set_err(err, who, "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)");
        return NULL;
    }
    struct timeval tv = tv_of(ms);
    redisContext *c = ep->is_unix ? redisConnectUnixWithTimeout(ep->path, tv)
                                  : redisConnectWithTimeout(ep->host, ep->port, tv);
    if (!c) {
        set_err(err, who, "out of memory");
        return NULL;
    }
    if (c->err) {
        set_err(err, who, c->errstr);
        redisFree(c);
        return NULL;
    }
    /* hiredis 0.14 cannot open its socket with SOCK_CLOEXEC: set it now, so a program that
     * forks and execs never hands our socket to its children. */
    int fl = fcntl(c->fd, F_GETFD);
    if (fl >= 0)
        (void)fcntl(c->fd, F_SETFD, fl | FD_CLOEXEC);
    if (!ep->is_unix)
        (void)redisEnableKeepAlive(c);
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        set_err(err, who, "cannot set the socket timeout");
        redisFree(c);
        return NULL;
    }
    dbt_redis *r = calloc(1, sizeof *r);
    if (!r) {
        redisFree(c);
        set_err(err, who, "out of memory");
        return NULL;
    }
    r->ctx = c;
    r->timeout_ms = cfg->redis_timeout_ms;
    r->armed_ms = ms;
    r->slot = -1;
    if (!ep->is_unix) {
        snprintf(r->node_host, sizeof r->node_host, "%s", ep->host);
        r->node_port = ep->port;
    }

    char msg[DBT_ERRLEN];
    redisReply *rep;
    if (password) {
        if (user) {
            const char *argv[] = {"AUTH", user, password};
            rep = simple(r, msg, 3, argv);
        } else {
            const char *argv[] = {"AUTH", password};
            rep = simple(r, msg, 2, argv);
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
    if (!full)
        return r;
    if (cfg->redis.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", cfg->redis.db);
        const char *argv[] = {"SELECT", db};
        rep = simple(r, msg, 2, argv);
        if (!rep) {
            char m2[DBT_ERRLEN];
            snprintf(m2, sizeof m2, "SELECT %d failed: %.300s", cfg->redis.db, msg);
            set_err(err, who, m2);
            dbt_redis_free(r);
            return NULL;
        }
        freeReplyObject(rep);
    }
    /* Load every script now, in one pipelined round trip: a fire-and-forget release must not
     * meet a NOSCRIPT that nobody would read until the connection is used again. */
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
    if (r->ctx)
        redisFree(r->ctx);
    free(r);
}

bool dbt_redis_broken(const dbt_redis *r)
{
    return !r->ctx || r->ctx->err != 0;
}

static void forget_pending(dbt_redis *r);

bool dbt_redis_stale(dbt_redis *r)
{
    if (dbt_redis_broken(r))
        return true;
    /* Its node no longer serves the pool's slot: given up, and the releases whose replies are
     * still owed on it become owed operations (dbt_redis_take_failed), sent again to the new
     * node; dropped unread, they were neither landed nor owed, and each one's permit stayed held
     * for a whole lease. */
    uint64_t gen = dbt_cluster_generation();
    if (r->slot >= 0 && r->cluster_gen != gen) {
        if (!dbt_cluster_serves(r->slot, r->node_host, r->node_port)) {
            forget_pending(r);
            r->ctx->err = REDIS_ERR_OTHER;
            return true;
        }
        r->cluster_gen = gen; /* checked against this map: no lock again until it changes */
    }
    if (r->npending > 0)
        return false; /* replies are owed: data waiting is normal, and read later */
    char c;
    ssize_t n = recv(r->ctx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    r->ctx->err = REDIS_ERR_EOF; /* closed (0), unasked-for data (> 0), or a socket error */
    return true;
}

bool dbt_redis_set_timeout(dbt_redis *r, int64_t ms)
{
    if (redisSetTimeout(r->ctx, tv_of(ms)) != REDIS_OK)
        return false;
    r->armed_ms = ms;
    return true;
}

/* Reads one reply. Returns NULL and sets err on I/O errors and on error replies. */
static redisReply *read_reply(dbt_redis *r, char *err)
{
    void *v = NULL;
    if (!arm(r, err))
        return NULL;
    if (redisGetReply(r->ctx, &v) != REDIS_OK || !v) {
        const char *e = r->ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)
                            ? "timed out waiting for a reply"
                            : r->ctx->errstr;
        set_err(err, "redis", e[0] ? e : "connection lost");
        /* A reply that never came leaves the connection out of step: never reuse it. */
        if (!r->ctx->err)
            r->ctx->err = REDIS_ERR_IO;
        return NULL;
    }
    redisReply *rep = v;
    if (rep->type == REDIS_REPLY_ERROR) {
        set_err(err, "redis", rep->str);
        /* A cluster node that no longer serves the slot: the map learns where it went, and the
         * connection is never used again (the pool's next one goes to the new node). */
        if (dbt_cluster_note_moved(rep->str, r->node_host, r->node_port) && !r->ctx->err)
            r->ctx->err = REDIS_ERR_OTHER;
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

/* Re-sends a formatted EVALSHA after loading its script, and reads the reply. */
static redisReply *retry_after_load(dbt_redis *r, const dbt_script *s, const char *cmd, size_t len,
                                    char *err)
{
    if (!dbt_redis_load_script(r, s, err))
        return NULL;
    if (redisAppendFormattedCommand(r->ctx, cmd, len) != REDIS_OK) {
        set_err(err, "redis", r->ctx->errstr);
        return NULL;
    }
    return read_reply(r, err);
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
        const char *argv[] = {"SCRIPT", "LOAD", s ? s->body : ""};
        size_t lens[] = {6, 4, s ? s->len : 0};
        if (!s || r->npending + 2 > DBT_MAX_PENDING ||
            redisAppendCommandArgv(r->ctx, 3, argv, lens) != REDIS_OK ||
            redisAppendFormattedCommand(r->ctx, again[j].cmd, again[j].len) != REDIS_OK) {
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
    /* Twice at most: once for the replies, once for what a NOSCRIPT made us send again. */
    for (int round = 0; round < 2 && r->npending > 0 && !dbt_redis_broken(r); round++)
        ok = read_pending(r, r->npending, err) && ok;
    if (r->npending > 0) {
        /* Replies still owed on a live connection would be read as the answers to later
         * commands: the connection is out of step, so it is never used again. */
        forget_pending(r);
        r->ctx->err = REDIS_ERR_OTHER;
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

static redisReply *command_unguarded(dbt_redis *r, int argc, const char **argv, const size_t *lens,
                                     char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->ctx->errstr[0] ? r->ctx->errstr : "connection lost");
        return NULL;
    }
    if (redisAppendCommandArgv(r->ctx, argc, argv, lens) != REDIS_OK) {
        set_err(err, "redis", r->ctx->errstr);
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

static redisReply *eval_unguarded(dbt_redis *r, const dbt_script *s, int nkeys,
                                  const char *const *keys, int nargs, const char *const *args,
                                  char *err)
{
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->ctx->errstr[0] ? r->ctx->errstr : "connection lost");
        return NULL;
    }
    char *cmd = NULL;
    long len = format_eval(s, nkeys, keys, nargs, args, &cmd);
    if (len < 0) {
        set_err(err, "redis", "cannot format the command");
        return NULL;
    }
    redisReply *rep = NULL;
    if (redisAppendFormattedCommand(r->ctx, cmd, (size_t)len) != REDIS_OK) {
        set_err(err, "redis", r->ctx->errstr);
    } else {
        rep = finish_command(r, err);
        if (!rep && !dbt_redis_broken(r) && is_noscript(err)) {
            /* Whatever a NOSCRIPT among the releases made us send again comes first. */
            char derr[DBT_ERRLEN];
            (void)dbt_redis_drain(r, derr);
            rep = retry_after_load(r, s, cmd, (size_t)len, err);
        }
    }
    redisFreeCommand(cmd);
    return rep;
}

static bool eval_nowait_unguarded(dbt_redis *r, const dbt_script *s, int nkeys,
                                  const char *const *keys, int nargs, const char *const *args,
                                  const char *tag, char *err)
{
    /* Room for this one, and for a SCRIPT LOAD and a resend should it meet NOSCRIPT. */
    if (r->npending + 3 > DBT_MAX_PENDING)
        (void)dbt_redis_drain(r, err); /* a failed release is not this one's failure */
    if (dbt_redis_broken(r)) {
        set_err(err, "redis", r->ctx->errstr[0] ? r->ctx->errstr : "connection lost");
        return false;
    }
    char *cmd = NULL;
    long len = format_eval(s, nkeys, keys, nargs, args, &cmd);
    if (len < 0) {
        set_err(err, "redis", "cannot format the command");
        return false;
    }
    if (redisAppendFormattedCommand(r->ctx, cmd, (size_t)len) != REDIS_OK) {
        set_err(err, "redis", r->ctx->errstr);
        redisFreeCommand(cmd);
        return false;
    }
    /* Push it onto the socket now; only the reply is left for later. */
    if (!arm(r, err)) {
        redisFreeCommand(cmd);
        return false;
    }
    int done = 0;
    while (!done) {
        if (redisBufferWrite(r->ctx, &done) != REDIS_OK) {
            set_err(err, "redis", r->ctx->errstr);
            redisFreeCommand(cmd);
            return false;
        }
    }
    add_pending(r, cmd, (size_t)len, tag);
    return true;
}

/* ---- the public calls: each one guarded against SIGPIPE ------------------------------- */

static dbt_endpoint url_endpoint(const dbt_config *cfg)
{
    dbt_endpoint ep = {.is_unix = cfg->redis.is_unix,
                       .host = cfg->redis.host,
                       .port = cfg->redis.port,
                       .path = cfg->redis.path};
    return ep;
}

dbt_redis *dbt_redis_connect(const dbt_config *cfg, char *err)
{
    return dbt_redis_connect_for(cfg, NULL, err);
}

dbt_redis *dbt_redis_connect_at(const dbt_config *cfg, const dbt_endpoint *ep, char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    dbt_redis *r = connect_unguarded(cfg, ep, cfg->redis.user, cfg->redis.password, true, err);
    dbt_sigpipe_restore(&g);
    return r;
}

dbt_redis *dbt_redis_open(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                          const char *password, char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    dbt_redis *r = connect_unguarded(cfg, ep, user, password, false, err);
    dbt_sigpipe_restore(&g);
    return r;
}

/* Redis Cluster (cluster.c): the slot's primary, and the era token a migrated slot adopts. A
 * redis:// URL's server that says cluster_enabled:1 turns routing on; a connection it made to a
 * node that does not serve the route's slot is then made again, to the one that does. */
dbt_redis *dbt_redis_connect_for(const dbt_config *cfg, const char *route, char *err)
{
    int slot = route ? dbt_cluster_slot(route, strlen(route)) : -1;
    dbt_cluster_node node;
    bool routed = slot >= 0 && dbt_cluster_routing(cfg);
    if (routed && !dbt_cluster_node_for(cfg, slot, &node, err))
        return NULL;
    uint64_t gen = dbt_cluster_generation();
    dbt_endpoint ep = url_endpoint(cfg);
    if (routed)
        ep = (dbt_endpoint){.host = node.host, .port = node.port};
    dbt_redis *r = dbt_redis_connect_at(cfg, &ep, err);
    if (!r) {
        if (routed)
            dbt_cluster_node_failed(node.host, node.port);
        return NULL;
    }
    r->slot = slot;
    r->cluster_gen = gen;
    if (!routed && r->cluster_node && !cfg->redis.is_unix) {
        dbt_cluster_discovered();
        char merr[DBT_ERRLEN];
        routed = slot >= 0 && dbt_cluster_node_for(cfg, slot, &node, merr);
        if (routed && (node.port != r->node_port || strcmp(node.host, r->node_host) != 0)) {
            gen = dbt_cluster_generation();
            ep = (dbt_endpoint){.host = node.host, .port = node.port};
            dbt_redis_free(r);
            if (!(r = dbt_redis_connect_at(cfg, &ep, err)))
                return NULL;
            r->slot = slot;
        }
        r->cluster_gen = gen;
    }
    if (routed)
        dbt_cluster_adopt_token(cfg, slot, r->adopt_token, sizeof r->adopt_token);
    return r;
}

bool dbt_redis_drain(dbt_redis *r, char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    bool ok = drain_unguarded(r, err);
    dbt_sigpipe_restore(&g);
    return ok;
}

redisReply *dbt_redis_command(dbt_redis *r, int argc, const char **argv, const size_t *lens,
                              char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    redisReply *rep = command_unguarded(r, argc, argv, lens, err);
    dbt_sigpipe_restore(&g);
    return rep;
}

redisReply *dbt_redis_eval(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    redisReply *rep = eval_unguarded(r, s, nkeys, keys, nargs, args, err);
    dbt_sigpipe_restore(&g);
    return rep;
}

bool dbt_redis_eval_nowait(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, const char *tag, char *err)
{
    dbt_sigpipe_guard g;
    dbt_sigpipe_block(&g);
    bool ok = eval_nowait_unguarded(r, s, nkeys, keys, nargs, args, tag, err);
    dbt_sigpipe_restore(&g);
    return ok;
}
