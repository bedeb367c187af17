/* sem_bench.c - `make bench`: the semaphore's costs, in Redis round trips measured in the same
 * run against a throwaway redis-server on loopback. */
#include "hist_cost.h"
#include "redis_server.h"
#include "sem_client.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct(int64_t *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    int i = (int)ceil(p / 100.0 * n) - 1;
    return (double)v[i < 0 ? 0 : i];
}

static double ping_rtt_ns(const test_redis *r, int n)
{
    redisContext *c = test_redis_connect(r);
    int64_t *v = malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++) {
        int64_t t = now_ns();
        freeReplyObject(redisCommand(c, "PING"));
        v[i] = now_ns() - t;
    }
    double p50 = pct(v, n, 50);
    free(v);
    redisFree(c);
    return p50;
}

/* ---- uncontended acquire over TLS against plain, same server, same run -------------------- */

/* Acquire latencies of n uncontended acquire+release cycles on pool p, into v; settle_us apart
 * (0: the next acquire right after the release, whose reply it then reads). */
static void time_acquires(dbt_pool *p, int64_t *v, int n, int settle_us)
{
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000};
    for (int i = 0; i < n; i++) {
        dbt_permit *pm;
        int64_t t = now_ns();
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED)
            abort();
        v[i] = now_ns() - t;
        dbt_release(pm);
        if (settle_us)
            usleep((useconds_t)settle_us);
    }
}

static int free_tcp_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* A redis-server of its own with a plain and a TLS port (certificates by tests/support/tls.sh):
 * blocks of plain and rediss:// acquires take turns, so that the machine's noise falls on both. */
static void tls_against_plain(void)
{
    char dir[] = "/tmp/dbt-bench-tls-XXXXXX", cmd[512], extra[1024];
    if (!mkdtemp(dir))
        return;
    snprintf(cmd, sizeof cmd, "sh %s/tests/support/tls.sh %s", DBT_SOURCE_DIR, dir);
    test_redis r;
    int port = free_tcp_port();
    snprintf(extra, sizeof extra,
             "--tls-port %d --tls-cert-file %s/server.crt --tls-key-file %s/server.key "
             "--tls-ca-cert-file %s/ca.crt --tls-auth-clients no",
             port, dir, dir, dir);
    if (system(cmd) != 0 || !test_redis_start(&r, extra)) {
        printf("%-52s %10s\n", "uncontended acquire over TLS", "(no TLS redis-server)");
        return;
    }
    char url[128], ca[300];
    snprintf(url, sizeof url, "DBTHROTTLE_REDIS_URL=rediss://127.0.0.1:%d", port);
    snprintf(ca, sizeof ca, "DBTHROTTLE_REDIS_CA=%s/ca.crt", dir);
    dbt_config plain_cfg, tls_cfg;
    test_config(&plain_cfg, &r, NULL);
    test_config(&tls_cfg, &r, url, ca, NULL);
    dbt_client *pc = dbt_client_new(&plain_cfg), *tc = dbt_client_new(&tls_cfg);
    dbt_pool *pp = dbt_client_pool(pc, "bench-plain"), *tp = dbt_client_pool(tc, "bench-tls");
    enum { BLOCK = 500, BLOCKS = 8 };
    int64_t *pv = malloc(BLOCK * BLOCKS * sizeof *pv), *tv = malloc(BLOCK * BLOCKS * sizeof *tv);
    time_acquires(pp, pv, 50, 0); /* connect outside the measurement */
    time_acquires(tp, tv, 50, 0);
    /* Back to back (each acquire right after the last release, as above), then with the
     * release's reply already back (Redis reads one TLS record per turn of its event loop: a
     * release just sent costs the acquire behind it a second turn, which plain TCP does not). */
    for (int settle = 0; settle <= 300; settle += 300) {
        for (int b = 0; b < BLOCKS; b++) {
            time_acquires(pp, pv + b * BLOCK, BLOCK, settle);
            time_acquires(tp, tv + b * BLOCK, BLOCK, settle);
        }
        double p50 = pct(pv, BLOCK * BLOCKS, 50), t50 = pct(tv, BLOCK * BLOCKS, 50);
        printf("%-52s %10.1f us\n",
               settle ? "  same, 300 us after the release: plain, p50"
                      : "uncontended acquire, plain (TLS server's), p50",
               p50 / 1000);
        printf("%-52s %10.1f us = %.2f x plain (target <= 1.2)\n",
               settle ? "  same, 300 us after the release: over TLS, p50"
                      : "uncontended acquire over TLS, p50",
               t50 / 1000, t50 / p50);
    }
    free(pv);
    free(tv);
    dbt_client_free(pc);
    dbt_client_free(tc);
    dbt_config_free(&plain_cfg);
    dbt_config_free(&tls_cfg);
    test_redis_stop(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)system(cmd);
}

