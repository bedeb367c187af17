/* Local handover (DBTHROTTLE_LOCAL_HANDOVER): while only one process' threads wait, a permit one
 * of them gives back goes straight to another with no Redis command; a waiter of another process
 * stops that at once (by push, or at the next renewal if the push went astray) and is served in
 * its turn; places nobody takes are withdrawn; off means every grant goes through Redis. */
#include "pool.h"
#include "script_protocol.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEY(k) "dbthrottle:{ho}:q:" k

enum { THREADS = 8, LIMIT = 2 };

typedef struct {
    dbt_pool *pool;
    atomic_int holders, max_seen, grants, failures;
    atomic_bool stop;
    int cycles;  /* per thread; 0 = until stop */
    int hold_us; /* how long each holds its permit */
} load;

static void *cycler(void *arg)
{
    load *l = arg;
    dbt_acquire_opts o = {.limit = LIMIT, .wait_ms = 30000, .conn = "ho"};
    for (int i = 0; (l->cycles == 0 || i < l->cycles) && !atomic_load(&l->stop); i++) {
        dbt_permit *pm;
        if (dbt_acquire(l->pool, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED) {
            atomic_fetch_add(&l->failures, 1);
            continue;
        }
        int now = atomic_fetch_add(&l->holders, 1) + 1;
        int max = atomic_load(&l->max_seen);
        while (now > max && !atomic_compare_exchange_weak(&l->max_seen, &max, now))
            ;
        atomic_fetch_add(&l->grants, 1);
        if (l->hold_us)
            usleep((useconds_t)l->hold_us);
        atomic_fetch_sub(&l->holders, 1);
        dbt_release(pm);
    }
    return NULL;
}

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(handover, .init = fx_redis_start, .fini = fx_stop);

typedef struct {
    dbt_client *c; /* fx_client's */
    const dbt_config *cfg;
    load l;
    pthread_t t[THREADS];
} fixture;

/* A Redis timeout far above the default's 1 s: under CI's lanes and ASan a reply came 1 s late
 * once, and the threads ran unthrottled (open mode) through the "outage" this made (counted as
 * failures); an outage is not this file's subject. */
static void setup(fixture *f, const char *lease, const char *handover)
{
    f->c = handover ? fx_client("DBTHROTTLE_REDIS_TIMEOUT=10s", lease, handover, NULL)
                    : fx_client("DBTHROTTLE_REDIS_TIMEOUT=10s", lease, NULL);
    f->cfg = fx_config(f->c);
    memset(&f->l, 0, sizeof f->l);
    f->l.pool = dbt_client_pool(f->c, "ho");
}

static void start(fixture *f, int cycles, int hold_us)
{
    f->l.cycles = cycles;
    f->l.hold_us = hold_us;
    for (int i = 0; i < THREADS; i++)
        pthread_create(&f->t[i], NULL, cycler, &f->l);
}

static void join(fixture *f)
{
    atomic_store(&f->l.stop, f->l.cycles == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(f->t[i], NULL);
}

static dbt_pool_stats stats(fixture *f)
{
    dbt_pool_stats st;
    dbt_pool_get_stats(f->l.pool, &st);
    return st;
}

typedef struct {
    fixture *f;
    uint64_t n;
} handovers_reach;

static bool handovers_reached(void *arg)
{
    handovers_reach *h = arg;
    return stats(h->f).handovers >= h->n;
}

/* The threads cycle until join(), with 2 ms holds, and pass permits among themselves by now. */
static void start_handing_over(fixture *f)
{
    start(f, 0, 2000);
    handovers_reach busy = {f, 50};
    cr_assert(test_wait_until(handovers_reached, &busy, 20000), "no local handover happened");
}

Test(handover, threads_of_one_process_pass_permits_without_redis, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=10m", NULL);
    cr_assert(f.cfg->local_handover, "on by default");
    enum { CYCLES = 300 };
    /* A first round to queue the threads (each acquire of the first waiters is a script). */
    long long before = test_redis_commands(&fx_redis);
    start(&f, CYCLES, 200);
    join(&f);
    long long commands = test_redis_commands(&fx_redis) - before;
    dbt_pool_stats st = stats(&f);
    int total = THREADS * CYCLES;
    cr_expect_eq(atomic_load(&f.l.failures), 0);
    cr_expect_eq(atomic_load(&f.l.grants), total);
    cr_expect_leq(atomic_load(&f.l.max_seen), LIMIT, "%d held at once, limit %d",
                  atomic_load(&f.l.max_seen), LIMIT);
    cr_expect_eq(atomic_load(&f.l.max_seen), LIMIT, "never saturated: nothing to hand over");
    /* Every grant but the first few is a handover here, and each costs Redis nothing. */
    cr_expect_geq(st.handovers, (uint64_t)total * 9 / 10, "%llu handovers of %d grants",
                  (unsigned long long)st.handovers, total);
    cr_expect_lt(commands, total / 10, "%lld Redis commands for %d grants", commands, total);
    cr_log_info("%d grants, %llu handed over, %llu places taken over, %lld Redis commands", total,
                (unsigned long long)st.handovers, (unsigned long long)st.adoptions, commands);
    /* What is left in Redis once the threads are done: the places nobody takes are withdrawn
     * while the process lives, and no count is left behind for it. */
    zcard_is none_q = {&fx_redis, KEY("queue"), 0}, none_h = {&fx_redis, KEY("holders"), 0};
    cr_expect(test_wait_until(test_zcard_is, &none_q, 5000), "places left in the queue: %lld",
              test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")));
    cr_expect(test_wait_until(test_zcard_is, &none_h, 5000), "holders left: %lld",
              test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")));
    cr_expect_eq(test_redis_int(&fx_redis, "HEXISTS %s %s", KEY("owners"), dbt_client_id(f.c)), 0,
                 "a waiter count was left for this process");
    /* dbthrottle status counts every grant, local ones too: renewals carry them, and the last
     * ones go when the client ends. Grants Redis made to places nobody took any more (given
     * back at once) may add a few. */
    fx_client_free(f.c);
    f.c = NULL;
    long long grants = test_redis_int(&fx_redis, "HGET %s grants", KEY("stats"));
    long long queued = test_redis_int(&fx_redis, "HGET %s queued", KEY("stats"));
    cr_expect(grants >= total && grants <= total + 2 * THREADS, "Redis counted %lld grants of %d",
              grants, total);
    /* Nearly every grant had to wait (a few found a permit free), and none is counted twice. */
    cr_expect(queued >= total * 9 / 10 && queued <= grants,
              "Redis counted %lld queued of %d grants", queued, total);
}

/* A condition: a process other than `mine` has a waiter in the pool's queue (owners: cid ->
 * its waiters queued; '*' is the total). */
typedef struct {
    const test_redis *r;
    const char *mine;
    test_child *child; /* or NULL */
} queued_elsewhere;

static bool other_queued(void *arg)
{
    queued_elsewhere *q = arg;
    redisContext *rc = test_redis_connect(q->r);
    redisReply *rep = rc ? redisCommand(rc, "HGETALL %s", KEY("owners")) : NULL;
    bool found = false;
    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const char *cid = rep->element[i]->str, *n = rep->element[i + 1]->str;
        if (strcmp(cid, "*") != 0 && strcmp(cid, q->mine) != 0 && atoi(n) > 0)
            found = true;
    }
    freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return found;
}

/* The same, or the child has its answer ready: under load this process' threads can all be
 * between their holds at once, a permit then goes back to Redis, and the child, arriving, takes it
 * without ever queueing (seen in CI at a load average of 8: "the other process never queued"). */
static bool other_queued_or_served(void *arg)
{
    queued_elsewhere *q = arg;
    struct pollfd pfd = {.fd = q->child->from_child, .events = POLLIN};
    return other_queued(arg) || poll(&pfd, 1, 0) == 1;
}

Test(handover, a_waiter_of_another_process_is_served_in_its_turn, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=10m", NULL);
    /* Forked before this process has threads (see test_child_start_paused). */
    test_child other;
    cr_assert(test_child_start_paused(&other, &fx_redis, "ho", LIMIT, 20000, "10m"));
    start_handing_over(&f);
    test_child_go(&other);
    /* Counted from its arrival in Redis' queue, not from its start (a slow start, under load or
     * ASan, let this process' threads pass 42 grants before the child had even asked). */
    queued_elsewhere q = {&fx_redis, dbt_client_id(f.c), &other};
    cr_assert(test_wait_until(other_queued_or_served, &q, 20000),
              "the other process neither queued nor was granted");
    int g0 = atomic_load(&f.l.grants);
    /* Without the push, this process would pass its permits among its own threads for ever and
     * the other would wait out its 20 s. In its turn: behind the threads that were waiting when
     * it came (at most THREADS - LIMIT), the places they had, and the commands in flight. */
    char rep = test_child_report(&other, 20000);
    int served = atomic_load(&f.l.grants) - g0;
    cr_expect_eq(rep, 'G', "the other process was not granted (report %c)", rep ? rep : '0');
    cr_expect_leq(served, 3 * THREADS, "%d grants here before the other process' one", served);
    cr_log_info("%d grants here between the other's arrival and its grant", served);
    test_child_finish(&other);
    join(&f);
    cr_expect_eq(atomic_load(&f.l.failures), 0);
    cr_expect_leq(atomic_load(&f.l.max_seen), LIMIT);
}

/* A waiter of another process whose push never came (injected straight into Redis, as if the
 * message had been lost with a listener connection): the next renewal sees a queue longer than
 * this process' waiters and stops the handover, so the waiter is granted. */
Test(handover, a_lost_push_is_caught_by_the_next_renewal, .timeout = 120)
{
    fixture f;
    /* Renewals every 500 ms. */
    setup(&f, "DBTHROTTLE_LEASE=1500ms", NULL);
    start_handing_over(&f);
    const char *ghost = "0123456789abcdef.1.2";
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep =
        redisCommand(rc, "EVAL %s 4 %s %s %s %s %s", /* a waiter, queued by hand */
                     "local t = redis.call('TIME')"
                     " local seq = redis.call('INCR', KEYS[4])"
                     " redis.call('ZADD', KEYS[1], seq, ARGV[1])"
                     " redis.call('ZADD', KEYS[2], t[1] * 1000 + 600000, ARGV[1])"
                     " redis.call('HINCRBY', KEYS[3], string.match(ARGV[1], '^[^.]+'), 1)"
                     " return seq",
                     KEY("queue"), KEY("wexp"), KEY("owners"), KEY("seq"), ghost);
    cr_assert(rep && rep->type == REDIS_REPLY_INTEGER, "could not queue the ghost waiter");
    freeReplyObject(rep);
    int64_t t0 = test_now_ms();
    bool granted = false;
    while (!granted && test_now_ms() - t0 < 10000) {
        rep = redisCommand(rc, "ZSCORE %s %s", KEY("holders"), ghost);
        granted = rep && rep->type == REDIS_REPLY_STRING;
        freeReplyObject(rep);
        usleep(5000);
    }
    cr_expect(granted, "the waiter whose push was lost was never granted");
    cr_log_info("granted %lld ms after it queued", (long long)(test_now_ms() - t0));
    rep = redisCommand(rc, "ZREM %s %s", KEY("holders"), ghost); /* nobody renews it */
    freeReplyObject(rep);
    redisFree(rc);
    join(&f);
    cr_expect_eq(atomic_load(&f.l.failures), 0);
    cr_expect_leq(atomic_load(&f.l.max_seen), LIMIT);
}

Test(handover, off_means_every_grant_goes_through_redis, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=10m", "DBTHROTTLE_LOCAL_HANDOVER=off");
    start(&f, 50, 200);
    join(&f);
    dbt_pool_stats st = stats(&f);
    cr_expect_eq(atomic_load(&f.l.grants), THREADS * 50);
    cr_expect_eq(st.handovers, 0);
    cr_expect_eq(st.adoptions, 0);
    cr_expect_gt(st.waits, 0, "no contention: nothing tested");
    cr_expect_leq(atomic_load(&f.l.max_seen), LIMIT);
}

/* A process that ends with _exit (no exit handlers: Python's multiprocessing children do) once
 * its threads are done leaves nothing in Redis: the last thread to give its permit back withdraws
 * the places kept for a next waiter before it returns, rather than leave them queued, to be
 * granted to nobody until their lease (ten minutes here) runs out. */
Test(handover, a_process_that_ends_with_exit_leaves_nothing_queued, .timeout = 120)
{
    pid_t pid = fork();
    if (pid == 0) {
        fixture f;
        setup(&f, "DBTHROTTLE_LEASE=10m", NULL);
        start(&f, 100, 200);
        join(&f);
        dbt_pool_stats st = stats(&f);
        _exit(st.handovers > 0 && atomic_load(&f.l.failures) == 0 ? 0 : 3);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child failed (no handover, or a failed acquire): status %d", status);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")), 0, "places left queued");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 0, "permits left held");
}

