/* The host's shelf (docs/design.md, "Permits kept where they are used"): a permit one process of
 * a host keeps between commands is taken by another process of the host with no acquire in
 * Redis; a waiter of another host recalls it wherever it went; a process that exits gives back
 * what it kept but never what another process took from it. fork()ed processes, each its own
 * client, one DBTHROTTLE_SHARE_DIR per simulated host, a real redis-server; judged from Redis'
 * own state (its holders, queue and counters). */
#include "handover.h"
#include "live.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEY(k) "dbthrottle:{shelf}:q:" k

/* A process of a host, driven one command at a time through a pipe: 'a' acquire (limit 1),
 * 'k' keep it (park), 'u' take it back (unpark), 'r' release it, 'L' a live lease of 20 minutes
 * applied and the segment let go (as the renewer does at a change of lease), 'q' free the client
 * and exit.
 * Each command is answered with one byte; the id it holds is written to `id` (shared). */
typedef struct {
    pid_t pid;
    int to, from;
    char *id;
} proc;

static void proc_main(const char *dir, bool cache, int down, int up, char *id)
{
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    dbt_config cfg;
    /* A long lease and idle time: nothing goes back by itself within a test, so only a recall
     * explains a permit that does. */
    test_config(&cfg, &fx_redis, "DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_LEASE=10m",
                cache ? "DBTHROTTLE_CACHE_PERMITS=on" : "DBTHROTTLE_CACHE_PERMITS=off",
                "DBTHROTTLE_CACHE_IDLE=1m", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "shelf");
    dbt_permit *pm = NULL;
    char cmd;
    while (read(down, &cmd, 1) == 1) {
        char rep = '?';
        if (cmd == 'a') {
            dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000, .conn = "c"};
            rep = dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) == DBT_ACQ_GRANTED ? 'G' : 'T';
            if (rep == 'G')
                snprintf(id, 128, "%s", dbt_permit_id(pm));
        } else if (cmd == 'k') {
            rep = dbt_permit_park(pm) ? 'K' : 'N';
        } else if (cmd == 'u') {
            rep = dbt_permit_unpark(&pm) ? 'Y' : 'N';
        } else if (cmd == 'r') {
            dbt_release(pm);
            pm = NULL;
            rep = 'R';
        } else if (cmd == 'L') {
            dbt_live_apply(p, "v1\nlease=20m\n");
            dbt_handover_leave_segment(p);
            rep = 'L';
        } else if (cmd == 'q') {
            break;
        }
        if (write(up, &rep, 1) != 1)
            _exit(2);
    }
    dbt_client_free(c);
    dbt_config_free(&cfg);
    char done = 'Q';
    if (write(up, &done, 1) != 1)
        _exit(2);
    _exit(0);
}

/* Forked before the test's own process has any thread (see test_child_start_paused). */
static proc spawn(const char *dir, bool cache)
{
    int down[2], up[2];
    cr_assert(pipe(down) == 0 && pipe(up) == 0);
    char *id = mmap(NULL, 128, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(id != MAP_FAILED);
    id[0] = '\0';
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        proc_main(dir, cache, down[0], up[1], id);
    }
    close(down[0]);
    close(up[1]);
    return (proc){.pid = pid, .to = down[1], .from = up[0], .id = id};
}

/* One command; its answer within timeout_ms (0: none came). */
static char ask(proc *pr, char cmd, int timeout_ms)
{
    cr_assert(write(pr->to, &cmd, 1) == 1);
    struct pollfd fd = {.fd = pr->from, .events = POLLIN};
    char rep = 0;
    if (poll(&fd, 1, timeout_ms) == 1 && read(pr->from, &rep, 1) != 1)
        rep = 0;
    return rep;
}

