/* The pool's keys live as long as permits are held in them: callers that bring different limits
 * must not stop the keys' TTL being refreshed. (keys_outlive_short_leases_in_a_mixed_pool, in
 * test_cancel.c, covers a waiter's ticket.) */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <unistd.h>

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(key_lifetime, .init = fx_redis_start, .fini = fx_stop);

/* Callers configured with different limits alternate for seven leases while two permits are held:
 * the pool's keys must keep their TTL, and the held permits must stay valid. */
Test(key_lifetime, alternating_limits_keep_the_keys_alive, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=600ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "ttl");
    dbt_acquire_opts two = {.limit = 2, .wait_ms = 0}, three = {.limit = 3, .wait_ms = 0};
    dbt_permit *h1, *h2, *x;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &h1), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &h2), DBT_ACQ_GRANTED);
    long long min_ttl = 1 << 30;
    for (int i = 0; i < 80; i++) { /* 4 s, about 7 leases */
        if (dbt_acquire(p, DBT_KIND_QUERY, (i % 2) ? &three : &two, &x) == DBT_ACQ_GRANTED)
            dbt_release(x);
        long long t = test_redis_int(&fx_redis, "PTTL dbthrottle:{ttl}:q:holders");
        if (t < min_ttl)
            min_ttl = t;
        usleep(50000);
    }
    cr_expect_gt(min_ttl, 0, "the holders key lost its TTL or vanished (PTTL %lld)", min_ttl);
    cr_expect(!dbt_permit_lost(h1) && !dbt_permit_lost(h2), "a held permit was lost");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{ttl}:q:holders"), 2);
    dbt_release(h1);
    dbt_release(h2);
}