/* The operator's controls reach a process passing permits between its threads: admin.lua tells it
 * to stop (the permits must come back to Redis to be held back), as for the queries of anyone. */
static void admin(fixture *f, const char *op, const char *arg)
{
    char lease[24], ttl[24];
    const char *argv[3 + DBT_NKEYS + DBT_BASE_ARGS + 2];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", DBT_NKEYS);
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = dbt_script_admin.body;
    argv[n++] = nk;
    const dbt_keys *k = dbt_pool_keys(f->l.pool);
    for (int i = 0; i < DBT_NKEYS; i++)
        argv[n++] = k->keys[DBT_KIND_QUERY][i];
    dbt_script_args(k, DBT_KIND_QUERY, f->cfg, lease, ttl, argv + n);
    n += DBT_BASE_ARGS;
    argv[n++] = op;
    argv[n++] = arg ? arg : "";
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommandArgv(rc, n, argv, NULL);
    cr_assert(rep && rep->type == REDIS_REPLY_ARRAY, "admin.lua %s: %s", op,
              rep && rep->type == REDIS_REPLY_ERROR ? rep->str : "no reply");
    freeReplyObject(rep);
    redisFree(rc);
}

Test(handover, a_drain_stops_it, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=10m", NULL);
    start_handing_over(&f);
    admin(&f, "drain", NULL);
    /* Commands in flight when the push arrives may still pass theirs on (at most one each); then
     * nothing is granted at all for as long as the drain lasts. Without the push the threads
     * would go on passing permits among themselves for ever. */
    int g0 = atomic_load(&f.l.grants);
    bool stopped = false;
    for (int i = 0; i < 100 && !stopped; i++) {
        usleep(100 * 1000);
        int g = atomic_load(&f.l.grants);
        stopped = g == g0;
        g0 = g;
    }
    cr_expect(stopped, "grants went on for 10 s of a drain");
    usleep(500 * 1000);
    int during = atomic_load(&f.l.grants) - g0;
    cr_expect_eq(during, 0, "%d grants in 500 ms of a drain", during);
    admin(&f, "resume", NULL);
    handovers_reach busy = {&f, stats(&f).handovers + 50};
    cr_expect(test_wait_until(handovers_reached, &busy, 20000), "no handover after the resume");
    join(&f);
    cr_expect_eq(atomic_load(&f.l.failures), 0);
}

