/* adapt_pg.c - dbthrottle adapt's readings of PostgreSQL (see adapt_pg.h). */
#include "adapt_pg.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cli_pg {
    char *conninfo;
    PGconn *conn;
};

/* One round trip. The controller's own backend is left out of the counts; pg_stat_activity and
 * pg_stat_database are read in one statement (autocommit: a fresh statistics snapshot each
 * time). A replica that reports no lag (idle, or too old to say) counts as 0. */
static const char sample_sql[] =
    "SELECT count(*),"
    " count(*) FILTER (WHERE wait_event_type IS NULL),"
    " count(*) FILTER (WHERE wait_event_type IN ('Lock', 'LWLock')),"
    " count(*) FILTER (WHERE wait_event_type = 'IO'),"
    " (SELECT xact_commit + xact_rollback FROM pg_stat_database"
    "   WHERE datname = current_database()),"
    " (SELECT CASE WHEN count(*) = 0 THEN -1"
    "   ELSE coalesce(max(extract(epoch FROM replay_lag)), 0) END FROM pg_stat_replication)"
    " FROM pg_stat_activity WHERE backend_type = 'client backend'"
    " AND datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()";

cli_pg *cli_pg_new(const char *conninfo)
{
    cli_pg *p = calloc(1, sizeof *p);
    if (!p || !(p->conninfo = strdup(conninfo ? conninfo : ""))) {
        free(p);
        return NULL;
    }
    return p;
}

void cli_pg_free(cli_pg *p)
{
    if (!p)
        return;
    if (p->conn)
        PQfinish(p->conn);
    free(p->conninfo);
    free(p);
}

/* libpq's message, on one line (it may hold several, ending in a newline). */
static void one_line(const char *msg, char *err, size_t cap)
{
    snprintf(err, cap, "%s", msg && *msg ? msg : "unknown error");
    for (char *c = err; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = (c[1] ? ' ' : '\0');
}

static bool connect_db(cli_pg *p, char *err, size_t cap)
{
    /* A connect that hangs must not stall the controller's loop for the kernel's TCP timeout:
     * 5 s unless the conninfo says otherwise (its values come after, and win); the name makes
     * the controller's session plain in pg_stat_activity. */
    const char *const keys[] = {"connect_timeout", "application_name", "dbname", NULL};
    const char *const values[] = {"5", "dbthrottle-adapt", p->conninfo, NULL};
    p->conn = PQconnectdbParams(keys, values, 1);
    if (!p->conn) {
        snprintf(err, cap, "PostgreSQL: out of memory");
        return false;
    }
    if (PQstatus(p->conn) != CONNECTION_OK) {
        char msg[512];
        one_line(PQerrorMessage(p->conn), msg, sizeof msg);
        snprintf(err, cap, "PostgreSQL: %s", msg);
        PQfinish(p->conn);
        p->conn = NULL;
        return false;
    }
    return true;
}

static double number_at(const PGresult *r, int col)
{
    if (PQgetisnull(r, 0, col))
        return -1;
    return strtod(PQgetvalue(r, 0, col), NULL);
}

bool cli_pg_sample_now(cli_pg *p, cli_pg_sample *s, char *err, size_t cap)
{
    *s = (cli_pg_sample){-1, -1, -1, -1, -1, -1};
    if (!p->conn && !connect_db(p, err, cap))
        return false;
    PGresult *r = PQexec(p->conn, sample_sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 6) {
        char msg[512];
        one_line(PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r) : PQerrorMessage(p->conn),
                 msg, sizeof msg);
        snprintf(err, cap, "PostgreSQL: %s", msg);
        PQclear(r);
        /* connect afresh next time: a broken connection does not mend itself */
        PQfinish(p->conn);
        p->conn = NULL;
        return false;
    }
    s->active = (int)number_at(r, 0);
    s->cpu_active = (int)number_at(r, 1);
    s->lock_waiting = (int)number_at(r, 2);
    s->io_waiting = (int)number_at(r, 3);
    s->xacts = number_at(r, 4);
    s->repl_lag_s = number_at(r, 5);
    PQclear(r);
    return true;
}

/* One host of a host list: a socket directory, localhost or a loopback address. */
static bool host_is_local(const char *h, size_t n)
{
    if (n == 0 || h[0] == '/' || h[0] == '@')
        return true;
    if ((n == 9 && strncmp(h, "localhost", 9) == 0) || (n == 3 && strncmp(h, "::1", 3) == 0))
        return true;
    return n > 4 && strncmp(h, "127.", 4) == 0;
}

/* Every host of a comma-separated list is local; else the first one that is not, in host. */
static bool list_is_local(const char *list, char *host, size_t cap)
{
    for (const char *h = list;;) {
        size_t n = strcspn(h, ",");
        if (!host_is_local(h, n)) {
            snprintf(host, cap, "%.*s", (int)n, h);
            return false;
        }
        if (!h[n])
            return true;
        h += n + 1;
    }
}

int cli_pg_is_local(const char *conninfo, char *host, size_t host_cap, char *err, size_t err_cap)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo ? conninfo : "", &perr);
    if (!opts) {
        char msg[512];
        one_line(perr ? perr : "out of memory", msg, sizeof msg);
        snprintf(err, err_cap, "%s", msg);
        PQfreemem(perr);
        return -1;
    }
    const char *h = NULL, *addr = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (o->val && o->val[0] && strcmp(o->keyword, "host") == 0)
            h = o->val;
        else if (o->val && o->val[0] && strcmp(o->keyword, "hostaddr") == 0)
            addr = o->val;
    }
    /* what the conninfo leaves out comes from the environment, as libpq does */
    if (!h && !addr) {
        h = getenv("PGHOST");
        addr = getenv("PGHOSTADDR");
    }
    /* hostaddr, when given, is where libpq connects (host only names it for TLS) */
    int local = list_is_local(addr && *addr ? addr : (h ? h : ""), host, host_cap);
    PQconninfoFree(opts);
    return local;
}
