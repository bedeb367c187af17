/* cmd_class.c - dbthrottle class: a pool's classes (guaranteed shares, priority, per-class wait
 * and queue cap, the aging bound), defined by the operator in Redis through admin.lua, and
 * listed with what each holds and waits for. */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle class POOL [--queries | --connections]\n"
    "       dbthrottle class POOL NAME --share PERCENT [--priority N] [--wait DURATION]\n"
    "                                  [--queue-cap N] [--default] [--aging DURATION]\n"
    "       dbthrottle class POOL NAME --clear\n"
    "       dbthrottle class POOL --clear\n"
    "       dbthrottle class POOL --aging DURATION\n"
    "       (each also takes --queries | --connections, --redis URL, --key-prefix P)\n"
    "\n"
    "Lists or sets the pool's classes, for every worker at once (kept in Redis, no TTL; both\n"
    "kinds unless one is named). A class under its guaranteed share of the limit is served\n"
    "first; idle capacity is borrowed by whoever waits; among classes at or over their share,\n"
    "the higher priority first, then FIFO; a waiter older than the aging bound is served next\n"
    "whatever its class. Without a NAME or an option: the classes, their use and their waiters.\n"
    "\n"
    "  --share P       guaranteed share of the limit: 75% or 75 (0 to 100; all sum to <= 100);\n"
    "                  needed to define a class, kept when a defined one is changed\n"
    "  --priority N    who borrows first beyond the shares: -1000 to 1000, larger first (0)\n"
    "  --wait D        the class' wait timeout (500ms, 5s, 2m; none: the worker's own\n"
    "                  DBTHROTTLE_WAIT_TIMEOUT, the default)\n"
    "  --queue-cap N   at most N queued: one more is refused at once with 53300 (none: no cap)\n"
    "  --default       serve connections no rule names as this class (else the implicit\n"
    "                  class \"default\", share 0)\n"
    "  --aging D       the pool's aging bound (0 or none: no bound)\n"
    "  --clear         remove the class NAME, or without NAME every definition: one FIFO queue\n"
    "                  again (waiters of a removed class are served as the default class)\n";

/* What the command line asks for. */
typedef struct {
    const char *pool, *name;
    bool kinds[DBT_NKINDS];
    bool clear, is_default;
    bool has_share, has_priority, has_wait, has_cap, has_aging;
    int share, priority;
    long long wait_ms, cap; /* -1: none */
    long long aging_ms;
    cli_redis_opts ro;
} class_args;

/* "75%" or "75": a whole percent from 0 to 100. */
static bool parse_share(const char *text, int *out, char *err)
{
    static const char expected[] = "a whole percent from 0 to 100, such as 75%";
    size_t n = strlen(text);
    if (n && text[n - 1] == '%')
        n--;
    if (n == 0 || n > 3 || strspn(text, "0123456789") != n)
        return dbt_bad_value("--share", text, expected, err);
    int v = atoi(text);
    if (v > 100)
        return dbt_bad_value("--share", text, expected, err);
    *out = v;
    return true;
}

/* A whole number in [lo, hi], an optional sign first. */
static bool parse_int(const char *opt, const char *text, long long lo, long long hi,
                      const char *expected, long long *out, char *err)
{
    const char *p = text + (text[0] == '-' || text[0] == '+');
    size_t n = strlen(p);
    if (n == 0 || n > 10 || strspn(p, "0123456789") != n)
        return dbt_bad_value(opt, text, expected, err);
    long long v = strtoll(text, NULL, 10);
    if (v < lo || v > hi)
        return dbt_bad_value(opt, text, expected, err);
    *out = v;
    return true;
}

static bool is_none(const char *text)
{
    return strcmp(text, "none") == 0 || strcmp(text, "-") == 0;
}

