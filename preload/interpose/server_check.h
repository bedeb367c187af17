/* server_check.h - each throttled connection asks its server to end a dead client's statement
 * (client_connection_check_interval in its startup options), so that a SIGKILLed holder's
 * statement is gone at the server before its permit's lease can lapse and admit another. */
#ifndef DBT_SERVER_CHECK_H
#define DBT_SERVER_CHECK_H

#include <libpq-fe.h>

#include <stdbool.h>

/* Calls the real libpq function that makes a connection from the user's arguments (ctx). */
typedef PGconn *(*dbt_check_open)(void *ctx);

/* The connection open(ctx) makes, but with client_connection_check_interval added to its
 * startup options when throttling is on, the setting is not off, and the options the user gave
 * (conninfo, service file or PGOPTIONS: libpq's resolution, read back) do not set it already.
 * blocking: made as PQconnectdbParams (else PQconnectStartParams). The options are resolved by
 * a probe, open(ctx) under dbt_check_probing(), which opens no socket. */
PGconn *dbt_check_connect(dbt_check_open open, void *ctx, bool blocking);

/* True on the thread while a probe resolves options: PQconnectPoll must fail it at once (the
 * call also tells the probe that libpq accepted the options). */
bool dbt_check_probing(void);

/* A connection that failed: if it carried our option and its server refused it (PostgreSQL
 * before 14, a pooler that forwards no startup options), says so once, with the way out. */
void dbt_check_failed(PGconn *conn);

/* Whether conn failed because its server refused our option (dbt_check_failed saw it): a
 * blocking connect is then made again, without it. */
bool dbt_check_refused(PGconn *conn);

#endif
