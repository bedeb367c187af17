/* sentinel.c - the master of a redis-sentinel:// URL (see sentinel.h).
 *
 * Process-wide, under `mu` (held only for copies, never across I/O): the sentinels in the order
 * to ask them (the one that answered moves to the front), the master's address found last, and
 * the generation. Discovery asks each sentinel with a short timeout (min(DBTHROTTLE_REDIS_TIMEOUT,
 * 500 ms)) within the caller's budget; a master whose ROLE is not "master" (a failover under way,
 * a demoted old master) is given up and the sentinels are asked again.
 *
 * The subscriber: one thread and one connection per process, started at the first connect to a
 * master, SUBSCRIBEd to +switch-master (and +promoted-slave, see on_message) on the first
 * sentinel that answers (another, after a
 * bounded back-off, when that connection breaks or stops answering its PINGs). It runs with every
 * signal blocked, is detached (a process exits without waiting for it), and a forked child forgets
 * it: the child's first connect starts its own. */
#include "sentinel.h"

#include "clock.h"
#include "log.h"
#include "redis_errors.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define HOST_LEN       256
#define ASK_MS_MAX     500
#define MAX_CALLBACKS  16
#define SUB_PING_MS    2000 /* the subscriber PINGs its sentinel this often ... */
#define SUB_SILENT_MS  6000 /* ... and gives it up after this long without a byte */
#define SUB_BACKOFF_MS 5000 /* the longest pause between two attempts to subscribe */

typedef struct {
    char host[HOST_LEN];
    int port;
} address;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char url_key[HOST_LEN * 2];   /* the master name and sentinels the state below is for */
static address order[DBT_MAX_HOSTS]; /* the sentinels, the one to ask first at the front */
static int norder;
static bool master_known;
static address master;
static uint64_t generation = 1;
typedef struct {
    void (*fn)(void *);
    void *arg;
} switch_callback;
static switch_callback callbacks[MAX_CALLBACKS];
static int ncallbacks;
/* Held while the callbacks run (and while one is added or removed), so that once
 * dbt_sentinel_off_switch returns, its callback is not running and never runs again (its arg may
 * then be freed). Taken before any lock a callback takes, never under mu. */
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;

/* The subscriber's own copy of what it needs (cfg belongs to its caller). */
static struct {
    bool running;
    pid_t pid; /* the process that started it: a forked child has none */
    char master_name[HOST_LEN];
    char *user, *password; /* the sentinels' own credentials */
    int64_t timeout_ms;
    dbt_config cfg; /* only the fields dbt_redis_open reads: timeout, the TLS settings */
} sub;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int sub_fd = -1; /* the subscriber's socket, for a forked child to close */

static int64_t ask_ms(const dbt_config *cfg)
{
    return cfg->redis_timeout_ms < ASK_MS_MAX ? cfg->redis_timeout_ms : ASK_MS_MAX;
}

uint64_t dbt_sentinel_generation(void)
{
    return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}

static void bump_generation_locked(void)
{
    __atomic_store_n(&generation, generation + 1, __ATOMIC_RELEASE);
}

void dbt_sentinel_master_failed(uint64_t gen)
{
    pthread_mutex_lock(&mu);
    if (gen == generation) {
        master_known = false;
        bump_generation_locked();
    }
    pthread_mutex_unlock(&mu);
}

void dbt_sentinel_on_switch(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&cb_mu);
    if (ncallbacks < MAX_CALLBACKS) {
        callbacks[ncallbacks].fn = fn;
        callbacks[ncallbacks].arg = arg;
        ncallbacks++;
    }
    pthread_mutex_unlock(&cb_mu);
}

void dbt_sentinel_off_switch(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&cb_mu);
    for (int i = 0; i < ncallbacks; i++)
        if (callbacks[i].fn == fn && callbacks[i].arg == arg) {
            callbacks[i] = callbacks[--ncallbacks];
            break;
        }
    pthread_mutex_unlock(&cb_mu);
}

/* Makes the state cfg's (a process normally has one URL; tests and the command may use others):
 * a different master name or list of sentinels starts over. Under mu. */
