/* conns.c - the connections the program has on a pool, for dbthrottle clients (PgBouncer's SHOW
 * CLIENTS): every connection the library knows, idle ones too, with its state, application and
 * server. The interposer tells the pool of each connection once it has chosen the connection's pool
 * (its first command) and again at PQfinish; each state is read from the pool's own slots when the
 * process reports (registry.c), so no command pays anything for this. A change in the set of
 * connections is reported within DBT_DOING_REPORT_US (renewer.c), not a heartbeat later. */
#include "conns.h"
#include "clock.h"
#include "fork.h"
#include "pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Connections a pool keeps by name; more are counted only (a program that leaks connections must
 * not make the library grow without bound). */
#define KNOWN_MAX 4096

struct dbt_known_conn {
    char id[24];
    char app[64];
    char server[128];
    bool exempt; /* the interposer said so (dbt_pool_conn_exempt) */
    int64_t opened_us;
    struct dbt_known_conn *next;
};

/* The set changed: reported within DBT_DOING_REPORT_US of the first change since the last report.
 */
static void note_change(dbt_pool *p)
{
    if (!p->known_changed)
        p->known_changed_us = dbt_now_us();
    p->known_changed = true;
}

void dbt_pool_conn_opened(dbt_pool *p, const char *conn, const char *app, const char *server)
{
    pthread_mutex_lock(&p->mu);
    note_change(p);
    if (p->nknown >= KNOWN_MAX) {
        p->known_untracked++;
    } else {
        struct dbt_known_conn *k = calloc(1, sizeof *k);
        if (k) {
            snprintf(k->id, sizeof k->id, "%s", conn);
            snprintf(k->app, sizeof k->app, "%s", app ? app : "");
            snprintf(k->server, sizeof k->server, "%s", server ? server : "");
            k->opened_us = dbt_now_us();
            k->next = p->known;
            p->known = k;
            p->nknown++;
        } else {
            p->known_untracked++;
        }
    }
    dbt_pool_report_soon(p);
    pthread_mutex_unlock(&p->mu);
}

