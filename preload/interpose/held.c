/* held.c - commands held while their permit is awaited by a thread of ours (see held.h).
 *
 * Locking: h->mu guards the fields below and every libpq call on the connection while our
 * thread lives (libpq lets one thread use a connection at a time: the program's calls on it
 * are made under h->mu then, and so are ours). The connection's permit state is the thread's
 * alone while it lives: the program's calls that would touch it (PQgetResult, the synchronous
 * calls, PQfinish) first wait for the thread to end. No network call is made under h->mu but
 * libpq's own non-blocking sends and flushes (our thread sets the connection non-blocking while
 * it sends, and restores it) and a release's fire-and-forget write to Redis.
 *
 * libpq calls back into the program (notice processors, event procedures), and a callback may
 * call libpq on the same connection: a thread that holds h->mu marks it (`owned`), and its
 * re-entrant calls on that connection go straight to libpq rather than wait for itself. */
#include "held.h"

#include "cancel_map.h"
#include "clock.h"
#include "conn_registry.h"
#include "held_park.h"
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
    bool in_stand_in;          /* the results being read are a stand-in's (until its NULL) */
    int sent_before;           /* commands of a batch sent for real before its first stand-in:
                                  their results come first, untouched */
    int owed;                  /* failures to present that no answer will bring (the session
                                  is gone): PQgetResult gives them first */
    bool segment_start;        /* the next stand-in begins a pipeline segment: the refusal */
    char *refusal;             /* what the stand-ins present, and its SQLSTATE (NULL: none, a
                                  failure of libpq's own) */
    const char *refusal_state;
    char *error;  /* a call refused while held (PQerrorMessage) */
    bool counted; /* counted in `live` */
    /* Parked (held_park.h): waiting, with no thread of ours, for the thread that frees its
     * permit to send it. */
    dbt_park_cell park;
};

/* Connections whose held state is in use: while 0, the hooks go straight to libpq. */
static atomic_int live;

/* The held state this thread has locked (see the top). */
static __thread dbt_held *owned;

static void lock(dbt_held *h)
{
    pthread_mutex_lock(&h->mu);
    owned = h;
}

static void unlock(dbt_held *h)
{
    owned = NULL;
    pthread_mutex_unlock(&h->mu);
}

/* pthread_cond_wait that keeps `owned` right while the lock is given up. */
static void wait_cv(dbt_held *h)
{
    owned = NULL;
    pthread_cond_wait(&h->cv, &h->mu);
    owned = h;
}

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

/* The registry frees an entry's held state with the entry (nothing runs on it any more) and, in
 * a child after fork(), forgets its parent's (never sent here: the thread that would is the
 * parent's): told how before the first is made. */
static void held_free(dbt_held *h);
static void held_after_fork(dbt_held *h);
static const dbt_conn_held_ops held_ops = {.free = held_free, .after_fork = held_after_fork};
static pthread_once_t held_ops_once = PTHREAD_ONCE_INIT;

static void tell_registry(void)
{
    dbt_conn_set_held_ops(&held_ops);
}

static dbt_held *held_of(dbt_conn *c, PGconn *conn)
{
    pthread_once(&held_ops_once, tell_registry);
    if (!c->held && (c->held = calloc(1, sizeof *c->held)) != NULL) {
        init_sync(c->held);
        c->held->pg = conn;
        c->held->tail = &c->held->head;
    }
    return c->held;
}

/* Each thread remembers the held state it last looked up: a program calls PQisBusy,
 * PQconsumeInput and PQtransactionStatus many times a command on the same connection, and the
 * registry's lock, shared by every thread, cost a contended program dearly. `frees` counts the
 * held states freed: a remembered one is used only while none was (an address may be reused). */
static atomic_uint_fast64_t frees;
static __thread const void *remembered_conn;
static __thread dbt_held *remembered;
static __thread uint_fast64_t remembered_frees;

static dbt_held *held_state_of(const PGconn *conn)
{
    uint_fast64_t now = atomic_load(&frees);
    if (remembered_conn == conn && remembered_frees == now)
        return remembered;
    dbt_conn *c = dbt_conn_find(conn, false);
    dbt_held *h = c ? c->held : NULL;
    if (h) { /* (none is not remembered: the connection's first held command makes one) */
        remembered_conn = conn;
        remembered = h;
        remembered_frees = now;
    }
    return h;
}

