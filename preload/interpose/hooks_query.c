/* hooks_query.c - every way a command reaches the server: the synchronous calls, the PQsend*
 * calls and PQgetResult. Each hook is thin: it tells throttle.c (and held.c, for a command held
 * while its permit is awaited) and forwards to libpq. */
#include "cancel_map.h"
#include "held.h"
#include "hook.h"
#include "hooks_errors.h"
#include "real.h"
#include "throttle.h"

/* A refusal's results a held command left unread, read away before a synchronous call (PQexec
 * would discard them itself, but through libpq alone): through our PQgetResult, which keeps the
 * permit state in step, and our PQclear, which forgets the refused results. */
static void discard_unread(PGconn *conn)
{
    PGresult *r;
    while ((r = PQgetResult(conn)) != NULL)
        PQclear(r);
}

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
        if (dbt_held_settle(conn)) /* a command held before this one is sent or refused first */   \
            discard_unread(conn);                                                                  \
        if (!dbt_throttle_before(conn, text))                                                      \
            return dbt_refused_result(conn);                                                       \
        dbt_nested++;                                                                              \
        PGresult *res = real(__VA_ARGS__);                                                         \
        dbt_nested--;                                                                              \
        dbt_throttle_after(conn);                                                                  \
        return res;                                                                                \
    } while (0)

/* The PQsend* calls start a command: the permit is given back when PQgetResult says it ended
 * (or at once, when nothing was sent). They never wait for it: a command whose permit is not
 * free at once is held (held.h) and the call returns 1. */
/* Whether libpq refuses the call at once, by its arguments or because a command is in progress
 * outside pipeline mode (its PQsendQueryStart and argument checks, in every libpq since 9.0):
 * such a call goes straight to libpq, which returns 0 with its own message, rather than be held
 * and fail later. */
static bool libpq_refuses(PGconn *conn, const dbt_send_op *op)
{
    bool needs_text =
        op->type == DBT_OP_QUERY || op->type == DBT_OP_QUERY_PARAMS || op->type == DBT_OP_PREPARE;
    bool needs_name = op->type == DBT_OP_PREPARE || op->type == DBT_OP_QUERY_PREPARED;
    if ((needs_text && !op->text) || (needs_name && !op->name) || op->nparams < 0 ||
        op->nparams > 65535)
        return true;
    for (int i = 0; op->values && op->formats && !op->lengths && i < op->nparams; i++)
        if (op->formats[i] && op->values[i])
            return true; /* a binary parameter needs a length */
    __typeof__(&PQpipelineStatus) pipeline = DBT_REAL(PQpipelineStatus);
    __typeof__(&PQtransactionStatus) tx = DBT_REAL(PQtransactionStatus);
    return pipeline && tx && pipeline(conn) == PQ_PIPELINE_OFF && tx(conn) == PQTRANS_ACTIVE;
}

static int send_command(PGconn *conn, const dbt_send_op *op)
{
    if (dbt_nested || !conn)
        return dbt_send_op_real(conn, op);
    int rc;
    /* Noted before it may be queued behind held commands (sent later without this path): a
     * statement later run by name is weighed by this text whichever way it went out. */
    if (op->type == DBT_OP_PREPARE)
        dbt_throttle_note_prepare(conn, op->name, op->text);
    if (dbt_held_enqueue(conn, op, &rc))
        return rc; /* behind the commands held on conn */
    if (libpq_refuses(conn, op))
        return dbt_send_op_real(conn, op); /* 0, libpq's message; no permit involved */
    dbt_acquire_wait *pending;
    const char *text = op->type == DBT_OP_QUERY_PREPARED
                           ? dbt_throttle_prepared_text(conn, op->name)
                           : op->text; /* a statement run by name is weighed by its text */
    dbt_cancel_wait *cell; /* the command's, claimed by the throttle: ended here unless held */
    switch (dbt_throttle_before_send(conn, text, &cell, &pending)) {
    case DBT_REFUSE:
        dbt_cancel_wait_end(cell);
        return 0;
    case DBT_DEFER:
        return dbt_held_start(conn, op, pending, cell);
    case DBT_PROCEED:
        dbt_cancel_wait_end(cell);
        break;
    }
    dbt_nested++;
    int ok = dbt_send_op_real(conn, op);
    dbt_nested--;
    dbt_throttle_sent(conn, ok);
    return ok;
}

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
    if (!dbt_nested && conn)
        dbt_throttle_note_prepare(conn, stmtName, query);
    SYNC_HOOK(query, PQprepare, conn, stmtName, query, nParams, paramTypes);
}