static void finish(proc *pr)
{
    cr_expect_eq(ask(pr, 'q', 20000), 'Q', "process %d did not exit", (int)pr->pid);
    int st;
    waitpid(pr->pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %d", (int)pr->pid, st);
}

static long long grants_in_redis(void)
{
    return test_redis_int(&fx_redis, "HGET %s grants", KEY("stats"));
}

/* Whether the process *arg has a connection blocked in Redis (its listener's BLPOP). */
static bool listens(void *arg)
{
    return test_redis_blocked_of(&fx_redis, *(pid_t *)arg) > 0;
}

static void make_dir(char *dir)
{
    strcpy(dir, "/tmp/dbt-shelf-XXXXXX");
    cr_assert(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_expect(system(rm) == 0);
}

TestSuite(shelf, .init = fx_redis_start, .fini = fx_stop);

/* A keeps its permit; B, of the same host, is granted it with no acquire in Redis (its counter
 * of grants stays at A's one, its only holder is A's id); when A exits it does not give back what
 * B holds. */
Test(shelf, another_process_of_the_host_takes_a_kept_permit_without_redis, .timeout = 90)
{
    char host[32];
    make_dir(host);
    proc a = spawn(host, true), b = spawn(host, true);
    cr_assert_eq(ask(&a, 'a', 20000), 'G');
    cr_assert_eq(ask(&a, 'k', 20000), 'K');
    cr_assert_eq(grants_in_redis(), 1);
    cr_assert_eq(ask(&b, 'a', 20000), 'G', "B was not granted");
    cr_expect_str_eq(b.id, a.id, "B holds another permit than the one A kept");
    cr_expect_eq(grants_in_redis(), 1, "Redis granted again: B's acquire reached it");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "ZSCORE %s %s", KEY("holders"), a.id) > 0, 1);
    finish(&a);
    /* A gone: the permit is B's, still held in Redis. */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 1,
                 "A's exit gave back the permit B holds");
    cr_expect_eq(ask(&b, 'r', 20000), 'R');
    zcard_is none = {&fx_redis, KEY("holders"), 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000), "B's release did not reach Redis");
    finish(&b);
    remove_dir(host);
}

/* A's permit, taken and kept again by B, is recalled by a waiter of another host although its
 * maker A is gone (the recall to A's own list reaches nobody): the host's list carries it to B,
 * which gives it back long before its idle time (a minute). */
Test(shelf, a_waiter_of_another_host_recalls_what_the_host_kept, .timeout = 90)
{
    char host1[32], host2[32];
    make_dir(host1);
    make_dir(host2);
    proc a = spawn(host1, true), b = spawn(host1, true), c = spawn(host2, false);
    cr_assert_eq(ask(&a, 'a', 20000), 'G');
    cr_assert_eq(ask(&a, 'k', 20000), 'K');
    cr_assert_eq(ask(&b, 'a', 20000), 'G');
    cr_assert_str_eq(b.id, a.id);
    /* B listens for a waiter's arrival from before it keeps the permit: its BLPOPs in flight
     * cannot name the list of the permit's maker A. Seen in CI when B's renewer won the race
     * against the 'k' below. Judged by B's own connections: A may or may not listen still (it
     * stops when a renewal of its finds the permit taken off the shelf, and its first one runs
     * at once or, under load, after B took it), and a count of 2 blocked in all never came. */
    cr_assert(test_wait_until(listens, &b.pid, 20000), "B's listener did not block");
    cr_assert_eq(ask(&b, 'k', 20000), 'K', "B did not keep it");
    cr_assert_eq(ask(&a, 'u', 20000), 'N', "A took back a permit B holds");
    finish(&a);
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 1);
    cr_expect_eq(ask(&c, 'a', 20000), 'G', "the other host's waiter was not granted within 20 s");
    cr_expect_neq(strcmp(c.id, a.id), 0);
    cr_expect_eq(ask(&b, 'u', 20000), 'N', "B still believes it keeps the recalled permit");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 1);
    finish(&c);
    finish(&b);
    remove_dir(host1);
    remove_dir(host2);
}

/* Whether the list *arg (a key) is empty. */
static bool list_empty(void *arg)
{
    return test_redis_int(&fx_redis, "LLEN %s", (const char *)arg) == 0;
}

/* B keeps on the host's shelf a permit A made, so its id names A's cid. B's BLPOPs name its own
 * lists and the host's, never A's: one that named A's list popped the grants of A's places
 * whenever A's own BLPOP was not first in line, dropped them as unknown, and A's thread waited
 * on until its next renewal (0.3-1 s with classes, 6 processes at a limit of 2) while the permit
 * Redis granted it was held by nobody. Judged in Redis: with A gone, a grant pushed to A's list
 * after every BLPOP of B was sent anew is still there. */
