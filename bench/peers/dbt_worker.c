/* dbt_worker.c - one worker process of `make bench-peers` for dbthrottle's semaphore, with the
 * same loop as the peers' workers (see run.sh): until END, acquire (limit L), count itself in the
 * independent holder counter, hold H ms, uncount, release. Cycles that start at or after START
 * and end by END are recorded: the wait of each, and the mean hold, go to OUTFILE.
 *
 * usage: dbt-peer-worker REDIS_PORT COUNTER_PORT LIMIT HOLD_MS START_MS END_MS OUTFILE
 * (times in ms of CLOCK_REALTIME, shared by every worker of a run) */
#include "config.h"
#include "sem_client.h"

#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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
    dbt_config_defaults(&cfg);
    char url[64], err[DBT_ERRLEN];
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
    long cycles = 0;
    for (;;) {
        double t0 = now_ms();
        if (t0 >= end)
            break;
        dbt_permit *pm;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED)
            continue;
        double t1 = now_ms();
        freeReplyObject(redisCommand(ctr, "EVAL %s 2 holders most", COUNT_UP));
        sleep_ms(hold);
        freeReplyObject(redisCommand(ctr, "DECR holders"));
        double t2 = now_ms();
        dbt_release(pm);
        if (t0 >= start && t2 <= end) {
            if (n == cap)
                waits = realloc(waits, (cap *= 2) * sizeof *waits);
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
    free(waits);
    dbt_client_free(c);
    dbt_config_free(&cfg);
    redisFree(ctr);
    return 0;
}
