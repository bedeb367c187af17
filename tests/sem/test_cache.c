/* Kept permits (DBTHROTTLE_CACHE_PERMITS): reused with no Redis traffic while nobody waits, given
 * back at once (by push) when somebody queues, and by themselves after DBTHROTTLE_CACHE_IDLE. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{cache}:q:holders"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(cache, .init = fx_redis_start, .fini = fx_stop);

/* The pool "cache" of a client that keeps permits. */
static dbt_pool *setup(const char *idle)
{
    /* A long lease: no renewal traffic during a test; the idle setting decides when kept
     * permits go back by themselves. */
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=10m", "DBTHROTTLE_CACHE_PERMITS=on", idle, NULL);
    return dbt_client_pool(c, "cache");
}

static dbt_permit *take(dbt_pool *p, int limit)
{
    dbt_acquire_opts o = {.limit = limit, .wait_ms = 5000};
    dbt_permit *pm = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    return pm;
}

Test(cache, a_kept_permit_is_reused_without_any_redis_command, .timeout = 60)
{
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=1m");
    dbt_permit *pm = take(p, 2);
    const char *id = dbt_permit_id(pm);
    char first[64];
    snprintf(first, sizeof first, "%s", id);
    cr_assert(dbt_permit_park(pm));
    long long before = test_redis_commands(&fx_redis);
    for (int i = 0; i < 200; i++) {
        cr_assert(dbt_permit_unpark(&pm), "round %d: the kept permit was gone", i);
        cr_assert(dbt_permit_park(pm));
    }
    long long after = test_redis_commands(&fx_redis);
    /* The renewer's BLPOP (listening for a waiter) is the only command it may have sent. */
    cr_expect_leq(after - before, 1, "%lld commands for 200 reuses", after - before);
    cr_expect_str_eq(dbt_permit_id(pm), first, "the same permit all along");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    dbt_release(pm);
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000));
}

Test(cache, an_idle_kept_permit_goes_back_when_a_waiter_queues, .timeout = 60)
{
    /* Kept for up to an hour unless revoked: only the push can explain a grant within 5 s. */
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=1m");
    test_child w; /* forked before this process has threads: see test_child_start_paused */
    cr_assert(test_child_start_paused(&w, &fx_redis, "cache", 1, 5000, "10s"));
    dbt_permit *pm = take(p, 1);
    cr_assert(dbt_permit_park(pm));
    test_child_go(&w);
    cr_expect_eq(test_child_report(&w, 10000), 'G', "the waiter was not granted the kept permit");
    /* The keeper learns its permit went back, and queues for the next command like anyone. */
    cr_expect_not(dbt_permit_unpark(&pm));
    cr_expect_null(pm);
    test_child_finish(&w);
    dbt_permit *again = take(p, 1);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    /* Granted with nobody queued: keeping is allowed again. */
    cr_expect(dbt_permit_park(again));
    dbt_release(again);
}

Test(cache, a_permit_in_use_goes_back_at_the_end_of_its_command, .timeout = 60)
{
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=1m");
    test_child w;
    cr_assert(test_child_start_paused(&w, &fx_redis, "cache", 1, 10000, "10s"));
    dbt_permit *pm = take(p, 1);
    cr_assert(dbt_permit_park(pm));
    cr_assert(dbt_permit_unpark(&pm)); /* a command runs on it */
    test_child_go(&w);
    zcard_is queued = {&fx_redis, "dbthrottle:{cache}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 5000));
    /* Busy: the waiter waits for the command... */
    cr_expect_eq(test_child_report(&w, 300), 0, "granted while the permit was in use");
    /* ...which ends: kept (the push is read once the permit is kept) or given back at once, the
     * permit reaches the waiter without waiting for the idle time (a minute). */
    bool kept = dbt_permit_park(pm);
    if (!kept)
        dbt_release(pm); /* the push came during the command: not kept at all */
    cr_expect_eq(test_child_report(&w, 10000), 'G');
    if (kept)
        cr_expect_not(dbt_permit_unpark(&pm));
    test_child_finish(&w);
}

Test(cache, a_kept_permit_goes_back_by_itself_after_the_idle_time, .timeout = 60)
{
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=100ms");
    dbt_permit *pm = take(p, 3);
    cr_assert(dbt_permit_park(pm));
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000), "the idle permit stayed in Redis");
    cr_expect_not(dbt_permit_unpark(&pm));
}