static void adopt_url_locked(const dbt_config *cfg)
{
    char key[sizeof url_key];
    int len = snprintf(key, sizeof key, "%s", cfg->redis.master_name);
    for (int i = 0; i < cfg->redis.nsentinels && len < (int)sizeof key; i++)
        len += snprintf(key + len, sizeof key - (size_t)len, " %s:%d", cfg->redis.sentinels[i].host,
                        cfg->redis.sentinels[i].port);
    if (strcmp(key, url_key) == 0)
        return;
    snprintf(url_key, sizeof url_key, "%s", key);
    norder = cfg->redis.nsentinels;
    for (int i = 0; i < norder; i++) {
        snprintf(order[i].host, HOST_LEN, "%s", cfg->redis.sentinels[i].host);
        order[i].port = cfg->redis.sentinels[i].port;
    }
    if (master_known) {
        master_known = false;
        bump_generation_locked();
    }
}

/* The sentinel that answered goes to the front of the list (when it is still in it). */
static void answered(const address *a)
{
    pthread_mutex_lock(&mu);
    for (int i = 1; i < norder; i++)
        if (order[i].port == a->port && strcmp(order[i].host, a->host) == 0) {
            address keep = order[i];
            memmove(&order[1], &order[0], (size_t)i * sizeof *order);
            order[0] = keep;
            break;
        }
    pthread_mutex_unlock(&mu);
}

static int snapshot_order(address *out)
{
    pthread_mutex_lock(&mu);
    int n = norder;
    memcpy(out, order, (size_t)n * sizeof *order);
    pthread_mutex_unlock(&mu);
    return n;
}

/* Opens a connection to one sentinel with the sentinels' credentials, within ask_ms. */
static dbt_redis *open_sentinel(const dbt_config *cfg, const char *user, const char *password,
                                const address *a, char *err)
{
    dbt_endpoint ep = {.host = a->host, .port = a->port};
    int64_t saved = dbt_redis_budget_begin(ask_ms(cfg));
    dbt_redis *s = dbt_redis_open(cfg, &ep, user, password, err);
    dbt_redis_budget_end(saved);
    return s;
}

/* What a sentinel's AUTH error says: 1 the password is wrong or missing, 0 another failure. */
static bool auth_refused(const char *err)
{
    const char *reply = dbt_redis_error_reply(err);
    return reply &&
           (strncmp(reply, "WRONGPASS", 9) == 0 || strncmp(reply, "NOAUTH", 6) == 0 ||
            strncmp(reply, "ERR invalid password", 20) == 0 || strncmp(reply, "ERR AUTH", 8) == 0 ||
            strncmp(reply, "ERR Client sent AUTH", 20) == 0);
}

typedef enum { ASK_FOUND, ASK_UNKNOWN, ASK_AUTH, ASK_FAILED } ask_result;

/* SENTINEL get-master-addr-by-name on one sentinel. */
static ask_result ask_one(const dbt_config *cfg, const address *a, address *found, char *why,
                          size_t cap, char *permanent)
{
    char err[DBT_ERRLEN], fix[DBT_ERRLEN];
    dbt_redis *s = open_sentinel(cfg, cfg->sentinel_user, cfg->sentinel_password, a, err);
    if (!s) {
        snprintf(why, cap, "%.190s", err);
        if (auth_refused(err))
            return ASK_AUTH;
        /* A certificate that does not verify, say: the first such error, whole. */
        if (!permanent[0] && dbt_redis_error_permanent(err, true, fix, sizeof fix))
            snprintf(permanent, DBT_ERRLEN, "%s", err);
        return ASK_FAILED;
    }
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", cfg->redis.master_name};
    int64_t saved = dbt_redis_budget_begin(ask_ms(cfg));
    redisReply *rep = dbt_redis_command(s, 3, argv, NULL, err);
    dbt_redis_budget_end(saved);
    dbt_redis_free(s);
    ask_result res = ASK_FAILED;
    if (!rep) {
        snprintf(why, cap, "%.190s", err);
        res = auth_refused(err) ? ASK_AUTH : ASK_FAILED;
    } else if (rep->type == REDIS_REPLY_NIL) {
        snprintf(why, cap, "does not know the master");
        res = ASK_UNKNOWN;
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
               rep->element[0]->type == REDIS_REPLY_STRING &&
               rep->element[1]->type == REDIS_REPLY_STRING && atoi(rep->element[1]->str) > 0 &&
               atoi(rep->element[1]->str) <= 65535) {
        snprintf(found->host, HOST_LEN, "%s", rep->element[0]->str);
        found->port = atoi(rep->element[1]->str);
        res = ASK_FOUND;
    } else {
        snprintf(why, cap, "an unexpected reply to SENTINEL get-master-addr-by-name");
    }
    freeReplyObject(rep);
    return res;
}

