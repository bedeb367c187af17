/* hooks_errors.c - how a refusal reads to the program.
 *
 * libpq has no public way to set a connection's or a result's error message. Rather than write
 * into libpq's private structures (their layout changes between versions), the few functions
 * that report errors are interposed: for a connection whose last word was a refusal, and for the
 * PGRES_FATAL_ERROR results we made to carry one, they return our message and SQLSTATE 53300
 * (too_many_connections, "insufficient resources"), or 57014 (query_canceled) when a cancel ended
 * the wait, as the server says of a cancelled statement; for everything else they are libpq's
 * own. A
 * refusal is forgotten at the connection's next command, and a refused result at its PQclear. */
#include "hooks_errors.h"

#include "conn_registry.h"
#include "held.h"
#include "hook.h"
#include "real.h"
#include "throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* conn's last word when it is ours: a call refused while commands are held on it, else the
 * throttle's refusal. NULL: libpq's own. */
static const char *conn_error(const PGconn *conn)
{
    const char *held = dbt_held_error(conn);
    return held ? held : dbt_throttle_error(conn);
}

PGresult *dbt_refused_result(PGconn *conn)
{
    PGresult *r = DBT_REAL(PQmakeEmptyPGresult)(conn, PGRES_FATAL_ERROR);
    const char *msg = conn_error(conn);
    if (r && msg) {
        const char *state;
        (void)dbt_throttle_refusal(conn, &state);
        dbt_refused_add(r, msg, state);
    }
    return r;
}

HOOK char *PQerrorMessage(const PGconn *conn)
{
    const char *msg = conn ? conn_error(conn) : NULL;
    if (msg)
        return (char *)msg;
    __typeof__(&PQerrorMessage) real = DBT_REAL(PQerrorMessage);
    return real ? real(conn) : (char *)"";
}

HOOK char *PQresultErrorMessage(const PGresult *res)
{
    const char *msg = dbt_refused_message(res, NULL);
    if (msg)
        return (char *)msg;
    __typeof__(&PQresultErrorMessage) real = DBT_REAL(PQresultErrorMessage);
    return real ? real(res) : (char *)"";
}

HOOK char *PQresultVerboseErrorMessage(const PGresult *res, PGVerbosity verbosity,
                                       PGContextVisibility show_context)
{
    const char *state = NULL;
    const char *msg = dbt_refused_message(res, &state);
    if (msg) {
        size_t cap = strlen(msg) + 32;
        char *out = malloc(cap); /* freed by PQfreemem (free) */
        if (out) {
            if (verbosity == PQERRORS_VERBOSE)
                snprintf(out, cap, "ERROR:  %s: %s", state ? state : "", msg);
            else
                snprintf(out, cap, "ERROR:  %s", msg);
        }
        return out;
    }
    __typeof__(&PQresultVerboseErrorMessage) real = DBT_REAL(PQresultVerboseErrorMessage);
    return real ? real(res, verbosity, show_context) : NULL;
}

HOOK char *PQresultErrorField(const PGresult *res, int fieldcode)
{
    const char *state = NULL;
    const char *msg = dbt_refused_message(res, &state);
    if (msg) {
        switch (fieldcode) {
        case PG_DIAG_SQLSTATE:
            return (char *)state;
        case PG_DIAG_SEVERITY:
        case PG_DIAG_SEVERITY_NONLOCALIZED:
            return (char *)"ERROR";
        case PG_DIAG_MESSAGE_PRIMARY:
            return (char *)msg;
        default:
            return NULL;
        }
    }
    __typeof__(&PQresultErrorField) real = DBT_REAL(PQresultErrorField);
    return real ? real(res, fieldcode) : NULL;
}

HOOK void PQclear(PGresult *res)
{
    dbt_refused_forget(res);
    __typeof__(&PQclear) real = DBT_REAL(PQclear);
    if (real)
        real(res);
}