Test(handover, a_lower_limit_applies_to_it, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=10m", NULL);
    start_handing_over(&f);
    admin(&f, "limit", "1");
    /* Once the permits over the new limit have come back to Redis (each holder's command ends
     * within a few ms), never more than one at once: one may still pass from thread to thread. */
    zcard_is one = {&fx_redis, KEY("holders"), 1};
    cr_expect(test_wait_until(test_zcard_is, &one, 10000), "the permits over the limit stayed out");
    atomic_store(&f.l.max_seen, atomic_load(&f.l.holders));
    int g0 = atomic_load(&f.l.grants);
    usleep(500 * 1000);
    cr_expect_gt(atomic_load(&f.l.grants) - g0, 10, "the pool stopped instead");
    cr_expect_leq(atomic_load(&f.l.max_seen), 1, "%d held at once under a limit of 1",
                  atomic_load(&f.l.max_seen));
    admin(&f, "clear", NULL);
    join(&f);
    cr_expect_eq(atomic_load(&f.l.failures), 0);
}

/* More units held than the limit, as a late re-assertion after a failover leaves them (ids an old
 * primary granted after the new one took over, put back on the new one beside its own grants): a
 * process that re-asserted nothing hears of it at its next renewal and gives its permits back
 * through Redis, which grants again only below the limit. Before, its threads passed their 2
 * permits on among themselves for as long as they ran: 4 held at a limit of 2. Judged by Redis'
 * holders. */