Test(cache, no_permit_is_kept_when_caching_is_off, .timeout = 60)
{
    dbt_pool *p = dbt_client_pool(fx_client("DBTHROTTLE_CACHE_PERMITS=off", NULL), "cache");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 1000};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    cr_expect_not(dbt_permit_park(pm), "kept although DBTHROTTLE_CACHE_PERMITS is off");
    dbt_release(pm);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 0);
}

Test(cache, a_child_never_uses_its_parents_kept_permit, .timeout = 60)
{
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=1m");
    dbt_permit *pm = take(p, 2);
    cr_assert(dbt_permit_park(pm));
    pid_t pid = fork();
    if (pid == 0) {
        int rc = 0;
        if (dbt_permit_unpark(&pm) || pm != NULL)
            rc |= 1; /* the parent's: never the child's */
        if (test_redis_int(&fx_redis, "ZCARD %s", HOLDERS) != 1)
            rc |= 2; /* and not given back by the child either */
        _exit(rc);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child check failed: %d", WEXITSTATUS(st));
    cr_expect(dbt_permit_unpark(&pm), "the parent keeps its permit");
    dbt_release(pm);
}

/* The push that says somebody queued can go astray (a listener connection lost with the popped
 * message; a Redis restored from a snapshot that already holds a queue): the keeper's next
 * renewal sees the queue and gives its kept permit back all the same. */
Test(cache, a_kept_permit_goes_back_at_the_next_renewal_if_the_push_is_lost, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=600ms", "DBTHROTTLE_CACHE_PERMITS=on",
                              "DBTHROTTLE_CACHE_IDLE=1m", NULL);
    dbt_pool *p = dbt_client_pool(c, "cache");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 1000};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    cr_assert(dbt_permit_park(pm));
    /* A waiter appears in the queue without any push, as a restored snapshot would have it. */
    const char *fake = "ffffffffffffffff.1.1";
    cr_assert_eq(test_redis_int(&fx_redis,
                                "EVAL %s 2 dbthrottle:{cache}:q:queue dbthrottle:{cache}:q:wexp %s",
                                "local t = redis.call('TIME') "
                                "redis.call('ZADD', KEYS[1], 1, ARGV[1]) "
                                "return redis.call('ZADD', KEYS[2], t[1] * 1000 + 60000, ARGV[1])",
                                fake),
                 1);
    /* Within a renewal or two (200 ms each) the kept permit goes back and the waiter holds it. */
    zcard_is one = {&fx_redis, HOLDERS, 1};
    bool granted = false;
    for (int i = 0; i < 250 && !granted; i++) {
        granted = test_redis_int(&fx_redis, "EVAL %s 1 %s %s",
                                 "return redis.call('ZSCORE', KEYS[1], ARGV[1]) and 1 or 0",
                                 HOLDERS, fake) == 1 &&
                  test_zcard_is(&one);
        if (!granted)
            usleep(20000);
    }
    cr_expect(granted, "the queued waiter never got the kept permit");
    cr_expect_not(dbt_permit_unpark(&pm));
}

/* FIFO holds with a keeper in the way: waiters that queued while it ran a command on its kept
 * permit are granted in their arrival order once it is done, and the keeper does not keep it. */
Test(cache, waiters_behind_a_kept_permit_are_granted_in_arrival_order, .timeout = 90)
{
    dbt_pool *p = setup("DBTHROTTLE_CACHE_IDLE=1m");
    enum { N = 4 };
    test_child w[N];
    for (int i = 0; i < N; i++)
        cr_assert(test_child_start_paused(&w[i], &fx_redis, "cache", 1, 30000, "10s"));
    dbt_permit *pm = take(p, 1);
    cr_assert(dbt_permit_park(pm));
    cr_assert(dbt_permit_unpark(&pm)); /* a command runs on it while the others arrive */
    for (int i = 0; i < N; i++) {
        test_child_go(&w[i]);
        zcard_is queued = {&fx_redis, "dbthrottle:{cache}:q:queue", i + 1};
        cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "waiter %d never queued", i);
    }
    /* The command ends: kept only if the push is not read yet, and then revoked. */
    bool kept = dbt_permit_park(pm);
    if (!kept)
        dbt_release(pm);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(test_child_report(&w[i], 10000), 'G', "waiter %d was not granted", i);
        for (int j = i + 1; j < N; j++) /* limit 1: nobody behind it holds meanwhile */
            cr_expect_eq(test_child_report(&w[j], 0), 0, "waiter %d overtook waiter %d", j, i);
        test_child_finish(&w[i]);
    }
    if (kept)
        cr_expect_not(dbt_permit_unpark(&pm));
}