dbt_held *dbt_held_lock(const PGconn *conn)
{
    if (atomic_load(&live) == 0 || !conn)
        return NULL;
    dbt_held *h = held_state_of(conn);
    if (!h || h == owned)
        return NULL; /* none, or a callback of libpq inside our own call on it */
    lock(h);
    if (h->counted)
        return h;
    unlock(h);
    return NULL;
}

void dbt_held_unlock(dbt_held *h)
{
    unlock(h);
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

/* What the commands that could not be sent present: libpq's own message, read right after the
 * call that failed, with no SQLSTATE (a failure of libpq's, as its own results have none). */
static void set_failure(dbt_held *h, const char *libpq_message)
{
    free(h->refusal);
    h->refusal = strdup(libpq_message && *libpq_message
                            ? libpq_message
                            : "dbthrottle: the held command could not be sent\n");
    h->refusal_state = NULL;
    h->segment_start = true;
}

static const char *libpq_error(PGconn *conn)
{
    __typeof__(&PQerrorMessage) err = DBT_REAL(PQerrorMessage);
    return err ? err(conn) : NULL;
}

/* Makes the held calls (or their stand-ins) and flushes them all out, on a connection set
 * non-blocking meanwhile (the program has been told nothing is left to flush; a full socket
 * must not keep h->mu). h->mu held; dropped while the socket is full. */
static void send_all(dbt_held *h, dbt_send_op *ops, bool granted)
{
    PGconn *conn = h->pg;
    __typeof__(&PQisnonblocking) is_nonblocking = DBT_REAL(PQisnonblocking);
    __typeof__(&PQsetnonblocking) set_nonblocking = DBT_REAL(PQsetnonblocking);
    __typeof__(&PQsetSingleRowMode) single_row = DBT_REAL(PQsetSingleRowMode);
    bool was_blocking = is_nonblocking && set_nonblocking && !is_nonblocking(conn);
    if (was_blocking)
        set_nonblocking(conn, 1);
    bool failed = false;
    int sent = 0;
    bool first_batch = h->stand_ins == 0 && h->owed == 0;
    dbt_nested++;
    for (dbt_send_op *op = ops; op; op = op->next) {
        if (granted && !failed) {
            op->rc = dbt_send_op_real(conn, op);
            if (op->rc && op->single_row && single_row)
                single_row(conn); /* asked for while it was held */
            sent += op->rc && dbt_op_is_command(op->type);
            if (op->rc || !dbt_op_is_command(op->type))
                continue;
            if (first_batch)
                h->sent_before = sent;
            failed = true;
            set_failure(h, libpq_error(conn)); /* before a stand-in resets the message */
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
        unlock(h);
        (void)poll(&p, 1, 100);
        lock(h);
    }
    if (was_blocking)
        set_nonblocking(conn, 0);
    dbt_nested--;
}

/* The permit state, told what was sent (as the PQsend* hooks tell it). h->mu held: the facts are
 * read from libpq, which the program's thread may be using meanwhile. */
static void account(PGconn *conn, const dbt_send_op *ops)
{
    for (const dbt_send_op *op = ops; op; op = op->next) {
        if (op->type == DBT_OP_PIPELINE_SYNC && op->rc != 0)
            dbt_throttle_pipeline_sync(conn);
        else if (dbt_op_is_command(op->type) && op->rc >= 0)
            dbt_throttle_sent(conn, op->rc == 1);
    }
}

static void serve(dbt_held *h)
{
    PGconn *conn = h->pg;
    lock(h);
    dbt_waker *waker = h->waker;
    dbt_acquire_wait *pending = h->pending;
    h->pending = NULL;
    unlock(h);

    dbt_verdict v = dbt_throttle_held_wait(conn, pending, h->t0_ms, stop_waiting, h, waker);

    lock(h);
    h->waker = NULL; /* withdraw fires it under h->mu: not once the cell is someone else's */
    dbt_cancel_wait *cell = h->cell;
    h->cell = NULL;
    unlock(h);
    dbt_cancel_wait_end(cell);

    lock(h);
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
            set_failure(h, libpq_error(conn));
            for (dbt_send_op *op = ops; op; op = op->next)
                if ((op->rc = -1, dbt_op_is_command(op->type)))
                    h->owed++;
        } else {
            send_all(h, ops, v == DBT_PROCEED);
        }
        account(conn, ops);
    }
    free_ops(ops);
    h->thread_alive = false;
    h->waiting = false;
    recount(h);
    pthread_cond_broadcast(&h->cv);
    unlock(h); /* h may be freed from here on (PQfinish) */
}

