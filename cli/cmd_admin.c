/* cmd_admin.c - the operator's controls: dbthrottle limit, drain, resume, evict (admin.lua). */
#include "cli.h"

#include "clock.h"

#include <getopt.h>
#include <string.h>
#include <time.h>

bool cli_admin(dbt_redis *r, const dbt_config *cfg, const char *pool, dbt_kind kind,
               dbt_admin_op op, const char *arg, dbt_admin_reply *out, char *err)
{
    dbt_keys k;
    memset(out, 0, sizeof *out);
    if (!dbt_keys_init(&k, cfg->key_prefix, pool)) {
        snprintf(err, DBT_ERRLEN, "out of memory");
        return false;
    }
    dbt_script_call call;
    dbt_build_admin(&call, &k, kind, cfg, op, arg);
    redisReply *rep = cli_pool_script(r, cfg, &k, &call, dbt_parse_admin, out, err);
    dbt_keys_free(&k);
    if (!rep)
        return false;
    freeReplyObject(rep);
    return true;
}

/* The parts every control shares: options, settings, connection. */
typedef struct {
    const char *cmd;
    cli_redis_opts ro;
    bool kinds[DBT_NKINDS]; /* which semaphores to act on */
    bool clear;
    bool create;        /* limit, drain, resume --create: a pool Redis has never seen */
    bool cancel;        /* evict --cancel */
    bool wait;          /* drain --wait */
    int64_t timeout_ms; /* drain --timeout; DBT_FOREVER: none */
    int npos;
    char **pos;
    dbt_config cfg;
    dbt_redis *r;
} admin_ctx;

/* Parses the options; returns -1 to go on, else the exit code. `both_default`: drain and resume
 * act on both kinds unless told; limit acts on queries unless told. */
static int parse(admin_ctx *c, int argc, char **argv, const char *usage, bool both_default,
                 bool allow_clear, int npos_min, int npos_max)
{
    static const struct option longopts[] = {
        {"queries", no_argument, NULL, 'q'},
        {"connections", no_argument, NULL, 'c'},
        {"clear", no_argument, NULL, 'x'},
        {"create", no_argument, NULL, 'N'},
        {"cancel", no_argument, NULL, 'C'},
        {"wait", no_argument, NULL, 'w'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    int opt;
    bool q = false, cn = false, timeout = false;
    char err[DBT_ERRLEN];
    c->timeout_ms = DBT_FOREVER;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'q':
            q = true;
            break;
        case 'c':
            cn = true;
            break;
        case 'x':
            if (!allow_clear)
                return cli_usage_error(c->cmd, "unknown option '%s'", argv[optind - 1]);
            c->clear = true;
            break;
        case 'N':
            if (strcmp(c->cmd, "evict") == 0)
                return cli_usage_error(c->cmd, "unknown option '%s'", argv[optind - 1]);
            c->create = true;
            break;
        case 'C':
            if (strcmp(c->cmd, "evict") != 0)
                return cli_usage_error(c->cmd, "unknown option '%s'", argv[optind - 1]);
            c->cancel = true;
            break;
        case 'w':
            if (strcmp(c->cmd, "drain") != 0)
                return cli_usage_error(c->cmd, "unknown option '--wait'");
            c->wait = true;
            break;
        case 't':
            if (strcmp(c->cmd, "drain") != 0)
                return cli_usage_error(c->cmd, "unknown option '--timeout'");
            if (!dbt_parse_duration("--timeout", optarg, true, true, &c->timeout_ms, err))
                return cli_usage_error(c->cmd, "%s", err);
            timeout = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&c->ro, opt, optarg))
                break;
            return cli_option_error(c->cmd, longopts, argv);
        }
    }
    if (timeout && !c->wait)
        return cli_usage_error(c->cmd, "--timeout goes with --wait");
    if (!q && !cn) {
        q = true;
        cn = both_default;
    }
    c->kinds[DBT_KIND_QUERY] = q;
    c->kinds[DBT_KIND_CONN] = cn;
    c->pos = argv + optind;
    c->npos = argc - optind;
    if (c->clear)
        npos_min = npos_max = 1;
    if (c->npos < npos_min)
        return cli_usage_error(c->cmd, "missing %s", c->npos == 0 ? "POOL" : "an argument");
    if (c->npos > npos_max)
        return cli_usage_error(c->cmd, "unexpected argument '%s'", c->pos[npos_max]);
    if (!cli_load_config(c->cmd, &c->ro, &c->cfg))
        return 1;
    c->r = cli_connect(c->cmd, &c->cfg);
    if (!c->r) {
        dbt_config_free(&c->cfg);
        return 1;
    }
    return -1;
}

