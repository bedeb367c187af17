/* The host's "f" (another host's waiter queued: end_sole pushes it to wake:<G>) reaches the
 * segment even when the process whose BLPOP pops it waits for nothing any more: its waits ended
 * before their BLPOPs did (those last up to 30 s), and the renewer reads their replies. Otherwise
 * the host's other processes went on passing permits among themselves, as if sole, while the
 * other host waited, until a renewal (lease/3) said otherwise. */
#include "hostshare_internal.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define LIMIT_OPTS(wait)                                                                           \
    {                                                                                              \
        .limit = 1, .wait_ms = (wait), .conn = "bl"                                                \
    }

static dbt_pool *pool_on_host(const char *dir)
{
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    dbt_client *c = fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_LEASE=60s",
                              "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    cr_assert(c);
    return dbt_client_pool(c, "bl");
}

/* The host's segment (the one file in its per-user directory), mapped read-only. */
static const dbt_seg *map_segment(const char *dir)
{
    char sub[400], path[700] = "";
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    DIR *d = opendir(sub);
    cr_assert(d, "no segment directory %s", sub);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "w.", 2) != 0) /* not a wake socket */
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    closedir(d);
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0, "no segment in %s", sub);
    void *m = mmap(NULL, sizeof(dbt_seg), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    cr_assert(m != MAP_FAILED);
    return m;
}

static bool host_not_sole(void *arg)
{
    const dbt_seg *g = arg;
    return __atomic_load_n(&g->sole[DBT_KIND_QUERY].sole, __ATOMIC_ACQUIRE) == 0;
}

typedef struct {
    dbt_pool *pool;
    int64_t wait_ms;
    dbt_acq_result result;
} waiting;

static void *wait_and_release(void *arg)
{
    waiting *w = arg;
    dbt_acquire_opts o = LIMIT_OPTS(w->wait_ms);
    dbt_permit *pm = NULL;
    w->result = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &pm);
    if (w->result == DBT_ACQ_GRANTED)
        dbt_release(pm);
    return NULL;
}

static pthread_t start_waiting(waiting *w)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_and_release, w), 0);
    return t;
}

static bool queued(void *arg)
{
    return test_redis_int(&fx_redis, "ZCARD dbthrottle:{bl}:q:queue") == *(long long *)arg;
}

Test(host_sole, ends_when_the_f_is_popped_by_a_process_that_waits_no_more, .init = fx_redis_start,
     .fini = fx_stop, .timeout = 120)
{
    char host[] = "/tmp/dbt-sole-a-XXXXXX", other[] = "/tmp/dbt-sole-b-XXXXXX";
    cr_assert(mkdtemp(host) && mkdtemp(other));
    dbt_pool *holder = pool_on_host(host), *quitter = pool_on_host(host);
    dbt_pool *stayer = pool_on_host(host), *foreigner = pool_on_host(other);

    dbt_acquire_opts o = LIMIT_OPTS(5000);
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(holder, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);
    /* Two processes of the host queue, alone in the queue (the host is sole): the first one's
     * BLPOP blocks first, so Redis gives it what is pushed to the host's list first. It gives
     * up; its BLPOP stays in flight. */
    waiting q = {.pool = quitter, .wait_ms = 1500}, s = {.pool = stayer, .wait_ms = 30000};
    pthread_t tq = start_waiting(&q);
    long long one = 1, two = 2;
    cr_assert(test_wait_until(queued, &one, 5000));
    pthread_t ts = start_waiting(&s);
    cr_assert(test_wait_until(queued, &two, 5000));
    pthread_join(tq, NULL);
    cr_assert_eq(q.result, DBT_ACQ_TIMEOUT);
    const dbt_seg *g = map_segment(host);
    cr_assert_not(host_not_sole((void *)g), "the host was not sole to begin with");

    /* Another host's waiter queues: the host is sole no more, within far less than lease/3. */
    waiting f = {.pool = foreigner, .wait_ms = 30000};
    pthread_t tf = start_waiting(&f);
    bool ended = test_wait_until(host_not_sole, (void *)g, 5000);
    cr_expect(ended, "the host stayed sole for 5 s while another host waited");

    dbt_release(held);
    pthread_join(ts, NULL);
    pthread_join(tf, NULL);
    cr_expect_eq(s.result, DBT_ACQ_GRANTED);
    cr_expect_eq(f.result, DBT_ACQ_GRANTED);
    munmap((void *)g, sizeof(dbt_seg));
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s %s", host, other);
    cr_assert(system(rm) == 0);
}
