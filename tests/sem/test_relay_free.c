/* A client that started its host's relay (DBTHROTTLE_HOST_RELAY, on by default) and is then freed
 * with its configuration, as the dbthrottle command and the benches free theirs: the relay's
 * thread read that configuration until it stopped, after it was freed. dbt_client_free now stops
 * a relay started with the client's configuration first. Judged from outside: the relay's socket
 * and lock file leave the share directory, and Redis no longer has the relay's connections. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The relay's files (relay-<T>.sock, relay-<T>.lock) in the user's share directory. */
static int relay_files(const char *share)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/dbthrottle-%d", share, (int)geteuid());
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, "relay-", 6) == 0;
    closedir(d);
    return n;
}

/* Redis' clients but the one asking. */
static long long redis_clients(void)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert(rc, "cannot connect to the test's Redis");
    redisReply *rep = redisCommand(rc, "CLIENT LIST");
    long long n = -1;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        n = 0;
        for (const char *p = rep->str; (p = strchr(p, '\n')) != NULL; p++)
            n++;
        n--; /* this connection's own line */
    }
    freeReplyObject(rep);
    redisFree(rc);
    return n;
}

typedef struct {
    dbt_pool *pool;
    const char *share;
} speaking_arg;

/* One command's permit taken and given back; true once the relay's socket is there. */
static bool relay_started(void *arg)
{
    speaking_arg *a = arg;
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 2000, .conn = "rf"};
    dbt_permit *pm;
    if (dbt_acquire(a->pool, DBT_KIND_QUERY, &o, &pm) == DBT_ACQ_GRANTED)
        dbt_release(pm);
    return relay_files(a->share) == 2;
}

static bool no_relay_client(void *arg)
{
    (void)arg;
    return redis_clients() == 0;
}

Test(relay_free, freeing_the_client_that_started_the_relay_stops_it, .init = fx_redis_start,
     .fini = fx_stop, .timeout = 60)
{
    char share[] = "/tmp/dbt-rf-XXXXXX";
    cr_assert(mkdtemp(share));
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", share);
    dbt_config cfg;
    test_config(&cfg, &fx_redis, "DBTHROTTLE_HOST_SHARE=on", "DBTHROTTLE_HOST_RELAY=on", dir_kv,
                NULL);
    dbt_client *c = dbt_client_new(&cfg);
    speaking_arg a = {.pool = dbt_client_pool(c, "rf"), .share = share};
    /* The first connections are direct (made before the host's segment named the directory);
     * a later one finds nobody speaking and starts the relay. */
    cr_assert(test_wait_until(relay_started, &a, 10000),
              "no relay started within 10 s (%d relay files in %s)", relay_files(share), share);
    cr_assert_gt(redis_clients(), 0, "the relay has no connection to Redis");

    dbt_client_free(c);
    dbt_config_free(&cfg);

    cr_expect_eq(relay_files(share), 0,
                 "the relay still runs after its client and configuration were freed (%d relay "
                 "files in the share directory)",
                 relay_files(share));
    cr_expect(test_wait_until(no_relay_client, NULL, 3000),
              "Redis still has %lld connections of the freed client's relay", redis_clients());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", share);
    cr_expect_eq(system(cmd), 0);
}
