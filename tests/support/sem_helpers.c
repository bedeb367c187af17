/* sem_helpers.c - small helpers shared by the semaphore tests. */
#include "sem_helpers.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool test_zcard_is(void *arg)
{
    zcard_is *z = arg;
    return test_redis_int(z->r, "ZCARD %s", z->key) == z->n;
}

bool test_key_gone(void *arg)
{
    key_gone *k = arg;
    return test_redis_int(k->r, "EXISTS %s", k->key) == 0;
}

static char report_of(dbt_acq_result res)
{
    switch (res) {
    case DBT_ACQ_GRANTED:
        return 'G';
    case DBT_ACQ_TIMEOUT:
        return 'T';
    case DBT_ACQ_UNTHROTTLED:
        return 'U';
    case DBT_ACQ_REFUSED:
        return 'R';
    default:
        return 'I';
    }
}

static bool start_child(test_child *ch, const test_redis *r, const char *pool, int limit,
                        int64_t wait_ms, const char *lease, bool paused)
{
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        return false;
    ch->pid = fork();
    if (ch->pid < 0)
        return false;
    if (ch->pid == 0) {
        close(down[1]);
        close(up[0]);
        char go;
        if (paused && (read(down[0], &go, 1) != 1 || go != 'a'))
            _exit(3);
        char lease_kv[64];
        snprintf(lease_kv, sizeof lease_kv, "DBTHROTTLE_LEASE=%s", lease ? lease : "10s");
        dbt_config cfg;
        test_config(&cfg, r, lease_kv, NULL);
        dbt_client *c = dbt_client_new(&cfg);
        dbt_pool *p = dbt_client_pool(c, pool);
        dbt_acquire_opts o = {.limit = limit, .wait_ms = wait_ms, .conn = "child"};
        dbt_permit *permit = NULL;
        char rep = report_of(dbt_acquire(p, DBT_KIND_QUERY, &o, &permit));
        if (write(up[1], &rep, 1) != 1)
            _exit(2);
        char cmd;
        if (read(down[0], &cmd, 1) == 1 && cmd == 'r')
            dbt_release(permit);
        dbt_client_free(c);
        dbt_config_free(&cfg);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    ch->to_child = down[1];
    ch->from_child = up[0];
    return true;
}

bool test_child_start(test_child *ch, const test_redis *r, const char *pool, int limit,
                      int64_t wait_ms, const char *lease)
{
    return start_child(ch, r, pool, limit, wait_ms, lease, false);
}

bool test_child_start_paused(test_child *ch, const test_redis *r, const char *pool, int limit,
                             int64_t wait_ms, const char *lease)
{
    return start_child(ch, r, pool, limit, wait_ms, lease, true);
}

void test_child_go(test_child *ch)
{
    char a = 'a';
    if (write(ch->to_child, &a, 1) != 1)
        return;
}

char test_child_report(test_child *ch, int64_t timeout_ms)
{
    struct pollfd pfd = {.fd = ch->from_child, .events = POLLIN};
    if (poll(&pfd, 1, (int)timeout_ms) != 1)
        return 0;
    char c;
    return read(ch->from_child, &c, 1) == 1 ? c : 0;
}

void test_child_finish(test_child *ch)
{
    char c = 'r';
    if (write(ch->to_child, &c, 1) != 1)
        kill(ch->pid, SIGKILL);
    waitpid(ch->pid, NULL, 0);
    close(ch->to_child);
    close(ch->from_child);
}

void test_child_kill(test_child *ch)
{
    kill(ch->pid, SIGKILL);
    waitpid(ch->pid, NULL, 0);
    close(ch->to_child);
    close(ch->from_child);
}
