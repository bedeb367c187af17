/* conn_state.h - the permit state machine of one connection, with no libpq and no Redis.
 *
 * The hooks (through throttle.c) turn libpq's calls into the events below and gather the facts
 * libpq knows (transaction and pipeline status) into dbt_conn_facts; this module decides when a
 * connection takes a permit, keeps it, parks it, gives it back, takes a lost one again or is
 * refused. It reaches the semaphore only through a dbt_permit_ops table, so that a test can drive
 * it with a fake one (tests/unit/test_conn_state.c); throttle.c passes the table over
 * sem_client.h. docs/design.md ("The interposer") has the state table.
 *
 * One thread uses a connection at a time (libpq's rule), so a state needs no lock. */
#ifndef DBT_CONN_STATE_H
#define DBT_CONN_STATE_H

#include "keys.h"
#include "sem_client.h"

#include <stdbool.h>

/* PQtransactionStatus, in our words. */
typedef enum {
    DBT_TX_IDLE,    /* outside a transaction, no command running */
    DBT_TX_ACTIVE,  /* a command is running */
    DBT_TX_INTRANS, /* idle inside a transaction block */
    DBT_TX_INERROR, /* idle inside a failed transaction block */
    DBT_TX_UNKNOWN  /* the connection is bad */
} dbt_tx_status;

/* PQpipelineStatus, in our words. */
typedef enum { DBT_PIPELINE_OFF, DBT_PIPELINE_ON, DBT_PIPELINE_ABORTED } dbt_pipeline_status;

/* What libpq says of the connection when a command has ended. */
typedef struct {
    dbt_tx_status tx;
    dbt_pipeline_status pipeline;
    bool dead; /* CONNECTION_BAD: the session is gone (tx is then UNKNOWN; it is while connecting
                  too) */
} dbt_conn_facts;

typedef enum {
    DBT_PROCEED, /* go on: a permit is held, or none is needed */
    DBT_REFUSE,  /* refused: the connection's last word is a refusal until its next command */
    DBT_DEFER    /* queued for a query permit that another thread waits for: the command is held
                    until dbt_conn_state_deferred_end (only when the acquire op defers) */
} dbt_verdict;

/* The semaphore, as the state machine sees it. `ctx` is the caller's, passed to every call. */
typedef struct {
    /* Whether this connection takes permits of `kind` (a limit is set, no exemption matches). */
    bool (*throttled)(void *ctx, dbt_kind kind);
    /* Waits for a permit of `kind` into *slot. DBT_PROCEED may leave *slot NULL (Redis is
     * unreachable and the setting lets commands through). On DBT_REFUSE the table has recorded
     * why, for the program. `query` is the command's text (NULL for none). DBT_DEFER (a query
     * permit only): queued, the wait is the caller's to run elsewhere. */
    dbt_verdict (*acquire)(void *ctx, dbt_kind kind, const char *query, dbt_permit **slot);
    /* Gives the permit back. */
    void (*release)(void *ctx, dbt_permit *permit);
    /* Keeps the permit for the next command: false when it must be released now. */
    bool (*park)(void *ctx, dbt_permit *permit);
    /* Takes a kept permit back for use; sets *permit NULL when it was given back meanwhile. */
    void (*unpark)(void *ctx, dbt_permit **permit);
    /* True when Redis may have given the permit to another: it is released and taken anew. */
    bool (*lost)(void *ctx, dbt_permit *permit);
    /* Marks the permit as held idle inside a transaction (for the renewer's warning), or not. */
    void (*note_idle)(void *ctx, dbt_permit *permit, bool idle);
    /* A command runs without a permit inside a transaction that began without one (Redis was
     * unreachable, open mode): counted as unthrottled. NULL: not counted. */
    void (*unthrottled)(void *ctx);
} dbt_permit_ops;

/* Zeroed is a connection that holds nothing. */
typedef struct {
    dbt_permit *query_permit; /* held from a command until the connection is idle again */
    bool query_kept;          /* query_permit is parked between commands (CACHE_PERMITS) */
    dbt_permit *conn_permit;  /* DBTHROTTLE_MAX_CONNECTIONS: held from connect to forget */
    bool had_conn_permit;     /* connect took one: one lost is taken again at a command */
    bool idle_in_tx;          /* query_permit is marked idle inside a transaction */
    int pipe_sent;            /* pipeline mode: commands sent since the last sync */
    int pipe_syncs;           /* pipeline mode: syncs sent whose result is unread */
    bool refused;             /* the last word on the connection was a refusal */
    bool ran_unthrottled;     /* the command running went ahead without a permit (Redis down) */
    bool tx_unthrottled;      /* in a transaction that began without a permit: runs to its end so */
    bool session_gone;        /* the server ended the session: nothing is taken until a reconnect */
} dbt_conn_state;

/* The connection is about to open its socket: take a connection permit unless one is held. */
dbt_verdict dbt_conn_state_connect(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx);

/* The connection attempt failed for good: the connection permit goes back. */
void dbt_conn_state_connect_failed(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx);

/* A command is about to be sent. Forgets the last refusal; takes a lost connection permit
 * again; takes a kept query permit back, or a new one, unless one is held. */
dbt_verdict dbt_conn_state_command(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                                   const char *query);

/* The wait of a command that dbt_conn_state_command deferred has ended: `v` DBT_PROCEED with
 * `permit` (NULL: it goes ahead unthrottled, Redis being unreachable) or DBT_REFUSE. */
void dbt_conn_state_deferred_end(dbt_conn_state *s, dbt_verdict v, dbt_permit *permit);

/* An asynchronous command was handed to libpq: `sent` false when libpq sent nothing (the command
 * has ended), else counted when the connection is in pipeline mode. */
void dbt_conn_state_sent(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx, bool sent,
                         dbt_conn_facts facts);

/* A command has ended (a synchronous call returned, PQgetResult returned NULL, the pipeline was
 * left). The query permit is parked or given back once the connection is idle: outside a
 * transaction, and out of pipeline mode or with every sync answered and nothing sent after. */
void dbt_conn_state_ended(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                          dbt_conn_facts facts);

/* Pipeline mode: a sync was sent; a sync's result (PGRES_PIPELINE_SYNC) was read, after which the
 * connection may be idle (as dbt_conn_state_ended). */
void dbt_conn_state_pipeline_sync(dbt_conn_state *s);
void dbt_conn_state_pipeline_synced(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                                    dbt_conn_facts facts);

/* The connection's session is gone (the server closed it: a restart, pg_terminate_backend,
 * idle_in_transaction_session_timeout; libpq reports CONNECTION_BAD). Its permits, query and
 * connection alike, go back at once, and no command takes one until the connection is made anew
 * (libpq fails such commands itself). */
void dbt_conn_state_session_ended(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx);

/* Whether the connection holds a permit of either kind (used or kept). */
bool dbt_conn_state_holds(const dbt_conn_state *s);

/* The caller refused the event itself, before any permit decision (a bad configuration). */
void dbt_conn_state_refuse(dbt_conn_state *s);

/* Whether the last word on the connection was a refusal. */
bool dbt_conn_state_refused(const dbt_conn_state *s);

/* The connection is closed or reset: both permits go back, the state is as new. */
void dbt_conn_state_forget(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx);

/* In a child after fork(): the permits held are the parent's; each is handed to `forget` (which
 * must not give it back in Redis: dbt_release only forgets a parent's permit), and the next
 * command takes the child's own. */
void dbt_conn_state_after_fork(dbt_conn_state *s, void (*forget)(dbt_permit *permit));

#endif