static void done(admin_ctx *c)
{
    dbt_redis_free(c->r);
    dbt_config_free(&c->cfg);
}

static void pool_label(const char *pool, char *out, size_t cap)
{
    cli_escape_name(pool, 200, true, out, cap);
}

static const char limit_usage[] =
    "usage: dbthrottle limit POOL N [--connections] [--create] [--redis URL] [--key-prefix P]\n"
    "       dbthrottle limit POOL --clear [--connections]\n"
    "\n"
    "Sets the pool's limit for every worker at once: an operator's override, kept in Redis,\n"
    "that takes precedence over each worker's DBTHROTTLE_MAX_QUERIES until --clear. Raising it\n"
    "grants the waiters that now fit at once; lowering it admits no one new until the holders\n"
    "drop below it (nobody is interrupted).\n"
    "\n"
    "  --connections   the connection limit (DBTHROTTLE_MAX_CONNECTIONS) instead of queries\n"
    "  --queries       the query limit (the default)\n"
    "  --clear         remove the override: each worker's own limit applies again\n"
    "  --create        act on a pool Redis has never seen (else refused as a likely typo, with\n"
    "                  the pools that exist)\n";

int cmd_limit(int argc, char **argv)
{
    admin_ctx c = {.cmd = "limit"};
    int rc = parse(&c, argc, argv, limit_usage, false, true, 2, 2);
    if (rc >= 0)
        return rc;
    char err[DBT_ERRLEN], name[256];
    int n = 0;
    if (!c.clear && !dbt_parse_limit("N", c.pos[1], &n, err)) {
        done(&c);
        return cli_usage_error("limit", "%s", err);
    }
    /* A change to a pool nobody has used is most likely a typo, and it stays in Redis. */
    if ((rc = cli_refuse_unknown_pool("limit", c.r, &c.cfg, c.pos[0], c.create)) >= 0) {
        done(&c);
        return rc;
    }
    pool_label(c.pos[0], name, sizeof name);
    rc = 0;
    for (int kind = 0; kind < DBT_NKINDS && rc == 0; kind++) {
        if (!c.kinds[kind])
            continue;
        dbt_admin_reply res;
        if (!cli_admin(c.r, &c.cfg, c.pos[0], (dbt_kind)kind,
                       c.clear ? DBT_ADMIN_CLEAR : DBT_ADMIN_LIMIT, c.clear ? NULL : c.pos[1], &res,
                       err)) {
            rc = cli_fail("limit", "pool %s: %s", name, err);
            break;
        }
        if (c.clear)
            printf("pool %s %s: override cleared: each worker's own limit applies", name,
                   dbt_kind_name((dbt_kind)kind));
        else
            printf("pool %s %s: limit %d for every worker", name, dbt_kind_name((dbt_kind)kind), n);
        printf("; %lld holding", res.holders);
        if (res.granted)
            printf(", %lld waiter%s granted at once", res.granted, res.granted == 1 ? "" : "s");
        if (!c.clear && res.holders > n)
            printf(" (above the new limit: no one new is admitted until fewer than %d hold)", n);
        printf("\n");
    }
    done(&c);
    return rc;
}

/* One held permit, as an operator needs it to find the session: where, which process and backend,
 * what it does. */
static void print_holder(dbt_kind kind, const dbt_status_entry *e, int64_t now_ms, bool lapsed)
{
    char held[24], app[200], ago[24];
    cli_duration(now_ms - e->since_ms, held, sizeof held);
    cli_duration(now_ms - e->expiry_ms, ago, sizeof ago);
    cli_escape_name(e->app, 63, true, app, sizeof app);
    fprintf(stderr, "  %s permit %s", dbt_kind_name(kind), e->permit);
    if (lapsed)
        fprintf(stderr, " (lease lapsed %s ago, never released)", ago);
    fprintf(stderr, ": host %s pid %ld", e->host[0] ? e->host : "?", e->pid);
    if (e->backend_pid > 0)
        fprintf(stderr, " backend pid %ld", e->backend_pid);
    fprintf(stderr, " application_name %s state %s, held for %s\n", app,
            e->state[0] ? e->state : "unknown", e->since_ms ? held : "?");
}

/* drain --wait: polls the pool until no permit of the drained kinds is held, by Redis' own count
 * of live leases; at the timeout, names the holders. A lease that lapsed without a release (its
 * holder stopped or cut off from Redis: still in the holders past its expiry, or reaped as
 * expired during the wait) is not a drained pool: its command may still run, so that ends the
 * wait at once with exit 1, naming them (waiting on would hang on a dead holder until the
 * timeout, and its release may never come; the operator decides: evict, or wait again). */
