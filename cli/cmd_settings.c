/* cmd_settings.c - dbthrottle set and dbthrottle settings: a pool's live settings, kept in Redis
 * by the operator and taken by every worker of the pool within a renewal, in place of its own
 * (docs/design.md, "Live settings per pool"). Each value is checked by the library's own parser
 * before it is written. */
#include "cli.h"
#include "settings.h"

#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char set_usage[] =
    "usage: dbthrottle set POOL KEY VALUE [--create]\n"
    "       dbthrottle set POOL KEY --clear\n"
    "       dbthrottle set POOL --clear-all\n"
    "\n"
    "Sets a live setting of POOL in Redis: every worker of the pool takes it within a renewal\n"
    "(a third of its lease) in place of its own value (environment or file), until it is\n"
    "cleared. KEY is a setting's file key or variable; live ones: %s. VALUE is checked as the\n"
    "library checks it (a bad one: one line, exit 2). A POOL Redis has never seen is refused\n"
    "unless --create. dbthrottle settings POOL lists them.\n"
    "\n"
    "  --clear         remove KEY's live value: the workers go back to their own\n"
    "  --clear-all     remove every live value of POOL\n"
    "  --create        a pool Redis has never seen\n"
    "  --redis URL     Redis to change (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

static const char settings_usage[] =
    "usage: dbthrottle settings POOL... [--json] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Lists each POOL's live settings (dbthrottle set) and their version: the values every\n"
    "worker of the pool uses in place of its own. A value the workers' parser refuses (set by\n"
    "hand in Redis) is listed as refused: the workers keep their own and log\n"
    "live_setting_refused. A pool with none says so. Then, for each live-able setting, the\n"
    "values in force in the pool's processes, where each came from and in how many.\n"
    "\n"
    "  --json          one JSON document: {\"pools\": [{\"pool\", \"live_settings\",\n"
    "                  \"settings_in_force\"}]}, as dbthrottle status --json has them\n"
    "  --redis URL     Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* Each live-able setting's values in force in the pool's processes, and where each came from
 * (in_force.c): "    on_redis_error       open (environment, 2 processes); closed (file, 1)". */
static void print_in_force(const cli_pool_view *v, const dbt_live *live)
{
    if (!v->nprocs) {
        printf("  in force: no process reports using the pool now\n");
        return;
    }
    printf("  in force in its %d process%s (value: where from, processes):\n", v->nprocs,
           v->nprocs == 1 ? "" : "es");
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        if (!s->live)
            continue;
        cli_in_force g[8];
        int n = cli_in_force_of(v, live, s, g, 8);
        printf("    %-20s", s->key);
        for (int i = 0; i < n; i++) {
            char shown[300];
            cli_escape_name(g[i].value, 120, false, shown, sizeof shown);
            printf("%s%s: %s, %d", i ? "; " : " ", shown, g[i].from, g[i].processes);
        }
        putchar('\n');
    }
}

/* The live settings' keys, for the usage and the messages: "wait_timeout, ...". */
static void live_keys(char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (s->live) {
            int w = snprintf(out + len, cap - len, "%s%s", len ? ", " : "", s->key);
            if (w > 0 && (size_t)w < cap - len)
                len += (size_t)w;
        }
}

/* GET of the pool's settings key. */
typedef struct {
    const char *key;
} get_op;

static redisReply *run_get(dbt_redis *r, void *arg, char *err)
{
    const char *argv[] = {"GET", ((get_op *)arg)->key};
    return dbt_redis_command(r, 2, argv, NULL, err);
}

/* Whether the pool's settings text in Redis has a line for key (any line when key is NULL, or
 * any text that is not live settings at all), as Redis holds it now: a --clear of what is not
 * there writes nothing and says so (it said "cleared"), and one written by hand, even of a key
 * that is not live (the workers refuse it), can be cleared. -1: not read. */
