/* A permit offered to a waiting thread of another process whose wake never came (its giver was
 * killed between writing the offer and sending the datagram, or the datagram found no room) is
 * taken on the receiver's timer (DBT_SHARE_POLL_US), not left in the segment while its waiter
 * waits on for Redis and the permit's lease runs out. */
#include "clock.h"
#include "hostshare_internal.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static dbt_pool *pool_on_host(const char *dir)
{
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    dbt_client *c =
        fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    cr_assert(c);
    return dbt_client_pool(c, "lw");
}

static dbt_seg *map_segment(const char *dir)
{
    char sub[400], path[700] = "";
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    DIR *d = opendir(sub);
    cr_assert(d);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "w.", 2) != 0) /* not a wake socket */
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    closedir(d);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    void *m = mmap(NULL, sizeof(dbt_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    cr_assert(m != MAP_FAILED);
    return m;
}

typedef struct {
    dbt_pool *pool;
    atomic_int done;
    dbt_acq_result result;
    dbt_permit *pm;
} waiting;

static void *wait_for_permit(void *arg)
{
    waiting *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000, .conn = "lw"};
    w->result = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->pm);
    atomic_store(&w->done, 1);
    return NULL;
}

/* The index of the one waiting registration, or -1. */
static int waiting_registration(const dbt_seg *g)
{
    for (uint32_t i = 0; i < g->reg_hw && i < DBT_SEG_REGS; i++)
        if (__atomic_load_n(&g->regs[i].state, __ATOMIC_ACQUIRE) == REG_WAITING)
            return (int)i;
    return -1;
}

static bool registered(void *arg)
{
    return waiting_registration(arg) >= 0;
}

static bool granted(void *arg)
{
    return atomic_load(&((waiting *)arg)->done) != 0;
}

Test(share_lost_wake, an_offer_without_a_wake_is_taken_on_a_timer, .init = fx_redis_start,
     .fini = fx_stop, .timeout = 120)
{
    char dir[] = "/tmp/dbt-lw-XXXXXX";
    cr_assert(mkdtemp(dir));
    dbt_pool *holder = pool_on_host(dir), *receiver = pool_on_host(dir);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000, .conn = "lw"};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(holder, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);
    waiting w = {.pool = receiver};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_for_permit, &w), 0);
    dbt_seg *g = map_segment(dir);
    cr_assert(test_wait_until(registered, g, 10000), "the waiter did not register");

    /* A giver wrote its permit into the registration and died before waking the receiver. */
    dbt_seg_reg *r = &g->regs[waiting_registration(g)];
    snprintf(r->id, sizeof r->id, "%.16s~gone.1.1", g->group);
    r->renewed_us = dbt_now_us();
    __atomic_store_n(&r->state, REG_OFFERED, __ATOMIC_RELEASE);

    bool taken = test_wait_until(granted, &w, 3000);
    cr_expect(taken, "the offered permit was not taken in 3 s (its waiter still waits)");
    dbt_release(held);
    pthread_join(t, NULL);
    cr_expect_eq(w.result, DBT_ACQ_GRANTED);
    if (w.result == DBT_ACQ_GRANTED)
        dbt_release(w.pm);
    munmap(g, sizeof(dbt_seg));
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert(system(rm) == 0);
}