/* ---- handover: one thread releases, the queued one is granted ------------------------- */

typedef struct {
    dbt_pool *pool;
    sem_t go, done;
    atomic_llong released_at;
    int64_t latency;
    bool quit;
} handover;

static void *handover_waiter(void *arg)
{
    handover *h = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    for (;;) {
        sem_wait(&h->go);
        if (h->quit)
            return NULL;
        dbt_permit *p;
        if (dbt_acquire(h->pool, DBT_KIND_QUERY, &o, &p) != DBT_ACQ_GRANTED)
            abort();
        h->latency = now_ns() - atomic_load(&h->released_at);
        dbt_release(p);
        sem_post(&h->done);
    }
}

static bool queued_one(void *arg)
{
    return test_redis_int(arg, "ZCARD dbthrottle:{bench-handover}:q:queue") == 1;
}

/* ---- saturation: 16 processes, limit 4, 5 ms holds -------------------------------------- */

typedef struct {
    atomic_long cycles;
    atomic_llong held_ns; /* time permits were held, measured by the holders */
    atomic_int current, max;
    atomic_int go, stop;
} sat_shared;

static void saturate_worker(const test_redis *r, sat_shared *sh, int hold_us)
{
    dbt_config cfg;
    test_config(&cfg, r, NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "bench-sat");
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000};
    while (atomic_load(&sh->go) == 0)
        usleep(100);
    while (!atomic_load(&sh->stop)) {
        dbt_permit *pm;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED)
            continue;
        int64_t t0 = now_ns();
        int cur = atomic_fetch_add(&sh->current, 1) + 1, m = atomic_load(&sh->max);
        while (cur > m && !atomic_compare_exchange_weak(&sh->max, &m, cur))
            ;
        struct timespec ts = {0, hold_us * 1000L};
        nanosleep(&ts, NULL);
        atomic_fetch_sub(&sh->current, 1);
        if (atomic_load(&sh->go) == 1) { /* count only inside the measured window */
            atomic_fetch_add(&sh->cycles, 1);
            atomic_fetch_add(&sh->held_ns, now_ns() - t0);
        }
        dbt_release(pm);
    }
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* ---- a kept permit revoked for a waiter of another process --------------------------------- */

/* The waiter's process: on each 'g' from the pipe, acquires (limit 1), reports how long it
 * waited (ns), releases. */
static void revoke_waiter(const test_redis *r, int cmd, int rep)
{
    dbt_config cfg;
    test_config(&cfg, r, NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "bench-revoke");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    char g;
    while (read(cmd, &g, 1) == 1 && g == 'g') {
        dbt_permit *pm;
        int64_t t = now_ns();
        int64_t waited =
            dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) == DBT_ACQ_GRANTED ? now_ns() - t : -1;
        dbt_release(pm);
        if (write(rep, &waited, sizeof waited) != sizeof waited)
            break;
    }
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* How long a waiter of another process waits for a permit kept idle (DBTHROTTLE_CACHE_IDLE one
 * minute, so only the revoke push can return it): p50 and p99 in ns; the keeper's process
 * listens with its renewer thread, as a worker between two commands does. */
