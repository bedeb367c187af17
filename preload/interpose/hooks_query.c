/* hooks_query.c - every way a command reaches the server: the synchronous calls, the PQsend*
 * calls and PQgetResult. Each hook is thin: it tells throttle.c and forwards to libpq. */
#include "hook.h"
#include "real.h"
#include "throttle.h"

/* The synchronous calls run a whole command: permit before, maybe give it back after. `text` is
 * the command's SQL, for the trace when DBTHROTTLE_LOG_QUERY is on; NULL for the calls that carry
 * none (prepared statements by name, describes, PQfn). */
#define SYNC_HOOK(text, call, ...)                                                                 \
    do {                                                                                           \
        __typeof__(&call) real = DBT_REAL(call);                                                   \
        if (!real)                                                                                 \
            return NULL;                                                                           \
        if (dbt_nested || !conn)                                                                   \
            return real(__VA_ARGS__);                                                              \
        if (!dbt_throttle_before(conn, text))                                                      \
            return dbt_throttle_refused_result(conn);                                              \
        dbt_nested++;                                                                              \
        PGresult *res = real(__VA_ARGS__);                                                         \
        dbt_nested--;                                                                              \
        dbt_throttle_after(conn);                                                                  \
        return res;                                                                                \
    } while (0)

/* The PQsend* calls start a command: the permit is given back when PQgetResult says it ended
 * (or at once, when nothing was sent). */
#define SEND_HOOK(text, call, ...)                                                                 \
    do {                                                                                           \
        __typeof__(&call) real = DBT_REAL(call);                                                   \
        if (!real)                                                                                 \
            return 0;                                                                              \
        if (dbt_nested || !conn)                                                                   \
            return real(__VA_ARGS__);                                                              \
        if (!dbt_throttle_before(conn, text))                                                      \
            return 0;                                                                              \
        dbt_nested++;                                                                              \
        int ok = real(__VA_ARGS__);                                                                \
        dbt_nested--;                                                                              \
        dbt_throttle_sent(conn, ok);                                                               \
        return ok;                                                                                 \
    } while (0)

HOOK PGresult *PQexec(PGconn *conn, const char *query)
{
    SYNC_HOOK(query, PQexec, conn, query);
}

HOOK PGresult *PQexecParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                            const char *const *paramValues, const int *paramLengths,
                            const int *paramFormats, int resultFormat)
{
    SYNC_HOOK(command, PQexecParams, conn, command, nParams, paramTypes, paramValues, paramLengths,
              paramFormats, resultFormat);
}

HOOK PGresult *PQprepare(PGconn *conn, const char *stmtName, const char *query, int nParams,
                         const Oid *paramTypes)
{
    SYNC_HOOK(query, PQprepare, conn, stmtName, query, nParams, paramTypes);
}

HOOK PGresult *PQexecPrepared(PGconn *conn, const char *stmtName, int nParams,
                              const char *const *paramValues, const int *paramLengths,
                              const int *paramFormats, int resultFormat)
{
    SYNC_HOOK(NULL, PQexecPrepared, conn, stmtName, nParams, paramValues, paramLengths,
              paramFormats, resultFormat);
}

HOOK PGresult *PQdescribePrepared(PGconn *conn, const char *stmt)
{
    SYNC_HOOK(NULL, PQdescribePrepared, conn, stmt);
}

HOOK PGresult *PQdescribePortal(PGconn *conn, const char *portal)
{
    SYNC_HOOK(NULL, PQdescribePortal, conn, portal);
}

/* The fast-path function call: the large-object API (lo_*) runs on it. */
HOOK PGresult *PQfn(PGconn *conn, int fnid, int *result_buf, int *result_len, int result_is_int,
                    const PQArgBlock *args, int nargs)
{
    SYNC_HOOK(NULL, PQfn, conn, fnid, result_buf, result_len, result_is_int, args, nargs);
}

HOOK int PQsendQuery(PGconn *conn, const char *query)
{
    SEND_HOOK(query, PQsendQuery, conn, query);
}

HOOK int PQsendQueryParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                           const char *const *paramValues, const int *paramLengths,
                           const int *paramFormats, int resultFormat)
{
    SEND_HOOK(command, PQsendQueryParams, conn, command, nParams, paramTypes, paramValues,
              paramLengths, paramFormats, resultFormat);
}

HOOK int PQsendPrepare(PGconn *conn, const char *stmtName, const char *query, int nParams,
                       const Oid *paramTypes)
{
    SEND_HOOK(query, PQsendPrepare, conn, stmtName, query, nParams, paramTypes);
}

HOOK int PQsendQueryPrepared(PGconn *conn, const char *stmtName, int nParams,
                             const char *const *paramValues, const int *paramLengths,
                             const int *paramFormats, int resultFormat)
{
    SEND_HOOK(NULL, PQsendQueryPrepared, conn, stmtName, nParams, paramValues, paramLengths,
              paramFormats, resultFormat);
}

HOOK int PQsendDescribePrepared(PGconn *conn, const char *stmt)
{
    SEND_HOOK(NULL, PQsendDescribePrepared, conn, stmt);
}

HOOK int PQsendDescribePortal(PGconn *conn, const char *portal)
{
    SEND_HOOK(NULL, PQsendDescribePortal, conn, portal);
}

HOOK PGresult *PQgetResult(PGconn *conn)
{
    __typeof__(&PQgetResult) real = DBT_REAL(PQgetResult);
    if (!real)
        return NULL;
    PGresult *res = real(conn);
    if (conn && !dbt_nested) {
        if (!res) {
            dbt_throttle_after(conn); /* the command has ended */
        } else if (DBT_REAL(PQresultStatus)(res) == PGRES_PIPELINE_SYNC) {
            dbt_throttle_pipeline_synced(conn); /* with nothing more in flight, it is idle */
        }
    }
    return res;
}

/* Leaving pipeline mode may leave nothing for PQgetResult to report: the connection is idle. */
HOOK int PQexitPipelineMode(PGconn *conn)
{
    __typeof__(&PQexitPipelineMode) real = DBT_REAL(PQexitPipelineMode);
    if (!real)
        return 0;
    int ok = real(conn);
    if (ok && conn && !dbt_nested)
        dbt_throttle_after(conn);
    return ok;
}

HOOK int PQpipelineSync(PGconn *conn)
{
    __typeof__(&PQpipelineSync) real = DBT_REAL(PQpipelineSync);
    if (!real)
        return 0;
    int ok = real(conn);
    if (ok && conn && !dbt_nested)
        dbt_throttle_pipeline_sync(conn);
    return ok;
}
