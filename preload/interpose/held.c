/* held.c - commands held while their permit is awaited by a thread of ours (see held.h).
 *
 * Locking: h->mu guards the fields below and every libpq call on the connection while our
 * thread lives (libpq lets one thread use a connection at a time: the program's calls on it
 * are made under h->mu then, and so are ours). The connection's permit state is the thread's
 * alone while it lives: the program's calls that would touch it (PQgetResult, the synchronous
 * calls, PQfinish) first wait for the thread to end. No network call is made under h->mu but
 * libpq's own non-blocking sends and flushes. */
#include "held.h"

#include "cancel_map.h"
#include "clock.h"
#include "conn_registry.h"
#include "log.h"
#include "real.h"
#include "throttle.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dbt_held {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    PGconn *pg;
    dbt_send_op *head, **tail; /* the held calls, in the program's order */
    dbt_acquire_wait *pending; /* the queued acquire our thread finishes */
    int64_t t0_ms;             /* when the first held command was sent */
    bool pipeline;             /* held in pipeline mode */
    bool waiting;              /* held, not yet sent: libpq sees an idle connection */
    bool thread_alive;         /* our thread has not let go of the connection */
    atomic_bool withdrawn;     /* PQfinish/PQreset: send nothing, end the wait */
    atomic_bool conn_lost;     /* libpq found the session gone while held: end the wait */
    dbt_waker own_waker;       /* ends the wait when no cancel cell could be had */
    dbt_waker *waker;          /* the wait's waker while it runs (withdraw fires it) */
    dbt_cancel_wait *cell;     /* a cancel of the connection ends the wait (cancel_map.h) */
    int stand_ins;             /* a refusal's empty queries whose answers are not yet read */
    int owed;                  /* failures to present that no answer will bring (the session
                                  is gone): PQgetResult gives them first */
    bool segment_start;        /* the next stand-in begins a pipeline segment: the refusal */
    char *refusal;             /* what the stand-ins present, and its SQLSTATE */
    const char *refusal_state;
    char *error;  /* a call refused while held (PQerrorMessage) */
    bool counted; /* counted in `live` */
};

/* Connections whose held state is in use: while 0, the hooks go straight to libpq. */
static atomic_int live;

/* h->mu held. */
static void recount(dbt_held *h)
{
    bool now = h->thread_alive || h->stand_ins > 0 || h->owed > 0;
    if (now != h->counted) {
        atomic_fetch_add(&live, now ? 1 : -1);
        h->counted = now;
    }
}

static void free_ops(dbt_send_op *op)
{
    while (op) {
        dbt_send_op *next = op->next;
        dbt_send_op_free(op);
        op = next;
    }
}

static void init_sync(dbt_held *h)
{
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
}

static dbt_held *held_of(dbt_conn *c, PGconn *conn)
{
    if (!c->held && (c->held = calloc(1, sizeof *c->held)) != NULL) {
        init_sync(c->held);
        c->held->pg = conn;
        c->held->tail = &c->held->head;
    }
    return c->held;
}

