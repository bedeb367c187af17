/* script_cost.c - `make bench-scripts`: what each script costs Redis, per call.
 *
 * Each acquire, release, renewal and cancel is one EVALSHA, and a Redis core's time is the
 * budget every grant of every pool shares. This drives the real semaphore client (the library's
 * code below the interposer) against a throwaway redis-server through representative sequences,
 * one at a time, and prints for each the Redis time per call of every script it ran:
 *   uncontended   one process, limit 64, acquire/release back to back (the defaults)
 *   shadow        the same in shadow mode (DBTHROTTLE_MODE=shadow): each command also goes
 *                 into the pool's sample (sample.lua, a call per chunk): with recording against
 *                 uncontended without, per command
 *   kept          the same with kept permits on (DBTHROTTLE_CACHE_PERMITS): what still reaches
 * Redis beside-kept   the same as uncontended while a process of another host keeps a permit idle
 *   contended     limit 1, two simulated hosts (a DBTHROTTLE_SHARE_DIR each) of two processes,
 *                 each holding its permit 200 us: queueing, grants from the queue, handovers
 *   renewals      limit 2, a lease of 300 ms, the same four processes holding (or queued) 2 s each
 *
 * The figures are Redis' own, immune to the client's scheduling: INFO commandstats (CONFIG
 * RESETSTAT before each sequence) gives EVALSHA's calls and usec per call over all the scripts;
 * EVALSHA is one command for every script, so the split by script comes from SLOWLOG, which names
 * each call's SHA1. Its threshold is SLOWLOG_US, above the commands a script runs inside (1-2 us
 * each, which SLOWLOG would log too, and whose logging would slow the scripts) and below any
 * script: a sequence whose SLOWLOG saw fewer calls than commandstats says so. Beside each
 * script's mean, its median (p50): on a machine shared with other jobs, a Redis preempted in the
 * middle of a script inflates the mean, rarely the median. */
#include "redis_server.h"
#include "scripts.h"
#include "sem_client.h"

#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    SLOWLOG_US = 5,        /* logs every script call, not the commands inside one */
    CYCLES = 3000,         /* acquire/release pairs of the uncontended sequences */
    CONTENDED_CYCLES = 300 /* per process of the contended one */
};

static void settings(dbt_config *cfg, const test_redis *r, const char *share_dir, const char *more1,
                     const char *more2)
{
    char dir[300];
    snprintf(dir, sizeof dir, "DBTHROTTLE_SHARE_DIR=%s", share_dir);
    /* the defaults (host sharing on), each simulated host its own share directory; a NULL ends
     * the list, so the settings given come first */
    const char *m1 = more1 ? more1 : more2, *m2 = more1 ? more2 : NULL;
    test_config(cfg, r, "DBTHROTTLE_HOST_SHARE=on", dir, "DBTHROTTLE_WAIT_TIMEOUT=30s", m1, m2,
                NULL);
}

/* A process that acquires and releases `cycles` times at `limit`, holding each permit hold_us
 * (0: none); with kept permits when `kept`; in shadow mode when `shadow`. */
static void cycler(const test_redis *r, const char *host, const char *pool, int limit, int cycles,
                   int hold_us, bool kept, bool shadow)
{
    dbt_config cfg;
    settings(&cfg, r, host, kept ? "DBTHROTTLE_CACHE_PERMITS=on" : NULL,
             shadow ? "DBTHROTTLE_MODE=shadow" : NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, pool);
    dbt_acquire_opts o = {.limit = limit, .wait_ms = 30000};
    dbt_permit *pm = NULL;
    for (int i = 0; i < cycles; i++) {
        if (pm && !dbt_permit_unpark(&pm))
            pm = NULL;
        if (!pm && dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED) {
            pm = NULL;
            continue;
        }
        if (hold_us > 0) {
            struct timespec ts = {0, hold_us * 1000L};
            nanosleep(&ts, NULL);
        }
        if (!kept || !dbt_permit_park(pm)) {
            dbt_release(pm);
            pm = NULL;
        }
    }
    if (pm)
        dbt_release(pm);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* A process that takes one permit, tells `ready`, holds it (kept idle, or in use) until `done`
 * closes, then gives it back. */
static void holder(const test_redis *r, const char *host, const char *pool, int limit, bool kept,
                   const char *lease, int ready, int done)
{
    dbt_config cfg;
    settings(&cfg, r, host, kept ? "DBTHROTTLE_CACHE_PERMITS=on" : NULL,
             kept ? "DBTHROTTLE_CACHE_IDLE=1m" : lease);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, pool);
    dbt_acquire_opts o = {.limit = limit, .wait_ms = 30000};
    dbt_permit *pm = NULL;
    bool got = dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) == DBT_ACQ_GRANTED;
    if (got && kept && !dbt_permit_park(pm))
        fprintf(stderr, "script-cost: the keeper could not keep its permit\n");
    if (write(ready, "r", 1) != 1)
        fprintf(stderr, "script-cost: the bench went away\n");
    char b;
    while (read(done, &b, 1) > 0)
        ;
    if (got && (!kept || dbt_permit_unpark(&pm)))
        dbt_release(pm);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

