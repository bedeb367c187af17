/* rediss://: the semaphore over TLS against a real redis-server --tls-port, with certificates
 * made by tests/support/tls.sh. The server also listens on a plain port, which only the test
 * uses to look at Redis' state; the library is given the TLS port alone. */
#include "redis_errors.h"
#include "route.h"
#include "sem_helpers.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{tls}:q:holders"

/* Where tests/support/tls.sh is: the Makefile says so for `make check`; the sanitizer builds run
 * from the top of the tree. */
#ifndef DBT_SOURCE_DIR
#define DBT_SOURCE_DIR "."
#endif

static test_redis R;
static bool started;
static char certs[64];
static int tls_port;

static int free_port(void)
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

/* Makes the certificates, then starts Redis with NAME.crt as its certificate; auth_clients is
 * Redis' tls-auth-clients (no, yes). */
static void tls_start(const char *name, const char *auth_clients)
{
    snprintf(certs, sizeof certs, "/tmp/dbt-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(certs));
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sh %s/tests/support/tls.sh %s", DBT_SOURCE_DIR, certs);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char extra[1024];
    for (int attempt = 0; attempt < 5 && !started; attempt++) {
        tls_port = free_port();
        snprintf(extra, sizeof extra,
                 "--tls-port %d --tls-cert-file %s/%s.crt --tls-key-file %s/%s.key "
                 "--tls-ca-cert-file %s/ca.crt --tls-auth-clients %s",
                 tls_port, certs, name, certs, name, certs, auth_clients);
        started = test_redis_start(&R, extra);
    }
    cr_assert(started, "redis-server with %s", extra);
}

static void tls_stop(void)
{
    if (started)
        test_redis_stop(&R);
    started = false;
    if (certs[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", certs);
        (void)system(cmd);
    }
}

/* A configuration for rediss://HOST:tls_port with DBTHROTTLE_REDIS_CA = certs/CA (NULL: the
 * system store) and more settings, NULL-terminated. */
static void tls_config(dbt_config *cfg, const char *host, const char *ca, ...)
{
    test_config(cfg, &R, NULL);
    char err[DBT_ERRLEN], v[300];
    snprintf(v, sizeof v, "rediss://%s:%d", host, tls_port);
    cr_assert(dbt_config_set(cfg, "DBTHROTTLE_REDIS_URL", v, DBT_SRC_ENV, err), "%s", err);
    if (ca) {
        snprintf(v, sizeof v, "%s/%s", certs, ca);
        cr_assert(dbt_config_set(cfg, "DBTHROTTLE_REDIS_CA", v, DBT_SRC_ENV, err), "%s", err);
    }
    va_list ap;
    va_start(ap, ca);
    for (const char *kv; (kv = va_arg(ap, const char *));) {
        char key[64];
        const char *eq = strchr(kv, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
        if (strstr(key, "CERT") || strstr(key, "KEY"))
            snprintf(v, sizeof v, "%s/%s", certs, eq + 1); /* a file of certs/ */
        else
            snprintf(v, sizeof v, "%s", eq + 1);
        cr_assert(dbt_config_set(cfg, key, v, DBT_SRC_ENV, err), "%s", err);
    }
    va_end(ap);
}

TestSuite(tls, .fini = tls_stop, .timeout = 60);

typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
    dbt_permit *permit;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

Test(tls, acquire_release_and_a_queued_grant_pushed_over_tls)
{
    tls_start("server", "no");
    dbt_config cfg;
    /* A generous timeout: this runs under valgrind too. */
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=10s", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "tls");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000};
    dbt_permit *first;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &first), DBT_ACQ_GRANTED);
    cr_expect_eq(test_redis_int(&R, "ZCARD %s", HOLDERS), 1);
    /* Another thread waits: its grant comes by the listener's BLPOP, over TLS. */
    waiter_arg w = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is queued = {&R, "dbthrottle:{tls}:q:queue", 1};
    cr_expect(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
    dbt_release(first);
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_GRANTED);
    cr_expect_eq(test_redis_int(&R, "ZCARD %s", HOLDERS), 1, "the waiter holds it");
    dbt_release(w.permit);
    zcard_is none = {&R, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000));
    /* A host name works as well as an address (the certificate names both). */
    dbt_config byname;
    tls_config(&byname, "localhost", "ca.crt", NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&byname, err);
    cr_expect_not_null(r, "%s", err);
    dbt_redis_free(r);
    dbt_config_free(&byname);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* A Redis that lost its scripts (SCRIPT FLUSH): the call is repaired (SCRIPT LOAD, then again),
 * and so is a release sent without waiting for its reply. */
Test(tls, noscript_is_repaired_over_tls)
{
    tls_start("server", "no");
    dbt_config cfg;
    /* A generous timeout: this runs under valgrind too. */
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=10s", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "tls");
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000};
    dbt_permit *a, *b;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    cr_assert_eq(test_redis_int(&R, "SCRIPT FLUSH"), -1000); /* +OK, not an integer */
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), DBT_ACQ_GRANTED, "no NOSCRIPT repair");
    cr_expect_eq(test_redis_int(&R, "ZCARD %s", HOLDERS), 2);
    cr_assert_eq(test_redis_int(&R, "SCRIPT FLUSH"), -1000);
    dbt_release(a); /* fire-and-forget: its NOSCRIPT is read and repaired by the next call */
    dbt_release(b);
    dbt_permit *again;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &again), DBT_ACQ_GRANTED);
    dbt_release(again);
    zcard_is none = {&R, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000), "a release was lost: %lld holders",
              test_redis_int(&R, "ZCARD %s", HOLDERS));
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_expect_eq(st.redis_errors, 0);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* A Redis that stops answering (SIGSTOP) mid-session and at the handshake: each call ends within
 * its DBTHROTTLE_REDIS_TIMEOUT budget (open: unthrottled), none hangs on a TLS read.
 *
 * What a process and a Redis do once is done first, by a connection with time to spare: the
 * process' TLS context and Redis' compiling of the scripts. Under the 300 ms budget they made
 * the first acquire (and the renewer's first round, whose overrun marks the pool down, so that
 * the stalled acquire returned at once) cost ~40 ms of a free CPU: under load (average 6 on 2
 * cores) the grant before the stall failed. Left under the budget: a handshake, INFO, SCRIPT
 * LOAD of scripts Redis has, the acquire (~5 ms). */