Test(shelf, a_permit_kept_from_another_process_leaves_its_makers_grants_alone, .timeout = 90)
{
    char host[32];
    make_dir(host);
    proc a = spawn(host, true), b = spawn(host, true);
    cr_assert_eq(ask(&a, 'a', 20000), 'G');
    cr_assert_eq(ask(&a, 'k', 20000), 'K');
    cr_assert_eq(ask(&b, 'a', 20000), 'G');
    cr_assert_str_eq(b.id, a.id, "B did not take A's kept permit");
    cr_assert(test_wait_until(listens, &b.pid, 20000), "B's listener did not block");
    cr_assert_eq(ask(&b, 'k', 20000), 'K', "B did not keep it");
    finish(&a);
    /* "<G>~<A's cid>.<n>...": the host group's list and A's. */
    char group[160], makers[160];
    size_t cid = strcspn(a.id, "."), g = strcspn(a.id, "~");
    cr_assert(g < cid, "A's id %s names no host group", a.id);
    snprintf(group, sizeof group, "dbthrottle:{shelf}:wake:%.*s", (int)g, a.id);
    snprintf(makers, sizeof makers, "dbthrottle:{shelf}:wake:%.*s", (int)cid, a.id);
    /* B keeps up to 8 BLPOPs in flight (listener.c, MAX_BLPOPS), read in turn: each message it
     * pops from the host's list (one it ignores) lets the next one block, and is answered by a
     * new one, sent since it keeps the permit. */
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(test_redis_int(&fx_redis, "RPUSH %s x", group), 1);
        cr_assert(test_wait_until(list_empty, group, 20000), "B did not pop the host's list");
        cr_assert(test_wait_until(listens, &b.pid, 20000), "B's listener did not block again");
    }
    char grant[200];
    snprintf(grant, sizeof grant, "gq:%.*s.999.x.1.1", (int)cid, a.id); /* a place of A's */
    cr_assert_eq(test_redis_int(&fx_redis, "RPUSH %s %s", makers, grant), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "LLEN %s", makers), 1,
                 "a BLPOP of B popped a grant pushed to A's own list");
    cr_expect_eq(ask(&b, 'u', 20000), 'Y', "B lost the permit it kept");
    cr_expect_eq(ask(&b, 'r', 20000), 'R');
    finish(&b);
    remove_dir(host);
}

/* B keeps on the shelf a permit A made; a live lease change makes B let the segment go, and the
 * permit comes back off the shelf into B's own keeping, under A's id. B then hears neither the
 * group's list (no group) nor A's (listener.c names only B's own lists), where Redis pushes the
 * permit's recall: it gives such a permit back at once rather than keep it unrecallable. Judged
 * in Redis (no holder left, long before B's idle time of a minute), and by a waiter of another
 * host granted then. */
Test(shelf, a_permit_of_another_process_off_the_shelf_goes_back_at_once, .timeout = 90)
{
    char host1[32], host2[32];
    make_dir(host1);
    make_dir(host2);
    proc a = spawn(host1, true), b = spawn(host1, true), c = spawn(host2, false);
    cr_assert_eq(ask(&a, 'a', 20000), 'G');
    cr_assert_eq(ask(&a, 'k', 20000), 'K');
    cr_assert_eq(ask(&b, 'a', 20000), 'G');
    cr_assert_str_eq(b.id, a.id, "B did not take A's kept permit");
    cr_assert_eq(ask(&b, 'k', 20000), 'K', "B did not keep it");
    finish(&a);
    cr_assert_eq(ask(&b, 'L', 20000), 'L');
    zcard_is none = {&fx_redis, KEY("holders"), 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 10000),
              "B kept A's permit off the shelf, where its recall cannot reach B");
    cr_expect_eq(ask(&c, 'a', 20000), 'G', "the other host's waiter was not granted within 20 s");
    cr_expect_eq(ask(&b, 'u', 20000), 'N', "B still kept A's permit off the shelf");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 1);
    finish(&c);
    finish(&b);
    remove_dir(host1);
    remove_dir(host2);
}

/* A process that exits gives back the permits it kept on the shelf (nobody took them). */
Test(shelf, an_exit_gives_back_what_it_kept, .timeout = 60)
{
    char host[32];
    make_dir(host);
    proc a = spawn(host, true);
    cr_assert_eq(ask(&a, 'a', 20000), 'G');
    cr_assert_eq(ask(&a, 'k', 20000), 'K');
    finish(&a);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", KEY("holders")), 0,
                 "the kept permit outlived its process in Redis");
    remove_dir(host);
}
