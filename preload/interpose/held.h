/* held.h - commands that an event loop sends while no permit is free: held by the library, not
 * waited for in the program's thread.
 *
 * A PQsend* call whose permit is not free at once is queued for in Redis by the call's one
 * round trip (dbt_acquire_start) and returns 1 at once. The command is kept here, and a thread
 * of ours waits for the permit and then makes the real call, so that the server's answer makes
 * the socket readable and the program's poll() wakes as it always does. Until then the
 * connection reads busy (PQisBusy 1, PQtransactionStatus ACTIVE, no result). A wait that ends
 * without a permit sends an empty query in the command's place, and its answer is presented as
 * the refusal (SQLSTATE 53300, or 57014 for a cancel): an empty query runs no statement and
 * leaves the transaction as it was. docs/design.md ("Asynchronous commands") says why this is
 * safe. Calls that need the library's help on such a connection come here (hooks_async.c,
 * hooks_query.c, hooks_conn.c); on any other connection, and whenever no connection of the
 * process holds anything, they cost one atomic load. */
#ifndef DBT_HELD_H
#define DBT_HELD_H

#include "cancel_map.h"
#include "sem_client.h"
#include "send_op.h"

#include <libpq-fe.h>
#include <stdbool.h>

typedef struct dbt_held dbt_held;

/* A PQsend* command was deferred (dbt_throttle_before_send said DBT_DEFER, `pending` is its
 * queued acquire): a copy is held, and a thread waits and sends it. Returns what the PQsend*
 * call returns: 1 (without memory or a thread, it waits and sends in this call, as before).
 * `cell`, claimed before the acquire began (NULL: none to be had), is the held wait's from here:
 * a cancel that came while the acquire was on its way to Redis ends the wait as one after. */
int dbt_held_start(PGconn *conn, const dbt_send_op *op, dbt_acquire_wait *pending,
                   dbt_cancel_wait *cell);

/* Before a PQsend* call, PQpipelineSync or PQsendFlushRequest: true when conn holds commands and
 * the call was dealt with, *rc being its return (in pipeline mode it is held behind them, in
 * order; otherwise refused, as libpq refuses a second command on a busy connection). False: go
 * on as usual (after the library's own send on conn, if one runs, has ended). */
bool dbt_held_enqueue(PGconn *conn, const dbt_send_op *op, int *rc);

/* conn's held state, locked, while the library holds, sends or answers for a command on conn;
 * NULL (nothing locked) otherwise: go to libpq as usual. */
dbt_held *dbt_held_lock(const PGconn *conn);
void dbt_held_unlock(dbt_held *h);

/* Locked: the command is still held (libpq itself sees an idle connection). */
bool dbt_held_waiting(const dbt_held *h);

/* Locked: whether libpq has found the session gone while the command is held (PQstatus
 * CONNECTION_BAD): its wait is then ended at once, and the command reads as failed with libpq's
 * message; the connection no longer reads busy. */
bool dbt_held_gone(dbt_held *h);

/* PQsetSingleRowMode on a locked h: for a held command, asked for now and made right after our
 * send of it (libpq's call then would find an idle connection, and our send would undo it). */
int dbt_held_single_row(dbt_held *h, PGconn *conn);

/* PQexitPipelineMode on a locked h (unlocked on return): refused while commands are held, as
 * libpq refuses with results pending; else libpq's, once our send has ended. */
int dbt_held_exit_pipeline(dbt_held *h, PGconn *conn);

/* PQgetResult on a locked h (unlocked on return): waits while the held commands are not yet
 * sent, then libpq's result, a refusal's stand-in answer translated. */
PGresult *dbt_held_get_result(dbt_held *h, PGconn *conn);

/* Before a synchronous call: waits until held commands are sent or refused. True when a
 * refusal's results are left unread: the caller reads them away through PQgetResult and PQclear
 * (as PQexec discards results the program left unread; the hooks keep the permit state in step
 * and forget the refused results). */
bool dbt_held_settle(PGconn *conn);

/* PQfinish, PQreset: held commands are withdrawn, never sent, their wait ended; returns once our
 * thread has let go of conn. */
void dbt_held_withdraw(PGconn *conn);

/* Around the permit's return in PQgetResult (on): a command of another connection parked for a
 * permit this thread gives back is sent here, now, rather than by a thread of ours woken for it
 * (held_park.h). */
void dbt_held_deliver_here(bool on);

/* Sets conn's error message for a call refused while commands are held (as libpq words it). */
void dbt_held_set_error(dbt_held *h, const char *msg);
/* The message of such a call, or NULL. */
const char *dbt_held_error(const PGconn *conn);

#endif