/* Our threads, kept for the next held command a while after theirs: creating one per command
 * cost a contended program more than the wait it saved (pgbench -S -c16 -j16 at a limit of 4
 * ran at 0.65 x PgBouncer's rate, 1.07 x before held commands). Each serves one command at a
 * time; an idle one waits IDLE_EXIT_MS for the next, then ends. */
#define IDLE_EXIT_MS 2000

typedef struct job {
    dbt_held *h;
    struct job *next;
} job;

static pthread_mutex_t workers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t workers_cv = PTHREAD_COND_INITIALIZER;
static job *jobs, **jobs_tail = &jobs;
static int idle_workers;
static pthread_once_t workers_once = PTHREAD_ONCE_INIT;

/* ---- parked: sent by the thread that frees the permit -------------------------------------- */

/* A command the releasing thread may send for it: one command (not a pipeline, whose later
 * calls join it while held) small enough that its send leaves nothing to flush on a socket
 * that had nothing in flight (libpq's own output buffer is 8 kB; the kernel's takes more). */
#define DELIVER_MAX_BYTES 4096

static size_t op_bytes(const dbt_send_op *op)
{
    size_t n = (op->text ? strlen(op->text) : 0) + (op->name ? strlen(op->name) : 0) + 64;
    for (int i = 0; op->values && i < op->nparams; i++)
        if (op->values[i])
            n += op->formats && op->formats[i] && op->lengths ? (size_t)op->lengths[i]
                                                              : strlen(op->values[i]);
    return n;
}

/* Set (dbt_held_deliver_here) while the program's thread gives a command's permit back in
 * PQgetResult: only there is a parked command sent in the releasing thread. Elsewhere (our
 * threads, the session watcher, a failed send under a held state's lock) its wake goes to the
 * watch and a thread of ours sends it, as before. */
static __thread bool may_deliver;

void dbt_held_deliver_here(bool on)
{
    may_deliver = on;
}

static bool deliver_claim(void *arg, bool ours)
{
    dbt_held *h = arg;
    if ((!may_deliver && !ours) || owned || dbt_nested)
        return false;
    return dbt_park_claim(&h->park);
}

static void deliver_serve(void *arg)
{
    serve(arg);
}

static bool spawn(dbt_held *h);

/* From the watch: the command's fd woke or its deadline came: a thread of ours finishes it. */
static void unpark(void *arg)
{
    dbt_held *h = arg;
    if (!spawn(h))
        serve(h);
}

/* Asked by the watch, under its lock, of a parked command: whether it needs a thread now (a wake
 * came for its acquire; a cancel, PQfinish or the session gone). */
static bool parked_due(void *arg)
{
    dbt_held *h = arg;
    return stop_waiting(h) || dbt_acquire_wait_notified(h->pending);
}

static const dbt_deliver_ops deliver_ops = {.claim = deliver_claim, .serve = deliver_serve};
static pthread_once_t deliver_once = PTHREAD_ONCE_INIT;

static void deliver_init(void)
{
    dbt_park_set_fire(unpark, parked_due);
    dbt_acquire_set_deliver(&deliver_ops);
}

/* Parks h's command (see held_park.h) when it may be sent by the releasing thread and someone
 * listens for the pool's grants; false: a thread of ours waits for it. */
