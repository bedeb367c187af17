/* A write to the host's relay that its speaker does not read (redis_conn.c, flush_out): over a
 * real unix socket whose listener, a child of the test, never reads, with the connection marked
 * relayed as dbt_relay_connect marks it. A stopped speaker is found half-way and the call given
 * up as the relay's failure (r->stalled: its caller goes to Redis directly); a running one that
 * reads nothing is waited for the whole timeout, a Redis-like timeout. No Redis. */
#include "config.h"
#include "redis_conn.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child listening on a unix socket under a fresh temporary directory, never accepting or
 * reading; stopped (SIGSTOP) when asked. */
typedef struct {
    pid_t pid;
    char dir[64];
    char path[108];
} listener;

static void listener_start(listener *l, bool stop)
{
    snprintf(l->dir, sizeof l->dir, "/tmp/dbt-relay-stall-XXXXXX");
    cr_assert_not_null(mkdtemp(l->dir));
    snprintf(l->path, sizeof l->path, "%s/relay.sock", l->dir);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    l->pid = fork();
    cr_assert_geq(l->pid, 0);
    if (l->pid == 0) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s", l->path);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0)
            _exit(1);
        if (write(ready[1], "r", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the listener did not start");
    close(ready[0]);
    if (stop) {
        int st;
        cr_assert_eq(kill(l->pid, SIGSTOP), 0);
        cr_assert_eq(waitpid(l->pid, &st, WUNTRACED), l->pid);
        cr_assert(WIFSTOPPED(st));
    }
}

static void listener_stop(listener *l)
{
    kill(l->pid, SIGKILL);
    kill(l->pid, SIGCONT);
    waitpid(l->pid, NULL, 0);
    unlink(l->path);
    rmdir(l->dir);
}

/* A command far larger than the socket's buffers (the scripts a new connection loads), sent on
 * a connection to the listener marked as the host's relay with the listener as its speaker. */
static redisReply *send_big(listener *l, dbt_redis **out, char *err)
{
    dbt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.redis_timeout_ms = 400;
    dbt_endpoint ep = {.is_unix = true, .path = l->path};
    dbt_redis *r = dbt_redis_open(&cfg, &ep, NULL, NULL, err);
    cr_assert_not_null(r, "%s", err);
    r->relayed = true;
    r->relay_pid = l->pid;
    size_t len = 4 << 20;
    char *big = malloc(len);
    cr_assert_not_null(big);
    memset(big, 'x', len);
    const char *argv[] = {"SCRIPT", "LOAD", big};
    size_t lens[] = {6, 4, len};
    redisReply *rep = dbt_redis_command(r, 3, argv, lens, err);
    free(big);
    *out = r;
    return rep;
}

/* Before: the write waited out the whole timeout without looking at the speaker, and the stall
 * read as Redis' timeout (make test's host_relay: "a renewal's DBTHROTTLE_REDIS_TIMEOUT spent",
 * commands refused in closed mode). */
Test(relay_stall, a_write_the_stopped_speaker_never_reads_is_the_relays_failure)
{
    listener l;
    listener_start(&l, true);
    dbt_redis *r = NULL;
    char err[DBT_ERRLEN] = "";
    redisReply *rep = send_big(&l, &r, err);
    cr_expect_null(rep);
    cr_expect(r->stalled, "not taken for the relay's stall: %s", err);
    cr_expect(dbt_redis_broken(r));
    cr_expect_not_null(strstr(err, "the host's relay is stopped"), "%s", err);
    freeReplyObject(rep);
    dbt_redis_free(r);
    listener_stop(&l);
}

/* A speaker that runs but reads nothing is waited for: a slow relay looks like a slow Redis. */
Test(relay_stall, a_write_a_running_speaker_never_reads_times_out)
{
    listener l;
    listener_start(&l, false);
    dbt_redis *r = NULL;
    char err[DBT_ERRLEN] = "";
    redisReply *rep = send_big(&l, &r, err);
    cr_expect_null(rep);
    cr_expect_not(r->stalled, "taken for a stall: %s", err);
    cr_expect(dbt_redis_broken(r));
    cr_expect_not_null(strstr(err, "timed out"), "%s", err);
    freeReplyObject(rep);
    dbt_redis_free(r);
    listener_stop(&l);
}
