/* replay.c - a sample's holds run again at a candidate limit (replay.h): an event simulation of
 * the queue acquire.lua keeps (first come first served, no barging, weights as units; with
 * classes, _common.lua's choice of the waiter to serve). */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

/* ---- time-weighted concurrency ------------------------------------------------------------- */

/* Time spent at each level of concurrency, grown as levels are reached. */
typedef struct {
    int64_t *at; /* at[level]: us spent at that level */
    int cap, peak;
    int64_t last_us, total_us;
    double weighted; /* sum of level * us */
    int level;
    bool started;
} level_time;

static bool level_change(level_time *lt, int64_t t, int delta)
{
    if (lt->started && t > lt->last_us) {
        int64_t dt = t - lt->last_us;
        lt->at[lt->level] += dt;
        lt->total_us += dt;
        lt->weighted += (double)lt->level * (double)dt;
    }
    lt->started = true;
    if (t > lt->last_us)
        lt->last_us = t;
    lt->level += delta;
    if (lt->level >= lt->cap) {
        int cap = lt->cap ? lt->cap * 2 : 64;
        while (cap <= lt->level)
            cap *= 2;
        int64_t *at = realloc(lt->at, (size_t)cap * sizeof *at);
        if (!at)
            return false;
        memset(at + lt->cap, 0, (size_t)(cap - lt->cap) * sizeof *at);
        lt->at = at;
        lt->cap = cap;
    }
    if (lt->level > lt->peak)
        lt->peak = lt->level;
    return true;
}

/* The least level at or below which the share q of the time was spent. */
static int level_quantile(const level_time *lt, double q)
{
    if (lt->total_us <= 0)
        return 0;
    int64_t sum = 0;
    for (int l = 0; l <= lt->peak && l < lt->cap; l++) {
        sum += lt->at[l];
        if ((double)sum >= q * (double)lt->total_us)
            return l;
    }
    return lt->peak;
}

static void level_summary(const level_time *lt, dbt_replay_concurrency *out)
{
    out->mean = lt->total_us > 0 ? lt->weighted / (double)lt->total_us : 0;
    out->p50 = level_quantile(lt, 0.50);
    out->p99 = level_quantile(lt, 0.99);
    out->peak = lt->peak;
}

/* A hold's place in the run: its connection's commands together, in the order they asked. */
typedef struct {
    int conn;
    int64_t arrival_us;
    size_t idx;
} keyed;

static int by_conn_then_arrival(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->conn != y->conn)
        return x->conn < y->conn ? -1 : 1;
    if (x->arrival_us != y->arrival_us)
        return x->arrival_us < y->arrival_us ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* ---- the observed concurrency -------------------------------------------------------------- */

typedef struct {
    int64_t t;
    int delta;
} edge;

static int edge_cmp(const void *a, const void *b)
{
    const edge *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->delta - y->delta; /* an end before a start at the same instant */
}

/* The observed concurrency's edges, sorted (2n of them, into *out; NULL when out of memory). */
static edge *observed_edges(const dbt_replay_hold *holds, size_t n)
{
    edge *e = malloc(2 * n * sizeof *e);
    keyed *order = malloc(n * sizeof *order);
    if (!e || !order) {
        free(e);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (keyed){holds[i].conn, holds[i].arrival_us, i};
    qsort(order, n, sizeof *order, by_conn_then_arrival);
    for (size_t i = 0; i < n; i++) {
        /* as the replay holds a unit: from the arrival, for the wait (the acquire's round trip)
         * and the hold, a weight of w as w units (sampled enforced and queued: from its grant,
         * its round trips before its queueing); and never past its connection's next arrival
         * (a release a little late, measured after the next command asked: the replay starts
         * that one after it too) */
        const dbt_replay_hold *h = &holds[order[i].idx];
        int64_t end = h->arrival_us + h->queued_us + h->wait_us + h->hold_us;
        int64_t start = h->queued_us > 0 ? end - h->hold_us : h->arrival_us;
        if (i + 1 < n && order[i + 1].conn == h->conn && order[i + 1].arrival_us < end)
            end = order[i + 1].arrival_us > start ? order[i + 1].arrival_us : start;
        e[2 * i] = (edge){start, h->weight};
        e[2 * i + 1] = (edge){end, -h->weight};
    }
    free(order);
    qsort(e, 2 * n, sizeof *e, edge_cmp);
    return e;
}

bool dbt_replay_observed(const dbt_replay_hold *holds, size_t n, dbt_replay_concurrency *out,
                         int64_t *span_us)
{
    memset(out, 0, sizeof *out);
    *span_us = 0;
    if (n == 0)
        return true;
    edge *e = observed_edges(holds, n);
    if (!e)
        return false;
    level_time lt = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < 2 * n; i++)
        ok = level_change(&lt, e[i].t, e[i].delta);
    if (ok) {
        level_summary(&lt, out);
        *span_us = e[2 * n - 1].t - e[0].t;
    }
    free(lt.at);
    free(e);
    return ok;
}

