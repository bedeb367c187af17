/* cache_burst.c - the driver of `make bench-cache` (bench/cache_bench.sh): a workload whose
 * contention comes and goes, run by processes that use libpq only (the library is preloaded
 * into them with the settings of the arm being measured). Everything is timed here, outside the
 * library, and the limit is checked at the server.
 *
 *   cache-burst burst WORKERS BURSTS BURST_MS IDLE_MS TRICKLE_US REDIS_PORT HOLDERS_KEY STATUS_CMD
 *       WORKERS processes, each with its own connection, wait together; BURSTS times, they all
 *       run short queries back to back for BURST_MS, then sit idle for IDLE_MS. One more process
 *       (the trickle) runs one query every TRICKLE_US throughout. Each query is
 *       SELECT cb_slot(aid): it takes the lowest free advisory lock of 64 numbered slots for the
 *       time of a primary-key read, so the highest slot number any query saw is a lower bound of
 *       the queries that ran at once (and exceeds the limit if ever more ran). While idle, the
 *       holders Redis counts (ZCARD HOLDERS_KEY) are sampled every 5 ms; STATUS_CMD (a shell
 *       command, or "-") runs once, 200 ms into the second idle period.
 *   cache-burst probe PERIOD_US COUNT
 *       The first waiter's delay alone: a keeper process runs a query every 2 ms; a prober runs
 *       COUNT queries, one every PERIOD_US, in the same pool (the script gives it a limit of 1).
 *       Prints the prober's latencies. With kept permits the keeper keeps the one permit, so each
 *       probe queues and waits for its revoke; without, the permit is free (or busy for one of
 *       the keeper's queries).
 *   cache-burst rtt REDIS_PORT N
 *       PING round trips over one TCP connection: the p50 in microseconds.
 *
 * Output: key=value lines on stdout (one per measurement), for cache_bench.sh. */
#include <libpq-fe.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_WORKERS = 64, MAX_BURSTS = 64, MAX_TRICKLE = 200000, MAX_SAMPLES = 4096 };

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until_ns(int64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* What the processes share (mapped before the fork). */
struct burst_result {
    int64_t first_ns; /* the latency of the worker's first query of the burst */
    long queries;
    int max_slot;
    int errors;
};
struct trickle_row {
    int64_t at_ns, lat_ns;
};
struct shared {
    _Atomic int gen;   /* the burst the workers should run; futex word */
    _Atomic int ready; /* workers connected */
    _Atomic int done;  /* workers finished the current burst */
    _Atomic int stop;
    int64_t end_ns; /* the current burst's end */
    int64_t burst_start_ns[MAX_BURSTS], burst_end_ns[MAX_BURSTS];
    struct burst_result res[MAX_BURSTS][MAX_WORKERS];
    _Atomic long ntrickle;
    int trickle_max_slot, trickle_errors;
    struct trickle_row trickle[MAX_TRICKLE];
};

static void futex_wait(_Atomic int *w, int val)
{
    syscall(SYS_futex, (int *)w, FUTEX_WAIT, val, NULL, NULL, 0);
}
static void futex_wake_all(_Atomic int *w)
{
    syscall(SYS_futex, (int *)w, FUTEX_WAKE, MAX_WORKERS + 8, NULL, NULL, 0);
}

static PGconn *connect_db(void)
{
    PGconn *c = PQconnectdb("");
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "cache-burst: %s", PQerrorMessage(c));
        exit(1);
    }
    return c;
}

/* One query: the slot it saw (-1 on an error). */
static int run_query(PGconn *c, unsigned *seed)
{
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT cb_slot(%d)", (int)(rand_r(seed) % 100000) + 1);
    PGresult *r = PQexec(c, sql);
    int slot = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        slot = atoi(PQgetvalue(r, 0, 0));
    else
        fprintf(stderr, "cache-burst: %s", PQerrorMessage(c));
    PQclear(r);
    return slot;
}

