/* The renewer's eventfd (what it polls beside the listener connection when it listens for the
 * pool, with no waiting thread to do it) is made with the pool's first command, not when the
 * renewer first listens: that comes when the scheduler lets it (the first kept permit, the first
 * cancelled wait whose BLPOP of the host's list is still in flight), and a descriptor appearing
 * then looked like a leak to a program that counts its own (cancel_ends_wait: 12 -> 13 across
 * ten cancels with host sharing on). */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{rfd}:q:holders"

/* The process' eventfds, by what /proc says each descriptor is (outside the library). */
static int eventfds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        n += strcmp(target, "anon_inode:[eventfd]") == 0;
    }
    closedir(d);
    return n;
}

/* Redis has a client blocked in BLPOP: the renewer listens for the kept permit. */
static bool renewer_listens(void *arg)
{
    redisContext *rc = test_redis_connect(arg);
    redisReply *rep = rc ? redisCommand(rc, "INFO clients") : NULL;
    bool yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "blocked_clients:1");
    if (rep)
        freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return yes;
}

Test(renewer_eventfd, made_with_the_first_command_not_at_the_first_listen, .timeout = 60,
     .init = fx_redis_start, .fini = fx_stop)
{
    /* A kept permit makes the renewer listen (for a waiter that would want it back); a long lease
     * and idle time: nothing else happens meanwhile. */
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=10m", "DBTHROTTLE_CACHE_PERMITS=on",
                              "DBTHROTTLE_CACHE_IDLE=1m", NULL);
    dbt_pool *p = dbt_client_pool(c, "rfd");
    int before = eventfds();
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000};
    dbt_permit *pm = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    int first = eventfds();
    cr_assert(dbt_permit_park(pm));
    cr_assert(test_wait_until(renewer_listens, &fx_redis, 10000), "the renewer never listened");
    int listening = eventfds();
    cr_expect_eq(listening, first,
                 "%d eventfds after the first command (%d before it), %d once the renewer "
                 "listened: one appeared later",
                 first, before, listening);
    cr_assert(dbt_permit_unpark(&pm));
    dbt_release(pm);
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000));
}