static bool park(dbt_held *h, const dbt_send_op *op, dbt_acquire_wait *pending, dbt_waker *waker,
                 bool pipeline)
{
    if (pipeline || op_bytes(op) > DELIVER_MAX_BYTES)
        return false;
    pthread_once(&deliver_once, deliver_init);
    int notify = dbt_park_notify_fd();
    if (notify < 0 || !dbt_acquire_wait_park(pending, waker, h, notify))
        return false;
    /* A cancel (or a session found gone) that came before the waker was published told nobody:
     * looked at now, while h is still this thread's alone (a wait_for after this republishes
     * the waker to its own eventfd). Later ones, and wakes of the acquire, wake the watch once h
     * is linked; dbt_park refuses to link one that something came for already. */
    if (stop_waiting(h))
        return false;
    /* No watch: a thread waits; a releasing thread's claim finds nothing parked. */
    return dbt_park(&h->park, dbt_acquire_wait_deadline_us(pending), h);
}

/* In a child after fork(): the parent's threads are not here, nor are its jobs. */
static void workers_after_fork(void)
{
    pthread_mutex_t fresh_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    workers_mu = fresh_mu;
    workers_cv = fresh_cv;
    jobs = NULL; /* leaked: a few bytes per command held at fork() */
    jobs_tail = &jobs;
    idle_workers = 0;
}

static void workers_init(void)
{
    pthread_atfork(NULL, NULL, workers_after_fork);
}

static void *worker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&workers_mu);
    for (;;) {
        while (!jobs) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += IDLE_EXIT_MS / 1000;
            idle_workers++;
            int rc = pthread_cond_timedwait(&workers_cv, &workers_mu, &until);
            idle_workers--;
            if (rc != 0 && !jobs) {
                pthread_mutex_unlock(&workers_mu);
                return NULL;
            }
        }
        job *j = jobs;
        jobs = j->next;
        if (!jobs)
            jobs_tail = &jobs;
        pthread_mutex_unlock(&workers_mu);
        dbt_held *h = j->h;
        free(j);
        serve(h);
        pthread_mutex_lock(&workers_mu);
    }
}

/* A detached thread with every signal blocked: signals are the program's threads' business. */
static bool new_worker(void)
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
    int rc = pthread_create(&t, &a, worker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    return rc == 0;
}

/* h's command to an idle worker, or to a new one. False: no thread to be had. */
static bool spawn(dbt_held *h)
{
    pthread_once(&workers_once, workers_init);
    job *j = malloc(sizeof *j);
    if (!j)
        return false;
    j->h = h;
    j->next = NULL;
    pthread_mutex_lock(&workers_mu);
    *jobs_tail = j;
    jobs_tail = &j->next;
    int queued = 0;
    for (job *k = jobs; k; k = k->next)
        queued++;
    bool enough = idle_workers >= queued;
    if (enough)
        pthread_cond_signal(&workers_cv);
    pthread_mutex_unlock(&workers_mu);
    if (enough || new_worker())
        return true;
    /* No new thread: take the job back (an idle one may have taken it meanwhile). */
    pthread_mutex_lock(&workers_mu);
    bool mine = false;
    for (job **k = &jobs; *k; k = &(*k)->next)
        if (*k == j) {
            *k = j->next;
            mine = true;
            break;
        }
    jobs_tail = &jobs;
    while (*jobs_tail)
        jobs_tail = &(*jobs_tail)->next;
    pthread_mutex_unlock(&workers_mu);
    if (mine)
        free(j);
    return !mine;
}