static void worker(struct shared *sh, int me)
{
    PGconn *c = connect_db();
    unsigned seed = (unsigned)getpid();
    (void)run_query(c, &seed); /* the plan and the connection warm, before any burst */
    atomic_fetch_add(&sh->ready, 1);
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load(&sh->gen)) == seen && !atomic_load(&sh->stop))
            futex_wait(&sh->gen, seen);
        if (atomic_load(&sh->stop))
            break;
        seen = g;
        struct burst_result *br = &sh->res[g - 1][me];
        int64_t end = sh->end_ns;
        for (int64_t t = now_ns(); t < end; t = now_ns()) {
            int slot = run_query(c, &seed);
            int64_t after = now_ns();
            if (br->queries == 0)
                br->first_ns = after - t;
            br->queries++;
            if (slot < 0)
                br->errors++;
            else if (slot > br->max_slot)
                br->max_slot = slot;
        }
        atomic_fetch_add(&sh->done, 1);
    }
    PQfinish(c);
    _exit(0);
}

static void trickle(struct shared *sh, int64_t period_ns)
{
    PGconn *c = connect_db();
    unsigned seed = (unsigned)getpid();
    (void)run_query(c, &seed);
    atomic_fetch_add(&sh->ready, 1);
    int64_t next = now_ns();
    while (!atomic_load(&sh->stop)) {
        next += period_ns;
        int64_t t = now_ns();
        if (next > t)
            sleep_until_ns(next);
        else
            next = t; /* late: no catching up in a rush */
        t = now_ns();
        int slot = run_query(c, &seed);
        long i = atomic_load(&sh->ntrickle);
        if (i < MAX_TRICKLE) {
            sh->trickle[i] = (struct trickle_row){t, now_ns() - t};
            atomic_store(&sh->ntrickle, i + 1);
        }
        if (slot < 0)
            sh->trickle_errors++;
        else if (slot > sh->trickle_max_slot)
            sh->trickle_max_slot = slot;
    }
    PQfinish(c);
    _exit(0);
}

/* ---- a minimal Redis client for PING and ZCARD (the library is not used for measuring) ---- */
static int redis_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("cache-burst: redis");
        exit(1);
    }
    return fd;
}

/* Sends cmd, reads one reply line; returns its integer (":N") or 0. */
static long redis_line(int fd, const char *cmd, size_t len)
{
    if (write(fd, cmd, len) != (ssize_t)len)
        return -1;
    char buf[256];
    size_t n = 0;
    while (n < sizeof buf - 1) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
            break;
    }
    buf[n] = '\0';
    return buf[0] == ':' ? atol(buf + 1) : 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
static double pct(int64_t *v, long n, double q)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    long i = (long)(q / 100.0 * (double)n);
    return (double)v[i < n ? i : n - 1];
}

static int do_rtt(int port, int n)
{
    int fd = redis_open(port);
    int64_t *v = calloc((size_t)n, sizeof *v);
    for (int i = 0; i < n; i++) {
        int64_t t = now_ns();
        redis_line(fd, "PING\r\n", 6);
        v[i] = now_ns() - t;
    }
    printf("rtt_us=%.1f\n", pct(v, n, 50) / 1e3);
    close(fd);
    return 0;
}