static void revoke_latency(const test_redis *r, double *p50, double *p99)
{
    enum { ROUNDS = 300 };
    int cmd[2], rep[2];
    *p50 = *p99 = -1;
    if (pipe(cmd) != 0 || pipe(rep) != 0)
        return;
    pid_t pid = fork(); /* before this process has threads */
    if (pid == 0) {
        close(cmd[1]);
        close(rep[0]);
        revoke_waiter(r, cmd[0], rep[1]);
        _exit(0);
    }
    close(cmd[0]);
    close(rep[1]);
    dbt_config cfg;
    test_config(&cfg, r, "DBTHROTTLE_CACHE_PERMITS=on", "DBTHROTTLE_CACHE_IDLE=1m", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "bench-revoke");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    int64_t *lat = malloc(ROUNDS * sizeof *lat);
    int n = 0;
    for (int i = 0; i < ROUNDS + 20; i++) {
        dbt_permit *pm;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) != DBT_ACQ_GRANTED || !dbt_permit_park(pm)) {
            dbt_release(pm);
            usleep(1000);
            continue;
        }
        usleep(2000); /* the keeper idles between commands, its renewer listening */
        int64_t waited = -1;
        if (write(cmd[1], "g", 1) != 1 || read(rep[0], &waited, sizeof waited) != sizeof waited)
            break;
        if (dbt_permit_unpark(&pm)) /* not revoked: the waiter must have timed out */
            dbt_release(pm);
        if (i >= 20 && waited >= 0 && n < ROUNDS)
            lat[n++] = waited; /* the first rounds warm the connections up */
    }
    close(cmd[1]); /* the waiter's read ends: it exits */
    waitpid(pid, NULL, 0);
    close(rep[0]);
    if (n > 0) {
        *p50 = pct(lat, n, 50);
        *p99 = pct(lat, n, 99);
    }
    free(lat);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

