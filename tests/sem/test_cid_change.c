/* A pool's cid changes while it waits (host sharing: attached, a broken segment let go, attached
 * anew with another group): a grant Redis pushes for a place made under a cid the pool had two
 * changes ago still reaches its waiter within a round trip, not at the next renewal (lease/3).
 * The lease here is 30 s (renewals every 10 s), so the renewal cannot be what delivers it. */
#include "listener.h"
#include "pool.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define G1   "0123456789abcdef"
#define G2   "fedcba9876543210"
#define BASE "dbthrottle:{cc}:"
#define P    BASE "q:"

TestSuite(cid_change, .init = fx_redis_start, .fini = fx_stop);

typedef struct {
    dbt_pool *p;
    dbt_acq_result r;
    dbt_permit *pm;
    atomic_llong done_ms;
} waiter;

static void *wait_for_permit(void *arg)
{
    waiter *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 60000, .conn = "cc"};
    w->r = dbt_acquire(w->p, DBT_KIND_QUERY, &o, &w->pm);
    atomic_store(&w->done_ms, test_now_ms());
    return NULL;
}

static bool someone_queued(void *arg)
{
    (void)arg;
    return test_redis_int(&fx_redis, "ZCARD " P "queue") == 1;
}

static bool granted(void *arg)
{
    waiter *w = arg;
    return atomic_load(&w->done_ms) != 0;
}

/* The one queued id (static: one test at a time). */
static const char *waiter_id(void)
{
    static char id[256];
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *q = redisCommand(rc, "ZRANGE " P "queue 0 -1");
    cr_assert(q && q->type == REDIS_REPLY_ARRAY && q->elements == 1);
    snprintf(id, sizeof id, "%s", q->element[0]->str);
    freeReplyObject(q);
    redisFree(rc);
    return id;
}

static bool lease_extended(void *arg)
{
    const long long *before = arg;
    return test_redis_int(&fx_redis, "ZSCORE " P "wexp %s", waiter_id()) > *before;
}

/* The listener has let its old connection go and listens again, and no renewal is asked for: the
 * one a reset with a BLPOP in flight asks for (listener.c: a grant that BLPOP popped would be
 * lost) has at least been taken by the renewer. Released before it has run, the grant could come
 * by that renewal instead of a BLPOP (seen under load: granted in time, its message left in the
 * old list), and the test would not test the listener. */
static bool listener_settled(void *arg)
{
    dbt_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    bool settled = !p->listener_reset && !p->renew_now && p->blpop_in_flight > 0;
    pthread_mutex_unlock(&p->mu);
    return settled;
}

Test(cid_change, a_grant_for_a_place_of_an_older_cid_comes_within_a_round_trip, .timeout = 90)
{
    const char *lease = "DBTHROTTLE_LEASE=30s", *off = "DBTHROTTLE_HOST_SHARE=off";
    dbt_client *holder_c = fx_client(lease, off, NULL);
    dbt_client *c = fx_client(lease, off, NULL);
    dbt_pool *hp = dbt_client_pool(holder_c, "cc"), *p = dbt_client_pool(c, "cc");
    cr_assert(hp && p);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 0, .conn = "cc"};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);

    /* The waiter queues under G1's cid. */
    pthread_mutex_lock(&p->mu);
    dbt_pool_set_group(p, G1);
    char old_cid[DBT_POOL_CID_MAX];
    snprintf(old_cid, sizeof old_cid, "%s", dbt_pool_cid(p));
    pthread_mutex_unlock(&p->mu);
    waiter w = {.p = p};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_for_permit, &w), 0);
    cr_assert(test_wait_until(someone_queued, NULL, 20000), "the waiter never queued");

    /* The segment is let go (the plain cid), and a new one attached (another group). */
    long long lease_end = test_redis_int(&fx_redis, "ZSCORE " P "wexp %s", waiter_id());
    pthread_mutex_lock(&p->mu);
    dbt_pool_set_group(p, NULL);
    dbt_pool_set_group(p, G2);
    pthread_mutex_unlock(&p->mu);
    /* The renewal the change asks for comes first (the grant is not made yet): it extends the
     * waiter's lease, within a round trip rather than at the next renewal, 10 s on. */
    cr_expect(test_wait_until(lease_extended, &lease_end, 5000),
              "no renewal at the change of cid (the waiter's lease was not extended in 5 s)");
    cr_assert(test_wait_until(listener_settled, p, 5000), "the listener did not listen again");
    /* A renewal asked for now runs after the catch-up one, if any (one renewer, one call at a
     * time): once it has extended the lease (2 ms on, so that its score is a later one), no
     * renewal is left that could bring the grant. */
    long long extended = test_redis_int(&fx_redis, "ZSCORE " P "wexp %s", waiter_id());
    usleep(2000);
    dbt_pool_renew_now(p);
    cr_assert(test_wait_until(lease_extended, &extended, 5000), "the renewal asked for never ran");

    int64_t released = test_now_ms();
    dbt_release(held);
    bool in_time = test_wait_until(granted, &w, 4000);
    long long wake_left = test_redis_int(&fx_redis, "LLEN " BASE "wake:%s", old_cid);
    cr_expect(in_time,
              "the grant pushed to wake:%s did not reach the waiter in 4 s (a renewal "
              "every 10 s); its list still holds %lld message(s)",
              old_cid, wake_left);
    if (in_time)
        cr_log_info("granted %lld ms after the release",
                    (long long)(atomic_load(&w.done_ms) - released));
    pthread_join(t, NULL);
    cr_assert_eq(w.r, DBT_ACQ_GRANTED);
    cr_expect_eq(wake_left, 0, "the grant's message was never popped from wake:%s", old_cid);
    dbt_release(w.pm);
}
