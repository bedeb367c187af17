/* fork(): a child never uses its parent's connections or permits. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{fork}:q:holders"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(fork, .init = fx_redis_start, .fini = fx_stop);

Test(fork, child_neither_releases_nor_shares_the_parents_permits, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "fork");
    dbt_acquire_opts o = {.limit = 3, .wait_ms = 5000};
    dbt_permit *mine;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &mine), DBT_ACQ_GRANTED);
    char parent_cid[17];
    snprintf(parent_cid, sizeof parent_cid, "%s", dbt_client_id(c));

    pid_t pid = fork();
    if (pid == 0) {
        int rc = 0;
        /* The parent's permit is not the child's: releasing it only forgets it. */
        dbt_release(mine);
        if (test_redis_int(&fx_redis, "ZCARD %s", HOLDERS) != 1)
            rc |= 1;
        if (strcmp(dbt_client_id(c), parent_cid) == 0)
            rc |= 2; /* the child must have a client id (and wake list) of its own */
        dbt_permit *childs;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &childs) != DBT_ACQ_GRANTED)
            rc |= 4;
        else if (strncmp(dbt_permit_id(childs), parent_cid, 16) == 0)
            rc |= 8;
        if (test_redis_int(&fx_redis, "ZCARD %s", HOLDERS) != 2)
            rc |= 16;
        dbt_release(childs);
        dbt_client_free(c);
        _exit(rc);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st));
    cr_expect_eq(WEXITSTATUS(st), 0, "child check failed: bits %d", WEXITSTATUS(st));
    /* The parent still holds its permit and its connections still work. */
    zcard_is one = {&fx_redis, HOLDERS, 1};
    cr_expect(test_wait_until(test_zcard_is, &one, 5000));
    dbt_permit *again;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &again), DBT_ACQ_GRANTED);
    dbt_release(again);
    dbt_release(mine);
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000));
}

typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000};
    dbt_permit *p = NULL;
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &p);
    dbt_release(p);
    return NULL;
}

/* fork() while another thread waits for a permit: the child is not stuck on a lock the waiting
 * thread held, and the parent's waiter still gets its grant. */
Test(fork, fork_while_a_thread_waits, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "fork");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is q = {&fx_redis, "dbthrottle:{fork}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    pid_t pid = fork();
    if (pid == 0) {
        /* A different pool: the parent's holds the only permit of "fork". */
        dbt_permit *x;
        int rc = dbt_acquire(dbt_client_pool(c, "fork-child"), DBT_KIND_QUERY, &now, &x) ==
                         DBT_ACQ_GRANTED
                     ? 0
                     : 1;
        dbt_release(x);
        _exit(rc);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child could not use the throttle");
    dbt_release(held);
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_GRANTED);
}
