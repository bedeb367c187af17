/* Which Redis errors refuse like a bad setting and which are outages, met for real: a host name
 * that stops resolving after the pool has reached Redis (a container restarting behind Docker's
 * or Kubernetes' DNS) is an outage, one that never resolved is a configuration error; a transient
 * error to INFO fails the connect like any outage instead of skipping the policy check. */
#include "log.h"
#include "redis_errors.h"
#include "route.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static dbt_acq_result acquire_until(dbt_pool *p, dbt_acq_result want, int64_t ms)
{
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 0};
    int64_t deadline = test_now_ms() + ms;
    dbt_acq_result res;
    dbt_permit *a = NULL;
    while ((res = dbt_acquire(p, DBT_KIND_QUERY, &o, &a)) != want && test_now_ms() < deadline) {
        if (res == DBT_ACQ_GRANTED)
            dbt_release(a);
        usleep(50 * 1000);
    }
    if (res == DBT_ACQ_GRANTED)
        dbt_release(a);
    return res;
}

static bool log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

Test(error_classes, a_name_that_stops_resolving_after_a_connect_is_an_outage,
     .init = fx_redis_start, .fini = fx_stop)
{
    char log[300], lkv[320], err[DBT_ERRLEN];
    snprintf(log, sizeof log, "%s/client.log", fx_redis.dir);
    snprintf(lkv, sizeof lkv, "DBTHROTTLE_LOG=%s", log);
    /* A configuration of the test's own, not fx_client's: the test points its host at a static
     * string for a while, which fx_stop must not free after a failed assertion. */
    dbt_config cfg;
    test_config(&cfg, &fx_redis, "DBTHROTTLE_ON_REDIS_ERROR=open", "DBTHROTTLE_REDIS_TIMEOUT=500ms",
                lkv, "DBTHROTTLE_LOG_LEVEL=debug", NULL);
    cr_assert(dbt_log_open(&cfg, err), "%s", err);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "dns");
    cr_assert_eq(acquire_until(p, DBT_ACQ_GRANTED, 5000), DBT_ACQ_GRANTED);

    /* The name stops resolving (what getaddrinfo says of a name with no DNS record: a test
     * cannot take a name out of DNS, so the URL's host becomes one that never resolves; the
     * pointer is swapped atomically since the pool's background thread may be connecting) and
     * Redis drops every connection, as a restarting container does. */
    char *host = cfg.redis.host;
    static char gone[] = "dbt-redis-restarting.invalid";
    __atomic_store_n(&cfg.redis.host, gone, __ATOMIC_SEQ_CST);
    cr_assert_geq(test_redis_int(&fx_redis, "CLIENT KILL TYPE normal"), 1);

    /* Commands go on until the pool has met the unresolved name (after the outage backoff of
     * the dropped connections, a new one is opened): in open mode, each runs unthrottled, none
     * is refused as misconfigured. */
    int64_t deadline = test_now_ms() + 8000;
    int misconfigured = 0, unthrottled = 0;
    bool met = false;
    while (!met && test_now_ms() < deadline) {
        met = log_has(log, "Name or service not known");
        dbt_acq_result res = acquire_until(p, DBT_ACQ_UNTHROTTLED, 0);
        misconfigured += res == DBT_ACQ_MISCONFIGURED;
        unthrottled += res == DBT_ACQ_UNTHROTTLED;
        usleep(20 * 1000);
    }
    cr_assert(met, "the pool never tried the unresolved name");
    cr_expect_eq(misconfigured, 0,
                 "%d commands refused as misconfigured (%d unthrottled): a name that resolved "
                 "before was taken for a configuration error",
                 misconfigured, unthrottled);
    cr_expect_eq(acquire_until(p, DBT_ACQ_UNTHROTTLED, 0), DBT_ACQ_UNTHROTTLED);
    char why[256] = "";
    cr_expect(!dbt_pool_misconfig(p, why, sizeof why), "misconfigured: %s", why);

    /* The name is back: throttling resumes once the outage backoff has passed. */
    __atomic_store_n(&cfg.redis.host, host, __ATOMIC_SEQ_CST);
    cr_expect_eq(acquire_until(p, DBT_ACQ_GRANTED, 5000), DBT_ACQ_GRANTED);
    dbt_client_free(c);
    dbt_log_close();
    dbt_config_free(&cfg);
}

Test(error_classes, a_name_that_never_resolved_is_a_configuration_error, .init = fx_redis_start,
     .fini = fx_stop)
{
    char url[128];
    snprintf(url, sizeof url, "DBTHROTTLE_REDIS_URL=redis://dbt-never-resolved.invalid:%d",
             fx_redis.port);
    dbt_client *c =
        fx_client("DBTHROTTLE_ON_REDIS_ERROR=open", "DBTHROTTLE_REDIS_TIMEOUT=500ms", url, NULL);
    dbt_pool *p = dbt_client_pool(c, "dns");
    cr_expect_eq(acquire_until(p, DBT_ACQ_MISCONFIGURED, 3000), DBT_ACQ_MISCONFIGURED);
    char why[256] = "";
    cr_expect(dbt_pool_misconfig(p, why, sizeof why) && strstr(why, "does not resolve") &&
                  strstr(why, "DBTHROTTLE_REDIS_URL"),
              "%s", why);
}

/* ---- a server that answers INFO with an error of our choosing --------------------------- */

