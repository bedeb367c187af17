/* conn_registry.h - what the throttle knows about each PGconn, keyed by its pointer.
 *
 * Nothing outlives its PGconn: an entry is made when a connection first needs the throttle and
 * removed by PQfinish. libpq lets one thread use a PGconn at a time, so an entry's fields need no
 * lock of their own; only the map does. */
#ifndef DBT_CONN_REGISTRY_H
#define DBT_CONN_REGISTRY_H

#include "conn_state.h"
#include "sem_client.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dbt_conn {
    const void *pg;            /* the PGconn */
    dbt_pool *pool;            /* NULL until the first command */
    dbt_conn_state state;      /* its permits (conn_state.c) */
    bool checked_exempt;       /* DBTHROTTLE_EXEMPT was evaluated for this connection */
    bool exempt;               /* it matched: this connection never takes a permit */
    long long exempt_live;     /* the pool's live settings' version it was decided by (0: none) */
    char exempt_rule[96];      /* the pattern that matched, for the trace */
    char id[24];               /* "c<N>": names the connection in the trace */
    int watch_cell;            /* session_watch.c's cell while it has one (0: none) */
    char *refusal;             /* the last refusal's message (PQerrorMessage while state.refused) */
    const char *refusal_state; /* its SQLSTATE: 53300, or 57014 when a cancel ended the wait */
    struct dbt_held *held;     /* commands held while their permit is awaited (held.c), or NULL */
    /* Classes and weights (throttle.c): the connection's class, decided as the exemption is
     * (once, and again when its pool's live settings changed: "-" the default class; NULL: the
     * process has no class setting, nor the pool live rules), and what DBTHROTTLE_WEIGHTS
     * matches a command's connection on. */
    bool checked_class;
    long long class_live; /* the live settings' version it was decided by (0: none) */
    const char *klass;    /* klass_buf, or NULL */
    char klass_buf[DBT_CLASS_NAME_MAX + 1];
    bool ident_known;
    char app[256]; /* application_name when first needed ("" none) */
    bool has_app;
    struct dbt_prepared *prepared; /* prepared statements' texts (prepared.c), or NULL */
    struct dbt_conn *next;
} dbt_conn;

/* held.c keeps the commands held on a connection in its entry (`held`): the registry ends them
 * through these, set once by held.c before it makes the first: `free` with the entry, and
 * `after_fork` in a child after fork(), for each entry. */
typedef struct {
    void (*free)(struct dbt_held *h);
    void (*after_fork)(struct dbt_held *h);
} dbt_conn_held_ops;
void dbt_conn_set_held_ops(const dbt_conn_held_ops *ops);

/* The entry of pg, made when `create` (NULL when out of memory or not found). */
dbt_conn *dbt_conn_find(const void *pg, bool create);
/* Calls fn with the PGconn of the connection named `id` ("c<N>"), under the map's lock (so that
 * PQfinish cannot free it meanwhile: fn must do no I/O). False when there is none. */
bool dbt_conn_with_id(const char *id, void (*fn)(const void *pg, void *arg), void *arg);
/* Unlinks and returns pg's entry (the caller frees it with dbt_conn_free), or NULL. */
dbt_conn *dbt_conn_take(const void *pg);
void dbt_conn_free(dbt_conn *c);

/* Refused results: PGresults we made to carry a refusal, with their message and SQLSTATE
 * (a static string). */
void dbt_refused_add(const void *res, const char *msg, const char *sqlstate);
/* The message of a refused result, or NULL for any other result. Cheap when there are none.
 * *sqlstate (if not NULL) is set to its SQLSTATE. */
const char *dbt_refused_message(const void *res, const char **sqlstate);
void dbt_refused_forget(const void *res);

#endif