int dbt_held_start(PGconn *conn, const dbt_send_op *op, dbt_acquire_wait *pending,
                   dbt_cancel_wait *cell)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    dbt_held *h = c ? held_of(c, conn) : NULL;
    dbt_send_op *copy = h ? dbt_send_op_copy(op) : NULL;
    if (!copy) {
        /* Out of memory: wait in this call, as the synchronous calls do. */
        dbt_verdict v = dbt_throttle_held_wait(conn, pending, dbt_now_us() / 1000,
                                               cell ? dbt_cancel_requested : NULL, cell,
                                               dbt_cancel_waker(cell));
        dbt_cancel_wait_end(cell);
        if (v == DBT_REFUSE)
            return 0;
        dbt_nested++;
        int ok = dbt_send_op_real(conn, op);
        dbt_nested--;
        dbt_throttle_sent(conn, ok);
        return ok;
    }
    __typeof__(&PQpipelineStatus) pipeline_status = DBT_REAL(PQpipelineStatus);
    lock(h);
    free_ops(h->head); /* none: a withdrawal or the last send emptied it */
    h->head = copy;
    h->tail = &copy->next;
    h->pending = pending;
    h->t0_ms = dbt_now_us() / 1000;
    if (h->stand_ins == 0 && h->owed == 0) {
        /* Nothing of an earlier refusal is left to present: start afresh. */
        h->pipeline = pipeline_status && pipeline_status(conn) != PQ_PIPELINE_OFF;
        free(h->refusal);
        h->refusal = NULL;
        h->refusal_state = NULL;
        h->in_stand_in = false;
        h->sent_before = 0;
    }
    h->segment_start = true;
    h->waiting = true;
    h->thread_alive = true;
    atomic_store(&h->withdrawn, false);
    atomic_store(&h->conn_lost, false);
    /* Claimed by the caller before the acquire, not in the thread: a cancel that came while the
     * acquire was on its way, or comes as soon as this call returns, ends the wait. */
    h->cell = cell;
    h->waker = h->cell ? dbt_cancel_waker(h->cell) : &h->own_waker;
    free(h->error);
    h->error = NULL;
    recount(h);
    dbt_waker *waker = h->waker;
    bool pipeline = h->pipeline;
    unlock(h);
    if (park(h, op, pending, waker, pipeline))
        return 1; /* the thread that frees its permit sends it, or the watch hands it on */
    /* Passed a permit between its queueing and now (by a thread that found it not yet parked):
     * sent here, as that thread would have, not by a thread of ours woken for it. Else a thread
     * waits for it; none to be had, this call waits, as before. */
    if (dbt_acquire_wait_granted(pending) || !spawn(h))
        serve(h);
    return 1;
}

/* h->mu held: the held command can never be sent on a session libpq found gone: its wait ends
 * now rather than at its timeout, and it then reads as failed with libpq's message. */
static void end_wait_if_gone(dbt_held *h)
{
    __typeof__(&PQstatus) status = DBT_REAL(PQstatus);
    if (h->waiting && h->waker && status && status(h->pg) == CONNECTION_BAD) {
        atomic_store(&h->conn_lost, true);
        dbt_waker_fire(h->waker);
    }
}

bool dbt_held_gone(dbt_held *h)
{
    end_wait_if_gone(h);
    return atomic_load(&h->conn_lost);
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
        unlock(h);
        return true;
    }
    if (!h->waiting) {
        while (h->thread_alive) /* our send is being flushed: then the program's */
            wait_cv(h);
        free(h->error);
        h->error = NULL;
        unlock(h);
        return false;
    }
    if (!h->pipeline) {
        dbt_held_set_error(h, op->type == DBT_OP_PIPELINE_SYNC || op->type == DBT_OP_FLUSH_REQUEST
                                  ? "cannot send pipeline when not in pipeline mode\n"
                                  : "another command is already in progress\n");
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
    unlock(h);
    return true;
}

int dbt_held_single_row(dbt_held *h, PGconn *conn)
{
    if (h->waiting) {
        /* libpq allows it right after the command is sent: it is, as far as the program can
         * tell. Made on the real connection right after our real send. */
        dbt_send_op *last = h->head;
        while (last && last->next)
            last = last->next;
        if (!last || !dbt_op_is_command(last->type) || last->single_row)
            return 0;
        last->single_row = true;
        return 1;
    }
    while (h->thread_alive)
        wait_cv(h);
    __typeof__(&PQsetSingleRowMode) real = DBT_REAL(PQsetSingleRowMode);
    return real ? real(conn) : 0;
}

int dbt_held_exit_pipeline(dbt_held *h, PGconn *conn)
{
    int ok = 0;
    if (h->waiting) {
        dbt_held_set_error(h, "cannot exit pipeline mode with uncollected results\n");
    } else {
        while (h->thread_alive)
            wait_cv(h);
        __typeof__(&PQexitPipelineMode) real = DBT_REAL(PQexitPipelineMode);
        ok = real ? real(conn) : 0;
    }
    unlock(h);
    return ok;
}