/* Parses the command line; returns -1 to go on, else the exit code. */
static int parse_args(class_args *a, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"share", required_argument, NULL, 's'},
        {"priority", required_argument, NULL, 'P'},
        {"wait", required_argument, NULL, 'w'},
        {"queue-cap", required_argument, NULL, 'Q'},
        {"default", no_argument, NULL, 'd'},
        {"aging", required_argument, NULL, 'a'},
        {"clear", no_argument, NULL, 'x'},
        {"queries", no_argument, NULL, 'q'},
        {"connections", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    char err[DBT_ERRLEN];
    bool q = false, cn = false;
    int opt;
    int64_t ms;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (!parse_share(optarg, &a->share, err))
                return cli_usage_error("class", "%s", err);
            a->has_share = true;
            break;
        case 'P': {
            long long v;
            if (!parse_int("--priority", optarg, -1000, 1000,
                           "a whole number from -1000 to 1000 (larger is served first)", &v, err))
                return cli_usage_error("class", "%s", err);
            a->priority = (int)v;
            a->has_priority = true;
            break;
        }
        case 'w':
            if (!dbt_parse_duration("--wait", optarg, true, true, &ms, err))
                return cli_usage_error("class", "%s", err);
            a->wait_ms = ms == DBT_FOREVER ? -1 : ms;
            a->has_wait = true;
            break;
        case 'Q':
            a->cap = -1;
            if (!is_none(optarg) &&
                !parse_int("--queue-cap", optarg, 0, 1000000000,
                           "a whole number of waiters from 0 (never queue), or none", &a->cap, err))
                return cli_usage_error("class", "%s", err);
            a->has_cap = true;
            break;
        case 'd':
            a->is_default = true;
            break;
        case 'a':
            if (!dbt_parse_duration("--aging", optarg, true, true, &ms, err))
                return cli_usage_error("class", "%s", err);
            a->aging_ms = ms == DBT_FOREVER ? 0 : ms;
            a->has_aging = true;
            break;
        case 'x':
            a->clear = true;
            break;
        case 'q':
            q = true;
            break;
        case 'c':
            cn = true;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&a->ro, opt, optarg))
                break;
            return cli_option_error("class", longopts, argv);
        }
    }
    a->kinds[DBT_KIND_QUERY] = q || !cn;
    a->kinds[DBT_KIND_CONN] = cn || !q;
    int npos = argc - optind;
    if (npos < 1)
        return cli_usage_error("class", "missing POOL");
    if (npos > 2)
        return cli_usage_error("class", "unexpected argument '%s'", argv[optind + 2]);
    a->pool = argv[optind];
    a->name = npos == 2 ? argv[optind + 1] : NULL;
    bool sets = a->has_share || a->has_priority || a->has_wait || a->has_cap || a->is_default;
    if (a->name && strcmp(a->name, "-") == 0)
        return cli_usage_error("class", "class name \"-\" is reserved (it names the default "
                                        "class in a permit's id)");
    if (a->name && !dbt_class_name_ok(a->name)) {
        char shown[160];
        dbt_escape(a->name, 40, true, shown, sizeof shown);
        return cli_usage_error("class", "class name %s: 1 to 32 of a-z, 0-9, _ and -", shown);
    }
    if (a->clear && (sets || a->has_aging))
        return cli_usage_error("class", "--clear takes no other class option");
    if (!a->name && sets)
        return cli_usage_error("class", "--share, --priority, --wait, --queue-cap and --default "
                                        "need a class NAME");
    if (a->name && !a->clear && !sets)
        return cli_usage_error("class",
                               "nothing to do for class %s: give --share (and more) to "
                               "define it, or --clear",
                               a->name);
    return -1;
}

/* The operator's definition of `name` on semaphore k, or NULL (none, or only a worker's). */
static const dbt_status_class *defined(const dbt_status_kind *k, const char *name)
{
    if (k->classes_shipped)
        return NULL;
    for (int i = 0; i < k->nclasses; i++)
        if (strcmp(k->classes[i].name, name) == 0)
            return &k->classes[i];
    return NULL;
}

/* "-" for none, else the number, as admin.lua takes it. */
static void none_or(long long v, char *out, size_t cap)
{
    if (v < 0)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%lld", v);
}

/* How many classes the operator defined on semaphore k (not the implicit default class). */
static int operator_classes(const dbt_status_kind *k)
{
    int n = 0;
    for (int i = 0; !k->classes_shipped && i < k->nclasses; i++)
        n += !k->classes[i].implicit;
    return n;
}

/* Refuses class a->name beyond DBT_MAX_CLASSES on semaphore k: one line naming the pool, the cap
 * and the classes defined; returns EXIT_USAGE. */
static int cap_refused(const class_args *a, const dbt_status_kind *k, const char *pool_name,
                       const char *kn)
{
    if (k->classes_over)
        return cli_usage_error("class",
                               "pool %s %s: class %s not added: a pool has at most %d classes, "
                               "and its definitions in Redis hold more (written by hand or an "
                               "older version; only the first %d are in force): clear them all "
                               "first (dbthrottle class %s --clear)",
                               pool_name, kn, a->name, DBT_MAX_CLASSES, DBT_MAX_CLASSES, pool_name);
    char names[DBT_MAX_CLASSES * (DBT_CLASS_NAME_MAX + 2) + 1] = "";
    size_t len = 0;
    for (int i = 0; i < k->nclasses && len < sizeof names; i++)
        if (!k->classes[i].implicit)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                    k->classes[i].name);
    fprintf(stderr,
            "dbthrottle class: pool %s %s: class %s not added: a pool has at most %d classes, "
            "and these %d are defined: %s (remove one with dbthrottle class %s NAME --clear)\n",
            pool_name, kn, a->name, DBT_MAX_CLASSES, operator_classes(k), names, pool_name);
    return EXIT_USAGE;
}

