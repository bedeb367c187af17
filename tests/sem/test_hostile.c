/* Redis answers that are not what the scripts expect: a key of the wrong type, keys deleted by
 * hand, a read-only replica. Each gives a clear logged error, never a crash, and the semaphore
 * works again once the data is sane. A key of the wrong type is another application's key under
 * the same prefix: a configuration error, refused whatever the mode (docs/configuration.md); the
 * others keep the configured fail mode. */
#include "log.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define Q "dbthrottle:{hostile}:q:"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(hostile, .init = fx_redis_start, .fini = fx_stop);

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

/* The log once it holds both needles (5 s at most): a line may come from the pool's background
 * thread, which can meet the error first and log it just after the caller's acquire returns. */
static char *slurp_until(const char *path, const char *a, const char *b)
{
    char *text = slurp(path);
    for (int i = 0; i < 500 && !(strstr(text, a) && strstr(text, b)); i++) {
        free(text);
        usleep(10000);
        text = slurp(path);
    }
    return text;
}

/* A client (fx_client's) of r with mode and a log file; *log gets its path. */
static dbt_client *client(const test_redis *r, const char *mode, char *log, size_t cap)
{
    char kv[64], lkv[300], url[64], err[DBT_ERRLEN];
    snprintf(kv, sizeof kv, "DBTHROTTLE_ON_REDIS_ERROR=%s", mode);
    snprintf(log, cap, "%s/client-%s.log", r->dir, mode);
    snprintf(lkv, sizeof lkv, "DBTHROTTLE_LOG=%s", log);
    snprintf(url, sizeof url, "DBTHROTTLE_REDIS_URL=redis://127.0.0.1:%d", r->port);
    dbt_client *c = fx_client(url, kv, lkv, "DBTHROTTLE_LOG_LEVEL=warn",
                              "DBTHROTTLE_REDIS_TIMEOUT=500ms", "DBTHROTTLE_LEASE=1s", NULL);
    cr_assert(dbt_log_open(fx_config(c), err), "%s", err);
    return c;
}

static dbt_acq_result acquire_eventually(dbt_pool *p, dbt_acq_result want, dbt_permit **out)
{
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 0};
    int64_t deadline = test_now_ms() + 5000;
    dbt_acq_result res;
    while ((res = dbt_acquire(p, DBT_KIND_QUERY, &o, out)) != want && test_now_ms() < deadline) {
        if (res == DBT_ACQ_GRANTED)
            dbt_release(*out);
        usleep(50 * 1000); /* the outage backoff (1 s) must pass */
    }
    return res;
}