dbt_held *dbt_held_lock(const PGconn *conn)
{
    if (atomic_load(&live) == 0 || !conn)
        return NULL;
    dbt_conn *c = dbt_conn_find(conn, false);
    dbt_held *h = c ? c->held : NULL;
    if (!h)
        return NULL;
    pthread_mutex_lock(&h->mu);
    if (h->counted)
        return h;
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

void dbt_held_unlock(dbt_held *h)
{
    pthread_mutex_unlock(&h->mu);
}

bool dbt_held_waiting(const dbt_held *h)
{
    return h->waiting;
}

/* ---- our thread: wait, then send the held calls or their refusal's stand-ins ---------------- */

static bool stop_waiting(void *arg)
{
    dbt_held *h = arg;
    return atomic_load(&h->withdrawn) || atomic_load(&h->conn_lost) ||
           (h->cell && dbt_cancel_requested(h->cell));
}

/* Stand-in for a refused call: an empty query (the server answers EmptyQueryResponse and runs
 * nothing), or the sync or flush itself. */
static int send_stand_in(PGconn *conn, const dbt_send_op *op, bool pipeline)
{
    if (!dbt_op_is_command(op->type))
        return dbt_send_op_real(conn, op);
    dbt_send_op empty = {.type = pipeline ? DBT_OP_QUERY_PARAMS : DBT_OP_QUERY, .text = ""};
    return dbt_send_op_real(conn, &empty);
}

/* Makes the held calls (or their stand-ins) and flushes them all out, even on a non-blocking
 * connection: the program has been told nothing is left to flush. h->mu held; dropped while
 * the socket is full. Returns true when a held command could not be sent (libpq's error). */
static bool send_all(dbt_held *h, dbt_send_op *ops, bool granted)
{
    PGconn *conn = h->pg;
    bool failed = false;
    dbt_nested++;
    for (dbt_send_op *op = ops; op; op = op->next) {
        if (granted && !failed) {
            op->rc = dbt_send_op_real(conn, op);
            if (op->rc)
                continue;
            failed = dbt_op_is_command(op->type);
        }
        /* Refused, or after a failure: stand-ins, so that the program's socket wakes and each
         * of its calls gets an answer. */
        op->rc = -1;
        bool out = send_stand_in(conn, op, h->pipeline);
        if (dbt_op_is_command(op->type)) {
            if (out)
                h->stand_ins++;
            else
                h->owed++; /* libpq cannot send: nothing will answer it */
        }
    }
    __typeof__(&PQflush) flush = DBT_REAL(PQflush);
    __typeof__(&PQsocket) sock = DBT_REAL(PQsocket);
    while (flush && sock && !atomic_load(&h->withdrawn) && flush(conn) == 1) {
        struct pollfd p = {.fd = sock(conn), .events = POLLOUT | POLLIN};
        pthread_mutex_unlock(&h->mu);
        (void)poll(&p, 1, 1000);
        pthread_mutex_lock(&h->mu);
    }
    dbt_nested--;
    return failed;
}

/* The permit state, told what was sent (as the PQsend* hooks tell it). Without h->mu: the state
 * is this thread's while it lives. */
static void account(PGconn *conn, const dbt_send_op *ops)
{
    for (const dbt_send_op *op = ops; op; op = op->next) {
        if (op->type == DBT_OP_PIPELINE_SYNC && op->rc != 0)
            dbt_throttle_pipeline_sync(conn);
        else if (dbt_op_is_command(op->type) && op->rc >= 0)
            dbt_throttle_sent(conn, op->rc == 1);
    }
}

/* What the commands that could not be sent present: libpq's own message. h->mu held. */
static void set_failure(dbt_held *h, PGconn *conn)
{
    __typeof__(&PQerrorMessage) err = DBT_REAL(PQerrorMessage);
    const char *msg = err ? err(conn) : NULL;
    free(h->refusal);
    h->refusal = strdup(msg && *msg ? msg : "dbthrottle: the held command could not be sent\n");
    h->refusal_state = "08006"; /* connection_failure */
    h->segment_start = true;
}

static void serve(dbt_held *h)
{
    PGconn *conn = h->pg;
    pthread_mutex_lock(&h->mu);
    dbt_waker *waker = h->waker;
    dbt_acquire_wait *pending = h->pending;
    h->pending = NULL;
    pthread_mutex_unlock(&h->mu);

    dbt_verdict v = dbt_throttle_held_wait(conn, pending, h->t0_ms, stop_waiting, h, waker);

    pthread_mutex_lock(&h->mu);
    h->waker = NULL; /* withdraw fires it under h->mu: not once the cell is someone else's */
    dbt_cancel_wait *cell = h->cell;
    h->cell = NULL;
    pthread_mutex_unlock(&h->mu);
    dbt_cancel_wait_end(cell);

    pthread_mutex_lock(&h->mu);
    dbt_send_op *ops = NULL;
    if (!atomic_load(&h->withdrawn)) {
        if (v == DBT_REFUSE) {
            const char *state = NULL;
            const char *msg = dbt_throttle_refusal(conn, &state);
            free(h->refusal);
            h->refusal = msg ? strdup(msg) : NULL;
            h->refusal_state = state;
            h->segment_start = true;
        }
        ops = h->head;
        h->head = NULL;
        h->tail = &h->head;
        h->waiting = false; /* from here the program's calls go to libpq (under h->mu) */
        __typeof__(&PQstatus) status = DBT_REAL(PQstatus);
        if (status && status(conn) == CONNECTION_BAD) {
            /* The session went while the command was held: nothing can be sent, and no answer
             * will come. Each command gets libpq's failure, as a command in flight would. */
            set_failure(h, conn);
            for (dbt_send_op *op = ops; op; op = op->next)
                if ((op->rc = -1, dbt_op_is_command(op->type)))
                    h->owed++;
        } else if (send_all(h, ops, v == DBT_PROCEED) && !h->refusal) {
            set_failure(h, conn);
        }
    }
    pthread_mutex_unlock(&h->mu);

    account(conn, ops);
    free_ops(ops);

    pthread_mutex_lock(&h->mu);
    h->thread_alive = false;
    h->waiting = false;
    recount(h);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu); /* h may be freed from here on (PQfinish) */
}