static int do_probe(int64_t period_ns, int count)
{
    struct shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    pid_t keeper = fork();
    if (keeper == 0)
        trickle(sh, 2000000);
    while (atomic_load(&sh->ready) < 1)
        usleep(1000);
    PGconn *c = connect_db();
    unsigned seed = (unsigned)getpid();
    (void)run_query(c, &seed);
    usleep(200000);
    int64_t *lat = calloc((size_t)count, sizeof *lat);
    int max_slot = 0;
    int64_t next = now_ns();
    for (int i = 0; i < count; i++) {
        /* off the keeper's 2 ms beat by a varying phase */
        next += period_ns + (int64_t)(rand_r(&seed) % 1000) * 1000;
        sleep_until_ns(next);
        int64_t t = now_ns();
        int slot = run_query(c, &seed);
        lat[i] = now_ns() - t;
        if (slot > max_slot)
            max_slot = slot;
    }
    atomic_store(&sh->stop, 1);
    waitpid(keeper, NULL, 0);
    if (sh->trickle_max_slot > max_slot)
        max_slot = sh->trickle_max_slot;
    printf("probe_p50_us=%.1f\nprobe_p90_us=%.1f\nprobe_max_slot=%d\n", pct(lat, count, 50) / 1e3,
           pct(lat, count, 90) / 1e3, max_slot);
    PQfinish(c);
    return 0;
}

