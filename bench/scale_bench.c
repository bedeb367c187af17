/* scale_bench.c - `make bench-scale`: how the semaphore's cost grows with the size of one pool.
 *
 * One pool is filled with 1 000 holders and 10, 100, 1 000 and 10 000 queued waiters by a few
 * processes (pipelined script calls, as many workers would make them), and at each size the
 * scripts the library runs are timed: a newcomer that queues and then withdraws (acquire +
 * cancel), a release that grants the head of the queue (release, plus the acquire that keeps the
 * size constant), a renewal, and a status read. For each, the client's round trip (p50) and the
 * Redis CPU per call (INFO commandstats, immune to the client's scheduling noise) are printed, and
 * the growth from 10 to 10 000 waiters is set beside what O(log n) and O(n) would give. Then the
 * Redis memory per holder and per waiter, and the Redis connections one worker process opens as
 * its threads grow (they must grow with pools, not threads).
 *
 * The scripts are driven directly, with the argument layout the library uses (dbt_script_args),
 * so that 10 000 waiters need no 10 000 threads; the connections are measured with the library
 * itself.
 *
 * The same sizes are then measured with 4 classes defined (the pool's `classes` key, as
 * `dbthrottle class` writes it) and every holder and waiter tagged with one of them (the 5-part
 * ids `<cid>.<serial>.<class>.<weight>.<limit>`): selection looks at each class' head, so its cost
 * must grow with the classes, not with the waiters. */
#include "config.h"
#include "keys.h"
#include "redis_server.h"
#include "script_protocol.h"
#include "scripts.h"
#include "sem_client.h"

#include <hiredis.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    HOLDERS = 1000,   /* the pool's limit: all held while the waiters queue */
    FILLERS = 4,      /* processes that fill the pool */
    OPS = 1000,       /* timed calls per operation and size */
    RENEW_IDS = 100,  /* ids per timed renewal (half holders, half waiters) */
    STATUS_ROWS = 50, /* rows per timed status read, as dbthrottle status shows */
    MAX_ID = 48,
};

static const int sizes[] = {10, 100, 1000, 10000};
#define NSIZES ((int)(sizeof sizes / sizeof *sizes))

/* The classes of the second run: shares 40/30/20/10 % (guarantees 400/300/200/100 of the 1 000
 * holders), each its own priority, an aging bound no waiter reaches while a size is measured. */
enum { NCLASSES = 4 }; /* == FILLERS: one filler process per class */
static const char *const class_names[NCLASSES] = {"web", "api", "report", "batch"};
static const char class_defs[] =
    "aging=600000;default=batch;web:40:3:-:-;api:30:2:-:-;report:20:1:-:-;batch:10:0:-:-";

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double p50_us(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    return (double)v[n / 2] / 1000.0;
}

/* ---- calling the scripts as the library does ------------------------------------------------ */

typedef struct {
    redisContext *c;
    const dbt_keys *keys;
    const char *base[DBT_BASE_ARGS]; /* wake prefix, kind, lease, key TTL, the era (none) */
    char lease[24], ttl[24];
} caller;

static void caller_init(caller *k, const test_redis *r, const dbt_keys *keys, const dbt_config *cfg)
{
    k->c = test_redis_connect(r);
    k->keys = keys;
    dbt_script_args(keys, DBT_KIND_QUERY, cfg, k->lease, k->ttl, k->base);
}

/* Appends (pipelined) or runs one call of script s over the query semaphore's keys (and the
 * connection one's when both is set), with extra ARGV after the four common ones. */