static void wrong_type(const char *mode, dbt_acq_result during)
{
    char log[300];
    dbt_client *c = client(&fx_redis, mode, log, sizeof log);
    dbt_pool *p = dbt_client_pool(c, "hostile");
    cr_assert_eq(test_redis_int(&fx_redis, "SET %s %s", Q "holders", "not-a-zset"), -1000);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 1000};
    dbt_permit *a = NULL;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), during);
    cr_expect_null(a);
    char *text = slurp_until(log, "event=redis_misconfigured", "DBTHROTTLE_KEY_PREFIX");
    cr_expect(strstr(text, "event=redis_misconfigured") && strstr(text, "WRONGTYPE") &&
                  strstr(text, "DBTHROTTLE_KEY_PREFIX"),
              "no error naming the prefix logged: %s", text);
    free(text);
    /* Sane again: throttling resumes by itself (at the next probe, within 2 s). */
    test_redis_int(&fx_redis, "DEL %s", Q "holders");
    cr_expect_eq(acquire_eventually(p, DBT_ACQ_GRANTED, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    fx_client_free(c);
    dbt_log_close();
}

Test(hostile, a_key_of_the_wrong_type_open)
{
    wrong_type("open", DBT_ACQ_MISCONFIGURED);
}

Test(hostile, a_key_of_the_wrong_type_closed)
{
    wrong_type("closed", DBT_ACQ_MISCONFIGURED);
}

/* Keys deleted by hand while a permit is held and a waiter waits: data lost (neither expired nor
 * given back), which the first renewal that names a missing id proves. The pool enters a
 * quarantine, the holder re-asserts its permit and keeps it, the waiter's place is queued again
 * (docs/design.md, "Failover and data loss"), and the limit holds throughout. On the code before
 * eras the holder lost its permit and the waiter was granted. */
Test(hostile, keys_deleted_by_hand)
{
    char log[300];
    dbt_client *c = client(&fx_redis, "closed", log, sizeof log);
    dbt_pool *p = dbt_client_pool(c, "hostile");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *a, *b = NULL, *x = NULL;
    /* Forked before this process has threads (see test_child_start_paused). */
    test_child ch;
    cr_assert(test_child_start_paused(&ch, &fx_redis, "hostile", 1, 10000, "1s"));
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &a), DBT_ACQ_GRANTED);
    test_child_go(&ch);
    zcard_is queued = {&fx_redis, Q "queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 5000));
    cr_assert_eq(test_redis_int(&fx_redis, "DEL %s %s %s", Q "holders", Q "queue", Q "seq"), 3);

    /* Within a renewal period (lease/3) and a little, the holder is back and the waiter queued
     * again. */
    zcard_is back = {&fx_redis, Q "holders", 1};
    cr_expect(test_wait_until(test_zcard_is, &back, 3000), "the holder was not re-asserted");
    cr_expect(test_wait_until(test_zcard_is, &queued, 3000), "the waiter was not queued again");
    cr_expect_gt(test_redis_int(&fx_redis, "ZSCORE %s %s", Q "holders", dbt_permit_id(a)), 0);
    cr_expect_not(dbt_permit_lost(a), "the holder lost a permit it could re-assert");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s quarantines", Q "stats"), 1);
    /* The limit holds: the re-asserted holder counts, and nobody else gets in. */
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &b), DBT_ACQ_TIMEOUT);
    cr_expect_eq(test_child_report(&ch, 200), 0, "the waiter was granted beside the holder");
    /* Given back, the permit goes to the waiter (once the quarantine is over). */
    dbt_release(a);
    cr_expect_eq(test_child_report(&ch, 8000), 'G');
    test_child_finish(&ch);
    cr_expect_eq(acquire_eventually(p, DBT_ACQ_GRANTED, &x), DBT_ACQ_GRANTED);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", Q "holders"), 1);
    dbt_release(x);
    char *text = slurp(log);
    cr_expect(strstr(text, "event=quarantine"), "the quarantine was not logged: %s", text);
    free(text);
    fx_client_free(c);
    dbt_log_close();
}

static void replica(const char *mode, dbt_acq_result during)
{
    /* The fixture's server is the primary; the replica, a second one, is stopped here. */
    test_redis rep;
    char extra[64];
    snprintf(extra, sizeof extra, "--replicaof 127.0.0.1 %d", fx_redis.port);
    cr_assert(test_redis_start(&rep, extra));
    char log[300];
    dbt_client *c = client(&rep, mode, log, sizeof log);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 1000};
    dbt_permit *a = NULL;
    cr_expect_eq(dbt_acquire(dbt_client_pool(c, "hostile"), DBT_KIND_QUERY, &o, &a), during);
    cr_expect_null(a);
    char *text = slurp_until(log, "event=redis_error", "READONLY");
    cr_expect(strstr(text, "event=redis_error") && strstr(text, "READONLY"),
              "no clear error logged: %s", text);
    free(text);
    fx_client_free(c);
    dbt_log_close();
    test_redis_stop(&rep);
}

Test(hostile, a_read_only_replica_open)
{
    replica("open", DBT_ACQ_UNTHROTTLED);
}

Test(hostile, a_read_only_replica_closed)
{
    replica("closed", DBT_ACQ_REFUSED);
}
