/* cmd_adapt.c - dbthrottle adapt: one controller per pool that finds the pool's limit from the
 * database's own signals (the rule: adapt_rule.c) and sets it for every worker through the
 * override key, with a TTL it refreshes while it leads (adapt.lua). Controllers elect one through
 * a Redis lease: the others sample as hot standbys and act only once they hold it. A dry run
 * writes nothing to Redis. Every line it logs is one logfmt line on stderr. */
#include "adapt_pg.h"
#include "adapt_rule.h"
#include "cli.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char adapt_usage[] =
    "usage: dbthrottle adapt POOL --min N --max N [--connections] [--class NAME]\n"
    "                        [--start N|min|max] [--interval 1s] [--window 5s] [--ttl 30s]\n"
    "                        [--lease 10s] [--db CONNINFO] [--db-cores N] [--dry-run]\n"
    "                        [--redis URL] [--key-prefix P]\n"
    "\n"
    "Runs the pool's adaptive controller (as a service): every interval it samples PostgreSQL\n"
    "(pg_stat_activity, pg_stat_database, pg_stat_replication) and the pool (holders, waiters,\n"
    "grants, the hold and wait histograms), and moves the limit within [min, max] (AIMD: see\n"
    "docs/design.md). It sets the limit for every worker as dbthrottle limit does, with a TTL it\n"
    "refreshes: if it dies, its limit lapses after --ttl and each worker's own applies again.\n"
    "Controllers of a pool elect one through a lease in Redis; the others wait as hot standbys "
    "and\n"
    "take over when its lease runs out (at once when it stops). A limit set by hand (dbthrottle\n"
    "limit) stops it changing anything until dbthrottle limit --clear. SIGTERM or SIGINT: it\n"
    "gives up its lease and exits 0. It logs one logfmt line on stderr per event.\n"
    "\n"
    "  --min N, --max N  the limit's bounds (required)\n"
    "  --connections     the connection limit instead of the query limit (--queries)\n"
    "  --class NAME      the hold and wait signals of that class only\n"
    "  --start N|min|max the first limit (default: the limit in force, within [min, max], or,\n"
    "                    when the live workers' ids carry none of it, theirs, said as\n"
    "                    adapt_start_stale); a controller that takes over from another\n"
    "                    continues from its limit\n"
    "  --interval T      how often it samples and renews its lease (1s)\n"
    "  --window T        the least time between two changes of the limit (5s)\n"
    "  --ttl T           the TTL of the limit it sets (30s; longer than --lease)\n"
    "  --lease T         how long its lease lasts unrenewed (10s; at least two intervals)\n"
    "  --db CONNINFO     its own connection to the database the pool protects (default:\n"
    "                    libpq's environment, as psql)\n"
    "  --db-cores N      the database server's cores (default: this machine's when the\n"
    "                    database is local, else required)\n"
    "  --dry-run         write nothing to Redis (no lease, no limit): log what it would do\n";

/* The command line. */
typedef struct {
    const char *pool;
    dbt_kind kind;
    const char *klass; /* NULL: every class' series */
    int min, max;
    int start; /* 0: the limit in force; -1 min; -2 max; else the value */
    int64_t interval_ms, window_ms, ttl_ms, lease_ms;
    const char *db;
    double cores;
    bool dry_run;
    cli_redis_opts ro;
} adapt_opts;

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

/* ---- logs ------------------------------------------------------------------------------------ */

static const char *log_pool, *log_kind;

/* One logfmt line on stderr, as the library writes them: ts, level, event, the fields, then the
 * pool and kind. */
static void say(dbt_log_level level, const char *event, const dbt_field *f, size_t n)
{
    dbt_field all[32];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 30; i++)
        all[k++] = f[i];
    all[k++] = DBT_S("pool", log_pool);
    all[k++] = DBT_S("kind", log_kind);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char ts[96], line[4096];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000);
    size_t len = dbt_log_format_line(line, sizeof line, DBT_FMT_LOGFMT, ts, level, event, all, k);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}
#define SAY(level, event, ...)                                                                     \
    say(level, event, (dbt_field[]){__VA_ARGS__},                                                  \
        sizeof((dbt_field[]){__VA_ARGS__}) / sizeof(dbt_field))

