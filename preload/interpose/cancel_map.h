/* cancel_map.h - lets PQcancel reach a command that waits for a permit rather than the server.
 *
 * A program cancels with PQcancel(PQgetCancel(conn)), often from a signal handler (psql's
 * Ctrl-C) or from another thread (psycopg2's connection.cancel()). While the command waits in our
 * queue the server has nothing to cancel, so the wait itself must end, as a cancelled statement
 * would. PGcancel is opaque, so the map remembers which connection each one came from; and since
 * PQcancel may run in a signal handler, everything it touches is a fixed table of atomics. */
#ifndef DBT_CANCEL_MAP_H
#define DBT_CANCEL_MAP_H

#include "sem_client.h"

#include <stdbool.h>
#include <stdint.h>

/* One waiting command's cell: fired by a cancel of its connection. */
typedef struct dbt_cancel_wait dbt_cancel_wait;

/* PQgetCancel(conn) returned `cancel`. */
void dbt_cancel_note(const void *conn, const void *cancel);
/* PQfreeCancel(cancel). */
void dbt_cancel_forget(const void *cancel);
/* PQfinish(conn): its PGcancels may outlive it, but they cancel nothing of ours any more. */
void dbt_cancel_forget_conn(const void *conn);

/* PQcancel(cancel) / PQrequestCancel(conn): ends the connection's wait for a permit, if one
 * runs. Async-signal-safe. */
void dbt_cancel_fire(const void *cancel);
void dbt_cancel_fire_conn(const void *conn);

/* A command on conn is about to wait for a permit: its cell (NULL when the table is full; the
 * wait then ends only by grant or timeout). Pass dbt_cancel_requested and the cell as the
 * acquire's `interrupted` callback and argument, and dbt_cancel_waker(cell) as its waker. */
dbt_cancel_wait *dbt_cancel_wait_begin(const void *conn);
bool dbt_cancel_requested(void *cell);
dbt_waker *dbt_cancel_waker(dbt_cancel_wait *cell);
/* The acquire returned: the cell is free again. NULL is ignored. */
void dbt_cancel_wait_end(dbt_cancel_wait *cell);

#endif
