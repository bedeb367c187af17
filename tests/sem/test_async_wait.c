/* dbt_acquire_start / dbt_acquire_wait_for: an acquire that queues in the caller's thread and is
 * waited for in another (held commands of an event loop, interpose/held.c). */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#define HOLDERS "dbthrottle:{async}:q:holders"
#define QUEUE   "dbthrottle:{async}:q:queue"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(async_wait, .init = fx_redis_start, .fini = fx_stop);

typedef struct {
    dbt_acquire_wait *pending;
    dbt_acquire_opts opts;
    dbt_permit *permit;
    dbt_acq_result res;
} waiter;

static void *wait_elsewhere(void *arg)
{
    waiter *w = arg;
    w->res = dbt_acquire_wait_for(w->pending, &w->opts, &w->permit);
    return NULL;
}

/* The place is taken by the start (no newcomer overtakes it), and the grant that comes while no
 * thread waits is the waiter's once one does. */
Test(async_wait, the_start_takes_its_place_and_the_wait_gets_the_grant, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "async");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_acquire_opts may_wait = {.limit = 1, .wait_ms = 20000};
    dbt_permit *held, *none;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);

    waiter w = {.opts = may_wait};
    cr_assert_eq(dbt_acquire_start(p, DBT_KIND_QUERY, &may_wait, &none, &w.pending),
                 DBT_ACQ_QUEUED);
    cr_assert_null(none);
    cr_assert_not_null(w.pending);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 1, "the start did not queue");
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &none), DBT_ACQ_TIMEOUT,
                 "a newcomer overtook the queued start");

    dbt_release(held); /* granted to the queued start, in Redis, while no thread waits */
    zcard_is granted = {&fx_redis, HOLDERS, 1};
    cr_expect(test_wait_until(test_zcard_is, &granted, 5000));
    pthread_t t;
    pthread_create(&t, NULL, wait_elsewhere, &w);
    pthread_join(t, NULL);
    cr_assert_eq(w.res, DBT_ACQ_GRANTED);
    dbt_release(w.permit);
    /* (The release may have passed its permit on here, the queued place then left to be
     * adopted or withdrawn: either way, nothing stays.) */
    zcard_is gone = {&fx_redis, HOLDERS, 0}, empty = {&fx_redis, QUEUE, 0};
    cr_expect(test_wait_until(test_zcard_is, &gone, 5000), "a permit stayed held");
    cr_expect(test_wait_until(test_zcard_is, &empty, 5000), "a place stayed queued");
}

/* The deadline counts from the start; the place is withdrawn at it. */
Test(async_wait, the_wait_times_out_at_the_starts_deadline, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "async");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_acquire_opts brief = {.limit = 1, .wait_ms = 300};
    dbt_permit *held, *none;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter w = {.opts = brief};
    cr_assert_eq(dbt_acquire_start(p, DBT_KIND_QUERY, &brief, &none, &w.pending), DBT_ACQ_QUEUED);
    wait_elsewhere(&w);
    cr_expect_eq(w.res, DBT_ACQ_TIMEOUT);
    cr_expect_null(w.permit);
    zcard_is empty = {&fx_redis, QUEUE, 0};
    cr_expect(test_wait_until(test_zcard_is, &empty, 5000), "the place was left in the queue");
    dbt_release(held);
    zcard_is gone = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &gone, 5000));
}

static bool stop_now(void *arg)
{
    return atomic_load((atomic_bool *)arg);
}

/* Another thread ends the wait through the waker (a cancel, or PQfinish of the connection). */
Test(async_wait, a_waker_ends_the_wait, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "async");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_acquire_opts may_wait = {.limit = 1, .wait_ms = 30000};
    dbt_permit *held, *none;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    atomic_bool stop = false;
    dbt_waker wk = {0};
    waiter w = {.opts = may_wait};
    w.opts.interrupted = stop_now;
    w.opts.arg = &stop;
    w.opts.waker = &wk;
    cr_assert_eq(dbt_acquire_start(p, DBT_KIND_QUERY, &may_wait, &none, &w.pending),
                 DBT_ACQ_QUEUED);
    pthread_t t;
    pthread_create(&t, NULL, wait_elsewhere, &w);
    atomic_store(&stop, true);
    dbt_waker_fire(&wk);
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_INTERRUPTED);
    zcard_is empty = {&fx_redis, QUEUE, 0};
    cr_expect(test_wait_until(test_zcard_is, &empty, 5000), "the place was left in the queue");
    dbt_release(held);
    zcard_is gone = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &gone, 5000));
}

/* A process that exits while an acquire it started is still queued (an event loop's held command)
 * withdraws the place: left queued, it would reach the head and be granted to nobody for a lease.
 */
Test(async_wait, exit_withdraws_a_queued_start, .timeout = 60)
{
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=30s", NULL),
               *wc = fx_client("DBTHROTTLE_LEASE=30s", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "async"), *wp = dbt_client_pool(wc, "async");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_acquire_opts brief = {.limit = 1, .wait_ms = 1500};
    dbt_permit *held, *none;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter w = {.opts = brief};
    cr_assert_eq(dbt_acquire_start(wp, DBT_KIND_QUERY, &brief, &none, &w.pending), DBT_ACQ_QUEUED);
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 1);
    dbt_client_exit(wc);
    zcard_is empty = {&fx_redis, QUEUE, 0};
    cr_expect(test_wait_until(test_zcard_is, &empty, 5000), "the place stayed queued");
    dbt_release(held);
    zcard_is gone = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &gone, 5000), "the permit went to the exited place");
    /* (A process that goes on after its exit handler, as this one, finds its place gone and
     * queues again: whatever it gets, it gives back.) */
    wait_elsewhere(&w);
    dbt_release(w.permit);
}