/* ---- options --------------------------------------------------------------------------------- */

enum {
    OPT_MIN = 2001,
    OPT_MAX,
    OPT_CLASS,
    OPT_START,
    OPT_INTERVAL,
    OPT_WINDOW,
    OPT_TTL,
    OPT_LEASE,
    OPT_DB,
    OPT_DB_CORES,
    OPT_DRY_RUN
};

static bool parse_cores(const char *text, double *out, char *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v > 0 && v <= 100000))
        return dbt_bad_value("--db-cores", text, "expected a number of cores above 0, such as 8",
                             err);
    *out = v;
    return true;
}

/* Returns -1 to go on, else the exit code. */
static int parse(adapt_opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"min", required_argument, NULL, OPT_MIN},
        {"max", required_argument, NULL, OPT_MAX},
        {"connections", no_argument, NULL, 'c'},
        {"queries", no_argument, NULL, 'q'},
        {"class", required_argument, NULL, OPT_CLASS},
        {"start", required_argument, NULL, OPT_START},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"ttl", required_argument, NULL, OPT_TTL},
        {"lease", required_argument, NULL, OPT_LEASE},
        {"db", required_argument, NULL, OPT_DB},
        {"db-cores", required_argument, NULL, OPT_DB_CORES},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    *o = (adapt_opts){.kind = DBT_KIND_QUERY,
                      .interval_ms = 1000,
                      .window_ms = 5000,
                      .ttl_ms = 30000,
                      .lease_ms = 10000};
    char err[DBT_ERRLEN];
    bool have_min = false, have_max = false;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        bool ok = true;
        switch (opt) {
        case OPT_MIN:
            ok = have_min = dbt_parse_limit("--min", optarg, &o->min, err);
            break;
        case OPT_MAX:
            ok = have_max = dbt_parse_limit("--max", optarg, &o->max, err);
            break;
        case 'c':
            o->kind = DBT_KIND_CONN;
            break;
        case 'q':
            o->kind = DBT_KIND_QUERY;
            break;
        case OPT_CLASS:
            o->klass = optarg;
            if (!dbt_class_name_ok(optarg))
                ok = dbt_bad_value("--class", optarg,
                                   "expected a class name: 1 to 32 of a-z, 0-9, _ and -", err);
            break;
        case OPT_START:
            if (strcmp(optarg, "min") == 0)
                o->start = -1;
            else if (strcmp(optarg, "max") == 0)
                o->start = -2;
            else
                ok = dbt_parse_limit("--start", optarg, &o->start, err);
            break;
        case OPT_INTERVAL:
            ok = dbt_parse_duration("--interval", optarg, false, false, &o->interval_ms, err);
            break;
        case OPT_WINDOW:
            ok = dbt_parse_duration("--window", optarg, false, false, &o->window_ms, err);
            break;
        case OPT_TTL:
            ok = dbt_parse_duration("--ttl", optarg, false, false, &o->ttl_ms, err);
            break;
        case OPT_LEASE:
            ok = dbt_parse_duration("--lease", optarg, false, false, &o->lease_ms, err);
            break;
        case OPT_DB:
            o->db = optarg;
            break;
        case OPT_DB_CORES:
            ok = parse_cores(optarg, &o->cores, err);
            break;
        case OPT_DRY_RUN:
            o->dry_run = true;
            break;
        case 'h':
            fputs(adapt_usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&o->ro, opt, optarg))
                break;
            return cli_option_error("adapt", longopts, argv);
        }
        if (!ok)
            return cli_usage_error("adapt", "%s", err);
    }
    if (optind >= argc)
        return cli_usage_error("adapt", "missing POOL");
    o->pool = argv[optind];
    if (optind + 1 < argc)
        return cli_usage_error("adapt", "unexpected argument '%s'", argv[optind + 1]);
    if (!have_min || !have_max)
        return cli_usage_error("adapt", "%s is required", have_min ? "--max" : "--min");
    if (o->min > o->max)
        return cli_usage_error("adapt", "--min %d is above --max %d", o->min, o->max);
    if (o->start > 0 && (o->start < o->min || o->start > o->max))
        return cli_usage_error("adapt", "--start %d is outside [--min %d, --max %d]", o->start,
                               o->min, o->max);
    if (o->lease_ms < 2 * o->interval_ms)
        return cli_usage_error("adapt",
                               "--lease %" PRId64 "ms is shorter than two --interval (%" PRId64
                               "ms): one late renewal would lose it",
                               o->lease_ms, o->interval_ms);
    if (o->ttl_ms <= o->lease_ms)
        return cli_usage_error("adapt",
                               "--ttl %" PRId64 "ms is not longer than --lease %" PRId64
                               "ms: the limit would lapse before a standby takes over",
                               o->ttl_ms, o->lease_ms);
    if (o->cores <= 0) {
        char host[256], perr[512];
        int local = cli_pg_is_local(o->db, host, sizeof host, perr, sizeof perr);
        if (local < 0)
            return cli_usage_error("adapt", "--db: %s", perr);
        if (!local)
            return cli_usage_error("adapt",
                                   "--db-cores is required: the database (host %s) is not on "
                                   "this machine",
                                   host);
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->cores = n > 0 ? (double)n : 1;
    }
    return -1;
}

