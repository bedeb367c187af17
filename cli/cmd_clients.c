/* cmd_clients.c - dbthrottle clients: every connection the workers' library knows, idle ones too
 * (PgBouncer's SHOW CLIENTS), with its state, process, application and server, as each process
 * last reported them (sem's conns.c writes them beside the process' record). */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle clients [POOL...] [--json] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Lists the connections of the processes that use each POOL (every pool when none is\n"
    "named), idle ones too, as PgBouncer's SHOW CLIENTS does: the process (host, pid,\n"
    "program), CONN (the connection's name in the trace and in status' holders), STATE\n"
    "(running, idle_tx: idle in a transaction with its permit, kept: keeps a permit between\n"
    "commands, waiting, exempt: takes no permit, idle), FOR (how long in that state), AGE\n"
    "(since its first command), APPLICATION (application_name as the client sent it) and\n"
    "SERVER. As of each process' last report (REPORTED), FOR and AGE counted to now: a\n"
    "connection that opens or closes, and one whose state changes, are reported within about a\n"
    "second. A process reports at most 50 connections, the busy ones first, and says how many\n"
    "it has. A POOL Redis has no key of is an error (exit 1).\n"
    "\n"
    "  --json          one JSON document: {\"pools\": [{\"pool\", \"processes\": [{\"host\", "
    "\"pid\",\n"
    "                  \"program\", \"reported_ms_ago\", \"connections_known\", \"connections\":\n"
    "                  [{\"conn\", \"state\", \"for_ms\", \"age_ms\", \"application\",\n"
    "                  \"server\"}]}]}]} (for_ms -1: not known)\n"
    "  --redis URL     Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* One process' connections, read from the registry beside its record. */
typedef struct {
    const dbt_keys *k;
    const char *cid;
} clients_op;

static redisReply *run_hget(dbt_redis *r, void *arg, char *err)
{
    const clients_op *o = arg;
    char field[64];
    snprintf(field, sizeof field, "%s%s", o->cid, DBT_RECORD_CLIENTS_FIELD);
    const char *argv[] = {"HGET", o->k->procinfo, field};
    return dbt_redis_command(r, 3, argv, NULL, err);
}

/* Its rows (up to DBT_CLIENTS_SHOWN) and how many connections it has: -1 when it reported none
 * (an older library, or a process with no connection), -2 on an error (in err). */
static int read_clients(dbt_redis *r, const dbt_config *cfg, const dbt_keys *k, const char *cid,
                        dbt_client_row *rows, long *known, char *err)
{
    clients_op o = {.k = k, .cid = cid};
    redisReply *rep = dbt_route_run_for(cfg, r, k->base, run_hget, &o, err);
    if (!rep)
        return -2;
    int n = -1;
    if (rep->type == REDIS_REPLY_STRING)
        n = dbt_parse_clients(rep->str, rows, DBT_CLIENTS_SHOWN, known);
    else if (rep->type == REDIS_REPLY_ERROR)
        snprintf(err, DBT_ERRLEN, "HGET: %s", rep->str), n = -2;
    freeReplyObject(rep);
    return n;
}

static void text_row(const char *pool, const dbt_proc_record *p, const char *reported,
                     const dbt_client_row *c)
{
    char epool[90], host[70], prog[70], app[80], server[140], conn[30], for_text[24], age[24];
    cli_escape_name(pool, 40, false, epool, sizeof epool);
    cli_escape_name(p->host, 30, false, host, sizeof host);
    cli_escape_name(p->program, 20, false, prog, sizeof prog);
    cli_escape_name(c->app, 30, false, app, sizeof app);
    cli_escape_name(c->server, 60, false, server, sizeof server);
    cli_escape_name(c->conn, 20, false, conn, sizeof conn);
    if (c->for_ms >= 0)
        cli_duration(c->for_ms, for_text, sizeof for_text);
    else
        snprintf(for_text, sizeof for_text, "-");
    cli_duration(c->age_ms, age, sizeof age);
    cli_put_padded(stdout, epool, 16);
    putchar(' ');
    cli_put_padded(stdout, host, 14);
    printf(" %7ld ", p->pid);
    cli_put_padded(stdout, prog, 12);
    printf(" %-6s %-8s %8s %8s ", conn, c->state, for_text, age);
    cli_put_padded(stdout, app[0] ? app : "-", 18);
    putchar(' ');
    cli_put_padded(stdout, server, 26);
    printf(" %s\n", reported);
}

static void json_process(const dbt_proc_record *p, int64_t now_ms, const dbt_client_row *rows,
                         int n, long known, bool first)
{
    printf("%s{\"host\":", first ? "" : ",");
    cli_json_str(stdout, p->host);
    printf(",\"pid\":%ld,\"program\":", p->pid);
    cli_json_str(stdout, p->program);
    printf(",\"reported_ms_ago\":%lld,\"connections_known\":%ld,\"connections\":[",
           (long long)(now_ms - p->seen_ms), known);
    for (int i = 0; i < n; i++) {
        printf("%s{\"conn\":", i ? "," : "");
        cli_json_str(stdout, rows[i].conn);
        printf(",\"state\":");
        cli_json_str(stdout, rows[i].state);
        printf(",\"for_ms\":%lld,\"age_ms\":%lld,\"application\":", rows[i].for_ms, rows[i].age_ms);
        cli_json_str(stdout, rows[i].app);
        printf(",\"server\":");
        cli_json_str(stdout, rows[i].server);
        printf("}");
    }
    printf("]}");
}

/* The rows of one pool's processes. False with a message in err. */
static bool show_pool(dbt_redis *r, const dbt_config *cfg, const cli_pool_view *v, bool json,
                      bool first, char *err)
{
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, v->name))
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    dbt_client_row *rows = calloc(DBT_CLIENTS_SHOWN, sizeof *rows);
    bool ok = rows != NULL;
    if (!ok)
        snprintf(err, DBT_ERRLEN, "out of memory");
    if (ok && json) {
        printf("%s{\"pool\":", first ? "" : ",");
        cli_json_str(stdout, v->name);
        printf(",\"processes\":[");
    }
    bool first_proc = true;
    for (int i = 0; ok && i < v->nprocs; i++) {
        const dbt_proc_record *p = &v->procs[i];
        long known = 0;
        int n = read_clients(r, cfg, &k, p->cid, rows, &known, err);
        if (n == -2) {
            ok = false;
            break;
        }
        if (n < 0)
            n = 0, known = 0;
        /* counted to now, not to the report: a state that lasts is not reported again */
        int64_t ago = v->now_ms - p->seen_ms;
        for (int j = 0; j < n && ago > 0; j++) {
            if (rows[j].for_ms >= 0)
                rows[j].for_ms += ago;
            rows[j].age_ms += ago;
        }
        if (json) {
            json_process(p, v->now_ms, rows, n, known, first_proc);
            first_proc = false;
            continue;
        }
        char reported[32];
        cli_duration(v->now_ms - p->seen_ms, reported, sizeof reported);
        strncat(reported, " ago", sizeof reported - strlen(reported) - 1);
        for (int j = 0; j < n; j++)
            text_row(v->name, p, reported, &rows[j]);
        if (known > n)
            printf("%-16s %-14s %7ld (%ld more connection%s not reported: a process reports %d "
                   "at most)\n",
                   "", "", p->pid, known - n, known - n == 1 ? "" : "s", DBT_CLIENTS_SHOWN);
    }
    if (ok && json)
        printf("]}");
    free(rows);
    dbt_keys_free(&k);
    return ok;
}