/* Asks the sentinels in turn for the master's address. On failure, err says why: an outage, or
 * (every sentinel that answered) a configuration error. */
static bool discover(const dbt_config *cfg, address *found, char *err)
{
    address list[DBT_MAX_HOSTS];
    int n = snapshot_order(list);
    char tried[DBT_ERRLEN] = "";
    size_t len = 0;
    int unknown = 0, auth = 0;
    char permanent[DBT_ERRLEN] = "";
    for (int i = 0; i < n; i++) {
        char why[200];
        ask_result r = ask_one(cfg, &list[i], found, why, sizeof why, permanent);
        if (r == ASK_FOUND) {
            answered(&list[i]);
            return true;
        }
        unknown += r == ASK_UNKNOWN;
        auth += r == ASK_AUTH;
        if (len < sizeof tried)
            len += (size_t)snprintf(tried + len, sizeof tried - len, "%s%s:%d (%s)", i ? ", " : "",
                                    list[i].host, list[i].port, why);
    }
    if (unknown > 0)
        snprintf(err, DBT_ERRLEN,
                 "Redis Sentinel does not know the master \"%.64s\" named by DBTHROTTLE_REDIS_URL "
                 "(asked: %.300s): fix the master name in DBTHROTTLE_REDIS_URL",
                 cfg->redis.master_name, tried);
    else if (auth > 0)
        snprintf(err, DBT_ERRLEN,
                 "Redis Sentinel refused our credentials (%.300s): set the sentinels' password "
                 "in DBTHROTTLE_SENTINEL_PASSWORD_FILE (and their user in "
                 "DBTHROTTLE_SENTINEL_USER)",
                 tried);
    else if (permanent[0])
        snprintf(err, DBT_ERRLEN, "%s", permanent); /* classified by its own words */
    else
        snprintf(err, DBT_ERRLEN,
                 "redis-sentinel: no sentinel answered for master %.64s (tried %.380s)",
                 cfg->redis.master_name, tried);
    return false;
}

/* ROLE's first element: "master" on the master. */
static bool says_master(dbt_redis *r, char *err)
{
    const char *argv[] = {"ROLE"};
    redisReply *rep = dbt_redis_command(r, 1, argv, NULL, err);
    bool ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
              rep->element[0]->type == REDIS_REPLY_STRING &&
              strcmp(rep->element[0]->str, "master") == 0;
    if (rep && !ok)
        snprintf(err, DBT_ERRLEN, "redis: ROLE does not say master (a failover under way?)");
    freeReplyObject(rep);
    return ok;
}

static void start_subscriber(const dbt_config *cfg);

dbt_redis *dbt_sentinel_connect_master(const dbt_config *cfg, uint64_t *found_gen, char *err)
{
    /* Within the caller's budget; without one, two timeouts: sentinels, then the master. */
    int64_t saved = dbt_redis_budget_begin(2 * cfg->redis_timeout_ms);
    dbt_redis *r = NULL;
    char why[DBT_ERRLEN] = "";
    for (int attempt = 0; attempt < 3 && !r; attempt++) {
        pthread_mutex_lock(&mu);
        adopt_url_locked(cfg);
        bool known = master_known;
        address m = master;
        uint64_t gen = generation;
        pthread_mutex_unlock(&mu);
        if (!known) {
            if (!discover(cfg, &m, err))
                goto out; /* its message says it all */
            pthread_mutex_lock(&mu);
            bool moved = generation != gen;
            if (!moved) {
                master = m;
                master_known = true;
            }
            pthread_mutex_unlock(&mu);
            /* The master changed while the sentinels were asked (the subscriber heard it): the
             * answer may name the old one, which must not pass for the new generation's. */
            if (moved)
                continue;
        }
        dbt_endpoint ep = {.host = m.host, .port = m.port};
        r = dbt_redis_open(cfg, &ep, cfg->redis.user, cfg->redis.password, why);
        if (r && !says_master(r, why)) {
            dbt_redis_free(r);
            r = NULL;
        }
        if (r) {
            *found_gen = gen;
        } else {
            /* A configuration error on the master (its AUTH refused, ROLE denied by the ACL, a
             * TLS certificate that does not verify) stays one whatever address the sentinels
             * give: said as it is, so that it is classified permanent, not as an outage. */
            char fix[DBT_ERRLEN];
            if ((dbt_redis_error_reply(why) && auth_refused(why)) ||
                dbt_redis_error_permanent(why, true, fix, sizeof fix)) {
                snprintf(err, DBT_ERRLEN, "%s", why);
                goto out;
            }
            dbt_sentinel_master_failed(gen);
        }
    }
    if (!r)
        snprintf(err, DBT_ERRLEN, "redis-sentinel: master %.64s: %.400s", cfg->redis.master_name,
                 why);
out:
    dbt_redis_budget_end(saved);
    if (r)
        start_subscriber(cfg);
    return r;
}