Test(tls, a_stalled_redis_times_out_per_operation)
{
    tls_start("server", "no");
    dbt_config cfg;
    char err[DBT_ERRLEN];
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=10s", NULL);
    dbt_redis *warm = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(warm, "%s", err);
    dbt_redis_free(warm);
    dbt_config_free(&cfg);
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=300ms", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "tls");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    dbt_release(pm);
    /* Nothing of the process' in flight when Redis stops: its release, and the renewer's first
     * report (sent at once after the first grant). A call sent before the stop and not answered
     * times out first and marks the pool down, and the acquire then returns at once: CI, under
     * load, saw the report time out 3 ms before the acquire returned, under the 250 ms below.
     * Redis wrote their replies once their effects are seen here (the later command's reply
     * goes after theirs). */
    zcard_is reported = {&R, "dbthrottle:{tls}:procs", 1}, released = {&R, HOLDERS, 0};
    cr_assert(test_wait_until(test_zcard_is, &reported, 10000), "the process never reported");
    cr_assert(test_wait_until(test_zcard_is, &released, 10000), "the release never landed");
    kill(R.pid, SIGSTOP);
    int64_t t0 = test_now_ms();
    dbt_acq_result res = dbt_acquire(p, DBT_KIND_QUERY, &o, &pm);
    int64_t took = test_now_ms() - t0;
    dbt_release(pm);
    /* A new connection: TCP connects (the kernel accepts), the TLS handshake gets no answer. */
    t0 = test_now_ms();
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    int64_t connect_took = test_now_ms() - t0;
    kill(R.pid, SIGCONT);
    cr_expect_eq(res, DBT_ACQ_UNTHROTTLED);
    cr_expect(took >= 250 && took < 3000, "the stalled acquire took %lld ms", (long long)took);
    cr_expect_null(r);
    cr_expect(strstr(err, "timed out") != NULL, "%s", err);
    cr_expect(!dbt_redis_error_permanent(err, true, (char[DBT_MISCONFIG_LEN]){0}, 256), "%s", err);
    cr_expect(connect_took >= 250 && connect_took < 3000, "the stalled handshake took %lld ms",
              (long long)connect_took);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}

