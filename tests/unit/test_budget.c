/* A call's time budget (redis_conn.h, dbt_redis_budget_begin) spent before its request was
 * written, with no wait for Redis timed out in it: the time went to this process (stopped, not
 * scheduled), so the request, built before, is not sent, and the failure says it was not Redis'
 * (dbt_redis_take_unsent). Against a server of the test's own on a unix socket (a thread that
 * answers each PING with +PONG, or reads and says nothing, counting what it read). No Redis. */
#include "config.h"
#include "redis_conn.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct {
    char dir[64];
    char path[108];
    int listen_fd;
    bool answer;        /* answer PINGs, or read and say nothing */
    _Atomic long bytes; /* what it read */
    pthread_t thread;
} server;

static void *serve(void *arg)
{
    server *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[256];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        s->bytes += n;
        if (s->answer && write(fd, "+PONG\r\n", 7) != 7)
            break;
    }
    close(fd);
    return NULL;
}

static void server_start(server *s, bool answer)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/dbt-budget-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
    snprintf(s->path, sizeof s->path, "%s/redis.sock", s->dir);
    s->answer = answer;
    s->bytes = 0;
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", s->path);
    cr_assert_eq(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s->listen_fd, 4), 0);
    cr_assert_eq(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(server *s)
{
    shutdown(s->listen_fd, SHUT_RDWR);
    close(s->listen_fd);
    pthread_join(s->thread, NULL);
    unlink(s->path);
    rmdir(s->dir);
}

static dbt_redis *open_to(server *s, char *err)
{
    dbt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.redis_timeout_ms = 200;
    dbt_endpoint ep = {.is_unix = true, .path = s->path};
    dbt_redis *r = dbt_redis_open(&cfg, &ep, NULL, NULL, err);
    cr_assert_not_null(r, "%s", err);
    return r;
}

static redisReply *ping(dbt_redis *r, char *err)
{
    const char *argv[] = {"PING"};
    return dbt_redis_command(r, 1, argv, NULL, err);
}

/* Before: "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)", taken for Redis' outage (chaos seed 5: a
 * client stopped for 2 s while its renewal connected ran unthrottled for a second as it resumed).
 */
Test(budget, spent_before_the_request_was_written_is_not_redis_failure)
{
    server s;
    server_start(&s, true);
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = open_to(&s, err);
    (void)dbt_redis_take_unsent();
    int64_t saved = dbt_redis_budget_begin(50);
    usleep(120 * 1000); /* this thread "stopped" past its budget before it wrote */
    redisReply *rep = ping(r, err);
    dbt_redis_budget_end(saved);
    cr_expect_null(rep);
    cr_expect(dbt_redis_take_unsent(), "not said to be unsent: %s", err);
    cr_expect_not_null(strstr(err, "ran out before it was sent"), "%s", err);
    usleep(50 * 1000);
    cr_expect_eq(s.bytes, 0, "the stale request was sent (%ld bytes)", (long)s.bytes);
    freeReplyObject(rep);
    dbt_redis_free(r);
    server_stop(&s);
}

/* Not when the budget went to Redis: a wait for its reply timed out in it (a hung Redis), and the
 * next call's failure in that budget is Redis' too. */
Test(budget, spent_on_a_late_redis_is_redis_failure)
{
    server s;
    server_start(&s, false);
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = open_to(&s, err);
    dbt_redis *r2 = open_to(&s, err);
    (void)dbt_redis_take_unsent();
    int64_t saved = dbt_redis_budget_begin(300);
    redisReply *rep = ping(r, err); /* waits its 200 ms timeout: Redis late */
    cr_expect_null(rep);
    usleep(150 * 1000); /* the budget is spent now */
    err[0] = '\0';
    rep = ping(r2, err);
    dbt_redis_budget_end(saved);
    cr_expect_null(rep);
    cr_expect_not(dbt_redis_take_unsent(), "said to be unsent: %s", err);
    cr_expect_not_null(strstr(err, "DBTHROTTLE_REDIS_TIMEOUT spent"), "%s", err);
    dbt_redis_free(r);
    dbt_redis_free(r2);
    server_stop(&s);
}
