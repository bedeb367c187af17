/* Leases: a SIGKILLed holder's permit comes back within lease + lease/3; a dead waiter's place is
 * skipped. Nobody releases anything here: the waiters' own renewals keep the queue live. */
#include "sem_fixture.h"

#include <criterion/criterion.h>

#define HOLDERS "dbthrottle:{crash}:q:holders"
#define QUEUE   "dbthrottle:{crash}:q:queue"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(crash, .init = fx_redis_start, .fini = fx_stop);

Test(crash, killed_holder_frees_its_permit_within_the_lease, .timeout = 60)
{
    test_child holder;
    cr_assert(test_child_start(&holder, &fx_redis, "crash", 1, 0, "1s"));
    cr_assert_eq(test_child_report(&holder, 10000), 'G');

    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "crash");
    test_child_kill(&holder);
    int64_t killed = test_now_ms();
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    dbt_permit *permit;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &permit), DBT_ACQ_GRANTED);
    int64_t took = test_now_ms() - killed;
    /* lease 1000 ms + renewal period 333 ms + 1 s of slack */
    cr_expect_leq(took, 2333, "granted %lld ms after the holder died", (long long)took);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    dbt_release(permit);
}

Test(crash, killed_waiter_loses_its_place, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "crash");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    /* Forked before this process has threads (see test_child_start_paused). */
    test_child dead, live;
    cr_assert(test_child_start_paused(&dead, &fx_redis, "crash", 1, 30000, "1s"));
    cr_assert(test_child_start_paused(&live, &fx_redis, "crash", 1, 30000, "1s"));
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);

    test_child_go(&dead);
    zcard_is q1 = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));
    test_child_go(&live);
    zcard_is q2 = {&fx_redis, QUEUE, 2};
    cr_assert(test_wait_until(test_zcard_is, &q2, 10000));

    test_child_kill(&dead);
    int64_t killed = test_now_ms();
    dbt_release(held);
    cr_assert_eq(test_child_report(&live, 10000), 'G', "the live waiter was never granted");
    int64_t took = test_now_ms() - killed;
    cr_expect_leq(took, 2333, "live waiter granted %lld ms after the first waiter died",
                  (long long)took);
    /* The only holder is the live waiter; the dead one is in neither set. */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 0);
    test_child_finish(&live);
    zcard_is h0 = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
}