/* Connects with cfg; the connect must fail with a permanent error whose reason names cause and
 * the setting fix; and a worker's acquire is refused as misconfigured, not run unthrottled. */
static void expect_refused(dbt_config *cfg, const char *cause, const char *fix)
{
    char err[DBT_ERRLEN], why[DBT_MISCONFIG_LEN] = "";
    dbt_redis *r = dbt_redis_connect(cfg, err);
    cr_expect_null(r, "connected despite %s", cause);
    dbt_redis_free(r);
    cr_expect(strstr(err, cause) != NULL, "wanted %s: %s", cause, err);
    cr_expect(dbt_redis_error_permanent(err, false, why, sizeof why), "transient: %s", err);
    cr_expect(strstr(why, fix) != NULL, "wanted %s: %s", fix, why);
    dbt_client *c = dbt_client_new(cfg);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 1000};
    dbt_permit *pm = NULL;
    cr_expect_eq(dbt_acquire(dbt_client_pool(c, "tls"), DBT_KIND_QUERY, &o, &pm),
                 DBT_ACQ_MISCONFIGURED, "%s", cause);
    dbt_release(pm);
    dbt_client_free(c);
    dbt_config_free(cfg);
}

Test(tls, a_certificate_from_another_ca_is_refused)
{
    tls_start("server", "no");
    dbt_config cfg;
    tls_config(&cfg, "127.0.0.1", "otherca.crt", NULL);
    expect_refused(&cfg, "certificate verify failed", "DBTHROTTLE_REDIS_CA");
    tls_config(&cfg, "127.0.0.1", NULL, NULL); /* the system store does not know our CA */
    expect_refused(&cfg, "certificate verify failed", "DBTHROTTLE_REDIS_CA");
}

/* rediss:// at Redis' plain port: a plain Redis never answers a TLS hello (it waits for the line
 * end of what it takes for an inline command), which looked like an outage and ran unthrottled.
 * It is a configuration error; the same plain Redis stopped (no answer at all) stays an outage. */
Test(tls, a_port_that_speaks_no_tls_is_refused)
{
    tls_start("server", "no");
    dbt_config cfg;
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=500ms", NULL);
    char err[DBT_ERRLEN], v[64];
    snprintf(v, sizeof v, "rediss://127.0.0.1:%d", R.port);
    cr_assert(dbt_config_set(&cfg, "DBTHROTTLE_REDIS_URL", v, DBT_SRC_ENV, err), "%s", err);
    kill(R.pid, SIGSTOP);
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    kill(R.pid, SIGCONT);
    cr_expect_null(r);
    dbt_redis_free(r);
    cr_expect(strstr(err, "handshake timed out") != NULL, "%s", err);
    cr_expect(!dbt_redis_error_permanent(err, true, (char[DBT_MISCONFIG_LEN]){0}, 256), "%s", err);
    expect_refused(&cfg, "does not speak TLS", "DBTHROTTLE_REDIS_URL");
}

/* The reverse, redis:// at the TLS port: Redis resets the connection on our first command, as a
 * server that restarts may. A TLS record sent on a second connection is answered with an alert:
 * a configuration error, refused (before: "Connection reset by peer", an outage, unthrottled). */
Test(tls, redis_url_at_a_tls_port_is_refused)
{
    tls_start("server", "no");
    dbt_config cfg;
    tls_config(&cfg, "127.0.0.1", NULL, "DBTHROTTLE_REDIS_TIMEOUT=500ms", NULL);
    char err[DBT_ERRLEN], v[64];
    snprintf(v, sizeof v, "redis://127.0.0.1:%d", tls_port);
    cr_assert(dbt_config_set(&cfg, "DBTHROTTLE_REDIS_URL", v, DBT_SRC_ENV, err), "%s", err);
    expect_refused(&cfg, "speaks TLS on this port", "rediss://");
}