const char *dbt_held_error(const PGconn *conn)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return NULL;
    const char *e = h->error; /* freed only by the connection's own thread (its next calls) */
    unlock(h);
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
        dbt_refused_add(r, h->refusal ? h->refusal : "dbthrottle: refused\n", h->refusal_state);
    return r;
}

/* A result libpq read while stand-ins are owed answers: the stand-ins' answers come first, in
 * order, one command's results and its NULL each (whatever the server said: an empty query's
 * answer, or a pipeline segment already aborted); syncs between them are the program's own. */
static PGresult *translate(dbt_held *h, PGconn *conn, PGresult *res)
{
    if (h->sent_before > 0) {
        if (!res)
            h->sent_before--; /* the end of a command sent for real */
        return res;
    }
    if (!res) {
        if (h->in_stand_in) {
            h->in_stand_in = false;
            h->stand_ins--;
            recount(h);
        }
        return NULL;
    }
    __typeof__(&PQresultStatus) status = DBT_REAL(PQresultStatus);
    ExecStatusType st = status ? status(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_PIPELINE_SYNC) {
        h->segment_start = true;
        return res;
    }
    if (h->in_stand_in)
        return res; /* never: a stand-in has one result */
    h->in_stand_in = true;
    if (st == PGRES_PIPELINE_ABORTED) {
        h->segment_start = false; /* libpq's own word for it is right */
        return res;
    }
    PGresult *mine = stand_in_result(h, conn);
    if (mine) {
        __typeof__(&PQclear) clear = DBT_REAL(PQclear);
        if (clear)
            clear(res);
        res = mine;
    }
    return res;
}

PGresult *dbt_held_get_result(dbt_held *h, PGconn *conn)
{
    end_wait_if_gone(h);
    while (h->thread_alive) /* a blocking read of a held command: wait for it to be sent */
        wait_cv(h);
    if (h->owed > 0) {
        h->owed--;
        PGresult *mine = stand_in_result(h, conn);
        recount(h);
        unlock(h);
        return mine;
    }
    __typeof__(&PQgetResult) real = DBT_REAL(PQgetResult);
    PGresult *res = real ? real(conn) : NULL;
    if (h->stand_ins > 0)
        res = translate(h, conn, res);
    unlock(h);
    return res;
}

bool dbt_held_settle(PGconn *conn)
{
    dbt_held *h = dbt_held_lock(conn);
    if (!h)
        return false;
    end_wait_if_gone(h);
    while (h->thread_alive)
        wait_cv(h);
    bool unread = (h->stand_ins > 0 || h->owed > 0) && !h->pipeline;
    unlock(h);
    return unread;
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
        wait_cv(h);
    free_ops(h->head);
    h->head = NULL;
    h->tail = &h->head;
    h->waiting = false;
    h->stand_ins = h->owed = h->sent_before = 0;
    h->in_stand_in = false;
    recount(h);
    unlock(h);
}

static void held_free(dbt_held *h)
{
    if (!h)
        return;
    /* The thread that served h's last command may still be letting go of h (serve's end: its
     * count in `live` is given back before it wakes waiters and unlocks, and PQfinish, seeing
     * nothing live, takes no lock before freeing): it is done with h once the lock is ours. */
    pthread_mutex_lock(&h->mu);
    pthread_mutex_unlock(&h->mu);
    atomic_fetch_add(&frees, 1);
    if (h->counted)
        atomic_fetch_sub(&live, 1);
    free_ops(h->head);
    free(h->refusal);
    free(h->error);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static void held_after_fork(dbt_held *h)
{
    if (!h)
        return;
    init_sync(h); /* the parent's thread may have held it at fork() */
    free_ops(h->head);
    h->head = NULL;
    h->tail = &h->head;
    free(h->pending); /* the parent's queued acquire: its thread's, which the child lacks */
    h->pending = NULL;
    h->waiting = h->thread_alive = false;
    h->waker = NULL;
    h->cell = NULL;
    h->stand_ins = h->owed = h->sent_before = 0;
    h->in_stand_in = false;
    memset(&h->park, 0, sizeof h->park); /* the watch forgot it too (held_park.c) */
    if (h->counted)
        atomic_fetch_sub(&live, 1);
    h->counted = false;
    free(h->error);
    h->error = NULL;
}