/* ---- the pool's signals ---------------------------------------------------------------------- */

/* The running totals a sample is the difference of. */
typedef struct {
    bool have;
    int64_t at_us;
    double xacts;
    long long grants, timeouts;
    long long hold_sum, hold_count, wait_sum, wait_count;
} totals;

static void hist_totals(const dbt_status_kind *k, const char *klass, char series, long long *sum,
                        long long *count)
{
    *sum = *count = 0;
    for (int i = 0; i < k->nhists; i++) {
        const dbt_status_hist *h = &k->hists[i];
        if (h->series != series || (klass && strcmp(h->klass, klass) != 0))
            continue;
        *sum += h->sum_ms;
        *count += h->count;
    }
}

/* Mean of the values added since: unknown (-1) when none were, or the totals went back (Redis
 * lost them). */
static double mean_since(long long sum, long long count, long long sum0, long long count0)
{
    if (count <= count0 || sum < sum0)
        return -1;
    return (double)(sum - sum0) / (double)(count - count0);
}

static double rate_since(double now, double before, double dt_s)
{
    if (now < 0 || before < 0 || now < before || dt_s <= 0)
        return -1;
    return (now - before) / dt_s;
}

/* Fills x from the pool's view and PostgreSQL's reading, against the totals of the last sample
 * (then updated). */
static void make_sample(const adapt_opts *o, const dbt_status_kind *k, const cli_pg_sample *pg,
                        int64_t start_us, totals *t, dbt_adapt_sample *x)
{
    int64_t now_us = dbt_now_us();
    totals n = {.have = true, .at_us = now_us, .xacts = pg->xacts};
    n.grants = k->counters[DBT_CTR_GRANTS];
    n.timeouts =
        k->counters[DBT_CTR_CANCELLED] + k->counters[DBT_CTR_REFUSED] + k->counters[DBT_CTR_CAPPED];
    hist_totals(k, o->klass, 'h', &n.hold_sum, &n.hold_count);
    hist_totals(k, o->klass, 'w', &n.wait_sum, &n.wait_count);
    double dt = t->have ? (double)(now_us - t->at_us) / 1e6 : -1;
    *x = (dbt_adapt_sample){
        .t_s = (double)(now_us - start_us) / 1e6,
        .dt_s = dt,
        .limit = (int)cli_effective_limit(k),
        .held = (double)k->nholders,
        .waiters = (int)k->nwaiters,
        .xacts_per_s = t->have ? rate_since(n.xacts, t->xacts, dt) : -1,
        .grants_per_s = t->have ? rate_since((double)n.grants, (double)t->grants, dt) : -1,
        .hold_ms = t->have ? mean_since(n.hold_sum, n.hold_count, t->hold_sum, t->hold_count) : -1,
        .wait_ms = t->have ? mean_since(n.wait_sum, n.wait_count, t->wait_sum, t->wait_count) : -1,
        .active = pg->active,
        .cpu_active = pg->cpu_active,
        .lock_waiting = pg->lock_waiting,
        .io_waiting = pg->io_waiting,
        .repl_lag_s = pg->repl_lag_s,
        .timeouts = t->have && n.timeouts >= t->timeouts ? n.timeouts - t->timeouts : -1};
    *t = n;
}