static void reply_free(redisReply *rp)
{
    if (rp)
        freeReplyObject(rp);
}

static void command(redisContext *rc, const char *cmd)
{
    reply_free(redisCommand(rc, cmd));
}

static const char *script_name(const char *sha)
{
    for (int i = 0; i < dbt_nscripts; i++)
        if (strcmp(dbt_scripts[i]->sha, sha) == 0)
            return dbt_scripts[i]->name;
    return "?";
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void start_sequence(redisContext *rc)
{
    command(rc, "CONFIG RESETSTAT");
    command(rc, "SLOWLOG RESET");
}

/* Prints the sequence's figures: EVALSHA from commandstats, then per script from SLOWLOG.
 * Returns the Redis time of all its script calls (us). */
static double report(redisContext *rc, const char *name)
{
    long long calls = 0;
    double per_call = 0;
    redisReply *info = redisCommand(rc, "INFO commandstats");
    const char *at =
        info && info->type == REDIS_REPLY_STRING ? strstr(info->str, "cmdstat_evalsha:") : NULL;
    if (at)
        sscanf(at, "cmdstat_evalsha:calls=%lld,usec=%*d,usec_per_call=%lf", &calls, &per_call);
    reply_free(info);
    double load[1] = {0};
    getloadavg(load, 1);
    printf("%-12s all scripts  calls %6lld  usec_per_call %6.1f  (load %.2f)\n", name, calls,
           per_call, load[0]);
    struct {
        const char *name;
        long long calls, usec;
        long long *each; /* each call's usec, for the median */
    } per[16] = {{0}};
    long long seen = 0;
    redisReply *log = redisCommand(rc, "SLOWLOG GET -1");
    for (size_t i = 0; log && log->type == REDIS_REPLY_ARRAY && i < log->elements; i++) {
        redisReply *e = log->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 || e->element[3]->elements < 2 ||
            strcasecmp(e->element[3]->element[0]->str, "evalsha") != 0)
            continue;
        const char *n = script_name(e->element[3]->element[1]->str);
        int k = 0;
        while (k < 15 && per[k].name && strcmp(per[k].name, n) != 0)
            k++;
        if (!per[k].name)
            per[k].each = malloc(log->elements * sizeof *per[k].each);
        per[k].name = n;
        if (per[k].each)
            per[k].each[per[k].calls] = e->element[2]->integer;
        per[k].calls++;
        per[k].usec += e->element[2]->integer;
        seen++;
    }
    reply_free(log);
    for (int k = 0; k < 16 && per[k].name; k++) {
        long long p50 = 0;
        if (per[k].each) {
            qsort(per[k].each, (size_t)per[k].calls, sizeof *per[k].each, cmp_ll);
            p50 = per[k].each[per[k].calls / 2];
        }
        printf("%-12s %-12s calls %6lld  usec_per_call %6.1f  p50 %4lld\n", "", per[k].name,
               per[k].calls, (double)per[k].usec / (double)per[k].calls, p50);
        free(per[k].each);
    }
    if (seen != calls)
        printf("%-12s (SLOWLOG saw %lld of the %lld calls: the split is partial)\n", "", seen,
               calls);
    return (double)calls * per_call;
}

static pid_t spawn_cycler(const test_redis *r, const char *host, const char *pool, int limit,
                          int cycles, int hold_us, bool kept, bool shadow)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        cycler(r, host, pool, limit, cycles, hold_us, kept, shadow);
        _exit(0);
    }
    return pid;
}

/* The parent's ends of the holders' pipes: a holder forked later must not keep another's open. */
static int open_dones[8], nopen_dones;

/* Forks a holder; returns its pid, *done the pipe end whose closing lets it give its permit back,
 * after it told it took one (or failed to). */
