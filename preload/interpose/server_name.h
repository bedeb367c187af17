/* server_name.h - the name of the server a connection reaches, for the default pool name. */
#ifndef DBT_SERVER_NAME_H
#define DBT_SERVER_NAME_H

#include <libpq-fe.h>

#include <stddef.h>

/* "addr:port" of the server libpq connects (or is about to connect) conn to, or
 * "localhost@<this host>:port" for a Unix socket or a loopback address (server_name.c says why).
 * Resolves the host name when the connection is not made yet. Never a password. */
void dbt_server_name(PGconn *conn, char *out, size_t cap);

#endif