/* ---- Redis ----------------------------------------------------------------------------------- */

typedef struct {
    adapt_opts o;
    dbt_config cfg;
    dbt_keys keys;
    dbt_redis *r;
    char token[160], host[64];
    char err[DBT_ERRLEN];
} controller;

/* Runs adapt.lua; false with a message in c->err (the connection is dropped: the next call
 * connects again). */
static bool adapt_call(controller *c, dbt_adapt_args *a, dbt_adapt_reply *out)
{
    int64_t saved = dbt_redis_budget_begin(c->cfg.redis_timeout_ms);
    if (c->r && dbt_redis_stale(c->r)) {
        dbt_redis_free(c->r);
        c->r = NULL;
    }
    if (!c->r)
        c->r = dbt_redis_connect(&c->cfg, c->err);
    bool ok = false;
    if (c->r) {
        a->token = c->token;
        dbt_script_call call;
        dbt_build_adapt(&call, &c->keys, c->o.kind, &c->cfg, a);
        redisReply *rep =
            cli_pool_script(c->r, &c->cfg, &c->keys, &call, dbt_parse_adapt, out, c->err);
        if (rep) {
            freeReplyObject(rep);
            ok = true;
        } else if (dbt_redis_broken(c->r)) {
            dbt_redis_free(c->r);
            c->r = NULL;
        }
    }
    dbt_redis_budget_end(saved);
    return ok;
}

/* Reads the pool's state (status.lua, through the status command's view code). */
static bool read_pool(controller *c, cli_pool_view *v)
{
    cli_pool_view *views = NULL;
    int n = 0;
    double secs;
    char *names[] = {(char *)c->o.pool};
    if (!cli_read_pools(&c->cfg, &c->r, names, 1, 1, &views, &n, &secs, c->err) || n != 1) {
        if (views)
            cli_views_free(views, n);
        return false;
    }
    *v = views[0];
    free(views);
    return true;
}

/* ---- the loop -------------------------------------------------------------------------------- */

