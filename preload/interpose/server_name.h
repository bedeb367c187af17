/* server_name.h - the name of the server a connection reaches, for the default pool name. */
#ifndef DBT_SERVER_NAME_H
#define DBT_SERVER_NAME_H

#include <libpq-fe.h>

#include <stddef.h>

/* "addr:port" of the server conn's options lead to (the first host of its list), or
 * "localhost:port" for a Unix socket or a loopback address (server_name.c says why); the same
 * before and after the connection is made. May resolve a host name (remembered for a minute).
 * Never a password. */
void dbt_server_name(PGconn *conn, char *out, size_t cap);

#endif
