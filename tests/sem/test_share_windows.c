/* Two windows of host-level sharing that last between two stores, opened on purpose: this file
 * defines dbt_share_lock_seam(), which hostshare.c calls as it locks and unlocks the segment, and
 * which a test here arms to act at that instant.
 *
 * - An offer whose wake is refused takes its permit back under the lock; when that unlock finds
 *   the lock word not its own (written into while held: another may have been let in and taken
 *   the permit), the permit was in the segment once and must never go to Redis too: the offer
 *   says OFFERED, not NOT_SOLE (hostshare.c, dbt_share_offer).
 * - A permit another process offered to a wait that ends at that instant becomes a held orphan of
 *   the receiver; while the host is not sole it goes back to Redis (cancel.lua), whose queue's
 *   head (another host's waiter) is granted, instead of being swapped to the receiver's next
 *   waiter, queued behind that head (handover.c, pass_held_orphan). Judged from Redis' holders. */
#include "clock.h"
#include "hostshare.h"
#include "hostshare_internal.h"
#include "keys.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* What the armed seam does, in the calling thread, as it locks or unlocks the segment. */
static void (*_Atomic at_lock_seam)(pid_t tid);

void dbt_share_lock_seam(uint32_t tid)
{
    void (*hook)(pid_t) = atomic_load(&at_lock_seam);
    if (hook)
        hook((pid_t)tid);
}

static void remove_tree(const char *dir)
{
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    cr_expect_eq(system(rm), 0);
}

/* ---- (5) the take-back whose unlock finds the lock word not ours -------------------------- */

#define KEY   "redis://127.0.0.1:6379/0 dbthrottle: pool"
#define LEASE INT64_C(10000000)

static dbt_seg *tb_seg;
static _Atomic(dbt_seg_reg *) tb_reg; /* the dead receiver's registration */
static atomic_bool tb_seen_offered, tb_tampered;

/* At each of the giver's lock calls: once its registration was seen OFFERED (the offer's first
 * unlock), the next time the giver holds the lock with it no longer OFFERED (taken back, its
 * process purged) another thread id is written into the lock word, as garbage or a second
 * holder let in by garbage would. */
static void tamper_at_take_back(pid_t tid)
{
    dbt_seg_reg *r = atomic_load(&tb_reg);
    if (!r || atomic_load(&tb_tampered))
        return;
    uint32_t word = atomic_load(&tb_seg->lock) & UINT32_C(0x3fffffff);
    if (word != ((uint32_t)tid & UINT32_C(0x3fffffff)))
        return; /* not held by us: a lock call, not an unlock */
    uint32_t state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    if (state == REG_OFFERED) {
        atomic_store(&tb_seen_offered, true);
    } else if (atomic_load(&tb_seen_offered)) {
        atomic_store(&tb_seg->lock, ((uint32_t)tid ^ 1u) & UINT32_C(0x3fffffff));
        atomic_store(&tb_tampered, true);
    }
}

/* A receiver: attaches, registers one waiter, says so, and waits to be killed. */
static void receiver(const char *dir, int out)
{
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        _exit(1);
    dbt_share_shape shape = {.kind = 0, .limit = 4, .weight = 1};
    if (!dbt_share_wait_begin(sh, &shape, dbt_now_us()))
        _exit(2);
    if (write(out, "R", 1) != 1)
        _exit(3);
    for (;;)
        pause();
}

Test(share_windows, a_take_back_whose_unlock_finds_the_lock_not_ours_is_offered, .timeout = 60)
{
    char dir[] = "/tmp/dbt-tb-XXXXXX";
    cr_assert(mkdtemp(dir));
    signal(SIGPIPE, SIG_IGN);
    char why[512];
    dbt_share *sh = dbt_share_attach(dir, KEY, why, sizeof why);
    cr_assert_not_null(sh, "attach: %s", why);
    dbt_share_verdict(sh, 0, 1001, true, LEASE);
    cr_assert(dbt_share_sole(sh, 0));
    int up[2];
    cr_assert_eq(pipe(up), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(up[0]);
        receiver(dir, up[1]);
    }
    close(up[1]);
    char c = 0;
    cr_assert_eq(read(up[0], &c, 1), 1, "the receiver did not register");
    close(up[0]);
    /* Killed: its wake socket is closed, so the offer's datagram is refused and the permit
     * taken back. */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);

    tb_seg = dbt_share_segment(sh);
    for (uint32_t i = 0; i < tb_seg->reg_hw && i < DBT_SEG_REGS; i++)
        if (tb_seg->regs[i].state == REG_WAITING)
            atomic_store(&tb_reg, &tb_seg->regs[i]);
    cr_assert_not_null(atomic_load(&tb_reg), "no registration of the receiver in the segment");
    atomic_store(&at_lock_seam, tamper_at_take_back);
    dbt_share_shape shape = {.kind = 0, .limit = 4, .weight = 1};
    dbt_share_permit p = {.renewed_us = dbt_now_us()};
    snprintf(p.id, sizeof p.id, "0123456789abcdef~00000000000000aa.1.4");
    dbt_share_offer_result r = dbt_share_offer(sh, &shape, &p, -1, NULL);
    atomic_store(&at_lock_seam, NULL);
    cr_assert(atomic_load(&tb_tampered),
              "the take-back's unlock was not reached (offered seen: %d)",
              (int)atomic_load(&tb_seen_offered));
    cr_expect(dbt_share_broken(sh), "a lock word written into while held breaks the attachment");
    cr_expect_eq(r, DBT_SHARE_OFFERED,
                 "the offer said %d, not OFFERED (%d): its giver would release the permit to "
                 "Redis though another may have taken it from the segment",
                 (int)r, (int)DBT_SHARE_OFFERED);
    dbt_share_detach(sh);
    remove_tree(dir);
}

