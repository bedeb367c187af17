/* conn_state.c - the permit decisions for one connection.
 *
 * A query permit is taken when a command is sent on a connection that holds none, and kept while
 * the connection is in a transaction (INTRANS, INERROR), in pipeline mode, or busy with the
 * command (COPY included); it goes back when the connection is idle again. So BEGIN ... COMMIT
 * is one permit, and a transaction never waits for a permit between its statements: releasing
 * there deadlocks when the holders of every permit wait for a row lock the transaction holds.
 * For the same reason a transaction that began without a permit (Redis was unreachable and the
 * setting let it through) runs to its end without one: queueing at its next statement would
 * wait while it holds its locks.
 *
 * A connection whose session the server ended (libpq: CONNECTION_BAD, PQTRANS_UNKNOWN) holds
 * nothing: its permits go back at once rather than at PQfinish, whenever that comes.
 *
 * Compiled without libpq's include path (see INC_interpose/conn_state in the Makefile): the
 * facts come in as our enums, the semaphore is reached through dbt_permit_ops. */
#include "conn_state.h"

#include <stddef.h>

static dbt_verdict take(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx, dbt_kind kind,
                        const char *query, dbt_permit **slot)
{
    dbt_verdict v = ops->acquire(ctx, kind, query, slot);
    if (v == DBT_REFUSE)
        s->refused = true;
    return v;
}

/* A permit Redis may have given to another (its lease ran out unrenewed, or Redis lost it) is
 * given back, so that the command goes through the queue again rather than run over the limit:
 * even inside a transaction, where the permit was being kept. */
static void drop_if_lost(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx, dbt_permit **slot)
{
    if (!*slot || !ops->lost(ctx, *slot))
        return;
    if (slot == &s->query_permit)
        s->idle_in_tx = false;
    ops->release(ctx, *slot);
    *slot = NULL;
}

dbt_verdict dbt_conn_state_connect(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx)
{
    s->refused = false;
    s->session_gone = false;
    if (s->conn_permit || !ops->throttled(ctx, DBT_KIND_CONN))
        return DBT_PROCEED;
    dbt_verdict v = take(s, ops, ctx, DBT_KIND_CONN, NULL, &s->conn_permit);
    s->had_conn_permit = v == DBT_PROCEED;
    return v;
}

void dbt_conn_state_connect_failed(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx)
{
    if (s->conn_permit) {
        ops->release(ctx, s->conn_permit);
        s->conn_permit = NULL;
    }
}

dbt_verdict dbt_conn_state_command(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                                   const char *query)
{
    s->refused = false;
    s->ran_unthrottled = false;
    if (s->session_gone)
        return DBT_PROCEED; /* libpq fails it: a dead connection takes no permit */
    drop_if_lost(s, ops, ctx, &s->conn_permit);
    if (!s->conn_permit && s->had_conn_permit && ops->throttled(ctx, DBT_KIND_CONN) &&
        take(s, ops, ctx, DBT_KIND_CONN, NULL, &s->conn_permit) == DBT_REFUSE)
        return DBT_REFUSE;
    if (s->query_kept) {
        /* Kept since the last command: ours again, unless a waiter took it back meanwhile. */
        s->query_kept = false;
        ops->unpark(ctx, &s->query_permit);
    }
    drop_if_lost(s, ops, ctx, &s->query_permit);
    if (s->query_permit) {
        if (s->idle_in_tx) {
            ops->note_idle(ctx, s->query_permit, false);
            s->idle_in_tx = false;
        }
        return DBT_PROCEED;
    }
    if (s->tx_unthrottled) {
        /* See the top of this file: the transaction ends as it began, without a permit. */
        s->ran_unthrottled = true;
        if (ops->unthrottled)
            ops->unthrottled(ctx);
        return DBT_PROCEED;
    }
    if (!ops->throttled(ctx, DBT_KIND_QUERY))
        return DBT_PROCEED;
    dbt_verdict v = take(s, ops, ctx, DBT_KIND_QUERY, query, &s->query_permit);
    s->ran_unthrottled = v == DBT_PROCEED && !s->query_permit;
    return v;
}