static int drain_wait(admin_ctx *c, const char *name)
{
    int64_t start = dbt_now_us() / 1000, poll_ms = 200;
    char err[DBT_ERRLEN];
    long long expired_at_start[DBT_NKINDS] = {0};
    for (bool first = true;; first = false) {
        cli_pool_view v;
        if (!cli_view_pool(c->r, &c->cfg, c->pos[0], 0, &v, err))
            return cli_fail(c->cmd, "pool %s: %s", name, err);
        long long held = 0, lapsed = 0, reaped = 0;
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            if (!c->kinds[kind])
                continue;
            const dbt_status_kind *k = &v.kind[kind];
            if (first)
                expired_at_start[kind] = k->counters[DBT_CTR_EXPIRED];
            held += k->nholders;
            lapsed += k->nlapsed;
            reaped += k->counters[DBT_CTR_EXPIRED] - expired_at_start[kind];
        }
        int64_t waited = dbt_now_us() / 1000 - start;
        if (held == 0 && lapsed == 0 && reaped <= 0) {
            cli_view_free(&v);
            char d[24];
            cli_duration(waited, d, sizeof d);
            printf("pool %s: no permit held (waited %s)\n", name, d);
            return 0;
        }
        bool timed_out = c->timeout_ms != DBT_FOREVER && waited >= c->timeout_ms;
        if (held == 0 || timed_out) {
            char d[24];
            cli_duration(timed_out ? c->timeout_ms : waited, d, sizeof d);
            if (held)
                cli_fail(c->cmd,
                         "pool %s: %lld unit%s still held after %s (a permit of weight w holds w; "
                         "still draining):",
                         name, held, held == 1 ? "" : "s", d);
            if (lapsed + reaped > 0)
                cli_fail(c->cmd,
                         "pool %s: %lld lease%s lapsed without a release (%lld still listed, "
                         "%lld reaped as expired during the wait); their holders may still run "
                         "(still draining):",
                         name, lapsed + reaped, lapsed + reaped == 1 ? "" : "s", lapsed,
                         reaped > 0 ? reaped : 0);
            for (int kind = 0; kind < DBT_NKINDS; kind++) {
                if (!c->kinds[kind])
                    continue;
                for (int i = 0; i < v.kind[kind].nh; i++)
                    print_holder((dbt_kind)kind, &v.kind[kind].holders[i], v.now_ms, false);
                for (int i = 0; i < v.kind[kind].nl; i++)
                    print_holder((dbt_kind)kind, &v.kind[kind].lapsed[i], v.now_ms, true);
            }
            cli_view_free(&v);
            return 1;
        }
        cli_view_free(&v);
        int64_t sleep_ms = poll_ms;
        if (c->timeout_ms != DBT_FOREVER && c->timeout_ms - waited < sleep_ms)
            sleep_ms = c->timeout_ms - waited;
        struct timespec ts = {.tv_sec = sleep_ms / 1000, .tv_nsec = sleep_ms % 1000 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int drain_or_resume(int argc, char **argv, bool drain, const char *usage)
{
    admin_ctx c = {.cmd = drain ? "drain" : "resume"};
    int rc = parse(&c, argc, argv, usage, true, false, 1, 1);
    if (rc >= 0)
        return rc;
    char err[DBT_ERRLEN], name[256];
    /* A change to a pool nobody has used is most likely a typo, and it stays in Redis. */
    if ((rc = cli_refuse_unknown_pool(c.cmd, c.r, &c.cfg, c.pos[0], c.create)) >= 0) {
        done(&c);
        return rc;
    }
    pool_label(c.pos[0], name, sizeof name);
    rc = 0;
    for (int kind = 0; kind < DBT_NKINDS && rc == 0; kind++) {
        if (!c.kinds[kind])
            continue;
        dbt_admin_reply res;
        if (!cli_admin(c.r, &c.cfg, c.pos[0], (dbt_kind)kind,
                       drain ? DBT_ADMIN_DRAIN : DBT_ADMIN_RESUME, NULL, &res, err)) {
            rc = cli_fail(c.cmd, "pool %s: %s", name, err);
            break;
        }
        if (drain)
            printf("pool %s %s: draining: no new grants (waiters wait); %lld unit%s still held "
                   "until their holders finish; undo with: dbthrottle resume\n",
                   name, dbt_kind_name((dbt_kind)kind), res.holders, res.holders == 1 ? "" : "s");
        else
            printf("pool %s %s: resumed: %lld waiter%s granted at once; %lld holding\n", name,
                   dbt_kind_name((dbt_kind)kind), res.granted, res.granted == 1 ? "" : "s",
                   res.holders);
    }
    if (rc == 0 && c.wait) {
        fflush(stdout);
        rc = drain_wait(&c, name);
    }
    done(&c);
    return rc;
}

static const char drain_usage[] =
    "usage: dbthrottle drain POOL [--queries | --connections] [--wait [--timeout T]]\n"
    "                        [--create] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Stops new grants in the pool (both kinds unless one is named), for a maintenance window:\n"
    "holders finish normally, newcomers and waiters wait (up to their DBTHROTTLE_WAIT_TIMEOUT)\n"
    "until dbthrottle resume POOL. Kept in Redis until then.\n"
    "\n"
    "  --wait       then return once no permit of the drained kinds is held, by Redis'\n"
    "               count of live leases (as PgBouncer's PAUSE); a lease that lapsed without\n"
    "               a release (its holder stopped or cut off: it may still run) ends the wait\n"
    "               with exit 1, naming it\n"
    "  --timeout T  give up waiting after T (30s, 5m): exit 1 naming the holders (host, pid,\n"
    "               backend pid, application_name, state); the drain stays in force\n"
    "  --create     drain a pool Redis has never seen (before its workers start; else\n"
    "               refused as a likely typo, with the pools that exist)\n";

static const char resume_usage[] =
    "usage: dbthrottle resume POOL [--queries | --connections] [--create] [--redis URL]\n"
    "                         [--key-prefix P]\n"
    "\n"
    "Ends a drain: the waiters that fit under the limit are granted at once. A pool Redis has\n"
    "never seen is refused as a likely typo (naming the pools that exist) unless --create.\n";

int cmd_drain(int argc, char **argv)
{
    return drain_or_resume(argc, argv, true, drain_usage);
}

int cmd_resume(int argc, char **argv)
{
    return drain_or_resume(argc, argv, false, resume_usage);
}

static const char evict_usage[] =
    "usage: dbthrottle evict POOL PERMIT [--cancel] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Frees one held permit by hand (a stuck holder: see dbthrottle status for the PERMIT ids)\n"
    "and passes it on to the first waiter. Says whose it was. The holder's process, if alive,\n"
    "learns at its next renewal (within a third of its lease) that the permit was evicted, logs\n"
    "'evicted', and takes a new one for its next command. With --cancel it also cancels the\n"
    "command running on that permit (as PQcancel would), so that the eviction does not leave\n"
    "one statement more than the limit running.\n";

int cmd_evict(int argc, char **argv)
{
    admin_ctx c = {.cmd = "evict"};
    int rc = parse(&c, argc, argv, evict_usage, true, false, 2, 2);
    if (rc >= 0)
        return rc;
    char err[DBT_ERRLEN], name[256], permit[160];
    pool_label(c.pos[0], name, sizeof name);
    dbt_escape(c.pos[1], 120, true, permit, sizeof permit);
    rc = 1;
    bool found = false, failed = false;
    for (int kind = 0; kind < DBT_NKINDS && !found && !failed; kind++) {
        if (!c.kinds[kind])
            continue;
        dbt_admin_reply res;
        dbt_admin_op op = c.cancel ? DBT_ADMIN_EVICT_CANCEL : DBT_ADMIN_EVICT;
        if (!cli_admin(c.r, &c.cfg, c.pos[0], (dbt_kind)kind, op, c.pos[1], &res, err)) {
            cli_fail("evict", "pool %s: %s", name, err);
            failed = true;
            break;
        }
        if (!res.evicted)
            continue;
        found = true;
        rc = 0;
        long long since = 0;
        long pid = 0;
        char host[64] = "?", conn[64] = "?", held[24] = "?";
        if (sscanf(res.info, "%lld %63s %ld %63s", &since, host, &pid, conn) >= 1 && since)
            cli_duration(res.now_ms - since, held, sizeof held);
        printf("pool %s %s: evicted permit %s, held by host %s pid %ld connection %s for %s; "
               "%lld waiter%s granted\n",
               name, dbt_kind_name((dbt_kind)kind), permit, host, pid, conn, held, res.granted,
               res.granted == 1 ? "" : "s");
    }
    if (!found && !failed)
        cli_fail("evict", "pool %s has no holder %s (see dbthrottle status %s)", name, permit,
                 name);
    done(&c);
    return rc;
}
