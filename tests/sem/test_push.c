/* Push, not poll: a waiting process sends Redis nothing until its grant is pushed to it. */
#include "sem_helpers.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <unistd.h>

typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
    dbt_permit *permit;
    int64_t granted_at;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    w->granted_at = test_now_ms();
    dbt_release(w->permit); /* hand it to the next waiter */
    return NULL;
}

static bool blpop_blocked(void *arg)
{
    redisContext *rc = test_redis_connect(arg);
    redisReply *rep = rc ? redisCommand(rc, "INFO clients") : NULL;
    bool yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "blocked_clients:1");
    if (rep)
        freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return yes;
}

Test(push, idle_waiters_send_nothing_and_a_release_wakes_them, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    /* A 30 s lease renews every 10 s: no renewal falls inside the observed second. */
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=30s", NULL);
    dbt_client *hc = dbt_client_new(&cfg), *wc = dbt_client_new(&cfg);
    dbt_pool *hp = dbt_client_pool(hc, "push"), *wp = dbt_client_pool(wc, "push");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    enum { N = 4 };
    waiter_arg w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        w[i] = (waiter_arg){.pool = wp};
        pthread_create(&t[i], NULL, waiter, &w[i]);
    }
    zcard_is q = {&r, "dbthrottle:{push}:q:queue", N};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    /* The listener's BLPOP is issued right after the first waiter queues: wait until Redis has
     * it blocked, so what is counted next is only what idle waiting costs. */
    cr_assert(test_wait_until(blpop_blocked, &r, 10000));
    long long before = test_redis_commands(&r);
    usleep(1000000);
    long long after = test_redis_commands(&r);
    cr_expect_eq(after - before, 0, "%lld commands reached Redis while %d threads waited",
                 after - before, N);
    /* Four waiting threads of one process share one listener connection. */
    redisContext *rc = test_redis_connect(&r);
    redisReply *rep = redisCommand(rc, "CLIENT LIST");
    int blocked = 0;
    for (char *s = rep->str; (s = strstr(s, "cmd=blpop")); s++)
        blocked++;
    freeReplyObject(rep);
    redisFree(rc);
    cr_expect_eq(blocked, 1, "%d connections blocked in BLPOP for one waiting process", blocked);

    int64_t released = test_now_ms();
    dbt_release(held);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(w[i].res, DBT_ACQ_GRANTED);
    }
    int64_t first = w[0].granted_at;
    for (int i = 1; i < N; i++)
        if (w[i].granted_at < first)
            first = w[i].granted_at;
    cr_log_info("first grant %lld ms after the release", (long long)(first - released));
    zcard_is h0 = {&r, "dbthrottle:{push}:q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_client_free(hc);
    dbt_client_free(wc);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}