HOOK PGresult *PQexecPrepared(PGconn *conn, const char *stmtName, int nParams,
                              const char *const *paramValues, const int *paramLengths,
                              const int *paramFormats, int resultFormat)
{
    /* Weighed (DBTHROTTLE_WEIGHTS) and traced by the text it was prepared with, when known. */
    SYNC_HOOK(conn ? dbt_throttle_prepared_text(conn, stmtName) : NULL, PQexecPrepared, conn,
              stmtName, nParams, paramValues, paramLengths, paramFormats, resultFormat);
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
    dbt_send_op op = {.type = DBT_OP_QUERY, .text = query};
    return send_command(conn, &op);
}

HOOK int PQsendQueryParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                           const char *const *paramValues, const int *paramLengths,
                           const int *paramFormats, int resultFormat)
{
    dbt_send_op op = {.type = DBT_OP_QUERY_PARAMS,
                      .text = command,
                      .nparams = nParams,
                      .types = paramTypes,
                      .values = paramValues,
                      .lengths = paramLengths,
                      .formats = paramFormats,
                      .result_format = resultFormat};
    return send_command(conn, &op);
}

HOOK int PQsendPrepare(PGconn *conn, const char *stmtName, const char *query, int nParams,
                       const Oid *paramTypes)
{
    dbt_send_op op = {.type = DBT_OP_PREPARE,
                      .text = query,
                      .name = stmtName,
                      .nparams = nParams,
                      .types = paramTypes};
    return send_command(conn, &op);
}

HOOK int PQsendQueryPrepared(PGconn *conn, const char *stmtName, int nParams,
                             const char *const *paramValues, const int *paramLengths,
                             const int *paramFormats, int resultFormat)
{
    dbt_send_op op = {.type = DBT_OP_QUERY_PREPARED,
                      .name = stmtName,
                      .nparams = nParams,
                      .values = paramValues,
                      .lengths = paramLengths,
                      .formats = paramFormats,
                      .result_format = resultFormat};
    return send_command(conn, &op);
}

HOOK int PQsendDescribePrepared(PGconn *conn, const char *stmt)
{
    dbt_send_op op = {.type = DBT_OP_DESCRIBE_PREPARED, .name = stmt};
    return send_command(conn, &op);
}

HOOK int PQsendDescribePortal(PGconn *conn, const char *portal)
{
    dbt_send_op op = {.type = DBT_OP_DESCRIBE_PORTAL, .name = portal};
    return send_command(conn, &op);
}

HOOK PGresult *PQgetResult(PGconn *conn)
{
    __typeof__(&PQgetResult) real = DBT_REAL(PQgetResult);
    if (!real)
        return NULL;
    dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);
    PGresult *res = h ? dbt_held_get_result(h, conn) : real(conn);
    if (conn && !dbt_nested) {
        if (!res) {
            dbt_held_deliver_here(true);
            dbt_throttle_after(conn); /* the command has ended */
            dbt_held_deliver_here(false);
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
    dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);
    int ok = h ? dbt_held_exit_pipeline(h, conn) : real(conn);
    if (ok && conn && !dbt_nested)
        dbt_throttle_after(conn);
    return ok;
}

HOOK int PQpipelineSync(PGconn *conn)
{
    __typeof__(&PQpipelineSync) real = DBT_REAL(PQpipelineSync);
    if (!real)
        return 0;
    dbt_send_op op = {.type = DBT_OP_PIPELINE_SYNC};
    int ok;
    if (!dbt_nested && conn && dbt_held_enqueue(conn, &op, &ok))
        return ok; /* behind the commands held on conn */
    ok = real(conn);
    if (ok && conn && !dbt_nested)
        dbt_throttle_pipeline_sync(conn);
    return ok;
}