void dbt_conn_state_deferred_end(dbt_conn_state *s, dbt_verdict v, dbt_permit *permit)
{
    s->query_permit = v == DBT_PROCEED ? permit : NULL;
    s->refused = v == DBT_REFUSE;
    s->ran_unthrottled = v == DBT_PROCEED && !permit;
}

void dbt_conn_state_sent(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx, bool sent,
                         dbt_conn_facts facts)
{
    if (!sent)
        dbt_conn_state_ended(s, ops, ctx, facts);
    else if (facts.pipeline != DBT_PIPELINE_OFF)
        s->pipe_sent++;
}

void dbt_conn_state_ended(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                          dbt_conn_facts facts)
{
    if (facts.dead) {
        dbt_conn_state_session_ended(s, ops, ctx);
        return;
    }
    bool in_tx = facts.tx == DBT_TX_INTRANS || facts.tx == DBT_TX_INERROR;
    if (s->ran_unthrottled)
        s->tx_unthrottled = in_tx || (s->tx_unthrottled && facts.tx == DBT_TX_ACTIVE);
    if (!s->query_permit || s->query_kept)
        return;
    bool pipeline_idle =
        facts.pipeline == DBT_PIPELINE_OFF || (s->pipe_sent == 0 && s->pipe_syncs == 0);
    if (facts.tx == DBT_TX_IDLE && pipeline_idle) {
        if (ops->park(ctx, s->query_permit)) {
            s->query_kept = true; /* for the next command, while nobody waits */
        } else {
            ops->release(ctx, s->query_permit);
            s->query_permit = NULL;
        }
        s->idle_in_tx = false;
        s->pipe_sent = s->pipe_syncs = 0;
    } else if ((facts.tx == DBT_TX_INTRANS || facts.tx == DBT_TX_INERROR) && !s->idle_in_tx) {
        /* Kept across the transaction: see the comment at the top of this file. */
        s->idle_in_tx = true;
        ops->note_idle(ctx, s->query_permit, true);
    }
}

void dbt_conn_state_pipeline_sync(dbt_conn_state *s)
{
    s->pipe_syncs++;
    s->pipe_sent = 0;
}

void dbt_conn_state_pipeline_synced(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx,
                                    dbt_conn_facts facts)
{
    if (s->pipe_syncs > 0)
        s->pipe_syncs--;
    dbt_conn_state_ended(s, ops, ctx, facts); /* a pipeline with nothing more in flight is idle */
}

void dbt_conn_state_session_ended(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx)
{
    if (s->query_permit)
        ops->release(ctx, s->query_permit); /* a kept one too: dbt_release takes either */
    if (s->conn_permit)
        ops->release(ctx, s->conn_permit);
    *s = (dbt_conn_state){.session_gone = true, .refused = s->refused};
}

bool dbt_conn_state_holds(const dbt_conn_state *s)
{
    return s->query_permit || s->conn_permit;
}

void dbt_conn_state_refuse(dbt_conn_state *s)
{
    s->refused = true;
}

bool dbt_conn_state_refused(const dbt_conn_state *s)
{
    return s->refused;
}

void dbt_conn_state_forget(dbt_conn_state *s, const dbt_permit_ops *ops, void *ctx)
{
    if (s->query_permit)
        ops->release(ctx, s->query_permit);
    if (s->conn_permit)
        ops->release(ctx, s->conn_permit);
    *s = (dbt_conn_state){0};
}

void dbt_conn_state_after_fork(dbt_conn_state *s, void (*forget)(dbt_permit *permit))
{
    if (s->query_permit)
        forget(s->query_permit);
    if (s->conn_permit)
        forget(s->conn_permit);
    s->query_permit = s->conn_permit = NULL;
    s->query_kept = false;
}
