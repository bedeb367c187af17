/* fork(): a child never uses its parent's connections or permits, nor counts its stats lines from
 * its parent's. */
#include "log.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* DBTHROTTLE_LOG_STATS: a child's stats lines count the child's own grants, never its counters
 * minus the marks its parent's last line left (which printed grants=-47). */
#define STATS_POOL "forkstats"
#define STATS_KEY  "dbthrottle:{" STATS_POOL "}:q:stats"

static char log_path[] = "/tmp/dbt-forkstats-XXXXXX";

/* The integer after " key=" in line, or fallback when the line has no such field. */
static long long field_of(const char *line, const char *key, long long fallback)
{
    char want[64];
    snprintf(want, sizeof want, " %s=", key);
    const char *at = strstr(line, want);
    return at ? strtoll(at + strlen(want), NULL, 10) : fallback;
}

typedef struct {
    pid_t pid;
    int lines;
    long long grants_sum, last_total;
    char negative[512]; /* the first line with a negative count, or empty */
} stats_seen;

/* Reads the log's stats lines of STATS_POOL written by pid. */
static stats_seen stats_of(pid_t pid)
{
    stats_seen s = {.pid = pid, .last_total = -1};
    FILE *fp = fopen(log_path, "r");
    if (!fp)
        return s;
    char line[8192], me[32];
    snprintf(me, sizeof me, " pid=%ld ", (long)pid);
    while (fgets(line, sizeof line, fp)) {
        if (!strstr(line, "event=stats") || !strstr(line, " pool=" STATS_POOL " ") ||
            !strstr(line, me))
            continue;
        s.lines++;
        s.grants_sum += field_of(line, "grants", 0);
        s.last_total = field_of(line, "total_grants", -1);
        if (strstr(line, "=-") && !s.negative[0])
            snprintf(s.negative, sizeof s.negative, "%.500s", line);
    }
    fclose(fp);
    return s;
}

typedef struct {
    pid_t pid;
    long long total;
} total_is;

static bool stats_line_with_total(void *arg)
{
    total_is *t = arg;
    return stats_of(t->pid).last_total == t->total;
}

static void take(dbt_pool *p, int n)
{
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000};
    for (int i = 0; i < n; i++) {
        dbt_permit *permit;
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &permit), DBT_ACQ_GRANTED);
        dbt_release(permit);
    }
}

Test(fork, a_childs_stats_lines_count_the_child_alone, .timeout = 120)
{
    close(mkstemp(log_path));
    dbt_config lc;
    dbt_config_defaults(&lc);
    lc.log_path = strdup(log_path);
    lc.log_level = DBT_LOG_WARN; /* the stats lines are written at any level but off */
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(&lc, err), "%s", err);
    dbt_client *c = fx_client("DBTHROTTLE_LOG_STATS=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, STATS_POOL);
    const int parent_grants = 5, child_grants = 2;
    take(p, parent_grants);
    /* The parent's line has been written: its marks are what the child inherits. */
    total_is parent_line = {getpid(), parent_grants};
    cr_assert(test_wait_until(stats_line_with_total, &parent_line, 20000),
              "no stats line of the parent with total_grants=%d", parent_grants);

    pid_t pid = fork();
    if (pid == 0) {
        take(p, child_grants);
        total_is child_line = {getpid(), child_grants};
        bool seen = test_wait_until(stats_line_with_total, &child_line, 20000);
        dbt_client_free(c);
        _exit(seen ? 0 : 1);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    stats_seen child = stats_of(pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the child saw no stats line of its own with total_grants=%d (last total_grants=%lld "
              "in %d lines)",
              child_grants, child.last_total, child.lines);
    cr_expect(!child.negative[0], "a negative count in the child's stats line: %s", child.negative);
    cr_expect_eq(child.grants_sum, child_grants, "the child's lines add up to grants=%lld",
                 child.grants_sum);
    cr_expect_eq(child.last_total, child_grants);
    /* Redis counted every grant, the parent's and the child's, once. */
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " STATS_KEY " grants"),
                 parent_grants + child_grants);
    dbt_log_close();
    dbt_config_free(&lc);
    unlink(log_path);
}
