/* session_watch.h - notices a session the server ended while its connection sits idle holding a
 * permit (a PostgreSQL restart, pg_terminate_backend, idle_in_transaction_session_timeout), so its
 * permits go back then, not when the program next uses or closes the connection.
 *
 * A connection that ends a command still holding a permit (inside a transaction, a kept permit, a
 * connection permit) is watched: one background thread polls the sockets of the watched
 * connections for the server's hangup (POLLRDHUP: only a FIN, never a NOTICE or a NOTIFY) and then
 * calls the `gone` function with the connection's owner. The owner's thread takes the connection
 * back (dbt_session_unwatch) before its next event: from then on the watcher does not touch it,
 * and if the watcher is handling it at that moment, unwatch waits until it is done. So a
 * connection's state has one user at a time, as libpq's rule gives it. */
#ifndef DBT_SESSION_WATCH_H
#define DBT_SESSION_WATCH_H

/* What the watcher calls, on its own thread, for a watched connection whose session is gone. */
typedef void (*dbt_session_gone_fn)(void *owner);

/* Set once, before any watch. */
void dbt_session_watch_init(dbt_session_gone_fn gone);

/* Watches socket fd for owner. *cell is the owner's cell (0: none yet; taken on first use, kept
 * until dbt_session_forget). Does nothing when fd < 0 or every cell is taken. */
void dbt_session_watch(int *cell, int fd, void *owner);

/* The owner's thread takes the connection back (cheap when it is not watched). */
void dbt_session_unwatch(int cell);

/* The connection is closing: unwatched, and its cell freed (*cell set to 0). */
void dbt_session_forget(int *cell);

#endif