/* ---- the subscriber ---------------------------------------------------------------------- */

/* A master of ours is now at new_host:new_port: it becomes the one to connect to, the generation
 * goes up unless a connect found it first (pools drop what they hold), and once per failover
 * heard the line is logged and the callbacks run. `from` is for the log line. */
static void master_moved(const char *event, const char *from, const char *new_host, int new_port)
{
    static address announced; /* the subscriber's thread only */
    bool news = announced.port != new_port || strcmp(announced.host, new_host) != 0;
    snprintf(announced.host, HOST_LEN, "%s", new_host);
    announced.port = new_port;
    pthread_mutex_lock(&mu);
    bool changed = !master_known || master.port != new_port || strcmp(master.host, new_host) != 0;
    snprintf(master.host, HOST_LEN, "%s", new_host);
    master.port = new_port;
    master_known = true;
    if (changed)
        bump_generation_locked();
    pthread_mutex_unlock(&mu);
    if (!news)
        return; /* the other announcement of the same failover: already followed */
    char to[HOST_LEN + 8];
    snprintf(to, sizeof to, "%s:%d", new_host, new_port);
    dbt_field f[] = {DBT_S("master", sub.master_name), DBT_S("from", from), DBT_S("to", to),
                     DBT_S("heard", event)};
    dbt_log(DBT_LOG_WARN, "sentinel_switch", f, 4);
    pthread_mutex_lock(&cb_mu);
    for (int i = 0; i < ncallbacks; i++)
        callbacks[i].fn(callbacks[i].arg);
    pthread_mutex_unlock(&cb_mu);
}

/* Two announcements of a failover, whichever comes first:
 *   +switch-master NAME OLDIP OLDPORT NEWIP NEWPORT: every sentinel, once it has the new
 *     configuration: the leader only at the end of the failover (after the other replicas are
 *     reconfigured, up to failover-timeout later), the others a hello period after promotion;
 *   +promoted-slave slave IP:PORT IP PORT @ NAME OLDIP OLDPORT: the leader, as soon as the replica
 *     it chose says it is the master (past that point a failover is never aborted).
 * Until then the old master may still accept writes: following early keeps this process off it. */
static void on_message(const char *channel, const char *text)
{
    char name[HOST_LEN], old_host[HOST_LEN], new_host[HOST_LEN], from[HOST_LEN + 8];
    int old_port, new_port;
    if (strcmp(channel, "+switch-master") == 0) {
        if (sscanf(text, "%255s %255s %d %255s %d", name, old_host, &old_port, new_host,
                   &new_port) != 5)
            return;
    } else if (strcmp(channel, "+promoted-slave") == 0) {
        if (sscanf(text, "%*s %*s %255s %d @ %255s %255s %d", new_host, &new_port, name, old_host,
                   &old_port) != 5)
            return;
    } else {
        return;
    }
    if (strcmp(name, sub.master_name) != 0 || new_port < 1 || new_port > 65535)
        return;
    snprintf(from, sizeof from, "%s:%d", old_host, old_port);
    master_moved(channel, from, new_host, new_port);
}

/* Handles what the subscription delivered; false when the connection is unusable. */
static bool read_messages(dbt_redis *s, int64_t *last_rx_ms)
{
    char err[DBT_ERRLEN];
    if (!dbt_redis_read_available(s, err))
        return false;
    *last_rx_ms = dbt_now_us() / 1000;
    redisReply *rep;
    int got;
    while ((got = dbt_redis_next_reply(s, &rep, err)) == 1) {
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
            rep->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(rep->element[0]->str, "message") == 0 &&
            rep->element[1]->type == REDIS_REPLY_STRING &&
            rep->element[2]->type == REDIS_REPLY_STRING)
            on_message(rep->element[1]->str, rep->element[2]->str);
        bool error = rep->type == REDIS_REPLY_ERROR;
        freeReplyObject(rep);
        if (error)
            return false;
    }
    return got == 0;
}