bool dbt_replay_timeline(const dbt_replay_hold *holds, size_t n, int64_t bucket_us,
                         dbt_replay_bucket **out, size_t *nbuckets)
{
    *out = NULL;
    *nbuckets = 0;
    if (n == 0 || bucket_us <= 0)
        return true;
    edge *e = observed_edges(holds, n);
    if (!e)
        return false;
    /* periods from the first arrival up to the last end: a span of whole periods has no empty
     * one after it (at least one period, for a span of an instant) */
    int64_t from = e[0].t, to = e[2 * n - 1].t;
    size_t nb = to > from ? (size_t)((to - from + bucket_us - 1) / bucket_us) : 1;
    dbt_replay_bucket *b = calloc(nb, sizeof *b);
    if (!b) {
        free(e);
        return false;
    }
    for (size_t i = 0; i < nb; i++)
        b[i].start_us = from + (int64_t)i * bucket_us;
    /* The level holds from each edge to the next: its time goes to the buckets it spans, and it
     * is each one's peak candidate (a level reached and left at one instant counts too). */
    int level = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        level += e[i].delta;
        int64_t t = e[i].t, next = i + 1 < 2 * n ? e[i + 1].t : t;
        size_t k = (size_t)((t - from) / bucket_us);
        if (k >= nb) /* the last end, on a period's bound */
            k = nb - 1;
        if (level > b[k].peak)
            b[k].peak = level;
        while (t < next) {
            int64_t edge_of = from + (int64_t)(k + 1) * bucket_us;
            int64_t upto = next < edge_of ? next : edge_of;
            b[k].units_us += (double)level * (double)(upto - t);
            t = upto;
            if (t == edge_of && t < next) {
                k++;
                if (level > b[k].peak)
                    b[k].peak = level;
            }
        }
    }
    for (size_t i = 0; i < nb; i++) {
        int64_t len = i + 1 < nb ? bucket_us : to - b[i].start_us;
        b[i].mean = len > 0 ? b[i].units_us / (double)len : 0;
    }
    free(e);
    *out = b;
    *nbuckets = nb;
    return true;
}

/* ---- the replay ---------------------------------------------------------------------------- */

/* At one instant, in this order: a limit that changes then applies to who arrives then. */
enum { EV_END = 0, EV_TIMEOUT = 1, EV_LIMIT = 2, EV_ARRIVE = 3 };

typedef struct {
    int64_t t;
    uint64_t seq;
    int type;
    size_t hold; /* index into the run's order */
} event;

typedef struct {
    event *v;
    size_t n, cap;
    uint64_t seq;
} heap;

static bool ev_before(const event *a, const event *b)
{
    if (a->t != b->t)
        return a->t < b->t;
    if (a->type != b->type)
        return a->type < b->type;
    return a->seq < b->seq;
}

static bool heap_push(heap *h, int64_t t, int type, size_t hold)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        event *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->v[i] = (event){t, h->seq++, type, hold};
    while (i > 0 && ev_before(&h->v[i], &h->v[(i - 1) / 2])) {
        event tmp = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
    return true;
}

static event heap_pop(heap *h)
{
    event top = h->v[0];
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && ev_before(&h->v[l], &h->v[m]))
            m = l;
        if (r < h->n && ev_before(&h->v[r], &h->v[m]))
            m = r;
        if (m == i)
            break;
        event tmp = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = tmp;
        i = m;
    }
    return top;
}

enum { ST_NEW, ST_QUEUED, ST_RUNNING, ST_DONE, ST_REFUSED };

/* A hold as the run sees it, in each connection's order. */
typedef struct {
    const dbt_replay_hold *h;
    int64_t pause_us;  /* after its connection's previous one ended (or was refused) */
    int64_t asked_us;  /* when it asks in the replay */
    int64_t waited_us; /* the time the limit added */
    int units;         /* the units it holds once granted (its weight cut to the limit then) */
    uint64_t ticket;   /* its place in arrival order */
    bool last_of_conn; /* its connection has no command after it */
    bool capped;       /* refused at once: its class's queue was full */
    int state;
} run_hold;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The value at or below which the share q of the sorted values v[0..n) lie. */
static int64_t quantile(const int64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)n + 0.999999);
    if (i > 0)
        i--;
    return v[i < n ? i : n - 1];
}