/* Sets class a->name on one semaphore: the options given, the others kept from its definition.
 * Prints what was set; returns the exit code. */
static int set_one(dbt_redis *r, const dbt_config *cfg, const class_args *a, dbt_kind kind,
                   const dbt_status_kind *k, const char *pool_name)
{
    const dbt_status_class *old = defined(k, a->name);
    const char *kn = dbt_kind_name(kind);
    if (!old && !a->has_share)
        return cli_fail("class",
                        "pool %s %s: class %s is not defined: --share is needed to "
                        "define it",
                        pool_name, kn, a->name);
    /* The cap is admin.lua's to refuse too (atomically, whoever writes); said here first, with
     * the classes there are, as a usage error: nothing is written. */
    if (!old && (operator_classes(k) >= DBT_MAX_CLASSES || k->classes_over))
        return cap_refused(a, k, pool_name, kn);
    int share = a->has_share ? a->share : old->share;
    int priority = a->has_priority ? a->priority : old ? old->priority : 0;
    long long wait = a->has_wait ? a->wait_ms : old ? old->wait_ms : -1;
    long long cap = a->has_cap ? a->cap : old ? old->cap : -1;
    /* The sum is admin.lua's to refuse too; said here with the classes it adds up. */
    int sum = share;
    char parts[512];
    size_t len = (size_t)snprintf(parts, sizeof parts, "%s %d%%", a->name, share);
    for (int i = 0; !k->classes_shipped && i < k->nclasses; i++) {
        const dbt_status_class *c = &k->classes[i];
        if (strcmp(c->name, a->name) == 0 || (c->share == 0 && c->is_default))
            continue;
        sum += c->share;
        if (len < sizeof parts)
            len +=
                (size_t)snprintf(parts + len, sizeof parts - len, " + %s %d%%", c->name, c->share);
    }
    if (sum > 100)
        return cli_fail("class", "pool %s %s: shares would sum to %d%% (%s): at most 100%%",
                        pool_name, kn, sum, parts);
    char w[24], c[24], arg[128], err[DBT_ERRLEN];
    none_or(wait, w, sizeof w);
    none_or(cap, c, sizeof c);
    snprintf(arg, sizeof arg, "%s:%d:%d:%s:%s%s", a->name, share, priority, w, c,
             a->is_default ? ":default" : "");
    dbt_admin_reply res;
    if (!cli_admin(r, cfg, a->pool, kind, DBT_ADMIN_CLASS_SET, arg, &res, err))
        return cli_fail("class", "pool %s %s: %s", pool_name, kn, err);
    char g[64] = "", wd[40] = "the worker's wait timeout", cd[40] = "no queue cap";
    long long limit = cli_effective_limit(k);
    if (limit > 0) {
        long long gv = limit * share / 100;
        snprintf(g, sizeof g, " (%lld of the limit %lld)", share > 0 && gv < 1 ? 1 : gv, limit);
    }
    if (wait >= 0) {
        char d[24];
        cli_duration(wait, d, sizeof d);
        snprintf(wd, sizeof wd, "wait %s", d);
    }
    if (cap >= 0)
        snprintf(cd, sizeof cd, "queue cap %lld", cap);
    printf("pool %s %s: class %s %s: share %d%%%s, priority %d, %s, %s%s", pool_name, kn, a->name,
           old ? "changed" : "defined", share, g, priority, wd, cd,
           a->is_default ? ", the default class" : "");
    if (res.granted)
        printf("; %lld waiter%s granted at once", res.granted, res.granted == 1 ? "" : "s");
    printf("\n");
    return 0;
}

static int clear_one(dbt_redis *r, const dbt_config *cfg, const class_args *a, dbt_kind kind,
                     const dbt_status_kind *k, const char *pool_name)
{
    const char *kn = dbt_kind_name(kind);
    char err[DBT_ERRLEN];
    dbt_admin_reply res;
    if (a->name && !defined(k, a->name)) {
        /* defined on the other kind only: that one is cleared (cmd_class checked) */
        printf("pool %s %s: no class %s defined: nothing to remove\n", pool_name, kn, a->name);
        return 0;
    }
    if (!cli_admin(r, cfg, a->pool, kind, DBT_ADMIN_CLASS_CLEAR, a->name ? a->name : "*", &res,
                   err))
        return cli_fail("class", "pool %s %s: %s", pool_name, kn, err);
    if (a->name)
        printf("pool %s %s: class %s removed: its waiters are served as the default class",
               pool_name, kn, a->name);
    else
        printf("pool %s %s: every class definition removed: one FIFO queue%s", pool_name, kn,
               k->classes_shipped ? " (a worker's DBTHROTTLE_CLASSES apply again when shipped)"
                                  : "");
    if (res.granted)
        printf("; %lld waiter%s granted at once", res.granted, res.granted == 1 ? "" : "s");
    printf("\n");
    return 0;
}