static void *serve_thread(void *arg)
{
    serve(arg);
    return NULL;
}

/* A detached thread with every signal blocked: signals are the program's threads' business. */
static bool spawn(dbt_held *h)
{
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0)
        return false;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 512 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &a, serve_thread, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    return rc == 0;
}

int dbt_held_start(PGconn *conn, const dbt_send_op *op, dbt_acquire_wait *pending)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    dbt_held *h = c ? held_of(c, conn) : NULL;
    dbt_send_op *copy = h ? dbt_send_op_copy(op) : NULL;
    if (!copy) {
        /* Out of memory: wait in this call, as the synchronous calls do. */
        if (dbt_throttle_held_wait(conn, pending, dbt_now_us() / 1000, NULL, NULL, NULL) ==
            DBT_REFUSE)
            return 0;
        dbt_nested++;
        int ok = dbt_send_op_real(conn, op);
        dbt_nested--;
        dbt_throttle_sent(conn, ok);
        return ok;
    }
    __typeof__(&PQpipelineStatus) pipeline_status = DBT_REAL(PQpipelineStatus);
    pthread_mutex_lock(&h->mu);
    free_ops(h->head); /* none: a withdrawal or the last send emptied it */
    h->head = copy;
    h->tail = &copy->next;
    h->pending = pending;
    h->t0_ms = dbt_now_us() / 1000;
    h->pipeline = pipeline_status && pipeline_status(conn) != PQ_PIPELINE_OFF;
    h->waiting = true;
    h->thread_alive = true;
    atomic_store(&h->withdrawn, false);
    atomic_store(&h->conn_lost, false);
    /* Here, not in the thread: a cancel that comes as soon as this call returns ends the wait. */
    h->cell = dbt_cancel_wait_begin(conn);
    h->waker = h->cell ? dbt_cancel_waker(h->cell) : &h->own_waker;
    free(h->error);
    h->error = NULL;
    recount(h);
    pthread_mutex_unlock(&h->mu);
    if (!spawn(h))
        serve(h); /* no thread to be had: wait here, as before */
    return 1;
}

void dbt_held_consumed(dbt_held *h, int rc)
{
    if (rc == 0 && h->waiting && h->waker) {
        /* libpq found the session gone (or unreadable): no permit can make the held command
         * run; end the wait now rather than at its timeout. */
        atomic_store(&h->conn_lost, true);
        dbt_waker_fire(h->waker);
    }
}

void dbt_held_set_error(dbt_held *h, const char *msg)
{
    free(h->error);
    h->error = strdup(msg);
}

bool dbt_held_enqueue(PGconn *conn, const dbt_send_op *op, int *rc)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return false;
    if (!h->waiting && !h->thread_alive && h->stand_ins > 0 && !h->pipeline) {
        /* A refusal not yet read: libpq's connection is busy with its stand-in. */
        dbt_held_set_error(h, "another command is already in progress\n");
        *rc = 0;
        dbt_held_unlock(h);
        return true;
    }
    if (!h->waiting) {
        while (h->thread_alive) /* our send is being flushed: then the program's */
            pthread_cond_wait(&h->cv, &h->mu);
        dbt_held_unlock(h);
        return false;
    }
    if (!h->pipeline) {
        dbt_held_set_error(h, "another command is already in progress\n");
        *rc = 0;
    } else {
        dbt_send_op *copy = dbt_send_op_copy(op);
        if (copy) {
            *h->tail = copy;
            h->tail = &copy->next;
        } else {
            dbt_held_set_error(h, "out of memory\n");
        }
        *rc = copy != NULL;
    }
    dbt_held_unlock(h);
    return true;
}