/* ---- (6) a held orphan from another process, while the host is not sole ------------------- */

#define POOL "ow"
#define BASE "dbthrottle:{" POOL "}:q:"

static dbt_pool *pool_of(dbt_client *c)
{
    cr_assert_not_null(c);
    return dbt_client_pool(c, POOL);
}

static dbt_seg *map_segment(const char *dir)
{
    char sub[400], path[700] = "";
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    DIR *d = opendir(sub);
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "w.", 2) != 0) /* not a wake socket */
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    closedir(d);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0, "%s", path);
    void *m = mmap(NULL, sizeof(dbt_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    cr_assert(m != MAP_FAILED);
    return m;
}

typedef struct {
    dbt_pool *pool;
    dbt_waker waker;
    atomic_bool interrupt; /* interrupted() says yes once this is set */
    atomic_int done;
    dbt_acq_result result;
    dbt_permit *pm;
} waiting;

static dbt_seg *ow_seg;
static _Atomic(dbt_seg_reg *) ow_reg; /* the registration of the wait that ends */
static char ow_id[DBT_SHARE_ID_MAX];
static atomic_int ow_tid, ow_written;

/* In the interrupted thread's first lock call after it said yes (ending its registration, with
 * its pool's lock held, so no other thread of its process can take the offer first): another
 * process' permit is written into its registration, as a giver does. */
static void offer_at_wait_end(pid_t tid)
{
    if (tid != atomic_load(&ow_tid))
        return;
    atomic_store(&ow_tid, 0);
    dbt_seg_reg *r = atomic_load(&ow_reg);
    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != REG_WAITING)
        return;
    memcpy(r->id, ow_id, sizeof r->id);
    r->renewed_us = dbt_now_us();
    __atomic_store_n(&r->state, REG_OFFERED, __ATOMIC_RELEASE);
    atomic_store(&ow_written, 1);
}

static bool interrupted(void *arg)
{
    waiting *w = arg;
    if (!atomic_load(&w->interrupt))
        return false;
    atomic_store(&ow_tid, (int)syscall(SYS_gettid));
    return true;
}

static void *wait_for_permit(void *arg)
{
    waiting *w = arg;
    dbt_acquire_opts o = {.limit = 1,
                          .wait_ms = 30000,
                          .conn = "ow",
                          .interrupted = interrupted,
                          .arg = w,
                          .waker = &w->waker};
    w->result = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->pm);
    atomic_store(&w->done, 1);
    return NULL;
}

static void start_waiting(waiting *w, dbt_pool *p, pthread_t *t)
{
    w->pool = p;
    cr_assert_eq(pthread_create(t, NULL, wait_for_permit, w), 0);
}

static bool is_done(void *arg)
{
    return atomic_load(&((waiting *)arg)->done) != 0;
}

typedef struct {
    const dbt_seg *g;
    int n;
} nregs;

static bool registrations_are(void *arg)
{
    const nregs *c = arg;
    int n = 0;
    for (uint32_t i = 0; i < c->g->reg_hw && i < DBT_SEG_REGS; i++)
        n += __atomic_load_n(&c->g->regs[i].state, __ATOMIC_ACQUIRE) == REG_WAITING;
    return n == c->n;
}

static bool queue_is(long long n)
{
    zcard_is z = {&fx_redis, BASE "queue", n};
    return test_wait_until(test_zcard_is, &z, 10000);
}

/* Whether id is among Redis' holders. */
static bool held_in_redis(const char *id)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZSCORE %s %s", BASE "holders", id);
    bool held = r && r->type == REDIS_REPLY_STRING;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return held;
}

/* Whether Redis says the group's waiters are the whole queue (owners['*']). */
static bool sole_in_redis(const char *group)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "HGET %s *", BASE "owners");
    bool sole = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, group) == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return sole;
}