static int build_argv(const caller *k, const dbt_script *s, bool both, const char **extra,
                      int nextra, const char **argv)
{
    static char nk1[8], nk2[8];
    snprintf(nk1, sizeof nk1, "%d", DBT_NKEYS);
    snprintf(nk2, sizeof nk2, "%d", 2 * DBT_NKEYS);
    int n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = s->sha;
    argv[n++] = both ? nk2 : nk1;
    for (int kind = 0; kind < (both ? 2 : 1); kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            argv[n++] = k->keys->keys[kind][i];
    for (int i = 0; i < DBT_BASE_ARGS; i++)
        argv[n++] = k->base[i];
    for (int i = 0; i < nextra; i++)
        argv[n++] = extra[i];
    return n;
}

static void append(caller *k, const dbt_script *s, const char **extra, int nextra)
{
    const char *argv[2 * DBT_NKEYS + DBT_BASE_ARGS + 8 + 2 * RENEW_IDS];
    int n = build_argv(k, s, false, extra, nextra, argv);
    redisAppendCommandArgv(k->c, n, argv, NULL);
}

static redisReply *call(caller *k, const dbt_script *s, bool both, const char **extra, int nextra)
{
    const char *argv[2 * DBT_NKEYS + DBT_BASE_ARGS + 8 + 2 * RENEW_IDS];
    int n = build_argv(k, s, both, extra, nextra, argv);
    redisReply *rep = redisCommandArgv(k->c, n, argv, NULL);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "scale-bench: %s: %s\n", s->name, rep ? rep->str : k->c->errstr);
        exit(1); /* a benchmark program of our own, not the interposer */
    }
    return rep;
}

static void run(caller *k, const dbt_script *s, bool both, const char **extra, int nextra)
{
    freeReplyObject(call(k, s, both, extra, nextra));
}

static void acquire_id(caller *k, const char *id, bool pipelined)
{
    char limit[16];
    snprintf(limit, sizeof limit, "%d", HOLDERS);
    const char *extra[] = {id, limit, "0", "benchhost 1 c1"};
    if (pipelined)
        append(k, &dbt_script_acquire, extra, 4);
    else
        run(k, &dbt_script_acquire, false, extra, 4);
}

/* The id of serial `serial`: untagged (today's 3-part form) when nclasses is 0, else tagged with
 * class serial % nclasses, weight 1. */
static void make_id(char *out, int owner, long serial, int nclasses)
{
    if (nclasses == 0)
        snprintf(out, MAX_ID, "%016x.%ld.%d", 0xbe000000u + (unsigned)owner, serial, HOLDERS);
    else
        snprintf(out, MAX_ID, "%016x.%ld.%s.1.%d", 0xbe000000u + (unsigned)owner, serial,
                 class_names[serial % nclasses], HOLDERS);
}

/* A filler process: acquires the ids from, from + step, ... below to, of owner `owner`,
 * pipelined in batches. */
static void fill(const test_redis *r, const dbt_keys *keys, const dbt_config *cfg, int owner,
                 long from, long to, long step, int nclasses)
{
    caller k;
    caller_init(&k, r, keys, cfg);
    enum { BATCH = 500 };
    for (long i = from; i < to; i += BATCH * step) {
        long end = i + BATCH * step < to ? i + BATCH * step : to;
        char id[MAX_ID];
        for (long j = i; j < end; j += step) {
            make_id(id, owner, j, nclasses);
            acquire_id(&k, id, true);
        }
        for (long j = i; j < end; j += step) {
            void *rep;
            if (redisGetReply(k.c, &rep) != REDIS_OK)
                exit(1);
            freeReplyObject(rep);
        }
    }
    redisFree(k.c);
}

/* Fills with `count` ids from FILLERS processes at once: process o gets serials base + [..), or,
 * with classes, the serials of class o (serial % NCLASSES == o), so that each class' ids queue in
 * the order of their serials. The holders must all be in before the waiters, so each phase waits
 * for its processes. */
static void fill_parallel(const test_redis *r, const dbt_keys *keys, const dbt_config *cfg,
                          long base, long count, int nclasses)
{
    pid_t pids[FILLERS];
    for (int o = 0; o < FILLERS; o++) {
        long from = base + count * o / FILLERS, to = base + count * (o + 1) / FILLERS, step = 1;
        if (nclasses)
            from = base + ((o - base) % nclasses + nclasses) % nclasses, to = base + count,
            step = nclasses;
        pids[o] = fork();
        if (pids[o] == 0) {
            fill(r, keys, cfg, 0, from, to, step, nclasses);
            _exit(0);
        }
    }
    for (int o = 0; o < FILLERS; o++)
        waitpid(pids[o], NULL, 0);
}