int main(void)
{
    test_redis r;
    if (!test_redis_start(&r, NULL)) {
        fprintf(stderr, "bench: cannot start redis-server\n");
        return 1;
    }
    double rtt = ping_rtt_ns(&r, 5000);
    printf("dbthrottle semaphore benchmark (redis-server on loopback, one run)\n");
    printf("%-52s %10.1f us\n", "Redis PING round trip, p50", rtt / 1000);

    dbt_config cfg;
    test_config(&cfg, &r, NULL);
    dbt_client *c = dbt_client_new(&cfg);

    /* Uncontended acquire + release. */
    dbt_pool *p = dbt_client_pool(c, "bench-fast");
    /* with a session, as the interposer sends one (its bytes ride on every acquire) */
    char session[DBT_SESSION_LEN];
    dbt_format_session(123456, "report_worker", "reports", "reports_db", session, sizeof session);
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000, .session = session};
    enum { FAST = 5000 };
    int64_t *acq = malloc(FAST * sizeof *acq), *rel = malloc(FAST * sizeof *rel);
    dbt_permit *pm;
    dbt_acquire(p, DBT_KIND_QUERY, &o, &pm); /* connect outside the measurement */
    dbt_release(pm);
    long long cmd0 = test_redis_commands(&r), usec0 = test_redis_script_usec(&r);
    for (int i = 0; i < FAST; i++) {
        int64_t t = now_ns();
        dbt_acquire(p, DBT_KIND_QUERY, &o, &pm);
        int64_t t2 = now_ns();
        dbt_release(pm);
        rel[i] = now_ns() - t2;
        acq[i] = t2 - t;
    }
    long long cmd1 = test_redis_commands(&r), usec1 = test_redis_script_usec(&r);
    double acq50 = pct(acq, FAST, 50), rel50 = pct(rel, FAST, 50);
    printf("%-52s %10.1f us = %.2f RTT\n", "uncontended acquire, p50", acq50 / 1000, acq50 / rtt);
    printf("%-52s %10.1f us = %.2f RTT\n", "release on the caller's path, p50", rel50 / 1000,
           rel50 / rtt);
    printf("%-52s %10.2f\n", "Redis commands per uncontended acquire+release",
           (double)(cmd1 - cmd0) / FAST);
    /* Redis' own CPU, immune to the client's scheduling noise: what sizes a coordinator. */
    printf("%-52s %10.1f us\n", "Redis script CPU per uncontended acquire+release",
           (double)(usec1 - usec0) / FAST);
    free(acq);
    free(rel);
    hist_cost_report(&r);
    tls_against_plain();

    /* Handover. */
    enum { ROUNDS = 1000 };
    handover h = {.pool = dbt_client_pool(c, "bench-handover")};
    sem_init(&h.go, 0, 0);
    sem_init(&h.done, 0, 0);
    int64_t *lat = malloc(ROUNDS * sizeof *lat);
    pthread_t th;
    pthread_create(&th, NULL, handover_waiter, &h);
    dbt_acquire_opts hold1 = {.limit = 1, .wait_ms = 10000};
    for (int i = 0; i < ROUNDS; i++) {
        dbt_permit *held;
        if (dbt_acquire(h.pool, DBT_KIND_QUERY, &hold1, &held) != DBT_ACQ_GRANTED)
            abort();
        sem_post(&h.go);
        while (!queued_one(&r))
            ;
        atomic_store(&h.released_at, now_ns());
        dbt_release(held);
        sem_wait(&h.done);
        lat[i] = h.latency;
    }
    h.quit = true;
    sem_post(&h.go);
    pthread_join(th, NULL);
    double h50 = pct(lat, ROUNDS, 50), h99 = pct(lat, ROUNDS, 99);
    printf("%-52s %10.1f us = %.2f RTT (target <= 1.5)\n", "handover release -> grant, p50",
           h50 / 1000, h50 / rtt);
    printf("%-52s %10.1f us = %.2f RTT\n", "handover release -> grant, p99", h99 / 1000, h99 / rtt);
    free(lat);
    dbt_client_free(c);
    dbt_config_free(&cfg);

    /* A kept permit, revoked for a waiter. */
    double rv50, rv99;
    revoke_latency(&r, &rv50, &rv99);
    printf("%-52s %10.1f us = %.2f RTT (an uncontended acquire: %.2f)\n",
           "waiter behind a kept idle permit, p50", rv50 / 1000, rv50 / rtt, acq50 / rtt);
    printf("%-52s %10.1f us = %.2f RTT\n", "waiter behind a kept idle permit, p99", rv99 / 1000,
           rv99 / rtt);

    /* Saturation. */
    enum { PROCS = 16, HOLD_US = 5000, LIMIT = 4 };
    const double seconds = 5.0;
    sat_shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    memset(sh, 0, sizeof *sh);
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            saturate_worker(&r, sh, HOLD_US);
            _exit(0);
        }
    }
    usleep(300000);           /* let the workers connect */
    atomic_store(&sh->go, 2); /* warm up: queues form */
    usleep(500000);
    long long s0 = test_redis_commands(&r);
    long c0 = atomic_load(&sh->cycles);
    atomic_store(&sh->go, 1);
    int64_t start = now_ns();
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&sh->go, 3);
    int64_t end = now_ns();
    long c1 = atomic_load(&sh->cycles);
    long long s1 = test_redis_commands(&r);
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < PROCS; i++)
        waitpid(pids[i], NULL, 0);
    double wall = (double)(end - start) / 1e9;
    double rate = (double)(c1 - c0) / wall;
    double mean_hold = (double)atomic_load(&sh->held_ns) / (double)(c1 - c0);
    double ideal = LIMIT * 1e9 / mean_hold;
    printf("%-52s %10.1f /s\n", "saturated: limit 4, 16 processes, 5 ms holds", rate);
    printf("%-52s %10.1f us (asked 5000: sleep overshoots)\n", "mean hold, measured by holders",
           mean_hold / 1000);
    printf("%-52s %10.3f (target >= 0.97)\n", "fraction of the ideal (limit / mean hold)",
           rate / ideal);
    printf("%-52s %10.3f\n", "same, against the nominal 800/s", rate / (LIMIT * 1e6 / HOLD_US));
    printf("%-52s %10d (limit %d)\n", "most holders seen at once", atomic_load(&sh->max), LIMIT);
    printf("%-52s %10.2f\n", "Redis commands per grant (saturated)",
           (double)(s1 - s0) / (double)(c1 - c0));
    munmap(sh, sizeof *sh);
    test_redis_stop(&r);
    return 0;
}
