/* server_check.c - asking the server to end a dead client's statement.
 *
 * A holder SIGKILLed inside a long statement gives its permit back by its lease, but the server
 * runs the statement on until it next writes to the client, which may be never (pg_sleep, a long
 * sort, a lock wait): its permit then admits another while it still runs, one more than the
 * limit. PostgreSQL 14+ polls a running backend's socket every client_connection_check_interval
 * and aborts when the client is gone; it is off by default, so each throttled connection asks
 * for it in its startup packet (docs/design.md, "A dead client's statement", says why the value
 * ends the statement before the lease can lapse, and what it does not cover).
 *
 * The startup options a connection sends are fixed once libpq has resolved its conninfo (its
 * string or arrays, a service file, PGOPTIONS), inside PGconn where we cannot write. So the
 * options are resolved first by a probe: the user's own call, made while PQconnectPoll fails at
 * once (no socket is opened), read back with PQconninfo; then the connection is made from every
 * resolved value with the user's options plus ours. A user's own value of the setting is kept.
 *
 * A server that refuses the setting (PostgreSQL 13 and older reject an unknown parameter at
 * startup; PgBouncer rejects the startup "options" unless ignore_startup_parameters names it) is
 * remembered by its name, with one warning, and its later connections go without: a blocking
 * connect is retried so at once (hooks_conn.c), an asynchronous one fails once. */
#include "server_check.h"

#include "lib.h"
#include "log.h"
#include "real.h"
#include "server_name.h"
#include "throttle.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SETTING "client_connection_check_interval"

static __thread int probing;   /* a probe is resolving options on this thread */
static __thread bool resolved; /* ... and reached PQconnectPoll: libpq took its options */
static __thread int rewriting; /* our own connect runs: the hooks it reaches pass it through */

bool dbt_check_probing(void)
{
    if (probing > 0)
        resolved = true;
    return probing > 0;
}

/* How many times text names the setting, in any case (PostgreSQL folds parameter names). */
static int times_named(const char *text)
{
    size_t n = sizeof SETTING - 1;
    int times = 0;
    for (const char *p = text; p && *p; p++)
        if (strncasecmp(p, SETTING, n) == 0)
            times++;
    return times;
}

static bool names_setting(const char *text)
{
    return times_named(text) > 0;
}

/* ---- servers that refused it ---------------------------------------------------------------- */

/* A handful is plenty: a process talks to few servers, and one that did not fit is only asked
 * again (and refuses again). Lock-free, so that a fork while another thread notes one leaves the
 * child nothing to wait for: a slot is claimed, written, then marked ready. */
#define NREFUSED 16
static char refused[NREFUSED][128];
static atomic_bool refused_ready[NREFUSED];
static atomic_int nclaimed;

static bool any_refused(void)
{
    return atomic_load(&nclaimed) > 0;
}

static bool refused_by(const char *server)
{
    int n = atomic_load(&nclaimed);
    for (int i = 0; i < n && i < NREFUSED; i++)
        if (atomic_load(&refused_ready[i]) && strcmp(refused[i], server) == 0)
            return true;
    return false;
}

/* Remembers server; true if it was not known (two threads noting one at once may both say so:
 * a second warning, no harm). */
static bool note_refusal(const char *server)
{
    if (refused_by(server))
        return false;
    /* A slot is claimed only while one is left: the count never passes NREFUSED (a count that
     * grew with every refusal past the table would wrap, and index it below zero). */
    int i = atomic_load(&nclaimed);
    while (i < NREFUSED && !atomic_compare_exchange_weak(&nclaimed, &i, i + 1))
        ;
    if (i < NREFUSED) {
        snprintf(refused[i], sizeof refused[0], "%s", server);
        atomic_store(&refused_ready[i], true);
    }
    return true;
}

/* ---- the connect ------------------------------------------------------------------------- */

/* Our option as it is appended, for the check interval ms: the exact text dbt_check_failed
 * looks for. */
static void our_option(int64_t ms, char *out, size_t cap)
{
    snprintf(out, cap, "-c " SETTING "=%" PRId64, ms);
}

/* Makes the connection from the probe's resolved options, with ours appended to options. NULL
 * when that cannot be done (the caller then connects as the user asked). */
static PGconn *connect_with(PQconninfoOption *opts, const char *ours, bool blocking)
{
    size_t n = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        n++;
    const char **keys = calloc(n + 2, sizeof *keys);
    const char **vals = calloc(n + 2, sizeof *vals);
    char *merged = NULL;
    PGconn *conn = NULL;
    if (!keys || !vals)
        goto out;
    size_t k = 0;
    bool had_options = false;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (strcmp(o->keyword, "options") == 0) {
            had_options = true;
            const char *user = o->val ? o->val : "";
            size_t len = strlen(user) + strlen(ours) + 2;
            if (!(merged = malloc(len)))
                goto out;
            snprintf(merged, len, "%s%s%s", user, user[0] ? " " : "", ours);
            keys[k] = o->keyword;
            vals[k++] = merged;
        } else if (o->val && o->val[0]) {
            keys[k] = o->keyword;
            vals[k++] = o->val;
        }
    }
    if (!had_options) /* a libpq without the keyword: leave the connection as it was */
        goto out;
    keys[k] = NULL;
    vals[k] = NULL;
    /* expand_dbname 0: dbname is the resolved name now, not a string to parse again. */
    rewriting++;
    if (blocking) {
        __typeof__(&PQconnectdbParams) real = DBT_REAL(PQconnectdbParams);
        conn = real ? real(keys, vals, 0) : NULL;
    } else {
        __typeof__(&PQconnectStartParams) real = DBT_REAL(PQconnectStartParams);
        conn = real ? real(keys, vals, 0) : NULL;
    }
    rewriting--;