static long long info_number(redisContext *c, const char *section, const char *field)
{
    redisReply *rep = redisCommand(c, "INFO %s", section);
    long long v = -1;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        char needle[64];
        snprintf(needle, sizeof needle, "\r\n%s:", field);
        const char *at = strstr(rep->str, needle);
        if (at)
            v = strtoll(at + strlen(needle), NULL, 10);
    }
    freeReplyObject(rep);
    return v;
}

/* ---- one size ------------------------------------------------------------------------------ */

typedef struct {
    double lat[5]; /* p50 us: acquire that queues, cancel, release, renew (per call), status */
    double cpu[4]; /* Redis us: acquire+cancel, release+acquire, renew per id, status */
    double mem_holder, mem_waiter;
    long long queued, held;
} size_result;

/* A FIFO of ids by serial: the pool's holders and waiters in the order the scripts keep them. */
typedef struct {
    long *v;
    long head, tail, cap;
} fifo;
static void fifo_push(fifo *f, long x)
{
    f->v[f->tail++ % f->cap] = x;
}
static long fifo_pop(fifo *f)
{
    return f->v[f->head++ % f->cap];
}
static long fifo_at(const fifo *f, long i)
{
    return f->v[(f->head + i) % f->cap];
}
static long fifo_len(const fifo *f)
{
    return f->tail - f->head;
}

/* The waiters of a pool, one FIFO per class (one in all without classes): within a class the
 * scripts grant in order of arrival, across classes by their rules, so which class a release
 * served is read back from Redis (granted_of). */
typedef struct {
    fifo q[NCLASSES];
    int nq;
} waiters;

static void waiters_push(waiters *w, long serial)
{
    fifo_push(&w->q[serial % w->nq], serial);
}

/* The waiter a release granted: the head of one class' queue that Redis now counts as a holder. */
static long granted_of(caller *k, waiters *w, int nclasses)
{
    if (w->nq == 1)
        return fifo_pop(&w->q[0]);
    for (int c = 0; c < w->nq; c++) {
        if (fifo_len(&w->q[c]) == 0)
            continue;
        char id[MAX_ID];
        make_id(id, 0, fifo_at(&w->q[c], 0), nclasses);
        redisReply *rep =
            redisCommand(k->c, "ZSCORE %s %s", k->keys->keys[DBT_KIND_QUERY][DBT_K_HOLDERS], id);
        bool held = rep && rep->type == REDIS_REPLY_STRING;
        freeReplyObject(rep);
        if (held)
            return fifo_pop(&w->q[c]);
    }
    redisReply *h = redisCommand(k->c, "ZCARD %s", k->keys->keys[DBT_KIND_QUERY][DBT_K_HOLDERS]);
    redisReply *q = redisCommand(k->c, "ZCARD %s", k->keys->keys[DBT_KIND_QUERY][DBT_K_QUEUE]);
    fprintf(stderr,
            "scale-bench: a release granted no class' head (%lld units held, %lld queued)\n",
            h ? h->integer : -1, q ? q->integer : -1);
    exit(1);
}

/* The i-th of `count` waiters spread over the whole queue (each class' in turn). */
static long waiter_sample(const waiters *w, int i, int count)
{
    const fifo *f = &w->q[i % w->nq];
    for (int c = 1; fifo_len(f) == 0 && c < w->nq; c++) /* a class whose waiters were all served */
        f = &w->q[(i + c) % w->nq];
    long per = (count + w->nq - 1) / w->nq;
    return fifo_at(f, (long)(i / w->nq) * (fifo_len(f) / per));
}