#define NONE SIZE_MAX

/* Waiters in arrival order (indices into the run's holds): one that left (granted or refused)
 * stays until it reaches the head, where it is skipped. */
typedef struct {
    size_t *v;
    size_t head, tail;
} fifo;

/* The run's state. */
typedef struct {
    run_hold *r;
    size_t n;
    int limit, in_use;
    int64_t timeout_us;
    fifo queue;                       /* every waiter: the oldest at its head */
    const dbt_replay_classes *cl;     /* NULL: no classes */
    fifo cq[DBT_REPLAY_MAX_CLASSES];  /* with classes: each one's waiters */
    int held[DBT_REPLAY_MAX_CLASSES]; /* ... and the units its permits hold */
    long long waiting[DBT_REPLAY_MAX_CLASSES];
    uint64_t tickets;
    heap h;
    level_time running; /* commands at the server */
    int64_t full_since_us, full_us;
    long long refused;
    const dbt_replay_limit *schedule; /* the limit over time (EV_LIMIT: an index into it) */
} run;

static size_t fifo_head(fifo *q, const run *x)
{
    while (q->head < q->tail && x->r[q->v[q->head]].state != ST_QUEUED)
        q->head++;
    return q->head < q->tail ? q->v[q->head] : NONE;
}

static void note_units(run *x, int64_t t, int delta)
{
    bool was_full = x->in_use >= x->limit;
    x->in_use += delta;
    bool full = x->in_use >= x->limit;
    if (!was_full && full)
        x->full_since_us = t;
    else if (was_full && !full)
        x->full_us += t - x->full_since_us;
}

/* The limit becomes l at t (a schedule's change): whether every unit is in use changes with it. */
static void set_limit(run *x, int64_t t, int l)
{
    bool was_full = x->in_use >= x->limit;
    x->limit = l;
    bool full = x->in_use >= x->limit;
    if (!was_full && full)
        x->full_since_us = t;
    else if (was_full && !full)
        x->full_us += t - x->full_since_us;
}

/* A command's units at this limit: its weight, cut to the limit (as the library cuts a weight
 * above the limit at its grant: the command then runs alone). */
static int units_of(const run *x, const run_hold *rh)
{
    return rh->h->weight < x->limit ? rh->h->weight : x->limit;
}

/* Class c's guarantee at the run's limit (_common.lua's K.guarantee). */
static int guarantee(const run *x, int c)
{
    int share = x->cl->v[c].share;
    if (share <= 0)
        return 0;
    int g = (int)((long long)x->limit * share / 100);
    return g > 1 ? g : 1;
}

/* The waiter to serve next at t (_common.lua's K.choose), NONE when nobody waits. */
static size_t choose(run *x, int64_t t)
{
    size_t oldest = fifo_head(&x->queue, x);
    if (oldest == NONE || !x->cl)
        return oldest;
    if (x->cl->aging_us > 0 && t - x->r[oldest].asked_us >= x->cl->aging_us)
        return oldest;
    size_t best = NONE;
    int best_tier = 0, best_priority = 0;
    for (int c = 0; c < x->cl->n; c++) {
        size_t i = fifo_head(&x->cq[c], x);
        if (i == NONE)
            continue;
        int tier = x->held[c] < guarantee(x, c) ? 0 : 1, priority = x->cl->v[c].priority;
        if (best == NONE || tier < best_tier ||
            (tier == best_tier &&
             (priority > best_priority ||
              (priority == best_priority && x->r[i].ticket < x->r[best].ticket)))) {
            best = i;
            best_tier = tier;
            best_priority = priority;
        }
    }
    return best;
}

/* The connection of r[i] goes on: its next command asks after its pause. */
static bool next_of_conn(run *x, size_t i, int64_t t)
{
    if (x->r[i].last_of_conn)
        return true;
    return heap_push(&x->h, t + x->r[i + 1].pause_us, EV_ARRIVE, i + 1);
}

static int class_of(const run *x, const run_hold *rh)
{
    return x->cl ? rh->h->klass : 0;
}

/* r[i] leaves the queue (granted or refused at t): the time it waited. */
static void leave_queue(run *x, size_t i, int64_t t, int state)
{
    run_hold *rh = &x->r[i];
    rh->state = state;
    rh->waited_us = t - rh->asked_us;
    x->waiting[class_of(x, rh)]--;
}