Test(share_windows, a_held_orphan_from_another_process_goes_back_to_redis_when_not_sole,
     .init = fx_redis_start, .fini = fx_stop, .timeout = 120)
{
    char dir[] = "/tmp/dbt-ow-XXXXXX";
    cr_assert(mkdtemp(dir));
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    /* B shares with its host; F is another host (no sharing: its own owner in Redis). */
    dbt_pool *b = pool_of(fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_LEASE=30s",
                                    "DBTHROTTLE_CACHE_PERMITS=off", NULL));
    dbt_pool *f = pool_of(fx_client("DBTHROTTLE_HOST_SHARE=off", "DBTHROTTLE_LEASE=30s",
                                    "DBTHROTTLE_CACHE_PERMITS=off", NULL));
    /* B attaches at its first acquire: then its segment names the host group G. */
    dbt_acquire_opts once = {.limit = 1, .wait_ms = 5000, .conn = "ow"};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(b, DBT_KIND_QUERY, &once, &pm), DBT_ACQ_GRANTED);
    dbt_release(pm);
    ow_seg = map_segment(dir);
    char group[DBT_SHARE_GROUP_LEN];
    snprintf(group, sizeof group, "%.16s", ow_seg->group);

    /* The permit another process of the host holds, as Redis knows it (the only one: limit 1). */
    snprintf(ow_id, sizeof ow_id, "%s~00000000000000aa.1.1", group);
    dbt_config cfg;
    test_config(&cfg, &fx_redis, "DBTHROTTLE_LEASE=30s", NULL);
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, POOL));
    char err[DBT_ERRLEN];
    dbt_redis *conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    dbt_acquire_call a = {.id = ow_id, .limit = 1, .who = "hostA 1 c1"};
    dbt_script_call call;
    dbt_build_acquire(&call, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    redisReply *rep = dbt_script_run(conn, &call, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_assert(held_in_redis(ow_id));

    /* Redis' queue: F's waiter, then B's two (t1, then w): the host is not sole. */
    waiting wf = {0}, w1 = {0}, w2 = {0};
    pthread_t tf, t1, t2;
    start_waiting(&wf, f, &tf);
    cr_assert(queue_is(1), "F did not queue");
    start_waiting(&w1, b, &t1);
    cr_assert(queue_is(2), "B's first waiter did not queue");
    nregs one = {ow_seg, 1}, two = {ow_seg, 2};
    cr_assert(test_wait_until(registrations_are, &one, 10000), "B's first waiter registered not");
    for (uint32_t i = 0; i < ow_seg->reg_hw && i < DBT_SEG_REGS; i++)
        if (ow_seg->regs[i].state == REG_WAITING)
            atomic_store(&ow_reg, &ow_seg->regs[i]);
    start_waiting(&w2, b, &t2);
    cr_assert(queue_is(3), "B's second waiter did not queue");
    cr_assert(test_wait_until(registrations_are, &two, 10000), "B's second waiter registered not");
    cr_assert_not(sole_in_redis(group), "Redis calls the host sole with F queued first");

    /* t1's wait ends (interrupted) just as the permit is written into its registration. */
    atomic_store(&at_lock_seam, offer_at_wait_end);
    atomic_store(&w1.interrupt, true);
    dbt_waker_fire(&w1.waker);
    pthread_join(t1, NULL);
    cr_assert(atomic_load(&ow_written), "the permit was not written as t1's wait ended");
    cr_assert_eq(w1.result, DBT_ACQ_INTERRUPTED);

    /* The permit goes back to Redis, which grants its queue's head: F. B's other waiter, queued
     * behind F, waits on. */
    bool f_granted = test_wait_until(is_done, &wf, 10000);
    cr_expect(f_granted && wf.result == DBT_ACQ_GRANTED,
              "F, first in Redis' queue, was not granted in 10 s");
    cr_expect_not(atomic_load(&w2.done),
                  "B's waiter, queued behind F, got the permit another process passed (%s)",
                  held_in_redis(ow_id) ? "Redis still holds it" : "Redis released it");
    cr_expect_not(held_in_redis(ow_id), "the passed permit is still held in Redis");

    if (f_granted && wf.result == DBT_ACQ_GRANTED)
        dbt_release(wf.pm);
    pthread_join(tf, NULL);
    pthread_join(t2, NULL); /* granted once F released */
    cr_expect_eq(w2.result, DBT_ACQ_GRANTED);
    if (w2.result == DBT_ACQ_GRANTED)
        dbt_release(w2.pm);
    atomic_store(&at_lock_seam, NULL);
    munmap(ow_seg, sizeof(dbt_seg));
    dbt_redis_free(conn);
    dbt_keys_free(&keys);
    dbt_config_free(&cfg);
    remove_tree(dir);
}