static int live_is_set(const dbt_config *cfg, dbt_redis *r, const char *pool, const char *key,
                       char *err)
{
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, pool)) {
        snprintf(err, DBT_ERRLEN, "out of memory");
        return -1;
    }
    get_op o = {.key = k.settings};
    redisReply *rep = dbt_route_run_for(cfg, r, k.base, run_get, &o, err);
    dbt_keys_free(&k);
    if (!rep)
        return -1;
    int set = 0;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, DBT_ERRLEN, "%s", rep->str);
        set = -1;
    } else if (rep->type == REDIS_REPLY_STRING) {
        const char *text = rep->str, *nl = strchr(text, '\n');
        bool versioned = text[0] == 'v' && strspn(text + 1, "0123456789") > 0;
        if (!key)
            set = !versioned || (nl && nl[1]); /* a line after the version, or not live text */
        for (const char *line = nl ? nl + 1 : NULL; key && line && *line;) {
            size_t n = strlen(key);
            if (strncmp(line, key, n) == 0 && line[n] == '=')
                set = 1;
            line = strchr(line, '\n');
            line = line ? line + 1 : NULL;
        }
    }
    freeReplyObject(rep);
    return set;
}

int cmd_set(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"clear", no_argument, NULL, 'x'},
        {"clear-all", no_argument, NULL, 'X'},
        {"create", no_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool clear = false, clear_all = false, create = false;
    char keys[256];
    live_keys(keys, sizeof keys);
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'x':
            clear = true;
            break;
        case 'X':
            clear_all = true;
            break;
        case 'N':
            create = true;
            break;
        case 'h':
            printf(set_usage, keys);
            return 0;
        default:
            if (!cli_redis_opt(&ro, opt, optarg))
                return cli_option_error("set", longopts, argv);
        }
    }
    int npos = argc - optind;
    char **pos = argv + optind;
    int want = clear_all ? 1 : clear ? 2 : 3;
    if (clear && clear_all)
        return cli_usage_error("set", "--clear and --clear-all exclude each other");
    if (clear && npos == 3)
        return cli_usage_error("set", "--clear takes no VALUE (set POOL KEY --clear)");
    if (clear && npos == 1)
        return cli_usage_error("set", "which KEY to clear? (or --clear-all for every one)");
    if (npos != want)
        return cli_usage_error("set", npos < want ? "which %s?" : "too many arguments (%s)",
                               clear_all ? "POOL"
                               : clear   ? "POOL and KEY"
                                         : "POOL, KEY and VALUE");
    const char *pool = pos[0];
    const dbt_setting *row = NULL;
    char stored[256] = "";
    bool short_lease = false; /* under 4 s: workers with the default server check refuse it */
    char arg[1200];
    if (clear_all) {
        snprintf(arg, sizeof arg, "*");
    } else {
        row = dbt_live_find(pos[1]);
        /* --clear takes a key that is not live too, written into Redis by hand (refused by
         * the workers): a word, as admin.lua reads a key; refused below when it is not there */
        bool word = strlen(pos[1]) <= 64 &&
                    strspn(pos[1], "abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == strlen(pos[1]);
        if (!row && !(clear && word && pos[1][0])) {
            char name[120];
            cli_escape_name(pos[1], 80, true, name, sizeof name);
            return cli_usage_error("set", "%s is not a live setting (live: %s)", name, keys);
        }
        if (clear) {
            snprintf(arg, sizeof arg, "%s", row ? row->key : pos[1]);
        } else {
            /* as the file's grammar reads a value: without the blanks around it */
            char value[1024];
            const char *v0 = pos[2] + strspn(pos[2], " \t");
            size_t vlen = strlen(v0);
            while (vlen && (v0[vlen - 1] == ' ' || v0[vlen - 1] == '\t'))
                vlen--;
            snprintf(value, sizeof value, "%.*s", (int)vlen, v0);
            char err[DBT_ERRLEN];
            dbt_config scratch;
            memset(&scratch, 0, sizeof scratch);
            bool ok = strchr(value, '\n') == NULL && strlen(value) < 1000 &&
                      row->kind->parse(row, &scratch, value, err);
            if (ok) /* what the workers will read, as check shows it ("0ms", not "0") */
                row->kind->show(row, &scratch, stored, sizeof stored);
            short_lease =
                ok && row->field == offsetof(dbt_config, lease_ms) && scratch.lease_ms < 4000;
            dbt_settings_release(&scratch);
            if (!ok) {
                if (strchr(value, '\n') || strlen(value) >= 1000)
                    snprintf(err, sizeof err, "%s: a value of one line under 1000 bytes", row->env);
                return cli_usage_error("set", "%s", err);
            }
            snprintf(arg, sizeof arg, "%s=%s", row->key, value);
        }
    }
    dbt_config cfg;
    if (!cli_load_config("set", &ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("set", &cfg);
    int rc = 0;
    char err[DBT_ERRLEN];
    if (!r) {
        rc = 1;
    } else if ((rc = cli_refuse_unknown_pool("set", r, &cfg, pool, create)) >= 0) {
        /* refused, said */
    } else {
        rc = 0;
        dbt_admin_reply res;
        dbt_admin_op op = clear || clear_all ? DBT_ADMIN_SETTING_CLEAR : DBT_ADMIN_SETTING_SET;
        char name[220];
        cli_escape_name(pool, 200, true, name, sizeof name);
        int was_set = clear || clear_all ? live_is_set(&cfg, r, pool, clear ? arg : NULL, err) : 1;
        if (was_set < 0)
            rc = cli_fail("set", "pool %s: %s", name, err);
        else if (was_set == 0 && clear && !row) {
            char key[120];
            cli_escape_name(pos[1], 80, true, key, sizeof key);
            rc = cli_usage_error("set", "%s is not a live setting (live: %s)", key, keys);
        } else if (was_set == 0 && clear)
            printf("pool %s: %s is not set live: nothing cleared (its workers use their own)\n",
                   name, row->key);
        else if (was_set == 0)
            printf("pool %s: no live setting: nothing cleared (its workers use their own)\n", name);
        else if (!cli_admin(r, &cfg, pool, DBT_KIND_QUERY, op, arg, &res, err))
            rc = cli_fail("set", "pool %s: %s", name, err);
        else if (clear_all)
            printf("pool %s: every live setting cleared: its workers use their own within a "
                   "renewal\n",
                   name);
        else if (clear && !row)
            printf("pool %s: %s cleared (not a live setting: its workers refused it)\n", name, arg);
        else if (clear)
            printf("pool %s: %s cleared: its workers use their own within a renewal (a lease while "
                   "idle)\n",
                   name, row->key);
        else
            printf("pool %s: %s = %s, live: its workers use it within a renewal (a lease while "
                   "idle)\n%s",
                   name, row->key, stored,
                   short_lease ? "  note: a worker refuses a live lease shorter than its own and "
                                 "under 4 x its connections' server check interval (auto: min(1s, "
                                 "its own lease/4), so 4s at the default): dbthrottle status names "
                                 "those that refuse it; set DBTHROTTLE_SERVER_CHECK_INTERVAL in "
                                 "them first\n"
                               : "");
    }
    if (fflush(stdout) != 0)
        rc = cli_fail("set", "cannot write the output");
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}

/* --json: a pool that could not be read, {"pool", "error"} (the n-th entry of the list). */
static void json_pool_error(int n, const char *pool, const char *err)
{
    fputs(n ? ",{\"pool\":" : "{\"pool\":", stdout);
    cli_json_str(stdout, pool);
    fputs(",\"error\":", stdout);
    cli_json_str(stdout, err);
    fputc('}', stdout);
}

int cmd_settings(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"json", no_argument, NULL, 'j'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool json = false;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(settings_usage, stdout);
            return 0;
        }
        if (opt == 'j') {
            json = true;
            continue;
        }
        if (!cli_redis_opt(&ro, opt, optarg))
            return cli_option_error("settings", longopts, argv);
    }
    if (optind == argc)
        return cli_usage_error("settings", "which POOL?");
    dbt_config cfg;
    /* --json: a document that says what went wrong, never an empty output (as status --json) */
    if (!cli_load_config("settings", &ro, &cfg)) {
        if (json)
            puts("{\"error\":\"a bad setting (see the message on stderr)\"}");
        return 1;
    }
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    if (!r) {
        if (json) {
            fputs("{\"error\":", stdout);
            cli_json_str(stdout, err);
            puts("}");
        }
        dbt_config_free(&cfg);
        return cli_fail("settings", "%s", err);
    }
    int rc = 0, listed = 0;
    if (json)
        fputs("{\"pools\":[", stdout);
    for (int i = optind; i < argc; i++) {
        char name[220];
        cli_escape_name(argv[i], 200, true, name, sizeof name);
        dbt_keys k;
        if (!dbt_keys_init(&k, cfg.key_prefix, argv[i])) {
            rc = cli_fail("settings", "out of memory");
            break;
        }
        get_op o = {.key = k.settings};
        redisReply *rep = dbt_route_run_for(&cfg, r, k.base, run_get, &o, err);
        dbt_keys_free(&k);
        if (!rep || (rep->type == REDIS_REPLY_NIL && cli_pool_seen(r, &cfg, argv[i], err) == 0)) {
            /* No settings and no key at all: a typo, not a pool without live settings. */
            char why[DBT_ERRLEN + CLI_KNOWN_POOLS_LEN];
            if (rep) {
                char known[CLI_KNOWN_POOLS_LEN];
                cli_known_pools(r, &cfg, known, sizeof known);
                snprintf(why, sizeof why,
                         "no worker has used it and nothing is set for it under this key prefix "
                         "(%.100s; a typo?); %s",
                         cfg.key_prefix, known);
            } else {
                snprintf(why, sizeof why, "%s", err);
            }
            rc = cli_fail("settings", "pool %s: %s", name, why);
            if (json)
                json_pool_error(listed++, argv[i], why);
            if (rep)
                freeReplyObject(rep);
            continue;
        }
        cli_pool_view view;
        bool viewed = cli_view_pool(r, &cfg, argv[i], 1, &view, err);
        if (json) { /* what status --json says of the pool's settings */
            if (viewed) {
                fputs(listed++ ? ",{\"pool\":" : "{\"pool\":", stdout);
                cli_json_str(stdout, argv[i]);
                cli_json_settings(stdout, &view);
                fputc('}', stdout);
                cli_view_free(&view);
            } else {
                rc = cli_fail("settings", "pool %s: %s", name, err);
                json_pool_error(listed++, argv[i], err);
            }
            freeReplyObject(rep);
            continue;
        }
        dbt_live live;
        char refused[512];
        bool any = rep->type == REDIS_REPLY_STRING &&
                   dbt_live_parse(rep->str, &live, refused, sizeof refused);
        if (!any && rep->type == REDIS_REPLY_ERROR) {
            rc = cli_fail("settings", "pool %s: %s", name, rep->str); /* WRONGTYPE, NOPERM */
        } else if (!any && rep->type == REDIS_REPLY_STRING) {
            /* written by hand, or a version this one cannot read: the workers apply none of it */
            char text[200];
            cli_escape_name(rep->str, 80, true, text, sizeof text);
            printf("pool %s: the settings key holds what is not live settings, which its workers "
                   "apply none of: %s (dbthrottle set %s --clear-all removes it)\n",
                   name, text, name);
        } else if (!any) {
            printf("pool %s: no live setting: its workers use their own values\n", name);
        } else {
            printf("pool %s: live settings, version %lld\n", name, live.version);
            int n = 0;
            for (const dbt_setting *s = dbt_settings; s->key; s++)
                if (live.set[s - dbt_settings]) {
                    char shown[256];
                    s->kind->show(s, &live.cfg, shown, sizeof shown);
                    printf("  %-20s %s\n", s->key, shown);
                    n++;
                }
            if (!n && !refused[0])
                printf("  (none: its workers use their own values)\n");
            if (refused[0]) {
                char text[600];
                cli_escape_name(refused, 500, false, text, sizeof text);
                printf("  refused by the workers' parser (they keep their own): %s\n", text);
            }
        }
        if (viewed)
            print_in_force(&view, any ? &live : NULL);
        else { /* an answer without them is not a whole one (json_pool_error's, in --json) */
            printf("  in force in its processes: not known (%s)\n", err);
            rc = cli_fail("settings", "pool %s: the values in force are not known: %s", name, err);
        }
        if (viewed)
            cli_view_free(&view);
        if (any)
            dbt_live_free(&live);
        freeReplyObject(rep);
    }
    if (json)
        fputs("]}\n", stdout);
    if (fflush(stdout) != 0)
        rc = cli_fail("settings", "cannot write the output");
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