void dbt_pool_conn_exempt(dbt_pool *p, const char *conn, bool exempt)
{
    pthread_mutex_lock(&p->mu);
    for (struct dbt_known_conn *k = p->known; k; k = k->next)
        if (strcmp(k->id, conn) == 0 && k->exempt != exempt) {
            k->exempt = exempt;
            note_change(p);
            dbt_pool_report_soon(p);
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

void dbt_pool_conn_closed(dbt_pool *p, const char *conn)
{
    pthread_mutex_lock(&p->mu);
    for (struct dbt_known_conn **at = &p->known; *at; at = &(*at)->next)
        if (strcmp((*at)->id, conn) == 0) {
            struct dbt_known_conn *k = *at;
            *at = k->next;
            free(k);
            p->nknown--;
            note_change(p);
            dbt_pool_report_soon(p);
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

void dbt_conns_free(dbt_pool *p)
{
    while (p->known) {
        struct dbt_known_conn *k = p->known;
        p->known = k->next;
        free(k);
    }
    p->nknown = 0;
    p->known_untracked = 0;
}

/* In a fork()ed child the parent's connections are the parent's: the child reports its own. */
static void after_fork(dbt_pool *p)
{
    dbt_conns_free(p);
    p->known_changed = false;
    p->known_sent_digest = 0;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}

/* What conn k does now, from the slots of the pool that name it. p->mu held. */
static void state_of(const dbt_pool *p, const struct dbt_known_conn *k, int64_t now,
                     dbt_client_row *r)
{
    snprintf(r->state, sizeof r->state, "%s", k->exempt ? DBT_CLIENT_EXEMPT : DBT_CLIENT_IDLE);
    r->for_ms = -1;
    for (const struct dbt_slot *s = p->slots; s; s = s->next) {
        if (s->orphan || s->gen != p->gen || s->kind != DBT_KIND_QUERY || strcmp(s->conn, k->id))
            continue;
        const char *st;
        int64_t since;
        if (s->state == SLOT_HELD && s->parked) {
            st = DBT_CLIENT_KEPT;
            since = s->parked_us;
        } else if (s->state == SLOT_HELD && s->idle_since_us) {
            st = DBT_CLIENT_IDLE_TX;
            since = s->idle_since_us;
        } else if (s->state == SLOT_HELD) {
            st = DBT_CLIENT_RUNNING;
            since = s->doing_since_us ? s->doing_since_us : s->t_grant_us;
        } else if (s->state == SLOT_PENDING || s->state == SLOT_QUEUED) {
            st = DBT_CLIENT_WAITING;
            since = s->t_request_us;
        } else {
            continue;
        }
        snprintf(r->state, sizeof r->state, "%s", st);
        r->for_ms = since > 0 && since <= now ? (now - since) / 1000 : -1;
        return;
    }
}

/* How many connections a look at their states (dbt_conns_look) covers: a program with thousands
 * costs the renewer no more than this per look. */
#define LOOK_MAX 256
/* How many a report looks at for the busy ones to show first (the newest: the list is newest
 * first); the others count in its total. */
#define FORMAT_LOOK_MAX 1024

/* A digest of the connections' states now, and whether any is busy (not idle). p->mu held. */
static uint64_t digest(const dbt_pool *p, int64_t now, bool *busy)
{
    uint64_t h = 1469598103934665603ULL;
    *busy = false;
    int n = 0;
    for (const struct dbt_known_conn *k = p->known; k && n < LOOK_MAX; k = k->next, n++) {
        dbt_client_row r;
        state_of(p, k, now, &r);
        /* an exempt one changes state by the interposer's word only (note_change): not looked at
         * again each second */
        *busy = *busy ||
                (strcmp(r.state, DBT_CLIENT_IDLE) != 0 && strcmp(r.state, DBT_CLIENT_EXEMPT) != 0);
        for (const char *c = k->id; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        for (const char *c = r.state; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;
    }
    return h;
}

void dbt_conns_look(dbt_pool *p, int64_t now, bool *busy)
{
    bool busy_now;
    uint64_t d = digest(p, now, &busy_now);
    if (d != p->known_sent_digest)
        note_change(p);
    *busy = busy_now || p->known_sent_busy;
}

bool dbt_conns_format(dbt_pool *p, char *out, size_t cap)
{
    int64_t now = dbt_now_us();
    dbt_client_row *rows = calloc(DBT_CLIENTS_SHOWN, sizeof *rows);
    if (!rows)
        return false;
    /* The busy ones first, then the idle, up to DBT_CLIENTS_SHOWN: a process with hundreds of
     * idle connections still shows the one that waits. */
    int n = 0;
    for (int pass = 0; pass < 2 && n < DBT_CLIENTS_SHOWN; pass++) {
        int looked = 0; /* the lock is held: a program with thousands costs no more than this */
        for (const struct dbt_known_conn *k = p->known;
             k && n < DBT_CLIENTS_SHOWN && looked < FORMAT_LOOK_MAX; k = k->next, looked++) {
            dbt_client_row r = {0};
            state_of(p, k, now, &r);
            bool idle = strcmp(r.state, DBT_CLIENT_IDLE) == 0;
            if (idle != (pass == 1))
                continue;
            snprintf(r.conn, sizeof r.conn, "%s", k->id);
            snprintf(r.app, sizeof r.app, "%s", k->app);
            snprintf(r.server, sizeof r.server, "%s", k->server);
            r.age_ms = (now - k->opened_us) / 1000;
            rows[n++] = r;
        }
    }
    bool ok = n == 0 && p->known_untracked == 0
                  ? (out[0] = '\0', true)
                  : dbt_format_clients(rows, n, p->nknown + p->known_untracked, out, cap);
    free(rows);
    p->known_changed = false;
    p->known_sent_digest = digest(p, now, &p->known_sent_busy);
    return ok;
}