static pid_t spawn_holder(const test_redis *r, const char *host, const char *pool, int limit,
                          bool kept, const char *lease, int *done, bool wait_ready)
{
    int ready[2], hold[2];
    if (pipe(ready) != 0 || pipe(hold) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        for (int i = 0; i < nopen_dones; i++)
            close(open_dones[i]);
        holder(r, host, pool, limit, kept, lease, ready[1], hold[0]);
        _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    char b;
    if (wait_ready && read(ready[0], &b, 1) != 1)
        fprintf(stderr, "script-cost: a holder died\n");
    close(ready[0]);
    *done = hold[1];
    if (nopen_dones < 8)
        open_dones[nopen_dones++] = hold[1];
    return pid;
}

/* Lets the holder of `done` give its permit back (and forgets the end). */
static void let_go(int done)
{
    close(done);
    for (int i = 0; i < nopen_dones; i++)
        if (open_dones[i] == done)
            open_dones[i--] = open_dones[--nopen_dones];
}

int main(void)
{
    test_redis r;
    char extra[96];
    snprintf(extra, sizeof extra, "--slowlog-log-slower-than %d --slowlog-max-len 1000000",
             SLOWLOG_US);
    if (!test_redis_start(&r, extra)) {
        fprintf(stderr, "script-cost: cannot start redis-server\n");
        return 1;
    }
    char host_a[300], host_b[300];
    snprintf(host_a, sizeof host_a, "%s/host-a", r.dir);
    snprintf(host_b, sizeof host_b, "%s/host-b", r.dir);
    char mk[700];
    snprintf(mk, sizeof mk, "mkdir -p '%s' '%s'", host_a, host_b);
    if (system(mk) != 0)
        return 1;
    redisContext *rc = test_redis_connect(&r);
    printf("Redis time per script call (INFO commandstats; per script from SLOWLOG above %d us)\n",
           SLOWLOG_US);

    start_sequence(rc);
    waitpid(spawn_cycler(&r, host_a, "bench-u", 64, CYCLES, 0, false, false), NULL, 0);
    double enforced_us = report(rc, "uncontended");

    /* shadow between two enforced runs of the same: the first run of a Redis pays its warm-up,
     * and a machine's load drifts; the enforced cost is the lesser of the two */
    start_sequence(rc);
    waitpid(spawn_cycler(&r, host_a, "bench-s", 64, CYCLES, 0, false, true), NULL, 0);
    double shadow_us = report(rc, "shadow");
    start_sequence(rc);
    waitpid(spawn_cycler(&r, host_a, "bench-u2", 64, CYCLES, 0, false, false), NULL, 0);
    double again_us = report(rc, "uncontended");
    if (again_us < enforced_us)
        enforced_us = again_us;
    printf("%-12s Redis per command: %.1f us enforced, %.1f us in shadow mode (recording "
           "included: %+.1f us, x%.2f)\n",
           "", enforced_us / CYCLES, shadow_us / CYCLES, (shadow_us - enforced_us) / CYCLES,
           enforced_us > 0 ? shadow_us / enforced_us : 0);

    start_sequence(rc);
    waitpid(spawn_cycler(&r, host_a, "bench-k", 64, CYCLES, 0, true, false), NULL, 0);
    report(rc, "kept");

    int done;
    pid_t keeper = spawn_holder(&r, host_b, "bench-bk", 64, true, NULL, &done, true);
    start_sequence(rc);
    waitpid(spawn_cycler(&r, host_a, "bench-bk", 64, CYCLES, 0, false, false), NULL, 0);
    report(rc, "beside-kept");
    let_go(done);
    waitpid(keeper, NULL, 0);

    start_sequence(rc);
    pid_t pids[4];
    for (int i = 0; i < 4; i++)
        pids[i] = spawn_cycler(&r, i % 2 ? host_b : host_a, "bench-c", 1, CONTENDED_CYCLES, 200,
                               false, false);
    for (int i = 0; i < 4; i++)
        waitpid(pids[i], NULL, 0);
    report(rc, "contended");

    /* two hold, two wait (their places renewed too), then the other two hold */
    start_sequence(rc);
    int dones[4];
    for (int i = 0; i < 4; i++)
        pids[i] = spawn_holder(&r, i % 2 ? host_b : host_a, "bench-r", 2, false,
                               "DBTHROTTLE_LEASE=300ms", &dones[i], i < 2);
    sleep(2);
    for (int i = 0; i < 2; i++) {
        let_go(dones[i]);
        waitpid(pids[i], NULL, 0);
    }
    sleep(2);
    for (int i = 2; i < 4; i++) {
        let_go(dones[i]);
        waitpid(pids[i], NULL, 0);
    }
    report(rc, "renewals");

    redisFree(rc);
    test_redis_stop(&r);
    return 0;
}