static int clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The first limit: --start, else the limit in force (the pool's), within [min, max]. */
static int start_limit(const adapt_opts *o, const dbt_status_kind *k)
{
    if (o->start == -1)
        return o->min;
    if (o->start == -2)
        return o->max;
    if (o->start > 0)
        return o->start;
    long long now = cli_effective_limit(k);
    return clamp(now > 0 && now < 100000 ? (int)now : o->min, o->min, o->max);
}

/* The next tick: one interval after the last, or from now when a slow tick (Redis or
 * PostgreSQL answering late) left it behind, so that late ticks do not come in a burst; or, for
 * a standby whose leader's lease runs out before that, just after it runs out (*takeover_us, then
 * cleared), so that a dead leader is replaced within its lease, not up to an interval later. */
static int64_t next_tick(int64_t tick_us, int64_t interval_ms, int64_t *takeover_us)
{
    int64_t next = tick_us + interval_ms * 1000, now = dbt_now_us();
    if (*takeover_us > 0 && *takeover_us < next)
        next = *takeover_us;
    *takeover_us = 0;
    return next < now ? now : next;
}

static void sleep_until(int64_t deadline_us)
{
    while (!stopping) {
        int64_t left = deadline_us - dbt_now_us();
        if (left <= 0)
            return;
        struct timespec ts = {.tv_sec = left / 1000000, .tv_nsec = left % 1000000 * 1000};
        nanosleep(&ts, NULL); /* a signal ends it early: stopping is then looked at */
    }
}

typedef enum { ROLE_NONE, ROLE_LEADER, ROLE_STANDBY, ROLE_OPERATOR, ROLE_ERROR } role;

static const char *role_name(role r)
{
    static const char *const names[] = {"none", "leader", "standby", "operator", "error"};
    return names[r];
}

static int run(controller *c)
{
    const adapt_opts *o = &c->o;
    dbt_adapt_params params;
    dbt_adapt_params_default(&params);
    params.min = o->min;
    params.max = o->max;
    params.cores = o->cores;
    params.window_s = (double)o->window_ms / 1000.0;
    dbt_adapt_state state;
    bool started = false; /* the rule's state is set (leading, or a dry run's first sample) */
    int dry_limit = 0;    /* a dry run: the limit it would have set last */
    role now_role = ROLE_NONE;
    int64_t said_at_us = 0; /* the last adapt_hold or adapt_operator line */
    cli_pg *pg = cli_pg_new(o->db);
    if (!pg)
        return cli_fail("adapt", "out of memory");
    char pg_err[512] = "", last_pg_err[512] = "";
    totals tot = {0};
    int64_t start_us = dbt_now_us();
    int64_t takeover_us = 0; /* a standby: when the leader's lease runs out (0: not before the
                                next interval's tick) */
    SAY(DBT_LOG_INFO, "adapt_start", DBT_S("token", c->token), DBT_I("min", o->min),
        DBT_I("max", o->max), DBT_S("class", o->klass ? o->klass : ""),
        DBT_MS("interval_ms", o->interval_ms), DBT_MS("window_ms", o->window_ms),
        DBT_MS("ttl_ms", o->ttl_ms), DBT_MS("lease_ms", o->lease_ms),
        DBT_I("db_cores", (long long)o->cores), DBT_S("dry_run", o->dry_run ? "true" : "false"));
    for (int64_t tick_us = dbt_now_us(); !stopping;
         tick_us = next_tick(tick_us, o->interval_ms, &takeover_us), sleep_until(tick_us)) {
        /* 1. the lease (a dry run takes none) */
        dbt_adapt_reply lr = {0};
        role was = now_role;
        if (!o->dry_run) {
            dbt_adapt_args a = {.op = DBT_ADAPT_LEASE,
                                .lease_ms = o->lease_ms,
                                .host = c->host,
                                .pid = (long)getpid(),
                                .min = o->min,
                                .max = o->max,
                                .ttl_ms = o->ttl_ms,
                                .interval_ms = o->interval_ms,
                                .window_ms = o->window_ms};
            if (!adapt_call(c, &a, &lr)) {
                /* unsure whether it still leads: it acts on nothing until Redis answers */
                if (was != ROLE_ERROR)
                    SAY(DBT_LOG_WARN, "adapt_lease_lost", DBT_S("was", role_name(was)),
                        DBT_S("reason", "Redis"), DBT_S("error", c->err));
                now_role = ROLE_ERROR;
                continue;
            }
            now_role = lr.status == DBT_ADAPT_OK         ? ROLE_LEADER
                       : lr.status == DBT_ADAPT_OPERATOR ? ROLE_OPERATOR
                                                         : ROLE_STANDBY;
            if (now_role == ROLE_STANDBY && was != ROLE_STANDBY) {
                if (was == ROLE_LEADER || was == ROLE_OPERATOR)
                    SAY(DBT_LOG_WARN, "adapt_lease_lost", DBT_S("owner", lr.owner),
                        DBT_S("owner_host", lr.owner_host), DBT_I("owner_pid", lr.owner_pid));
                SAY(DBT_LOG_INFO, "adapt_standby", DBT_S("owner", lr.owner),
                    DBT_S("owner_host", lr.owner_host), DBT_I("owner_pid", lr.owner_pid),
                    DBT_MS("lease_left_ms", lr.lease_left_ms));
            }
            if (now_role != ROLE_STANDBY &&
                (was == ROLE_STANDBY || was == ROLE_NONE || was == ROLE_ERROR))
                SAY(DBT_LOG_INFO, "adapt_lead", DBT_S("owner", c->token),
                    DBT_MS("lease_left_ms", lr.lease_left_ms));
            if (now_role != ROLE_LEADER && now_role != ROLE_OPERATOR)
                started = false; /* a later lease starts afresh from the limit then in force */
            /* The lease left, by Redis' clock when the script ran: counted from after its reply,
             * the try comes no earlier than the lapse (1 ms for the clocks' rates). */
            if (now_role == ROLE_STANDBY && lr.lease_left_ms > 0)
                takeover_us = dbt_now_us() + (lr.lease_left_ms + 1) * 1000;
        }
        /* 2. one sample: the pool, then PostgreSQL */
        cli_pool_view v;
        if (!read_pool(c, &v)) {
            SAY(DBT_LOG_WARN, "adapt_error", DBT_S("what", "read the pool"),
                DBT_S("error", c->err));
            continue;
        }
        const dbt_status_kind *k = &v.kind[o->kind];
        cli_pg_sample ps;
        if (!cli_pg_sample_now(pg, &ps, pg_err, sizeof pg_err)) {
            if (strcmp(pg_err, last_pg_err) != 0)
                SAY(DBT_LOG_WARN, "adapt_error", DBT_S("what", "sample PostgreSQL"),
                    DBT_S("error", pg_err));
        } else {
            pg_err[0] = '\0';
        }
        snprintf(last_pg_err, sizeof last_pg_err, "%s", pg_err);
        dbt_adapt_sample x;
        make_sample(o, k, &ps, start_us, &tot, &x);
        int64_t now_us = dbt_now_us();
        bool say_again = now_us - said_at_us >= o->window_ms * 1000;
        if (now_role == ROLE_OPERATOR) {
            if (was != ROLE_OPERATOR || say_again) {
                SAY(DBT_LOG_WARN, "adapt_operator", DBT_I("limit", lr.override),
                    DBT_S("reason", "the limit was set by hand (dbthrottle limit): changing "
                                    "nothing until dbthrottle limit --clear"));
                said_at_us = now_us;
            }
            cli_view_free(&v);
            continue;
        }
        if (now_role == ROLE_STANDBY) {
            cli_view_free(&v);
            continue;
        }
        /* 3. the rule (leading, or a dry run) */
        /* The limit in force that is the controller's: the override while it has a TTL (a
         * dry run: what it would have set). */
        int in_force = o->dry_run ? dry_limit : (lr.override_pttl > 0 ? (int)lr.override : 0);
        const char *why_start = NULL;
        if (!started) {
            int first;
            if (!o->dry_run && in_force > 0) {
                first = clamp(in_force, o->min, o->max); /* another controller's: go on from it */
                why_start = "continues from the controller's limit in force";
            } else {
                first = start_limit(o, k);
                why_start = o->start ? "start (--start)" : "start (the limit in force)";
                /* The limit in force is the last acquirer's: a week-old one outlives the workers
                 * that asked for it (the pool idle since, or their limit changed). The live
                 * workers' ids say what they use now: the controller starts from that (the
                 * lowest, when they disagree), and says so. */
                cli_limit_use u[8];
                /* (Not under an override: it is every worker's limit, whatever its ids say.) */
                int nu = o->start || k->override ? 0 : cli_limits_in_use(k, u, 8);
                long long in_force_now = cli_effective_limit(k);
                bool used = false;
                for (int i = 0; i < nu; i++)
                    used = used || u[i].limit == in_force_now;
                if (nu > 0 && !used) {
                    first = clamp(u[0].limit < 100000 ? (int)u[0].limit : o->max, o->min, o->max);
                    char limits[80] = "";
                    for (int i = 0, len = 0; i < nu && len < (int)sizeof limits - 24; i++)
                        len += snprintf(limits + len, sizeof limits - (size_t)len, "%s%ld",
                                        i ? "," : "", u[i].limit);
                    SAY(DBT_LOG_WARN, "adapt_start_stale", DBT_I("limit_in_force", in_force_now),
                        DBT_S("workers_limits", limits), DBT_I("start", first),
                        DBT_S("reason", "the limit in force is not what the live workers ask "
                                        "for: starting from theirs"));
                    why_start = "start (the live workers' limit)";
                }
            }
            dbt_adapt_init(&state, &params, first);
            if (o->dry_run)
                in_force = dry_limit = (int)cli_effective_limit(k);
            started = true;
        }
        dbt_adapt_decision d = dbt_adapt_step(&state, &params, &x);
        cli_view_free(&v);
        if (d.limit == in_force) {
            if (say_again) {
                SAY(DBT_LOG_INFO, "adapt_hold", DBT_I("limit", d.limit), DBT_S("reason", d.reason),
                    DBT_MS("held", x.held), DBT_I("waiters", x.waiters),
                    DBT_MS("xacts_per_s", x.xacts_per_s), DBT_MS("hold_ms", x.hold_ms),
                    DBT_MS("wait_ms", x.wait_ms), DBT_I("active", x.active),
                    DBT_I("cpu_active", x.cpu_active), DBT_I("lock_waiting", x.lock_waiting),
                    DBT_S("dry_run", o->dry_run ? "true" : "false"));
                said_at_us = now_us;
            }
            continue;
        }
        const char *reason = d.change ? d.reason
                             : why_start
                                 ? why_start
                                 : "its limit was not in force (cleared by hand, or lapsed)";
        if (o->dry_run) {
            SAY(DBT_LOG_INFO, "adapt_change", DBT_I("from", in_force), DBT_I("to", d.limit),
                DBT_S("reason", reason), DBT_S("dry_run", "true"));
            dry_limit = d.limit;
            continue;
        }
        dbt_adapt_args a = {.op = DBT_ADAPT_SET, .limit = d.limit, .reason = reason};
        dbt_adapt_reply sr;
        if (!adapt_call(c, &a, &sr)) {
            SAY(DBT_LOG_WARN, "adapt_lease_lost", DBT_S("was", role_name(now_role)),
                DBT_S("reason", "Redis"), DBT_S("error", c->err));
            now_role = ROLE_ERROR;
            started = false;
            continue;
        }
        if (sr.status == DBT_ADAPT_OK) {
            SAY(DBT_LOG_INFO, "adapt_change", DBT_I("from", in_force), DBT_I("to", d.limit),
                DBT_S("reason", reason), DBT_I("granted", sr.granted), DBT_S("dry_run", "false"));
        } else if (sr.status == DBT_ADAPT_OPERATOR) {
            SAY(DBT_LOG_WARN, "adapt_operator", DBT_I("limit", sr.override),
                DBT_S("reason", "the limit was set by hand (dbthrottle limit): changing nothing "
                                "until dbthrottle limit --clear"));
            said_at_us = now_us;
            now_role = ROLE_OPERATOR;
        } else {
            SAY(DBT_LOG_WARN, "adapt_lease_lost", DBT_S("owner", sr.owner),
                DBT_S("owner_host", sr.owner_host), DBT_I("owner_pid", sr.owner_pid));
            now_role = ROLE_STANDBY;
            started = false;
        }
    }
    /* SIGTERM or SIGINT: give the lease up, so that a standby takes over at once */
    const char *resigned = "no";
    if (!o->dry_run) {
        dbt_adapt_args a = {.op = DBT_ADAPT_RESIGN};
        dbt_adapt_reply rr;
        resigned =
            adapt_call(c, &a, &rr) ? (rr.status == DBT_ADAPT_OK ? "yes" : "not leading") : c->err;
    }
    SAY(DBT_LOG_INFO, "adapt_stop", DBT_S("resigned", resigned));
    cli_pg_free(pg);
    return 0;
}

/* "<host>:<pid>:<16 hex>": unique per controller process, so that a restarted controller with
 * the pid of a dead one is not taken for it. */
static void make_token(controller *c)
{
    if (gethostname(c->host, sizeof c->host) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
    c->host[sizeof c->host - 1] = '\0';
    for (char *p = c->host; *p; p++)
        if (*p == ':' || (unsigned char)*p < 0x21)
            *p = '_';
    unsigned char rnd[8] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = (uint64_t)dbt_now_us() ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, sizeof rnd);
    }
    int n = snprintf(c->token, sizeof c->token, "%s:%ld:", c->host, (long)getpid());
    for (int i = 0; i < 8 && n > 0 && (size_t)n + 2 < sizeof c->token; i++, n += 2)
        snprintf(c->token + n, sizeof c->token - (size_t)n, "%02x", rnd[i]);
}

int cmd_adapt(int argc, char **argv)
{
    controller c;
    memset(&c, 0, sizeof c);
    int rc = parse(&c.o, argc, argv);
    if (rc >= 0)
        return rc;
    if (!cli_load_config("adapt", &c.o.ro, &c.cfg))
        return 1;
    if (!dbt_keys_init(&c.keys, c.cfg.key_prefix, c.o.pool)) {
        dbt_config_free(&c.cfg);
        return cli_fail("adapt", "out of memory");
    }
    char name[256];
    cli_escape_name(c.o.pool, 200, false, name, sizeof name);
    log_pool = name;
    log_kind = dbt_kind_name(c.o.kind);
    make_token(&c);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: a sleep ends at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = run(&c);
    dbt_redis_free(c.r);
    dbt_keys_free(&c.keys);
    dbt_config_free(&c.cfg);
    return rc;
}