static void measure(const test_redis *r, const dbt_config *cfg, int n, int nclasses,
                    size_result *out)
{
    char pool[32];
    snprintf(pool, sizeof pool, "scale-%d-%d", nclasses, n);
    dbt_keys keys;
    if (!dbt_keys_init(&keys, cfg->key_prefix, pool))
        exit(1);
    caller k;
    caller_init(&k, r, &keys, cfg);
    if (nclasses)
        freeReplyObject(
            redisCommand(k.c, "SET %s %s", keys.keys[DBT_KIND_QUERY][DBT_K_CLASSES], class_defs));
    long long m0 = info_number(k.c, "memory", "used_memory");
    fill_parallel(r, &keys, cfg, 0, HOLDERS, nclasses);
    long long m1 = info_number(k.c, "memory", "used_memory");
    fill_parallel(r, &keys, cfg, HOLDERS, n, nclasses);
    long long m2 = info_number(k.c, "memory", "used_memory");
    out->mem_holder = (double)(m1 - m0) / HOLDERS;
    out->mem_waiter = (double)(m2 - m1) / n;

    fifo held = {calloc(HOLDERS + OPS + 1, sizeof(long)), 0, 0, HOLDERS + OPS + 1};
    waiters waiting = {.nq = nclasses ? nclasses : 1};
    for (int c = 0; c < waiting.nq; c++)
        waiting.q[c] = (fifo){calloc((size_t)n + OPS + 1, sizeof(long)), 0, 0, n + OPS + 1};
    for (long i = 0; i < HOLDERS; i++)
        fifo_push(&held, i);
    for (long i = 0; i < n; i++)
        waiters_push(&waiting, HOLDERS + i);
    long next = HOLDERS + n;
    int64_t *lat = malloc(OPS * sizeof *lat), *lat2 = malloc(OPS * sizeof *lat2);
    char id[MAX_ID];

    /* A newcomer queues at the tail, then withdraws (a wait timeout): the size stays n. */
    long long u0 = test_redis_script_usec(r);
    for (int i = 0; i < OPS; i++) {
        make_id(id, 0, next++, nclasses);
        int64_t t = now_ns();
        acquire_id(&k, id, false);
        int64_t t2 = now_ns();
        const char *extra[] = {id};
        run(&k, &dbt_script_cancel, false, extra, 1);
        lat[i] = t2 - t;
        lat2[i] = now_ns() - t2;
    }
    out->cpu[0] = (double)(test_redis_script_usec(r) - u0) / OPS;
    out->lat[0] = p50_us(lat, OPS);
    out->lat[1] = p50_us(lat2, OPS);

    /* The oldest holder releases: the head of the queue is granted (a handover), and a newcomer
     * queues, so the size stays n. */
    u0 = test_redis_script_usec(r);
    for (int i = 0; i < OPS; i++) {
        make_id(id, 0, fifo_pop(&held), nclasses);
        const char *extra[] = {id};
        int64_t t = now_ns();
        run(&k, &dbt_script_release, false, extra, 1);
        lat[i] = now_ns() - t;
        fifo_push(&held, granted_of(&k, &waiting, nclasses));
        make_id(id, 0, next, nclasses);
        acquire_id(&k, id, false);
        waiters_push(&waiting, next++);
    }
    out->cpu[1] = (double)(test_redis_script_usec(r) - u0) / OPS;
    out->lat[2] = p50_us(lat, OPS);

    /* A renewal of RENEW_IDS ids, half holders, half waiters (what one busy process sends). */
    char ids[RENEW_IDS][MAX_ID];
    const char *extra[4 + RENEW_IDS];
    int nh = RENEW_IDS / 2, nw = n < RENEW_IDS / 2 ? n : RENEW_IDS / 2;
    char c_h[16], c_w[16];
    snprintf(c_h, sizeof c_h, "%d", nh);
    snprintf(c_w, sizeof c_w, "%d", nw);
    extra[0] = c_h, extra[1] = c_w, extra[2] = "0", extra[3] = "0";
    for (int i = 0; i < nh; i++) {
        make_id(ids[i], 0, fifo_at(&held, i * (HOLDERS / nh)), nclasses);
        extra[4 + i] = ids[i];
    }
    for (int i = 0; i < nw; i++) {
        make_id(ids[nh + i], 0, waiter_sample(&waiting, i, nw), nclasses);
        extra[4 + nh + i] = ids[nh + i];
    }
    u0 = test_redis_script_usec(r);
    for (int i = 0; i < OPS; i++) {
        int64_t t = now_ns();
        run(&k, &dbt_script_renew, true, extra, 4 + nh + nw);
        lat[i] = now_ns() - t;
    }
    out->cpu[2] = (double)(test_redis_script_usec(r) - u0) / OPS / (nh + nw);
    out->lat[3] = p50_us(lat, OPS);

    /* What dbthrottle status (and top, every second) costs. */
    char rows[16];
    snprintf(rows, sizeof rows, "%d", STATUS_ROWS);
    const char *srows[] = {rows};
    u0 = test_redis_script_usec(r);
    for (int i = 0; i < OPS; i++) {
        int64_t t = now_ns();
        run(&k, &dbt_script_status, true, srows, 1);
        lat[i] = now_ns() - t;
    }
    out->cpu[3] = (double)(test_redis_script_usec(r) - u0) / OPS;
    out->lat[4] = p50_us(lat, OPS);

    /* The pool is still full and still n long: the measurement did not drift. */
    out->held = test_redis_int(r, "ZCARD %s", keys.keys[DBT_KIND_QUERY][DBT_K_HOLDERS]);
    out->queued = test_redis_int(r, "ZCARD %s", keys.keys[DBT_KIND_QUERY][DBT_K_QUEUE]);
    freeReplyObject(redisCommand(k.c, "FLUSHALL"));
    free(held.v);
    for (int c = 0; c < waiting.nq; c++)
        free(waiting.q[c].v);
    free(lat);
    free(lat2);
    redisFree(k.c);
    dbt_keys_free(&keys);
}