const char *dbt_held_error(const PGconn *conn)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return NULL;
    const char *e = h->error; /* freed only by the connection's own thread (its next calls) */
    dbt_held_unlock(h);
    return e;
}

/* A refusal's result (PGRES_FATAL_ERROR, our message and SQLSTATE), or a later command of the
 * refused pipeline segment's (PGRES_PIPELINE_ABORTED, as libpq reports those after an error). */
static PGresult *stand_in_result(dbt_held *h, PGconn *conn)
{
    __typeof__(&PQmakeEmptyPGresult) make = DBT_REAL(PQmakeEmptyPGresult);
    if (!make)
        return NULL;
    bool first = h->segment_start || !h->pipeline;
    h->segment_start = false;
    PGresult *r = make(conn, first ? PGRES_FATAL_ERROR : PGRES_PIPELINE_ABORTED);
    if (r && first)
        dbt_refused_add(r, h->refusal ? h->refusal : "dbthrottle: refused\n",
                        h->refusal_state ? h->refusal_state : "53300");
    return r;
}

PGresult *dbt_held_get_result(dbt_held *h, PGconn *conn)
{
    while (h->thread_alive) /* a blocking read of a held command: wait for it to be sent */
        pthread_cond_wait(&h->cv, &h->mu);
    if (h->owed > 0) {
        h->owed--;
        PGresult *mine = stand_in_result(h, conn);
        recount(h);
        dbt_held_unlock(h);
        return mine;
    }
    __typeof__(&PQgetResult) real = DBT_REAL(PQgetResult);
    PGresult *res = real ? real(conn) : NULL;
    __typeof__(&PQresultStatus) status = DBT_REAL(PQresultStatus);
    if (res && status && h->stand_ins > 0) {
        ExecStatusType st = status(res);
        if (st == PGRES_PIPELINE_SYNC) {
            h->segment_start = true;
        } else if (st == PGRES_EMPTY_QUERY) {
            PGresult *mine = stand_in_result(h, conn);
            if (mine) {
                __typeof__(&PQclear) clear = DBT_REAL(PQclear);
                if (clear)
                    clear(res);
                res = mine;
            }
            h->stand_ins--;
            recount(h);
        }
    }
    dbt_held_unlock(h);
    return res;
}

void dbt_held_settle(PGconn *conn)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return;
    while (h->thread_alive)
        pthread_cond_wait(&h->cv, &h->mu);
    bool unread = h->stand_ins > 0 && !h->pipeline;
    dbt_held_unlock(h);
    if (!unread)
        return;
    /* PQexec would discard them itself, but through libpq alone: read through our PQgetResult,
     * which keeps the permit state in step. */
    PGresult *r;
    while ((r = PQgetResult(conn)) != NULL)
        PQclear(r);
}

void dbt_held_withdraw(PGconn *conn)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return;
    atomic_store(&h->withdrawn, true);
    if (h->waker)
        dbt_waker_fire(h->waker);
    while (h->thread_alive)
        pthread_cond_wait(&h->cv, &h->mu);
    free_ops(h->head);
    h->head = NULL;
    h->tail = &h->head;
    h->waiting = false;
    h->stand_ins = h->owed = 0;
    recount(h);
    dbt_held_unlock(h);
}

void dbt_held_free(dbt_held *h)
{
    if (!h)
        return;
    if (h->counted)
        atomic_fetch_sub(&live, 1);
    free_ops(h->head);
    free(h->refusal);
    free(h->error);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void dbt_held_after_fork(dbt_held *h)
{
    if (!h)
        return;
    init_sync(h); /* the parent's thread may have held it at fork() */
    free_ops(h->head);
    h->head = NULL;
    h->tail = &h->head;
    h->pending = NULL; /* the parent's queued acquire, its thread's to finish */
    h->waiting = h->thread_alive = false;
    h->waker = NULL;
    h->cell = NULL;
    h->stand_ins = h->owed = 0;
    if (h->counted)
        atomic_fetch_sub(&live, 1);
    h->counted = false;
    free(h->error);
    h->error = NULL;
}