static bool grant(run *x, size_t i, int64_t t)
{
    run_hold *rh = &x->r[i];
    leave_queue(x, i, t, ST_RUNNING);
    rh->units = units_of(x, rh); /* (the limit may change while it runs) */
    x->held[class_of(x, rh)] += rh->units;
    note_units(x, t, rh->units);
    return level_change(&x->running, t, rh->units) &&
           heap_push(&x->h, t + rh->h->wait_us + rh->h->hold_us, EV_END, i);
}

/* Grants the one chosen while its weight fits (the pumps of release.lua and cancel.lua). */
static bool grant_chosen(run *x, int64_t t)
{
    for (;;) {
        size_t i = choose(x, t);
        if (i == NONE || x->in_use + units_of(x, &x->r[i]) > x->limit)
            return true;
        if (!grant(x, i, t))
            return false;
    }
}

static bool arrive(run *x, size_t i, int64_t t)
{
    run_hold *rh = &x->r[i];
    int c = class_of(x, rh);
    rh->asked_us = t;
    rh->ticket = x->tickets++;
    rh->state = ST_QUEUED;
    x->queue.v[x->queue.tail++] = i;
    if (x->cl)
        x->cq[c].v[x->cq[c].tail++] = i;
    x->waiting[c]++;
    /* acquire.lua: granted at once only if chosen over every waiter and it fits */
    if (choose(x, t) == i && x->in_use + units_of(x, rh) <= x->limit)
        return grant(x, i, t);
    const dbt_replay_class *k = x->cl ? &x->cl->v[c] : NULL;
    if (k && k->cap >= 0 && x->waiting[c] - 1 >= k->cap) {
        leave_queue(x, i, t, ST_REFUSED);
        rh->capped = true;
        x->refused++;
        return next_of_conn(x, i, t);
    }
    int64_t timeout = k && k->wait_us >= 0 ? k->wait_us : x->timeout_us;
    return timeout < 0 || heap_push(&x->h, t + timeout, EV_TIMEOUT, i);
}

static bool step(run *x, event ev)
{
    run_hold *rh = &x->r[ev.hold];
    switch (ev.type) {
    case EV_ARRIVE:
        return arrive(x, ev.hold, ev.t);
    case EV_TIMEOUT:
        if (rh->state != ST_QUEUED)
            return true;
        leave_queue(x, ev.hold, ev.t, ST_REFUSED);
        x->refused++;
        /* a refused waiter may have blocked the one behind it, which may fit */
        return grant_chosen(x, ev.t) && next_of_conn(x, ev.hold, ev.t);
    case EV_END:
        rh->state = ST_DONE;
        x->held[class_of(x, rh)] -= rh->units;
        note_units(x, ev.t, -rh->units);
        if (!level_change(&x->running, ev.t, -rh->units))
            return false;
        return grant_chosen(x, ev.t) && next_of_conn(x, ev.hold, ev.t);
    case EV_LIMIT:
        /* (ev.hold: the schedule's index) a higher limit grants the waiters that now fit, as
         * adapt.lua's set does; a lower one grants nobody until enough have ended */
        set_limit(x, ev.t, x->schedule[ev.hold].limit);
        return grant_chosen(x, ev.t);
    }
    return false;
}

/* Each class's share of the run's result: waits[] is scratch of n. */
static void class_results(const run *x, int64_t *waits, dbt_replay_result *out)
{
    out->nclasses = x->cl->n;
    for (int c = 0; c < x->cl->n; c++) {
        dbt_replay_class_result *k = &out->klass[c];
        size_t m = 0;
        double sum = 0;
        for (size_t i = 0; i < x->n; i++) {
            const run_hold *rh = &x->r[i];
            if (rh->h->klass != c)
                continue;
            waits[m++] = rh->waited_us;
            sum += (double)rh->waited_us;
            k->waited += rh->waited_us > 0;
            k->refused += rh->state == ST_REFUSED;
            k->capped += rh->capped;
        }
        k->commands = (long long)m;
        k->wait_mean_us = m ? sum / (double)m : 0;
        qsort(waits, m, sizeof *waits, cmp_i64);
        k->wait_p50_us = quantile(waits, m, 0.50);
        k->wait_p99_us = quantile(waits, m, 0.99);
        k->wait_max_us = m ? waits[m - 1] : 0;
    }
}

/* The class queues' room: each as many as its holds. False when out of memory. */
static bool class_queues(run *x)
{
    size_t count[DBT_REPLAY_MAX_CLASSES] = {0};
    for (size_t i = 0; i < x->n; i++)
        count[x->r[i].h->klass]++;
    for (int c = 0; c < x->cl->n; c++)
        if (count[c] && !(x->cq[c].v = malloc(count[c] * sizeof *x->cq[c].v)))
            return false;
    return true;
}

