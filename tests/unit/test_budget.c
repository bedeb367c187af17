/* A call's time budget (redis_conn.h, dbt_redis_budget_begin) spent before its request was
 * written: the time went elsewhere (a slow connect, this process stopped or not scheduled), and
 * Redis, which never had the request, is given one more timeout, once per budget. Against a
 * server of the test's own on a unix socket (a thread that answers each PING with +PONG, or
 * nothing). No Redis. */
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
    bool answer; /* answer PINGs, or read and say nothing */
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
    while ((n = read(fd, buf, sizeof buf)) > 0)
        if (s->answer && write(fd, "+PONG\r\n", 7) != 7)
            break;
    close(fd);
    return NULL;
}

static void server_start(server *s, bool answer)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/dbt-budget-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir));
    snprintf(s->path, sizeof s->path, "%s/redis.sock", s->dir);
    s->answer = answer;
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

/* Before: "timed out (DBTHROTTLE_REDIS_TIMEOUT spent)" without a byte sent, taken for Redis'
 * outage (chaos seed 5: a client stopped while its renewal connected, unthrottled as it resumed).
 */
Test(budget, spent_before_the_request_was_written_gives_redis_its_timeout)
{
    server s;
    server_start(&s, true);
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = open_to(&s, err);
    int64_t saved = dbt_redis_budget_begin(50);
    usleep(120 * 1000); /* this thread "stopped" past its budget before it wrote */
    redisReply *rep = ping(r, err);
    dbt_redis_budget_end(saved);
    cr_assert_not_null(rep, "%s", err);
    cr_expect_eq(rep->type, REDIS_REPLY_STATUS);
    cr_expect_str_eq(rep->str, "PONG");
    freeReplyObject(rep);
    dbt_redis_free(r);
    server_stop(&s);
}

/* Once per budget: a server that never answers still fails the call within that one more
 * timeout, and the next call in the same spent budget fails at once. */
Test(budget, the_extra_timeout_comes_once_per_budget)
{
    server s;
    server_start(&s, false);
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = open_to(&s, err);
    dbt_redis *r2 = open_to(&s, err);
    int64_t saved = dbt_redis_budget_begin(50);
    usleep(120 * 1000);
    redisReply *rep = ping(r, err);
    cr_expect_null(rep);
    cr_expect_not_null(strstr(err, "timed out"), "%s", err);
    err[0] = '\0';
    rep = ping(r2, err);
    cr_expect_null(rep);
    cr_expect_not_null(strstr(err, "DBTHROTTLE_REDIS_TIMEOUT spent"), "%s", err);
    dbt_redis_budget_end(saved);
    dbt_redis_free(r);
    dbt_redis_free(r2);
    server_stop(&s);
}

/* Not when the budget went to Redis: a wait for its reply timed out in it, so a hung Redis costs
 * one timeout, not two (recovery/exit_takes_one_timeout_in_all: exit took 2 s with a 1 s
 * timeout when this was missing). */
Test(budget, not_extended_once_redis_was_late_in_it)
{
    server s;
    server_start(&s, false);
    char err[DBT_ERRLEN] = "";
    dbt_redis *r = open_to(&s, err);
    dbt_redis *r2 = open_to(&s, err);
    int64_t saved = dbt_redis_budget_begin(300);
    redisReply *rep = ping(r, err); /* waits its 200 ms timeout: Redis late */
    cr_expect_null(rep);
    usleep(150 * 1000); /* the budget is spent now */
    err[0] = '\0';
    rep = ping(r2, err);
    cr_expect_null(rep);
    cr_expect_not_null(strstr(err, "DBTHROTTLE_REDIS_TIMEOUT spent"), "%s", err);
    dbt_redis_budget_end(saved);
    dbt_redis_free(r);
    dbt_redis_free(r2);
    server_stop(&s);
}