Test(handover, a_pool_held_over_its_limit_stops_it, .timeout = 120)
{
    fixture f;
    setup(&f, "DBTHROTTLE_LEASE=3s", NULL); /* a renewal every second */
    start_handing_over(&f);
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *t = redisCommand(rc, "TIME");
    cr_assert(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
    long long until = atoll(t->element[0]->str) * 1000 + 600000; /* 10 minutes on Redis' clock */
    freeReplyObject(t);
    const char *theirs[] = {"feedfacefeedface.1.2", "feedfacefeedface.2.2"};
    for (int i = 0; i < 2; i++) {
        redisReply *z = redisCommand(rc, "ZADD %s %lld %s", KEY("holders"), until, theirs[i]);
        cr_assert(z && z->type == REDIS_REPLY_INTEGER && z->integer == 1);
        freeReplyObject(z);
    }
    zcard_is two = {&fx_redis, KEY("holders"), 2};
    cr_expect(test_wait_until(test_zcard_is, &two, 10000),
              "the process kept its permits beside 2 others at a limit of 2");
    /* Then nothing is granted while the other two hold (a command in flight may still have
     * passed its permit on once). */
    usleep(300 * 1000);
    int g0 = atomic_load(&f.l.grants);
    usleep(1500 * 1000);
    int during = atomic_load(&f.l.grants) - g0;
    cr_expect_eq(during, 0, "%d grants in 1.5 s while 2 others held the limit", during);
    redisReply *z = redisCommand(rc, "ZREM %s %s %s", KEY("holders"), theirs[0], theirs[1]);
    cr_assert(z && z->type == REDIS_REPLY_INTEGER && z->integer == 2);
    freeReplyObject(z);
    redisFree(rc);
    handovers_reach busy = {&f, stats(&f).handovers + 50};
    cr_expect(test_wait_until(handovers_reached, &busy, 20000), "no handover once they left");
    join(&f);
    cr_expect_eq(atomic_load(&f.l.failures), 0);
}

/* ---- places kept for next waits ---- */

typedef struct {
    dbt_pool *pool;
    atomic_int granted;
    atomic_bool go;
} burst;

/* Waits for a permit; the fourth thread served keeps it until `go`, the others give it back. */
static void *burst_waiter(void *arg)
{
    burst *b = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000};
    dbt_permit *permit = NULL;
    if (dbt_acquire(b->pool, DBT_KIND_QUERY, &o, &permit) != DBT_ACQ_GRANTED)
        return NULL;
    if (atomic_fetch_add(&b->granted, 1) + 1 == 4)
        while (!atomic_load(&b->go))
            usleep(5000);
    dbt_release(permit);
    return NULL;
}

