/* A lease set live (live.c, lease.c): the pool's calls carry it, each permit carries the lease of
 * the call Redis last accepted for it, and a renewal never ends a lease in Redis sooner than it
 * was (renew.lua's ZADD GT): a renewal with the shorter lease whose reply is lost, or an older
 * renewal run after a newer one, must leave no process believing in a permit Redis has expired.
 * Judged by the holder's score in Redis. */
#include "clock.h"
#include "lease.h"
#include "live.h"
#include "pool.h"
#include "sem_fixture.h"
#include "settings.h"

#include <criterion/criterion.h>
#include <hiredis.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(live_lease, .init = fx_redis_start, .fini = fx_stop);

/* The expiry Redis holds for id among the pool's query holders (ms, its clock), -1 none; and its
 * clock now in *now_ms. */
static long long score_of(const char *pool, const char *id, long long *now_ms)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert(rc);
    redisReply *r = redisCommand(rc, "EVAL %s 1 dbthrottle:{%s}:q:holders %s",
                                 "local t = redis.call('TIME') "
                                 "local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) "
                                 "return {t[1] * 1000 + math.floor(t[2] / 1000), s or '-1'}",
                                 pool, id);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "%s",
              r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    *now_ms = r->element[0]->integer;
    long long s = atoll(r->element[1]->str);
    freeReplyObject(r);
    redisFree(rc);
    return s;
}

/* The permit's lease and renewal time, as its process believes them. */
static void belief(dbt_pool *p, dbt_permit *pm, int64_t *lease_us, int64_t *renewed_us)
{
    pthread_mutex_lock(&p->mu);
    *lease_us = pm->lease_us;
    *renewed_us = pm->t_renewed_us;
    pthread_mutex_unlock(&p->mu);
}

/* Renews now, and waits until a renewal sent after `after` was accepted for pm. */
static void renewed_after(dbt_pool *p, dbt_permit *pm, int64_t after)
{
    int64_t lease, renewed = 0;
    for (int i = 0; i < 200 && renewed <= after; i++) {
        dbt_pool_renew_now(p);
        usleep(20000);
        belief(p, pm, &lease, &renewed);
    }
    cr_assert_gt(renewed, after, "no renewal was accepted");
}

Test(live_lease, a_shorter_lease_applies_to_new_calls_and_never_shortens_a_lease_in_redis,
     .timeout = 60)
{
    /* (a server check of 200 ms: 4 x that is within the live 1 s, which it then accepts) */
    dbt_client *c =
        fx_client("DBTHROTTLE_LEASE=10s", "DBTHROTTLE_SERVER_CHECK_INTERVAL=200ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "ll");
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000};
    dbt_permit *a;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    long long now, first = score_of("ll", a->id, &now);
    cr_assert_gt(first - now, 9000, "granted with its own 10 s lease: %lld ms left", first - now);

    dbt_live_apply(p, "v1\nlease=1s\n");
    cr_assert_eq(dbt_lease_us(p), 1000000, "the live 1 s is in force");
    /* A new permit carries the live lease. */
    dbt_permit *b;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), DBT_ACQ_GRANTED);
    long long b_left = score_of("ll", b->id, &now) - now;
    cr_assert(b_left > 0 && b_left <= 1000, "a new permit is granted with 1 s: %lld ms left",
              b_left);
    int64_t lease_us, renewed_us;
    belief(p, b, &lease_us, &renewed_us);
    cr_expect_eq(lease_us, 1000000, "the new permit believes the 1 s it was granted with");

    /* The old one, renewed with 1 s: it believes 1 s from the renewal, and Redis keeps the end
     * it gave it (10 s from the grant), not a second from now (before: lowered to it). */
    int64_t t0 = dbt_now_us();
    renewed_after(p, a, t0);
    belief(p, a, &lease_us, &renewed_us);
    cr_expect_eq(lease_us, 1000000, "renewed with the live lease, it believes that one");
    long long after = score_of("ll", a->id, &now);
    cr_expect_geq(after, first,
                  "a renewal with a shorter lease lowered its end in Redis: %lld -> %lld", first,
                  after);
    cr_expect_gt(after - now, 5000, "its end in Redis is still the 10 s one: %lld ms left",
                 after - now);

    /* Back to its own: new calls carry 10 s again. */
    dbt_live_apply(p, "");
    cr_assert_eq(dbt_lease_us(p), 10000000);
    dbt_release(b);
    dbt_permit *d;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &d), DBT_ACQ_GRANTED);
    long long d_left = score_of("ll", d->id, &now) - now;
    cr_expect_gt(d_left, 9000, "cleared, a new permit carries the own 10 s: %lld ms left", d_left);
    dbt_release(a);
    dbt_release(d);
}

Test(live_lease, while_a_change_settles_renewals_come_at_a_third_of_the_shorter, .timeout = 30)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "ls");
    int64_t now = dbt_now_us();
    cr_assert_eq(dbt_lease_shortest_us(p, now), 1000000);
    dbt_live_apply(p, "v1\nlease=6s\n");
    now = dbt_now_us();
    cr_expect_eq(dbt_lease_us(p), 6000000);
    cr_expect_eq(dbt_lease_shortest_us(p, now), 1000000, "a permit may still carry the old 1 s");
    cr_expect_eq(dbt_lease_longest_us(p, now), 6000000);
    /* Corrected at once (6 s was a typo for 3 s): the 1 s is still carried too. */
    dbt_live_apply(p, "v2\nlease=3s\n");
    now = dbt_now_us();
    cr_expect_eq(dbt_lease_shortest_us(p, now), 1000000);
    cr_expect_eq(dbt_lease_longest_us(p, now), 6000000);
    /* Settled: past the longest before it (6 s) plus a Redis timeout and a second. */
    int64_t later = now + 8100000;
    cr_expect_eq(dbt_lease_shortest_us(p, later), 3000000);
    cr_expect_eq(dbt_lease_longest_us(p, later), 3000000);
}

Test(live_lease, refused_under_four_times_the_server_check, .timeout = 30)
{
    /* The default check (auto: min(1 s, lease/4), 1 s at the own 10 s) could not end a dead
     * client's statement before a 1 s lease gives its permit back: refused, the own kept. */
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=10s", NULL);
    dbt_pool *p = dbt_client_pool(c, "lr");
    dbt_live_apply(p, "v1\nlease=1s\n");
    cr_expect_eq(dbt_lease_us(p), 10000000, "the own 10 s stays in force");
    pthread_mutex_lock(&p->mu);
    cr_expect_str_eq(p->live->refused_keys, "lease");
    pthread_mutex_unlock(&p->mu);
    dbt_live_apply(p, "v2\nlease=4s\n");
    cr_expect_eq(dbt_lease_us(p), 4000000, "4 x the 1 s check: taken");
}