/* ---- Redis connections per worker process -------------------------------------------------- */

typedef struct {
    dbt_pool *pool[2];
    int npools;
    atomic_int *stop;
} churn_arg;

static void *churn(void *arg)
{
    churn_arg *a = arg;
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000};
    for (long i = 0; !atomic_load(a->stop); i++) {
        dbt_permit *p;
        if (dbt_acquire(a->pool[i % a->npools], DBT_KIND_QUERY, &o, &p) == DBT_ACQ_GRANTED) {
            usleep(200);
            dbt_release(p);
        }
    }
    return NULL;
}

/* The most connections Redis sees at once from one process whose `threads` threads take and give
 * back permits (limit 4: most of them wait) in `npools` pools. */
static long long connections_of(const test_redis *r, int threads, int npools)
{
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dbt_config cfg;
        test_config(&cfg, r, NULL);
        dbt_client *c = dbt_client_new(&cfg);
        static atomic_int stop;
        churn_arg a = {.npools = npools, .stop = &stop};
        a.pool[0] = dbt_client_pool(c, "conns-a");
        a.pool[1] = dbt_client_pool(c, "conns-b");
        pthread_t *th = calloc((size_t)threads, sizeof *th);
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, churn, &a);
        usleep(300000);
        char b = 1;
        if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
            b = 0;
        atomic_store(&stop, 1);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        free(th);
        dbt_client_free(c);
        dbt_config_free(&cfg);
        _exit(0);
    }
    char b;
    long long most = -1;
    if (read(ready[0], &b, 1) == 1) {
        redisContext *c = test_redis_connect(r);
        for (int i = 0; i < 50; i++) {
            long long n = info_number(c, "clients", "connected_clients") - 1; /* not ours */
            if (n > most)
                most = n;
            usleep(10000);
        }
        redisFree(c);
    }
    if (write(go[1], &b, 1) != 1)
        most = -1;
    waitpid(pid, NULL, 0);
    close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
    return most;
}

/* The table of one run over every size: untagged ids in a pool without classes (nclasses 0), or
 * ids tagged with nclasses classes in a pool that defines them. */
