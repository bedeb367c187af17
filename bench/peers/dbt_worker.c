/* dbt_worker.c - one worker process of `make bench-peers` for dbthrottle's semaphore, with the
 * same loop as the peers' workers (see run.sh): until END, acquire (limit L), count itself in the
 * independent holder counter, hold H ms, uncount, release. Cycles that start at or after START
 * and end by END are recorded: the wait of each, and the mean hold, go to OUTFILE.
 *
 * usage: dbt-peer-worker REDIS_PORT COUNTER_PORT LIMIT HOLD_MS START_MS END_MS OUTFILE
 * (times in ms of CLOCK_REALTIME, shared by every worker of a run)
 *
 * Settings come from the environment as in a preloaded program (DBTHROTTLE_*, no configuration
 * file), so a row runs with the defaults, or with what run.sh sets for it (a simulated host's
 * DBTHROTTLE_SHARE_DIR); the Redis URL is the run's. With DBT_PEER_EVENTS=FILE each recorded cycle
 * also goes to FILE as "ACQUIRE_US GRANT_US RELEASE_US" (CLOCK_MONOTONIC microseconds, one clock
 * for every process of the host): run.sh matches one process' release with another's grant. */
#include "config.h"
#include "sem_client.h"

#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char **environ;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1e3),
                          (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

/* The independent counter: holders right now and the most ever, in a Redis of its own. */
static const char *const COUNT_UP = "local n = redis.call('INCR', KEYS[1]) "
                                    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then "
                                    "redis.call('SET', KEYS[2], n) end return n";

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: dbt-peer-worker REDIS_PORT COUNTER_PORT LIMIT HOLD_MS START_MS "
                        "END_MS OUTFILE\n");
        return 2;
    }
    int limit = atoi(argv[3]);
    double hold = atof(argv[4]), start = atof(argv[5]), end = atof(argv[6]);
    redisContext *ctr = redisConnect("127.0.0.1", atoi(argv[2]));
    if (!ctr || ctr->err)
        return 1;
    dbt_config cfg;
    char url[64], err[DBT_ERRLEN];
    if (!dbt_config_load_with_default(&cfg, environ, NULL, err)) {
        fprintf(stderr, "dbt-peer-worker: %s\n", err);
        return 1;
    }
    snprintf(url, sizeof url, "redis://127.0.0.1:%s", argv[1]);
    if (!dbt_config_set(&cfg, "DBTHROTTLE_REDIS_URL", url, DBT_SRC_ENV, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "peers");
    dbt_acquire_opts o = {.limit = limit, .wait_ms = 120000};
    size_t cap = 1 << 16, n = 0;
    double *waits = malloc(cap * sizeof *waits), held = 0;
    const char *events_path = getenv("DBT_PEER_EVENTS");
    double(*events)[3] = events_path ? malloc(cap * sizeof *events) : NULL;
    long cycles = 0;
    for (;;) {
        double t0 = now_ms();
        if (t0 >= end)
            break;
        double a_us = mono_us();
        dbt_permit *pm;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED)
            continue;
        double g_us = mono_us();
        double t1 = now_ms();
        freeReplyObject(redisCommand(ctr, "EVAL %s 2 holders most", COUNT_UP));
        sleep_ms(hold);
        freeReplyObject(redisCommand(ctr, "DECR holders"));
        double t2 = now_ms();
        double r_us = mono_us();
        dbt_release(pm);
        if (t0 >= start && t2 <= end) {
            if (n == cap) {
                cap *= 2;
                waits = realloc(waits, cap * sizeof *waits);
                if (events)
                    events = realloc(events, cap * sizeof *events);
            }
            if (events) {
                events[n][0] = a_us;
                events[n][1] = g_us;
                events[n][2] = r_us;
            }
            waits[n++] = t1 - t0;
            held += t2 - t1;
            cycles++;
        }
    }
    FILE *out = fopen(argv[7], "w");
    if (!out)
        return 1;
    fprintf(out, "cycles %ld\nheld_ms %.3f\n", cycles, held);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%.3f\n", waits[i]);
    fclose(out);
    if (events) {
        FILE *ev = fopen(events_path, "w");
        if (!ev)
            return 1;
        for (size_t i = 0; i < n; i++)
            fprintf(ev, "%.1f %.1f %.1f\n", events[i][0], events[i][1], events[i][2]);
        fclose(ev);
        free(events);
    }
    free(waits);
    dbt_client_free(c);
    dbt_config_free(&cfg);
    redisFree(ctr);
    return 0;
}