static int aging_one(dbt_redis *r, const dbt_config *cfg, const class_args *a, dbt_kind kind,
                     const char *pool_name)
{
    const char *kn = dbt_kind_name(kind);
    char arg[24], err[DBT_ERRLEN];
    dbt_admin_reply res;
    snprintf(arg, sizeof arg, "%lld", a->aging_ms);
    if (!cli_admin(r, cfg, a->pool, kind, DBT_ADMIN_AGING, arg, &res, err))
        return cli_fail("class", "pool %s %s: %s", pool_name, kn, err);
    if (a->aging_ms > 0) {
        char d[24];
        cli_duration(a->aging_ms, d, sizeof d);
        printf("pool %s %s: aging bound %s: a waiter queued that long is served next whatever "
               "its class",
               pool_name, kn, d);
    } else {
        printf("pool %s %s: no aging bound", pool_name, kn);
    }
    if (res.granted)
        printf("; %lld waiter%s granted at once", res.granted, res.granted == 1 ? "" : "s");
    printf("\n");
    return 0;
}

/* The listing: per semaphore asked for, its classes and their use. */
static void list(const class_args *a, const cli_pool_view *v, const char *pool_name)
{
    for (int kind = 0; kind < DBT_NKINDS; kind++) {
        if (!a->kinds[kind])
            continue;
        const dbt_status_kind *k = &v->kind[kind];
        long long limit = cli_effective_limit(k);
        char lim[40] = "unknown";
        if (limit > 0)
            snprintf(lim, sizeof lim, "%lld", limit);
        if (!k->nclasses) {
            printf("pool %s %s: no classes defined (one FIFO queue)%s\n", pool_name,
                   dbt_kind_name((dbt_kind)kind), k->aging_ms > 0 ? "; an aging bound is set" : "");
            cli_render_classes_problem(stdout, k);
            continue;
        }
        printf("pool %s %s: limit %s, %lld holding, %lld waiting\n", pool_name,
               dbt_kind_name((dbt_kind)kind), lim, k->nholders, k->nwaiters);
        cli_render_classes_problem(stdout, k);
        cli_render_classes(stdout, k);
    }
}

int cmd_class(int argc, char **argv)
{
    class_args a = {.wait_ms = -1, .cap = -1};
    int rc = parse_args(&a, argc, argv);
    if (rc >= 0)
        return rc;
    dbt_config cfg;
    if (!cli_load_config("class", &a.ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("class", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    char err[DBT_ERRLEN], pool_name[256];
    dbt_escape(a.pool, 200, true, pool_name, sizeof pool_name);
    cli_pool_view v;
    rc = 0;
    /* The definitions as they are: to keep what an option does not change, and to say what is
     * wrong before anything is written. */
    if (!cli_view_pool(r, &cfg, a.pool, 0, &v, err)) {
        rc = cli_fail("class", "pool %s: %s", pool_name, err);
    } else {
        bool changes = a.name || a.clear || a.has_aging;
        bool anywhere = false; /* the class to clear is the operator's on some kind asked for */
        for (int kind = 0; kind < DBT_NKINDS; kind++)
            anywhere |= a.kinds[kind] && a.name && defined(&v.kind[kind], a.name);
        if (a.clear && a.name && !anywhere) {
            rc = cli_fail("class",
                          "pool %s: no class %s is defined by the operator (see dbthrottle "
                          "class %s)",
                          pool_name, a.name, pool_name);
            changes = false;
        }
        for (int kind = 0; kind < DBT_NKINDS && rc == 0 && changes; kind++) {
            if (!a.kinds[kind])
                continue;
            const dbt_status_kind *k = &v.kind[kind];
            if (a.clear)
                rc = clear_one(r, &cfg, &a, (dbt_kind)kind, k, pool_name);
            else if (a.name)
                rc = set_one(r, &cfg, &a, (dbt_kind)kind, k, pool_name);
            if (rc == 0 && a.has_aging)
                rc = aging_one(r, &cfg, &a, (dbt_kind)kind, pool_name);
        }
        if (!changes && rc == 0)
            list(&a, &v, pool_name);
        cli_view_free(&v);
    }
    if (rc == 0 && fflush(stdout) != 0)
        rc = cli_fail("class", "cannot write the output");
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