static void run_sizes(const test_redis *r, const dbt_config *cfg, int nclasses)
{
    printf("client round trip p50 (us) | Redis script CPU (us, INFO commandstats)\n");
    printf("%8s %8s %8s %8s %8s %8s | %10s %10s %8s %8s\n", "waiters", "queue", "cancel", "release",
           "renew", "status", "queue+", "release+", "renew", "status");
    printf("%8s %8s %8s %8s %8s %8s | %10s %10s %8s %8s\n", "", "", "", "->grant", "(100 ids)",
           "(50 rows)", "cancel", "grant+queue", "per id", "");
    size_result res[NSIZES];
    bool drift = false;
    for (int s = 0; s < NSIZES; s++) {
        measure(r, cfg, sizes[s], nclasses, &res[s]);
        const size_result *x = &res[s];
        printf("%8d %8.1f %8.1f %8.1f %8.1f %8.1f | %10.1f %10.1f %8.2f %8.1f\n", sizes[s],
               x->lat[0], x->lat[1], x->lat[2], x->lat[3], x->lat[4], x->cpu[0], x->cpu[1],
               x->cpu[2], x->cpu[3]);
        if (x->held != HOLDERS || x->queued != sizes[s])
            drift = true;
    }
    if (drift)
        printf("warning: the pool's size drifted during a measurement (leases expired?)\n");
    const size_result *lo = &res[0], *hi = &res[NSIZES - 1];
    double logr = log2((double)sizes[NSIZES - 1]) / log2((double)sizes[0]);
    double linr = (double)sizes[NSIZES - 1] / sizes[0];
    printf("growth of Redis CPU from %d to %d waiters (O(log n) would be <= %.1fx, O(n) %.0fx):\n",
           sizes[0], sizes[NSIZES - 1], logr, linr);
    printf("  queue+cancel %.2fx, release->grant+queue %.2fx, renew per id %.2fx, status %.2fx\n",
           hi->cpu[0] / lo->cpu[0], hi->cpu[1] / lo->cpu[1], hi->cpu[2] / lo->cpu[2],
           hi->cpu[3] / lo->cpu[3]);
    printf("Redis memory per holder %.0f bytes, per waiter %.0f bytes (at %d waiters)\n",
           hi->mem_holder, hi->mem_waiter, sizes[NSIZES - 1]);
    printf("grants one Redis core carries at %d waiters: %.0f /s (1e6 / release+grant+queue)\n",
           sizes[NSIZES - 1], 1e6 / hi->cpu[1]);
    printf("growth from %d to %d waiters (O(log n) <= %.2fx): queue+cancel %.2fx, "
           "release->grant+queue %.2fx, renew per id %.2fx, status %.2fx\n",
           sizes[NSIZES - 2], sizes[NSIZES - 1],
           log2((double)sizes[NSIZES - 1]) / log2((double)sizes[NSIZES - 2]),
           hi->cpu[0] / res[NSIZES - 2].cpu[0], hi->cpu[1] / res[NSIZES - 2].cpu[1],
           hi->cpu[2] / res[NSIZES - 2].cpu[2], hi->cpu[3] / res[NSIZES - 2].cpu[3]);
}

int main(void)
{
    test_redis r;
    if (!test_redis_start(&r, NULL)) {
        fprintf(stderr, "scale-bench: cannot start redis-server\n");
        return 1;
    }
    dbt_config cfg;
    /* Leases long enough that nothing expires while a size is measured. */
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=30m", NULL);
    redisContext *c = test_redis_connect(&r);
    for (int i = 0; i < dbt_nscripts; i++)
        freeReplyObject(
            redisCommand(c, "SCRIPT LOAD %b", dbt_scripts[i]->body, dbt_scripts[i]->len));

    printf("dbthrottle scale benchmark: one pool, %d holders and N queued waiters (one run)\n",
           HOLDERS);
    run_sizes(&r, &cfg, 0);
    printf("\nthe same with %d classes defined (%s) and every holder and waiter tagged:\n",
           NCLASSES, class_defs);
    run_sizes(&r, &cfg, NCLASSES);

    static const int threads[] = {1, 8, 64};
    printf("Redis connections of one worker process (limit 4, most threads waiting):\n ");
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++)
        printf(" %d thread%s: %lld;", threads[i], threads[i] > 1 ? "s" : "",
               connections_of(&r, threads[i], 1));
    printf(" 64 threads over 2 pools: %lld\n", connections_of(&r, 64, 2));
    redisFree(c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
    return 0;
}