Test(tls, an_expired_certificate_is_refused)
{
    tls_start("expired", "no");
    dbt_config cfg;
    tls_config(&cfg, "127.0.0.1", "ca.crt", NULL);
    expect_refused(&cfg, "certificate has expired", "renew");
}

Test(tls, a_certificate_for_another_host_is_refused)
{
    tls_start("wronghost", "no");
    dbt_config cfg;
    tls_config(&cfg, "localhost", "ca.crt", NULL);
    expect_refused(&cfg, "hostname mismatch", "DBTHROTTLE_REDIS_URL");
    tls_config(&cfg, "127.0.0.1", "ca.crt", NULL);
    expect_refused(&cfg, "IP address mismatch", "DBTHROTTLE_REDIS_URL");
}

Test(tls, a_client_certificate_when_redis_requires_one)
{
    tls_start("server", "yes");
    dbt_config cfg;
    tls_config(&cfg, "127.0.0.1", "ca.crt", NULL);
    expect_refused(&cfg, "requires a client certificate", "DBTHROTTLE_REDIS_CERT");
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_CERT=client.crt",
               "DBTHROTTLE_REDIS_KEY=client.key", NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_expect_not_null(r, "with a client certificate: %s", err);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* The ids of the connections on the TLS port (Redis' CLIENT LIST, over the plain port). */
static int tls_clients(long long *ids, int cap)
{
    redisContext *rc = test_redis_connect(&R);
    redisReply *rep = redisCommand(rc, "CLIENT LIST");
    char want[32];
    snprintf(want, sizeof want, "laddr=127.0.0.1:%d ", tls_port);
    int n = 0;
    for (char *line = rep ? rep->str : NULL; line && *line && n < cap;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(line, want))
            ids[n++] = atoll(line + 3); /* "id=N ..." */
        line = nl ? nl + 1 : NULL;
    }
    freeReplyObject(rep);
    redisFree(rc);
    return n;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* A child of a process connected over TLS never writes to its parent's sessions (Redis would
 * close them on a close_notify or a record out of sequence), and closes their sockets. */
Test(tls, a_fork_child_leaves_the_parents_sessions_alone)
{
    tls_start("server", "no");
    dbt_config cfg;
    /* A generous timeout: this runs under valgrind too. */
    tls_config(&cfg, "127.0.0.1", "ca.crt", "DBTHROTTLE_REDIS_TIMEOUT=10s", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "tls");
    dbt_acquire_opts o = {.limit = 3, .wait_ms = 5000};
    dbt_permit *mine;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &mine), DBT_ACQ_GRANTED);
    long long before[16];
    int nbefore = tls_clients(before, 16);
    cr_assert(nbefore >= 1);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = 0, fds = open_fds();
        dbt_release(mine); /* the parent's: only forgotten here */
        for (int i = 0; i < 20; i++) {
            dbt_permit *childs;
            if (dbt_acquire(p, DBT_KIND_QUERY, &o, &childs) != DBT_ACQ_GRANTED)
                rc |= 1;
            dbt_release(childs);
        }
        dbt_client_free(c);
        if (open_fds() > fds)
            rc |= 2; /* a socket of the child's own left open */
        _exit(rc);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st));
    cr_expect_eq(WEXITSTATUS(st), 0, "child check failed: bits %d", WEXITSTATUS(st));
    /* The parent's sessions are the ones it had, and still work. */
    dbt_permit *again;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &again), DBT_ACQ_GRANTED);
    dbt_release(again);
    dbt_release(mine);
    zcard_is none = {&R, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000));
    long long after[16];
    int nafter = tls_clients(after, 16);
    for (int i = 0; i < nbefore; i++) {
        bool still = false;
        for (int j = 0; j < nafter; j++)
            still = still || after[j] == before[i];
        cr_expect(still, "the parent's connection %lld was closed", before[i]);
    }
    dbt_pool_stats stp;
    dbt_pool_get_stats(p, &stp);
    cr_expect_eq(stp.redis_errors, 0);
    dbt_client_free(c);
    dbt_config_free(&cfg);
}
