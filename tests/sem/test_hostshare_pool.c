/* Host-level sharing seen from the pool (sharing.c, with hostshare.c and a real redis-server):
 * fork()ed processes of one "host" (one DBTHROTTLE_SHARE_DIR) pass permits among themselves
 * without Redis while only they wait; the limit holds; a process whose waits end otherwise
 * (timeouts) loses nothing; off means every grant goes through Redis. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEY(k) "dbthrottle:{hs}:q:" k

enum { PROCS = 6, LIMIT = 2, CYCLES = 40 };

/* What the processes tell the test, in shared memory. */
typedef struct {
    atomic_int holders, max_seen, grants, failures, ready;
} tally;

/* One process: CYCLES acquires of a 2 ms hold each, counted in t (mmap'd shared). */
static void run_process(const char *share, const char *dir, tally *t, int64_t wait_ms)
{
    char share_kv[64], dir_kv[300];
    snprintf(share_kv, sizeof share_kv, "DBTHROTTLE_HOST_SHARE=%s", share);
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    dbt_config cfg;
    test_config(&cfg, &fx_redis, share_kv, dir_kv, NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "hs");
    dbt_acquire_opts o = {.limit = LIMIT, .wait_ms = wait_ms, .conn = "hs"};
    atomic_fetch_add(&t->ready, 1);
    while (atomic_load(&t->ready) < PROCS)
        usleep(1000);
    for (int i = 0; i < CYCLES; i++) {
        dbt_permit *pm;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED) {
            atomic_fetch_add(&t->failures, 1);
            continue;
        }
        int now = atomic_fetch_add(&t->holders, 1) + 1;
        int max = atomic_load(&t->max_seen);
        while (now > max && !atomic_compare_exchange_weak(&t->max_seen, &max, now))
            ;
        atomic_fetch_add(&t->grants, 1);
        usleep(2000);
        atomic_fetch_sub(&t->holders, 1);
        dbt_release(pm);
    }
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* PROCS processes of one host; returns the Redis commands they sent per grant. */
static double run_host(const char *share, tally *t, int64_t wait_ms)
{
    char dir[] = "/tmp/dbt-hs-XXXXXX";
    cr_assert(mkdtemp(dir));
    long long before = test_redis_commands(&fx_redis);
    pid_t pid[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pid[i] = fork();
        cr_assert(pid[i] >= 0);
        if (pid[i] == 0) {
            run_process(share, dir, t, wait_ms);
            _exit(0);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d did not exit cleanly", i);
    }
    long long sent = test_redis_commands(&fx_redis) - before;
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert(system(rm) == 0);
    int grants = atomic_load(&t->grants);
    return grants ? (double)sent / grants : 99;
}

static tally *new_tally(void)
{
    tally *t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(t != MAP_FAILED);
    memset(t, 0, sizeof *t);
    return t;
}

static bool nothing_left(void *arg)
{
    (void)arg;
    return test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")) == 0 &&
           test_redis_int(&fx_redis, "ZCARD %s", KEY("queue")) == 0;
}

/* The processes pass permits among themselves: far below one Redis command per grant, never
 * more than the limit at once, and nothing left in Redis once they exit. */
Test(hostshare_pool, processes_pass_permits_without_redis, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 120)
{
    tally *t = new_tally();
    double per_grant = run_host("on", t, 30000);
    cr_log_info("shared: %.2f Redis commands per grant", per_grant);
    cr_expect_eq(atomic_load(&t->grants), PROCS * CYCLES);
    cr_expect_eq(atomic_load(&t->failures), 0);
    cr_expect_leq(atomic_load(&t->max_seen), LIMIT, "%d held at once", atomic_load(&t->max_seen));
    cr_expect_lt(per_grant, 1.0, "%.2f Redis commands per grant", per_grant);
    cr_expect(test_wait_until(nothing_left, NULL, 5000), "Redis still holds or queues");
    munmap(t, sizeof *t);
}

/* Off: every grant goes through Redis (about three commands each), as before. */
Test(hostshare_pool, off_goes_through_redis, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 120)
{
    tally *t = new_tally();
    double per_grant = run_host("off", t, 30000);
    cr_log_info("not shared: %.2f Redis commands per grant", per_grant);
    cr_expect_eq(atomic_load(&t->grants), PROCS * CYCLES);
    cr_expect_leq(atomic_load(&t->max_seen), LIMIT);
    cr_expect_gt(per_grant, 1.5, "%.2f Redis commands per grant", per_grant);
    cr_expect(test_wait_until(nothing_left, NULL, 5000), "Redis still holds or queues");
    munmap(t, sizeof *t);
}

/* Waits that end by their deadline (1 ms: most do) while permits pass between the processes:
 * an offer that meets a registration as it ends is passed on or given back, never lost nor
 * used twice: the limit holds, and Redis holds nothing in the end. */
Test(hostshare_pool, waits_that_time_out_lose_nothing, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 120)
{
    tally *t = new_tally();
    (void)run_host("on", t, 1);
    cr_expect_eq(atomic_load(&t->grants) + atomic_load(&t->failures), PROCS * CYCLES);
    cr_expect_leq(atomic_load(&t->max_seen), LIMIT, "%d held at once", atomic_load(&t->max_seen));
    cr_expect(test_wait_until(nothing_left, NULL, 5000), "Redis still holds or queues");
    munmap(t, sizeof *t);
}