bool dbt_replay(const dbt_replay_hold *holds, size_t n, int limit, int64_t wait_timeout_us,
                const dbt_replay_classes *classes, dbt_replay_result *out)
{
    dbt_replay_limit one = {.from_us = INT64_MIN, .limit = limit};
    return dbt_replay_scheduled(holds, n, &one, 1, wait_timeout_us, classes, out);
}

bool dbt_replay_scheduled(const dbt_replay_hold *holds, size_t n, const dbt_replay_limit *schedule,
                          size_t nschedule, int64_t wait_timeout_us,
                          const dbt_replay_classes *classes, dbt_replay_result *out)
{
    memset(out, 0, sizeof *out);
    if (nschedule == 0)
        return false;
    int limit = schedule[0].limit;
    for (size_t i = 0; i < nschedule; i++)
        if (schedule[i].limit < 1 || (i > 0 && schedule[i].from_us < schedule[i - 1].from_us))
            return false;
    out->limit = limit;
    if (classes && classes->n <= 0)
        classes = NULL;
    if (classes && classes->n > DBT_REPLAY_MAX_CLASSES)
        return false;
    for (size_t i = 0; classes && i < n; i++)
        if (holds[i].klass < 0 || holds[i].klass >= classes->n)
            return false;
    if (n == 0)
        return true;
    run x = {
        .n = n, .limit = limit, .timeout_us = wait_timeout_us, .cl = classes, .schedule = schedule};
    for (size_t i = 1; i < nschedule; i++)
        if (!heap_push(&x.h, schedule[i].from_us, EV_LIMIT, i)) {
            free(x.h.v);
            return false;
        }
    keyed *order = malloc(n * sizeof *order);
    x.r = calloc(n, sizeof *x.r);
    x.queue.v = malloc(n * sizeof *x.queue.v);
    int64_t *waits = malloc(n * sizeof *waits);
    bool ok = order && x.r && x.queue.v && waits;
    if (ok) {
        for (size_t i = 0; i < n; i++)
            order[i] = (keyed){holds[i].conn, holds[i].arrival_us, i};
        qsort(order, n, sizeof *order, by_conn_then_arrival);
        for (size_t i = 0; i < n; i++) {
            const dbt_replay_hold *h = &holds[order[i].idx];
            x.r[i].h = h;
            bool first = i == 0 || order[i - 1].conn != h->conn;
            x.r[i].last_of_conn = i + 1 == n || order[i + 1].conn != h->conn;
            if (first) {
                ok = ok && heap_push(&x.h, h->arrival_us, EV_ARRIVE, i);
            } else {
                const dbt_replay_hold *prev = &holds[order[i - 1].idx];
                int64_t ended = prev->arrival_us + prev->queued_us + prev->wait_us + prev->hold_us;
                x.r[i].pause_us = h->arrival_us > ended ? h->arrival_us - ended : 0;
            }
        }
        ok = ok && (!classes || class_queues(&x));
    }
    int64_t first_t = 0, last_t = 0;
    bool any = false;
    while (ok && x.h.n > 0) {
        event ev = heap_pop(&x.h);
        /* (a change of the limit is no command's: not the span's start or end; nor a timeout
         * of a waiter granted before it, which changes nothing) */
        bool commands = ev.type != EV_LIMIT;
        if (!any && commands)
            first_t = ev.t;
        any = any || commands;
        if (commands && (ev.type != EV_TIMEOUT || x.r[ev.hold].state == ST_QUEUED))
            last_t = ev.t;
        ok = step(&x, ev);
    }
    if (ok) {
        if (x.in_use >= x.limit)
            x.full_us += last_t - x.full_since_us;
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            waits[i] = x.r[i].waited_us;
            out->waited += x.r[i].waited_us > 0;
            sum += (double)x.r[i].waited_us;
        }
        out->wait_mean_us = sum / (double)n;
        qsort(waits, n, sizeof *waits, cmp_i64);
        out->commands = (long long)n;
        out->refused = x.refused;
        out->wait_p50_us = quantile(waits, n, 0.50);
        out->wait_p99_us = quantile(waits, n, 0.99);
        out->wait_max_us = waits[n - 1];
        out->span_us = last_t - first_t;
        level_summary(&x.running, &out->server);
        out->server.at_limit_share =
            out->span_us > 0 ? (double)x.full_us / (double)out->span_us : 0;
        if (classes)
            class_results(&x, waits, out);
    }
    for (int c = 0; c < DBT_REPLAY_MAX_CLASSES; c++)
        free(x.cq[c].v);
    free(x.running.at);
    free(x.h.v);
    free(waits);
    free(x.queue.v);
    free(x.r);
    free(order);
    return ok;
}