out:
    free(merged);
    free(keys);
    free(vals);
    return conn;
}

PGconn *dbt_check_connect(dbt_check_open open, void *ctx, bool blocking)
{
    if (rewriting || probing)
        return open(ctx);
    const dbt_lib *lib = dbt_lib_get();
    int64_t ms = lib->active ? dbt_server_check_ms(&lib->cfg) : 0;
    __typeof__(&PQconninfo) conninfo = DBT_REAL(PQconninfo);
    __typeof__(&PQconninfoFree) conninfo_free = DBT_REAL(PQconninfoFree);
    __typeof__(&PQfinish) finish = DBT_REAL(PQfinish);
    if (ms <= 0 || !conninfo || !conninfo_free || !finish)
        return open(ctx);

    probing++;
    resolved = false;
    PGconn *probe = open(ctx);
    probing--;
    if (!probe)
        return open(ctx);
    /* Options libpq refused (a bad conninfo, an unknown service) never reach PQconnectPoll: the
     * user's own call then fails as libpq fails it, with libpq's message. */
    PQconninfoOption *opts = resolved ? conninfo(probe) : NULL;
    PGconn *conn = NULL;
    if (opts) {
        const char *user = NULL;
        for (PQconninfoOption *o = opts; o->keyword; o++)
            if (strcmp(o->keyword, "options") == 0)
                user = o->val;
        /* The server's name (a lookup, for a host name) only once one has refused. */
        char server[128] = "";
        if (any_refused())
            dbt_server_name(probe, server, sizeof server);
        if (!names_setting(user) && !refused_by(server)) {
            char ours[96];
            our_option(ms, ours, sizeof ours);
            conn = connect_with(opts, ours, blocking);
        }
        conninfo_free(opts);
    }
    finish(probe);
    if (conn && blocking && dbt_check_refused(conn)) {
        dbt_throttle_finish(conn); /* ours: the throttle forgets it */
        conn = NULL;               /* and the server is now known to refuse: asked without */
    }
    return conn ? conn : open(ctx);
}

/* Whether conn's options end with an option of ours: we append it, and only to options that do
 * not name the setting, so a connection of ours names it once, last (a user's lone
 * "-c client_connection_check_interval=N" reads as ours: refused, it is still refused alone). */
static bool carries_ours(PGconn *conn)
{
    __typeof__(&PQoptions) options = DBT_REAL(PQoptions);
    const char *opts = conn && options ? options(conn) : NULL;
    if (!opts)
        return false;
    static const char tail[] = "-c " SETTING "=";
    const char *at = strstr(opts, tail);
    if (!at || times_named(opts) != 1)
        return false;
    const char *digit = at + sizeof tail - 1;
    if (!isdigit((unsigned char)*digit))
        return false;
    while (isdigit((unsigned char)*digit))
        digit++;
    return *digit == '\0';
}

void dbt_check_failed(PGconn *conn)
{
    __typeof__(&PQerrorMessage) message = DBT_REAL(PQerrorMessage);
    const char *err = message && conn ? message(conn) : NULL;
    if (!err || !carries_ours(conn))
        return;
    /* PostgreSQL names the parameter in any language; PgBouncer speaks English only. */
    if (!names_setting(err) && !(strstr(err, "startup parameter") && strstr(err, "options")))
        return;
    char server[128];
    dbt_server_name(conn, server, sizeof server);
    if (!note_refusal(server))
        return;
    dbt_field f[] = {
        DBT_S("server", server),
        DBT_S("why", "the server refused " SETTING " in the startup options (PostgreSQL before "
                     "14, or a pooler that forwards no options): its connections go on without "
                     "it, so a killed client's statement may outlive its permit; "
                     "DBTHROTTLE_SERVER_CHECK_INTERVAL=off stops asking"),
    };
    dbt_log(DBT_LOG_WARN, "server_check_refused", f, sizeof f / sizeof *f);
}

bool dbt_check_refused(PGconn *conn)
{
    __typeof__(&PQstatus) status = DBT_REAL(PQstatus);
    if (!conn || !status || status(conn) != CONNECTION_BAD || !carries_ours(conn))
        return false;
    char server[128];
    dbt_server_name(conn, server, sizeof server);
    return refused_by(server);
}