static int do_burst(int nworkers, int bursts, int64_t burst_ns, int64_t idle_ns, int64_t trickle_ns,
                    int port, const char *holders_key, const char *status_cmd)
{
    if (nworkers > MAX_WORKERS || bursts > MAX_BURSTS)
        return 2;
    struct shared *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    pid_t pids[MAX_WORKERS + 1];
    for (int i = 0; i <= nworkers; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            if (i == nworkers)
                trickle(sh, trickle_ns);
            worker(sh, i);
        }
    }
    int64_t give_up = now_ns() + INT64_C(30000000000);
    while (atomic_load(&sh->ready) < nworkers + 1 && now_ns() < give_up)
        usleep(2000);
    int fd = redis_open(port);
    char zcard[512];
    int zlen = snprintf(zcard, sizeof zcard, "*2\r\n$5\r\nZCARD\r\n$%zu\r\n%s\r\n",
                        strlen(holders_key), holders_key);
    /* Idle holders, sampled every 5 ms: index by ms since the burst ended / 5. */
    static long hsum[MAX_SAMPLES], hn[MAX_SAMPLES];
    long hmax_idle = 0;
    usleep((useconds_t)(idle_ns / 1000)); /* the warm-up queries' permits settle first */
    for (int b = 0; b < bursts; b++) {
        atomic_store(&sh->done, 0);
        int64_t start = now_ns();
        sh->end_ns = start + burst_ns;
        sh->burst_start_ns[b] = start;
        atomic_store(&sh->gen, b + 1);
        futex_wake_all(&sh->gen);
        sleep_until_ns(sh->end_ns);
        while (atomic_load(&sh->done) < nworkers && now_ns() < sh->end_ns + INT64_C(20000000000))
            usleep(200);
        int64_t idle_from = now_ns();
        sh->burst_end_ns[b] = idle_from;
        bool status_done = false;
        for (int64_t t = idle_from; t < idle_from + idle_ns; t = now_ns()) {
            long h = redis_line(fd, zcard, (size_t)zlen);
            long i = (long)((now_ns() - idle_from) / 5000000);
            if (i < MAX_SAMPLES && h >= 0) {
                hsum[i] += h;
                hn[i]++;
            }
            if (h > hmax_idle && now_ns() - idle_from > INT64_C(100000000))
                hmax_idle = h;
            if (b == 1 && !status_done && t - idle_from >= INT64_C(200000000) &&
                strcmp(status_cmd, "-") != 0) {
                status_done = true;
                if (system(status_cmd) != 0)
                    fprintf(stderr, "cache-burst: the status command failed\n");
            }
            usleep(5000);
        }
    }
    atomic_store(&sh->stop, 1);
    futex_wake_all(&sh->gen);
    for (int i = 0; i <= nworkers; i++)
        waitpid(pids[i], NULL, 0);

    /* Bursts: queries per second of burst time; the first queries' latencies by rank. */
    long queries = 0;
    int max_slot = sh->trickle_max_slot, errors = sh->trickle_errors;
    double burst_s = 0;
    static int64_t rank[MAX_WORKERS][MAX_BURSTS];
    for (int b = 0; b < bursts; b++) {
        int64_t firsts[MAX_WORKERS];
        for (int w = 0; w < nworkers; w++) {
            struct burst_result *r = &sh->res[b][w];
            queries += r->queries;
            errors += r->errors;
            if (r->max_slot > max_slot)
                max_slot = r->max_slot;
            firsts[w] = r->first_ns;
        }
        qsort(firsts, (size_t)nworkers, sizeof firsts[0], cmp_i64);
        for (int w = 0; w < nworkers; w++)
            rank[w][b] = firsts[w];
        burst_s += (double)(sh->burst_end_ns[b] - sh->burst_start_ns[b]) / 1e9;
    }
    printf("burst_qps=%.1f\n", (double)queries / burst_s);
    for (int w = 0; w < nworkers; w++)
        printf("first_rank%d_us=%.1f\n", w + 1, pct(rank[w], bursts, 50) / 1e3);
    /* The trickle: its rate, and its latencies while bursts ran and while idle. */
    long nt = atomic_load(&sh->ntrickle), nb = 0, ni = 0;
    int64_t *lb = calloc((size_t)nt + 1, sizeof *lb), *li = calloc((size_t)nt + 1, sizeof *li);
    for (long i = 0; i < nt; i++) {
        bool in_burst = false;
        for (int b = 0; b < bursts && !in_burst; b++)
            in_burst = sh->trickle[i].at_ns >= sh->burst_start_ns[b] &&
                       sh->trickle[i].at_ns < sh->burst_end_ns[b];
        if (in_burst)
            lb[nb++] = sh->trickle[i].lat_ns;
        else
            li[ni++] = sh->trickle[i].lat_ns;
    }
    double span_s = nt > 1 ? (double)(sh->trickle[nt - 1].at_ns - sh->trickle[0].at_ns) / 1e9 : 1;
    printf("trickle_qps=%.1f\n", (double)(nt - 1) / span_s);
    printf("trickle_idle_p50_us=%.1f\ntrickle_idle_p99_us=%.1f\n", pct(li, ni, 50) / 1e3,
           pct(li, ni, 99) / 1e3);
    printf("trickle_burst_p50_us=%.1f\ntrickle_burst_p99_us=%.1f\n", pct(lb, nb, 50) / 1e3,
           pct(lb, nb, 99) / 1e3);
    /* Holders while idle: the mean at a few points after the burst, and the most after 100 ms. */
    const int at_ms[] = {10, 25, 50, 75, 100, 200, 400};
    for (size_t k = 0; k < sizeof at_ms / sizeof at_ms[0]; k++) {
        long i = at_ms[k] / 5;
        printf("idle_holders_%dms=%.2f\n", at_ms[k], hn[i] ? (double)hsum[i] / (double)hn[i] : -1);
    }
    printf("idle_holders_max_after_100ms=%ld\n", hmax_idle);
    printf("max_slot=%d\nerrors=%d\n", max_slot, errors);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 10 && strcmp(argv[1], "burst") == 0)
        return do_burst(atoi(argv[2]), atoi(argv[3]), atoll(argv[4]) * 1000000,
                        atoll(argv[5]) * 1000000, atoll(argv[6]) * 1000, atoi(argv[7]), argv[8],
                        argv[9]);
    if (argc == 4 && strcmp(argv[1], "probe") == 0)
        return do_probe(atoll(argv[2]) * 1000, atoi(argv[3]));
    if (argc == 4 && strcmp(argv[1], "rtt") == 0)
        return do_rtt(atoi(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: cache-burst burst WORKERS BURSTS BURST_MS IDLE_MS TRICKLE_US "
                    "REDIS_PORT HOLDERS_KEY STATUS_CMD\n"
                    "       cache-burst probe PERIOD_US COUNT\n"
                    "       cache-burst rtt REDIS_PORT N\n");
    return 2;
}