static bool first_renewal_done(void *arg)
{
    dbt_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    bool r = p->last_renew_us > 0 && p->renew_in_flight_us == 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

static bool four_waiting_alone(void *arg)
{
    dbt_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    bool r = p->nqueued == 4 && p->queue[DBT_KIND_QUERY].sole.sole != 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

/* Four threads of one process queue behind a permit it holds and are served one after the other
 * by local handover: each served thread's place stays queued, kept for a next wait. While the
 * last one served holds, one place stays (for its next wait) and the three beyond it go after
 * their idle time; when it gives the permit back, the last place goes before the release (which
 * would grant it, to nobody). Before: every place went 50 ms after it was kept, the holder's
 * too (its next wait queued anew); then, for a while, all stayed while any thread held. */
Test(handover, places_beyond_the_holders_go_while_one_holds, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=30s", NULL);
    burst b = {.pool = dbt_client_pool(c, "ho")};
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(b.pool, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    /* The first renewal, which the first command starts, is over before the threads queue: one
     * that reaches Redis after an acquire begun after it left finds more in the queue than the
     * process counted its own, and ends the sole state (the next is 10 s away). */
    cr_assert(test_wait_until(first_renewal_done, b.pool, 10000), "no renewal");
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, burst_waiter, &b), 0);
    zcard_is four = {&fx_redis, KEY("queue"), 4};
    cr_assert(test_wait_until(test_zcard_is, &four, 10000), "the four never queued");
    /* and each thread has read that it waits, and that the process' waiters are the queue */
    cr_assert(test_wait_until(four_waiting_alone, b.pool, 10000), "not alone in the queue");
    dbt_release(held);
    int64_t deadline = test_now_ms() + 10000;
    while (atomic_load(&b.granted) < 4 && test_now_ms() < deadline)
        usleep(2000);
    cr_assert_eq(atomic_load(&b.granted), 4, "not served");
    dbt_pool_stats st;
    dbt_pool_get_stats(b.pool, &st);
    cr_assert_geq(st.handovers, 3, "not served by local handover (%llu)",
                  (unsigned long long)st.handovers);
    zcard_is one = {&fx_redis, KEY("queue"), 1};
    cr_expect(test_wait_until(test_zcard_is, &one, 5000), "%lld places queued, not 1",
              test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")));
    usleep(300000); /* six idle times */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")), 1,
                 "the holder's place did not stay kept");
    long long grants = test_redis_int(&fx_redis, "HGET %s grants", KEY("stats"));
    atomic_store(&b.go, true);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    zcard_is none_q = {&fx_redis, KEY("queue"), 0}, none_h = {&fx_redis, KEY("holders"), 0};
    cr_expect(test_wait_until(test_zcard_is, &none_q, 5000), "places left: %lld",
              test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")));
    cr_expect(test_wait_until(test_zcard_is, &none_h, 5000), "holders left: %lld",
              test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")));
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s grants", KEY("stats")), grants,
                 "Redis granted the last place: the release went before its withdrawal");
}