/* One subscription, until its connection fails. True when it was subscribed at all. */
static bool subscribe_once(const address *a)
{
    char err[DBT_ERRLEN];
    dbt_redis *s = open_sentinel(&sub.cfg, sub.user, sub.password, a, err);
    if (!s)
        return false;
    const char *argv[] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
    bool subscribed = false;
    if (dbt_redis_append(s, 3, argv, NULL, err) && dbt_redis_flush(s, err)) {
        __atomic_store_n(&sub_fd, dbt_redis_fd(s), __ATOMIC_RELEASE);
        answered(a);
        subscribed = true;
        int64_t now = dbt_now_us() / 1000, last_rx = now, last_ping = now;
        for (;;) {
            struct pollfd pfd = {.fd = dbt_redis_fd(s), .events = POLLIN};
            int n = poll(&pfd, 1, SUB_PING_MS / 2);
            now = dbt_now_us() / 1000;
            if (n > 0 && !read_messages(s, &last_rx))
                break;
            if (n < 0 || now - last_rx > SUB_SILENT_MS)
                break;
            if (now - last_ping >= SUB_PING_MS) {
                const char *ping[] = {"PING"};
                if (!dbt_redis_append(s, 1, ping, NULL, err) || !dbt_redis_flush(s, err))
                    break;
                last_ping = now;
            }
        }
    }
    __atomic_store_n(&sub_fd, -1, __ATOMIC_RELEASE);
    dbt_redis_free(s);
    return subscribed;
}

static void *subscriber_main(void *unused)
{
    (void)unused;
    int64_t backoff_ms = 100;
    for (;;) {
        address list[DBT_MAX_HOSTS];
        int n = snapshot_order(list);
        for (int i = 0; i < n; i++)
            if (subscribe_once(&list[i])) {
                backoff_ms = 100; /* it worked a while: the next sentinel is tried at once */
                break;
            }
        struct timespec pause = {.tv_sec = backoff_ms / 1000,
                                 .tv_nsec = (long)(backoff_ms % 1000) * 1000000};
        nanosleep(&pause, NULL);
        backoff_ms = backoff_ms * 2 > SUB_BACKOFF_MS ? SUB_BACKOFF_MS : backoff_ms * 2;
    }
    return NULL;
}

static void prepare_fork(void)
{
    pthread_mutex_lock(&mu);
}

static void parent_after_fork(void)
{
    pthread_mutex_unlock(&mu);
}

/* The child has no subscriber thread (only the forking thread survives fork): it forgets it, and
 * its first connect starts its own. It closes its copy of the subscriber's socket (the parent's
 * stays open) and never writes to it; the memory the thread used is left. */
static void child_after_fork(void)
{
    pthread_mutex_init(&mu, NULL);
    pthread_mutex_init(&cb_mu, NULL); /* only the subscriber, not in the child, could hold it */
    sub.running = false;
    int fd = __atomic_exchange_n(&sub_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0)
        close(fd);
}

static void register_atfork(void)
{
    pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
}

static void start_subscriber(const dbt_config *cfg)
{
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&mu);
    bool start = !sub.running || sub.pid != getpid();
    if (start) {
        /* The subscriber's own copies: written once per process, before its thread starts. */
        sub.running = true;
        sub.pid = getpid();
        snprintf(sub.master_name, sizeof sub.master_name, "%s", cfg->redis.master_name);
        free(sub.user);
        free(sub.password);
        sub.user = cfg->sentinel_user ? strdup(cfg->sentinel_user) : NULL;
        sub.password = cfg->sentinel_password ? strdup(cfg->sentinel_password) : NULL;
        sub.cfg.redis_timeout_ms = cfg->redis_timeout_ms;
        /* rediss-sentinel://: the subscriber verifies the sentinels as every connect does. */
        sub.cfg.redis.tls = cfg->redis.tls;
        free(sub.cfg.redis_ca);
        free(sub.cfg.redis_cert);
        free(sub.cfg.redis_key);
        sub.cfg.redis_ca = cfg->redis_ca ? strdup(cfg->redis_ca) : NULL;
        sub.cfg.redis_cert = cfg->redis_cert ? strdup(cfg->redis_cert) : NULL;
        sub.cfg.redis_key = cfg->redis_key ? strdup(cfg->redis_key) : NULL;
    }
    pthread_mutex_unlock(&mu);
    if (!start)
        return;
    /* Every signal blocked in the thread (it inherits this thread's mask at creation): the host
     * program's handlers never run on our thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, subscriber_main, NULL) != 0) {
        pthread_mutex_lock(&mu);
        sub.running = false; /* the next connect tries again */
        pthread_mutex_unlock(&mu);
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
