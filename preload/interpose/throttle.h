/* throttle.h - the events of a connection, as the hooks see them: each gathers what libpq knows
 * and hands it to the permit state machine (conn_state.h), which decides when a command takes a
 * query permit and when the connection gives it back. The hooks only translate libpq calls. */
#ifndef DBT_THROTTLE_H
#define DBT_THROTTLE_H

#include "cancel_map.h"
#include "conn_state.h"
#include "sem_client.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

/* Set while a hook runs the real function, so that libpq's calls of its own exported functions
 * (PQexec -> PQsendQuery -> ..., PQexecFinish -> PQgetResult) pass straight through: one logical
 * command takes exactly one permit. */
extern __thread int dbt_nested;

/* A command is about to be sent on conn. True: send it (a permit is held, or none is needed).
 * False: refused; conn's error message says why (see dbt_throttle_error). */
bool dbt_throttle_before(PGconn *conn, const char *query);

/* The same for a PQsend* call, which must not wait in the program's thread: DBT_PROCEED (send
 * it), DBT_REFUSE (as dbt_throttle_before's false), or DBT_DEFER: no permit was free at once,
 * the connection is queued for one and *pending set; the command is to be held and the wait
 * run by dbt_throttle_held_wait (held.c). *cell: the command's cancel cell, claimed as the
 * throttle began to handle it (see permit_ctx's cell), NULL when the throttle is not in use or
 * none could be had: the caller ends it (dbt_cancel_wait_end) unless DBT_DEFER hands it to the
 * held wait (dbt_held_start). */
dbt_verdict dbt_throttle_before_send(PGconn *conn, const char *query, dbt_cancel_wait **cell,
                                     dbt_acquire_wait **pending);

/* The wait of a deferred command, in held.c's thread: ends `pending` (granted, timed out,
 * interrupted when `interrupted(arg)` says so after `waker` fired, Redis gone) and records the
 * outcome in the connection's state: DBT_PROCEED (send the held commands; the permit is the
 * connection's) or DBT_REFUSE (the refusal is set, as dbt_throttle_before's). `t0_ms` is when
 * the command was sent (dbt_now_us() / 1000), for the refusal's message. */
dbt_verdict dbt_throttle_held_wait(PGconn *conn, dbt_acquire_wait *pending, int64_t t0_ms,
                                   bool (*interrupted)(void *), void *arg, dbt_waker *waker);

/* PQprepare/PQsendPrepare of `query` under `name`: kept while DBTHROTTLE_WEIGHTS has sql= rules,
 * so that running it by name is weighed by its text. */
void dbt_throttle_note_prepare(PGconn *conn, const char *name, const char *query);

/* The text prepared under `name` on conn (NULL: not known), for weighing a PQexecPrepared. */
const char *dbt_throttle_prepared_text(const PGconn *conn, const char *name);

/* A PQsend* call returned: `sent` false when it sent nothing (the command has ended at once). */
void dbt_throttle_sent(PGconn *conn, bool sent);

/* A command on conn has ended (a synchronous call returned, PQgetResult returned NULL, the
 * pipeline was left). The permit goes back once the connection is idle: not inside a
 * transaction or a pipeline. */
void dbt_throttle_after(PGconn *conn);

/* Pipeline bookkeeping: a sync was sent; a sync's result was read (then as dbt_throttle_after).
 * A connection that stays in pipeline mode gives its permit back once every sync it sent has
 * been answered and nothing was queued after the last one. */
void dbt_throttle_pipeline_sync(PGconn *conn);
void dbt_throttle_pipeline_synced(PGconn *conn);

/* conn is about to open its socket (PQconnectPoll in CONNECTION_NEEDED). True: go on (a
 * connection permit is held, or none is needed). False: refused, with the message set. */
bool dbt_throttle_connect(PGconn *conn);

/* conn is connected (PQconnectPoll said so): idle, holding its connection permit if it took one,
 * so watched for the server closing the session. */
void dbt_throttle_connected(PGconn *conn);

/* A connection attempt failed for good: its connection permit goes back. */
void dbt_throttle_connect_failed(PGconn *conn);

/* conn is being reset (PQreset, PQresetStart): whatever it holds goes back, and its entry is
 * forgotten. */
void dbt_throttle_forget(PGconn *conn);

/* PQfinish: libpq's own closes conn (NULL too), and whatever conn holds goes back after the
 * socket is closed, so that a connection the freed permit admits does not open while this one
 * still is; its entry is forgotten. */
void dbt_throttle_finish(PGconn *conn);

/* The message of conn's last refusal (NULL: none yet) and its SQLSTATE, whether or not it is
 * still conn's last word (held.c presents it later). */
const char *dbt_throttle_refusal(const PGconn *conn, const char **sqlstate);

/* The refusal message of conn, or NULL when the last word on conn was not a refusal (a call
 * refused while commands are held is held.c's: dbt_held_error). */
const char *dbt_throttle_error(const PGconn *conn);

#endif