int cmd_clients(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool json = false;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (opt == 'j') {
            json = true;
            continue;
        }
        if (!cli_redis_opt(&ro, opt, optarg))
            return cli_option_error("clients", longopts, argv);
    }
    dbt_config cfg;
    if (!cli_load_config("clients", &ro, &cfg))
        return 1;
    dbt_redis *r = NULL;
    cli_pool_view *v = NULL;
    int n = -1;
    double seconds = 0;
    char err[DBT_ERRLEN];
    char **names = argv + optind;
    int nnames = argc - optind;
    int rc = 0;
    if (!cli_read_pools(&cfg, &r, names, nnames, 0, &v, &n, &seconds, err)) {
        rc = cli_fail("clients", "%s", err);
        goto out;
    }
    for (int i = 0; i < nnames; i++) {
        int found = cli_pool_exists(r, &cfg, &v[i], err);
        if (found != 1) {
            char name[220];
            cli_escape_name(names[i], 200, true, name, sizeof name);
            rc = found < 0 ? cli_fail("clients", "pool %s: %s", name, err)
                           : cli_fail("clients", "no pool %s under this key prefix", name);
            goto out;
        }
    }
    if (json)
        printf("{\"pools\":[");
    else
        printf("%-16s %-14s %7s %-12s %-6s %-8s %8s %8s %-18s %-26s %s\n", "POOL", "HOST", "PID",
               "PROGRAM", "CONN", "STATE", "FOR", "AGE", "APPLICATION", "SERVER", "REPORTED");
    for (int i = 0; i < n; i++)
        if (!show_pool(r, &cfg, &v[i], json, i == 0, err)) {
            if (json)
                printf("]}\n");
            rc = cli_fail("clients", "pool %s: %s", v[i].name, err);
            goto out;
        }
    if (json)
        printf("]}\n");
    if (fflush(stdout) != 0)
        rc = cli_fail("clients", "cannot write the output");
out:
    if (v)
        cli_views_free(v, n);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