typedef struct {
    int lfd, port;
    const char *info_reply; /* the whole RESP error line INFO gets */
    pthread_t thread;
} fake_redis;

/* Reads one RESP command (an array of bulk strings) into argv; false at EOF. Good enough for
 * what dbt_redis_connect sends. */
static bool read_command(FILE *in, char **argv, size_t *lens, int cap, int *argc)
{
    int n;
    if (fscanf(in, "*%d\r\n", &n) != 1 || n < 1 || n > cap)
        return false;
    for (int i = 0; i < n; i++) {
        size_t len;
        argv[i] = NULL;
        if (fscanf(in, "$%zu\r\n", &len) == 1)
            argv[i] = malloc(len + 2);
        if (!argv[i] || fread(argv[i], 1, len + 2, in) != len + 2) { /* with its \r\n */
            for (int j = 0; j <= i; j++) /* a client that went mid-command */
                free(argv[j]);
            return false;
        }
        argv[i][len] = '\0';
        lens[i] = len;
    }
    *argc = n;
    return true;
}

static void *fake_serve(void *arg)
{
    fake_redis *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    FILE *in = fdopen(dup(fd), "r");
    char *argv[8];
    size_t lens[8];
    int argc;
    while (in && read_command(in, argv, lens, 8, &argc)) {
        char out[128];
        if (strcasecmp(argv[0], "INFO") == 0) {
            snprintf(out, sizeof out, "%s\r\n", f->info_reply);
        } else if (argc >= 2 && strcasecmp(argv[0], "SCRIPT") == 0 &&
                   strcasecmp(argv[1], "EXISTS") == 0) {
            /* none there: the client loads them all */
            int n = snprintf(out, sizeof out, "*%d\r\n", argc - 2);
            for (int i = 2; i < argc && n > 0 && (size_t)n < sizeof out; i++)
                n += snprintf(out + n, sizeof out - (size_t)n, ":0\r\n");
        } else if (argc == 3 && strcasecmp(argv[0], "SCRIPT") == 0) {
            snprintf(out, sizeof out, "-ERR no such script\r\n");
            for (int i = 0; i < dbt_nscripts; i++)
                if (dbt_scripts[i]->len == lens[2] &&
                    memcmp(dbt_scripts[i]->body, argv[2], lens[2]) == 0)
                    snprintf(out, sizeof out, "$40\r\n%s\r\n", dbt_scripts[i]->sha);
        } else {
            snprintf(out, sizeof out, "+OK\r\n");
        }
        bool sent = send(fd, out, strlen(out), MSG_NOSIGNAL) >= 0;
        for (int i = 0; i < argc; i++)
            free(argv[i]);
        if (!sent) /* the client may have gone */
            break;
    }
    if (in)
        fclose(in);
    close(fd);
    return NULL;
}

static void fake_start(fake_redis *f, const char *info_reply)
{
    f->info_reply = info_reply;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(f->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f->lfd, 4) == 0);
    socklen_t len = sizeof a;
    cr_assert(getsockname(f->lfd, (struct sockaddr *)&a, &len) == 0);
    f->port = ntohs(a.sin_port);
    cr_assert(pthread_create(&f->thread, NULL, fake_serve, f) == 0);
}

static void fake_stop(fake_redis *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    close(f->lfd);
    pthread_join(f->thread, NULL);
}

static dbt_redis *connect_to(fake_redis *f, dbt_config *cfg, char *err)
{
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", f->port);
    dbt_config_defaults(cfg);
    cr_assert(dbt_config_set(cfg, "DBTHROTTLE_REDIS_URL", url, DBT_SRC_ENV, err), "%s", err);
    return dbt_redis_connect(cfg, err);
}

/* INFO refused for a while (BUSY: a long script; LOADING: a restart) says nothing of the policy:
 * the connect is an outage, never a Redis "unverified" for the life of the connection. */
Test(error_classes, a_transient_error_to_info_is_an_outage)
{
    const char *replies[] = {"-BUSY Redis is busy running a script. You can only call SCRIPT "
                             "KILL or SHUTDOWN NOSCRIPT.",
                             "-LOADING Redis is loading the dataset in memory"};
    for (size_t i = 0; i < sizeof replies / sizeof *replies; i++) {
        fake_redis f;
        fake_start(&f, replies[i]);
        dbt_config cfg;
        char err[DBT_ERRLEN] = "";
        dbt_redis *r = connect_to(&f, &cfg, err);
        cr_expect_null(r, "%s: connected, info_refused=%d (the policy went unchecked)", replies[i],
                       r ? r->info_refused : -1);
        dbt_redis_free(r);
        cr_expect(strstr(err, replies[i] + 1) != NULL, "err: %s", err);
        char why[256];
        cr_expect(!dbt_redis_error_permanent(err, false, why, sizeof why), "permanent: %s", err);
        dbt_config_free(&cfg);
        fake_stop(&f);
    }
}

/* A user that may not run INFO still throttles, unverified (and warned about by the pool). */
Test(error_classes, info_denied_by_the_acl_is_unverified_not_refused)
{
    fake_redis f;
    fake_start(&f, "-NOPERM this user has no permissions to run the 'info' command");
    dbt_config cfg;
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = connect_to(&f, &cfg, err);
    cr_expect_not_null(r, "%s", err);
    cr_expect(r && r->info_refused);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    fake_stop(&f);
}
