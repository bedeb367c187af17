/* Fairness: first come, first served across processes; a newcomer never overtakes. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{fifo}:q:holders"
#define QUEUE   "dbthrottle:{fifo}:q:queue"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(fifo, .init = fx_redis_start, .fini = fx_stop);

enum { WAITERS = 8 };

typedef struct {
    atomic_int next;
    int order[WAITERS + 1];
} order_log;

/* A waiter process: once let go, waits for a permit, writes its number into the order log,
 * releases. Forked before the test's process has threads (a child forked while the renewer is
 * inside ASan's allocator can hang in it: see test_child_start_paused). */
typedef struct {
    pid_t pid;
    int gate; /* written to let it go */
} waiter_proc;

static waiter_proc fork_waiter(const test_redis *r, order_log *log, int me, int limit)
{
    int gate[2];
    cr_assert(pipe(gate) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(gate[1]);
        char go;
        if (read(gate[0], &go, 1) != 1)
            _exit(2);
        dbt_config cfg;
        test_config(&cfg, r, NULL);
        dbt_client *c = dbt_client_new(&cfg);
        dbt_pool *p = dbt_client_pool(c, "fifo");
        dbt_acquire_opts o = {.limit = limit, .wait_ms = 30000};
        dbt_permit *permit;
        int rc = 1;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &permit) == DBT_ACQ_GRANTED) {
            log->order[atomic_fetch_add(&log->next, 1)] = me;
            dbt_release(permit);
            rc = 0;
        }
        dbt_client_free(c);
        dbt_config_free(&cfg);
        _exit(rc);
    }
    close(gate[0]);
    return (waiter_proc){pid, gate[1]};
}

static void let_go(waiter_proc *w)
{
    cr_assert(write(w->gate, "g", 1) == 1);
    close(w->gate);
}

Test(fifo, waiters_are_granted_in_arrival_order, .timeout = 60)
{
    order_log *log =
        mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(log, 0, sizeof *log);
    waiter_proc w[WAITERS];
    for (int i = 0; i < WAITERS; i++)
        w[i] = fork_waiter(&fx_redis, log, i, 1);
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "fifo");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);

    for (int i = 0; i < WAITERS; i++) {
        let_go(&w[i]);
        zcard_is q = {&fx_redis, QUEUE, i + 1};
        cr_assert(test_wait_until(test_zcard_is, &q, 10000), "waiter %d never queued", i);
    }
    /* A newcomer that will not wait gets nothing while others queue, nor right after the
     * release: the permit goes to the head of the queue inside the release script. */
    dbt_permit *barged = NULL;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &barged), DBT_ACQ_TIMEOUT);
    dbt_release(held);
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &barged), DBT_ACQ_TIMEOUT);

    for (int i = 0; i < WAITERS; i++) {
        int st;
        waitpid(w[i].pid, &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "waiter %d was not granted", i);
    }
    cr_assert_eq(atomic_load(&log->next), WAITERS);
    for (int i = 0; i < WAITERS; i++)
        cr_expect_eq(log->order[i], i, "grant %d went to waiter %d", i, log->order[i]);
    zcard_is h = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &h, 5000), "holders did not return to 0");
    fx_client_free(c);
    munmap(log, sizeof *log);
}

/* A newcomer whose own limit would admit it still queues behind a waiter whose smaller limit
 * keeps it waiting: no barging, even when callers disagree on the limit. */
Test(fifo, no_barging_past_a_waiter_with_a_smaller_limit, .timeout = 60)
{
    order_log *log =
        mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(log, 0, sizeof *log);
    waiter_proc w = fork_waiter(&fx_redis, log, 0, 1); /* limit 1: must wait for `held` */
    waiter_proc n = fork_waiter(&fx_redis, log, 1, 5); /* limit 5: queues behind waiter 0 */
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "fifo");
    dbt_acquire_opts one = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &one, &held), DBT_ACQ_GRANTED);

    let_go(&w);
    zcard_is q = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    /* limit 5 would admit a second holder, but the queue is not empty */
    dbt_acquire_opts five = {.limit = 5, .wait_ms = 0};
    dbt_permit *barged = NULL;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &five, &barged), DBT_ACQ_TIMEOUT);
    let_go(&n);
    zcard_is q2 = {&fx_redis, QUEUE, 2};
    cr_assert(test_wait_until(test_zcard_is, &q2, 10000));
    /* Still queued, not admitted: one holder, two waiters. */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 2);
    dbt_release(held);
    int st;
    waitpid(w.pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    waitpid(n.pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* The release granted both at once (1 < 1 for the head, then 2 < 5 for the newcomer). */
    cr_assert_eq(atomic_load(&log->next), 2);
    fx_client_free(c);
    munmap(log, sizeof *log);
}
