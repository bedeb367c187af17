/* hooks_errors.h - a refusal as the synchronous calls return it, worded as PQerrorMessage words
 * the connection's refusal (hooks_errors.c). */
#ifndef DBT_HOOKS_ERRORS_H
#define DBT_HOOKS_ERRORS_H

#include <libpq-fe.h>

/* A PGRES_FATAL_ERROR result carrying conn's refusal (SQLSTATE 53300, or 57014 when a cancel
 * ended the wait), for PQexec and friends. */
PGresult *dbt_refused_result(PGconn *conn);

#endif
