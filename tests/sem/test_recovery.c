/* No stall after a fault ends: once Redis answers again, a newcomer is granted within a second,
 * as Redis' own state shows (a holder of the newcomer's client in the holders set), timed by the
 * test's clock. Each fault here once left places or permits in Redis that nobody would use or
 * give back before their lease ran out. */
#include "pool_types.h"
#include "sem_fixture.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{recovery}:q:holders"
#define QUEUE   "dbthrottle:{recovery}:q:queue"

TestSuite(recovery, .init = fx_redis_start, .fini = fx_stop);

/* Holders in Redis whose id begins with this client id. */
static long long holders_of(const char *cid)
{
    return test_redis_int(&fx_redis, "EVAL %s 1 %s %s",
                          "local n = 0 for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do "
                          "if string.sub(m, 1, #ARGV[1]) == ARGV[1] then n = n + 1 end end "
                          "return n",
                          HOLDERS, cid);
}

typedef struct {
    const char *cid;
} held_by;

static bool holds_one(void *arg)
{
    return holders_of(((held_by *)arg)->cid) >= 1;
}

/* A thread that acquires on its pool, and gives the permit back at once (release_at_once) or when
 * told (`go`). */
typedef struct {
    dbt_pool *pool;
    int64_t wait_ms;
    bool release_at_once;
    atomic_bool go;
    dbt_acq_result res;
    dbt_permit *permit;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = w->wait_ms};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    if (!w->release_at_once)
        while (!atomic_load(&w->go))
            usleep(10000);
    dbt_release(w->permit);
    return NULL;
}

/* Redis has a client blocked (a listener's BLPOP). */
static bool someone_blocked(void *arg)
{
    (void)arg;
    redisContext *c = test_redis_connect(&fx_redis);
    redisReply *rep = c ? redisCommand(c, "INFO clients") : NULL;
    const char *b =
        rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "blocked_clients:") : NULL;
    bool yes = b && atoi(b + strlen("blocked_clients:")) > 0;
    freeReplyObject(rep);
    redisFree(c);
    return yes;
}

/* Polls until the newcomer's client holds, and returns how long after `since` that was seen. */
static int64_t granted_after(const char *cid, int64_t since)
{
    held_by h = {cid};
    cr_assert(test_wait_until(holds_one, &h, 20000), "the newcomer was never granted");
    return test_now_ms() - since;
}

/* Redis stopped longer than DBTHROTTLE_REDIS_TIMEOUT but well within a lease: renewals fail
 * meanwhile. The waiters' places stay valid in Redis, so they keep waiting (not run unthrottled
 * all at once), and once Redis answers the permit moves on without a stall: before, they gave up
 * and left their places queued, granted to nobody for a lease. */
Test(recovery, redis_blip_stalls_nobody, .timeout = 90)
{
    /* Kept permits off: a holder that keeps permits listens too, and someone_blocked must see
     * the waiters' listener. */
    const char *lease = "DBTHROTTLE_LEASE=6s", *timeout = "DBTHROTTLE_REDIS_TIMEOUT=1s",
               *uncached = "DBTHROTTLE_CACHE_PERMITS=off";
    dbt_client *hc = fx_client(lease, timeout, uncached, NULL),
               *wc = fx_client(lease, timeout, uncached, NULL),
               *nc = fx_client(lease, timeout, uncached, NULL);
    dbt_pool *hp = dbt_client_pool(hc, "recovery"), *wp = dbt_client_pool(wc, "recovery"),
             *np = dbt_client_pool(nc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    worker_arg w[2] = {{.pool = wp, .wait_ms = 30000, .release_at_once = true},
                       {.pool = wp, .wait_ms = 30000, .release_at_once = true}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, &w[i]);
    zcard_is q2 = {&fx_redis, QUEUE, 2};
    cr_assert(test_wait_until(test_zcard_is, &q2, 10000));
    /* Their listener is connected and blocked in BLPOP: a leader whose own connect to a hung Redis
     * fails does give up, as documented; this test is about the waits a blip must not end. */
    cr_assert(test_wait_until(someone_blocked, NULL, 10000));

    /* 3.5 s: a renewal (every 2 s) is sure to be sent and to time out (1 s) meanwhile. */
    kill(fx_redis.pid, SIGSTOP);
    usleep(3500000);
    kill(fx_redis.pid, SIGCONT);
    int64_t t_end = test_now_ms();
    dbt_release(held);

    worker_arg n = {.pool = np, .wait_ms = 30000};
    pthread_t tn;
    pthread_create(&tn, NULL, worker, &n);
    int64_t ms = granted_after(dbt_client_id(nc), t_end);
    atomic_store(&n.go, true);
    pthread_join(tn, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    dbt_pool_stats st;
    dbt_pool_get_stats(wp, &st);
    cr_assert_geq(st.redis_errors, 1, "no renewal failed: the fault did not happen");
    cr_expect_eq(w[0].res, DBT_ACQ_GRANTED, "a waiter with a valid place gave up (%d)", w[0].res);
    cr_expect_eq(w[1].res, DBT_ACQ_GRANTED, "a waiter with a valid place gave up (%d)", w[1].res);
    cr_expect_leq(ms, 1000, "the newcomer was granted %lld ms after Redis answered again",
                  (long long)ms);
}

/* ---- a revoke is never undone --------------------------------------------------------- */

/* A TCP relay between one client and the test's redis-server that can hold back what Redis
 * answers on command connections (not on the listener's, which sends BLPOP), so that a reply is
 * read after a push that Redis sent later. */
enum { RELAY_MAX = 16 };
typedef struct {
    int lfd, port;
    atomic_bool hold, stop;
    atomic_int rounds; /* polls begun: one begun after `hold` changed obeys it */
    int cfd[RELAY_MAX], sfd[RELAY_MAX];
    bool listener[RELAY_MAX];
    int n;
    pthread_t thread;
} relay;

static void relay_accept(relay *r)
{
    int c = accept(r->lfd, NULL, NULL);
    if (c < 0)
        return;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx_redis.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (r->n == RELAY_MAX || s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c);
        if (s >= 0)
            close(s);
        return;
    }
    r->cfd[r->n] = c;
    r->sfd[r->n] = s;
    r->listener[r->n] = false;
    r->n++;
}

/* Copies what `from` has to `to`; false when `from` closed. */
static bool relay_copy(int from, int to, bool *saw_blpop)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return false;
    if (saw_blpop && memmem(buf, (size_t)n, "\r\n$5\r\nBLPOP\r\n", 13))
        *saw_blpop = true;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0)
            return false;
        off += w;
    }
    return true;
}

static void *relay_main(void *arg)
{
    relay *r = arg;
    while (!atomic_load(&r->stop)) {
        struct pollfd pfd[1 + 2 * RELAY_MAX];
        int map[1 + 2 * RELAY_MAX], n = 0;
        pfd[n].fd = r->lfd;
        pfd[n].events = POLLIN;
        map[n++] = -1;
        bool hold = atomic_load(&r->hold);
        atomic_fetch_add(&r->rounds, 1);
        for (int i = 0; i < r->n; i++) {
            if (r->cfd[i] < 0)
                continue;
            pfd[n].fd = r->cfd[i];
            pfd[n].events = POLLIN;
            map[n++] = i;
            if (hold && !r->listener[i])
                continue; /* Redis' answers wait in the socket */
            pfd[n].fd = r->sfd[i];
            pfd[n].events = POLLIN;
            map[n++] = RELAY_MAX + i;
        }
        if (poll(pfd, (nfds_t)n, 5) <= 0)
            continue;
        for (int j = 0; j < n; j++) {
            if (!pfd[j].revents)
                continue;
            if (map[j] < 0) {
                relay_accept(r);
                continue;
            }
            int i = map[j] % RELAY_MAX;
            bool ok = map[j] < RELAY_MAX ? relay_copy(r->cfd[i], r->sfd[i], &r->listener[i])
                                         : relay_copy(r->sfd[i], r->cfd[i], NULL);
            if (!ok) {
                close(r->cfd[i]);
                close(r->sfd[i]);
                r->cfd[i] = r->sfd[i] = -1;
            }
        }
    }
    return NULL;
}

static void relay_start(relay *r)
{
    memset(r, 0, sizeof *r);
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    cr_assert(bind(r->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(r->lfd, 16) == 0 &&
              getsockname(r->lfd, (struct sockaddr *)&a, &len) == 0);
    r->port = ntohs(a.sin_port);
    pthread_create(&r->thread, NULL, relay_main, r);
}

/* Holds back (or lets through) Redis' answers on command connections from the next poll on. */
static void relay_hold(relay *r, bool hold)
{
    atomic_store(&r->hold, hold);
    int from = atomic_load(&r->rounds);
    while (atomic_load(&r->rounds) < from + 2)
        usleep(1000);
}

static void relay_stop(relay *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    for (int i = 0; i < r->n; i++)
        if (r->cfd[i] >= 0) {
            close(r->cfd[i]);
            close(r->sfd[i]);
        }
    close(r->lfd);
}

/* A connection that runs command after command and keeps its permit between them
 * (DBTHROTTLE_CACHE_PERMITS): never idle for DBTHROTTLE_CACHE_IDLE, so only a revoke takes the
 * permit back. */
typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
    atomic_bool stop;
} busy_arg;

static void *busy_connection(void *arg)
{
    busy_arg *b = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000};
    dbt_permit *permit = NULL;
    b->res = dbt_acquire(b->pool, DBT_KIND_QUERY, &o, &permit);
    int64_t until = test_now_ms() + 8000;
    while (permit && !atomic_load(&b->stop) && test_now_ms() < until) {
        if (!dbt_permit_park(permit)) {
            dbt_release(permit);
            return NULL;
        }
        usleep(2000); /* between two commands */
        if (!dbt_permit_unpark(&permit))
            return NULL; /* given back: the next command would queue */
    }
    dbt_release(permit);
    return NULL;
}

typedef struct {
    dbt_pool *pool;
} pool_ref;

static bool revoked(void *arg)
{
    dbt_pool *p = ((pool_ref *)arg)->pool;
    pthread_mutex_lock(&p->mu);
    bool r = p->queue[DBT_KIND_QUERY].keep.contended;
    pthread_mutex_unlock(&p->mu);
    return r;
}

/* A's renewer is done with its renewal's reply and listens for revokes. */
static bool listening(void *arg)
{
    dbt_pool *p = ((pool_ref *)arg)->pool;
    pthread_mutex_lock(&p->mu);
    bool r = p->bg_leading;
    pthread_mutex_unlock(&p->mu);
    return r;
}

typedef struct {
    const char *key, *member;
    long long was;
} score_moved;

static bool score_changed(void *arg)
{
    score_moved *m = arg;
    return test_redis_int(&fx_redis, "ZSCORE %s %s", m->key, m->member) != m->was;
}

/* A waiter queues while a kept-permit connection's fast grant is on its way: the revoke pushed
 * for the waiter is read first, the grant's reply after it. Before, the late reply cleared the
 * revoke, the connection kept its permit command after command, and the waiter waited for the
 * next renewal (lease/3); now it is granted as soon as the command ends. */
Test(recovery, late_grant_does_not_undo_a_revoke, .timeout = 90)
{
    relay r;
    relay_start(&r);
    char url[80];
    snprintf(url, sizeof url, "DBTHROTTLE_REDIS_URL=redis://127.0.0.1:%d", r.port);
    const char *lease = "DBTHROTTLE_LEASE=6s", *timeout = "DBTHROTTLE_REDIS_TIMEOUT=5s";
    dbt_client *ac = fx_client(url, lease, timeout, "DBTHROTTLE_CACHE_PERMITS=on", NULL),
               *bc = fx_client(lease, timeout, NULL);
    dbt_pool *ap = dbt_client_pool(ac, "recovery"), *bp = dbt_client_pool(bc, "recovery");
    /* A holds a connection permit: its renewer listens for revokes from now on. */
    dbt_acquire_opts conn = {.limit = 10, .wait_ms = 0};
    dbt_permit *c;
    cr_assert_eq(dbt_acquire(ap, DBT_KIND_CONN, &conn, &c), DBT_ACQ_GRANTED);
    /* Right after one of A's renewals (its permit's expiry moves), so the next is 2 s away. */
    score_moved m = {"dbthrottle:{recovery}:c:holders", dbt_permit_id(c), 0};
    m.was = test_redis_int(&fx_redis, "ZSCORE %s %s", m.key, m.member);
    cr_assert(test_wait_until(score_changed, &m, 10000), "A's renewal never came");
    pool_ref ar = {ap};
    cr_assert(test_wait_until(listening, &ar, 10000), "A's renewer does not listen");

    relay_hold(&r, true);
    busy_arg a = {.pool = ap};
    pthread_t ta;
    pthread_create(&ta, NULL, busy_connection, &a);
    zcard_is h1 = {&fx_redis, HOLDERS, 1};
    cr_assert(test_wait_until(test_zcard_is, &h1, 10000)); /* granted in Redis, reply held */
    worker_arg w = {.pool = bp, .wait_ms = 30000};
    pthread_t tw;
    pthread_create(&tw, NULL, worker, &w);
    cr_assert(test_wait_until(revoked, &ar, 10000), "A never read the revoke");
    relay_hold(&r, false);
    int64_t t_end = test_now_ms();

    int64_t ms = granted_after(dbt_client_id(bc), t_end);
    atomic_store(&w.go, true);
    atomic_store(&a.stop, true);
    pthread_join(ta, NULL);
    pthread_join(tw, NULL);
    dbt_release(c);
    cr_expect_eq(a.res, DBT_ACQ_GRANTED);
    cr_expect_leq(ms, 1000, "the waiter was granted %lld ms after the late reply was let through",
                  (long long)ms);
    fx_client_free(ac);
    relay_stop(&r);
}

/* ---- exit takes one Redis timeout at most ---------------------------------------------- */

/* One of the threads waiting in one process: the permit passes from thread to thread here
 * (local handover), each served thread leaving its place in Redis' queue to the pool; the last
 * one served keeps the permit until told. */
typedef struct {
    dbt_pool *pool;
    atomic_int granted;
    int keep_at; /* the grant that is kept */
    atomic_bool go;
} chain_arg;

static bool first_renewal_done(void *arg)
{
    dbt_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    bool r = p->last_renew_us > 0 && p->renew_in_flight_us == 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

static bool all_waiting(void *arg)
{
    dbt_pool *p = ((pool_ref *)arg)->pool;
    pthread_mutex_lock(&p->mu);
    bool r = p->nqueued == 5 && p->queue[DBT_KIND_QUERY].sole.sole != 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

static void *chain_waiter(void *arg)
{
    chain_arg *c = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000};
    dbt_permit *permit = NULL;
    if (dbt_acquire(c->pool, DBT_KIND_QUERY, &o, &permit) != DBT_ACQ_GRANTED)
        return NULL;
    if (atomic_fetch_add(&c->granted, 1) + 1 == c->keep_at)
        while (!atomic_load(&c->go))
            usleep(10000);
    dbt_release(permit);
    return NULL;
}

/* Redis hangs as a process exits holding a permit and five places in the queue (its threads were
 * served by local handover): exit gives them all back in one DBTHROTTLE_REDIS_TIMEOUT at most
 * (before: one timeout per place, ~5 s), written at once, so that once Redis answers again a
 * newcomer is granted without waiting out their leases. */
Test(recovery, exit_takes_one_timeout_in_all, .timeout = 90)
{
    const char *lease = "DBTHROTTLE_LEASE=30s", *timeout = "DBTHROTTLE_REDIS_TIMEOUT=1s";
    dbt_client *xc = fx_client(lease, timeout, NULL), *nc = fx_client(lease, timeout, NULL);
    dbt_pool *xp = dbt_client_pool(xc, "recovery"), *np = dbt_client_pool(nc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(xp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    /* The first renewal, which the first command starts, is over before the threads queue: one
     * that reached Redis after an acquire begun after it left found more in the queue than the
     * process counted its own, and ended the sole state (1 run in 6 under 2 busy loops; the next
     * renewal is 10 s away). */
    cr_assert(test_wait_until(first_renewal_done, xp, 10000), "no renewal");
    enum { WAITERS = 5 };
    chain_arg c = {.pool = xp, .keep_at = WAITERS};
    pthread_t t[WAITERS];
    for (int i = 0; i < WAITERS; i++)
        pthread_create(&t[i], NULL, chain_waiter, &c);
    zcard_is q = {&fx_redis, QUEUE, WAITERS};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    pool_ref xr = {xp}; /* and each thread has read that it waits, and whether alone */
    cr_assert(test_wait_until(all_waiting, &xr, 10000));
    /* And their listener is connected, its BLPOP blocked in Redis (only xc's waiters block
     * here): the leading waiter connects it once its acquire is answered. A connect that meets
     * the stopped Redis fails after the timeout, an outage as documented: the process forgets
     * that its waiters were alone, so the permit goes to Redis, and each next leader's connect
     * fails and it gives up. Under load, Redis was stopped before that connect ended in 7 runs of
     * 120: the 7 that failed. */
    cr_assert(test_wait_until(someone_blocked, NULL, 10000), "the waiters never listened");

    kill(fx_redis.pid, SIGSTOP);
    dbt_release(held); /* passed on from thread to thread, without Redis */
    int64_t deadline = test_now_ms() + 10000;
    while (atomic_load(&c.granted) < WAITERS && test_now_ms() < deadline)
        usleep(2000);
    cr_assert_eq(atomic_load(&c.granted), WAITERS, "the permit was not passed on locally");
    int64_t t0 = test_now_ms();
    dbt_client_exit(xc);
    int64_t exit_ms = test_now_ms() - t0;
    kill(fx_redis.pid, SIGCONT);
    int64_t t_end = test_now_ms();

    worker_arg n = {.pool = np, .wait_ms = 30000};
    pthread_t tn;
    pthread_create(&tn, NULL, worker, &n);
    int64_t ms = granted_after(dbt_client_id(nc), t_end);
    atomic_store(&n.go, true);
    atomic_store(&c.go, true);
    pthread_join(tn, NULL);
    for (int i = 0; i < WAITERS; i++)
        pthread_join(t[i], NULL);
    cr_expect_leq(exit_ms, 1500, "exit took %lld ms with a 1 s Redis timeout", (long long)exit_ms);
    cr_expect_leq(ms, 1000, "the newcomer was granted %lld ms after Redis answered again",
                  (long long)ms);
}

/* A thread waits in the queue as the process exits: exit withdraws its place, and the next
 * renewal finds it gone from Redis ("Redis no longer had this waiter"). The thread must not queue
 * again: nobody would withdraw the new place, which would reach the head once the holder is done
 * and be granted to nobody for a lease (seen in CI: a held command's thread, 1 exit in 300 under
 * load). Redis' ticket counter says whether it queued again. */
Test(recovery, a_waiter_queues_no_more_once_its_process_exits)
{
    dbt_client *hc = fx_client(NULL), *xc = fx_client(NULL);
    dbt_pool *hp = dbt_client_pool(hc, "recovery"), *xp = dbt_client_pool(xc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    worker_arg w = {.pool = xp, .wait_ms = 5000, .release_at_once = true};
    pthread_t t;
    pthread_create(&t, NULL, worker, &w);
    zcard_is queued = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
    long long tickets = test_redis_int(&fx_redis, "GET dbthrottle:{recovery}:q:seq");
    dbt_client_exit(xc);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 0, "exit left the place queued");
    dbt_client_renew_all_now(xc); /* the renewal that finds the place gone */
    pthread_join(t, NULL);
    cr_expect_eq(test_redis_int(&fx_redis, "GET dbthrottle:{recovery}:q:seq"), tickets,
                 "the waiter queued again after its process' exit");
    cr_expect_eq(w.res, DBT_ACQ_INTERRUPTED, "the wait ended with %d", (int)w.res);
    dbt_release(held);
}

/* Whether the pool has an acquire in flight (sent, its reply not read). */
static bool acquire_in_flight(void *arg)
{
    dbt_pool *p = ((pool_ref *)arg)->pool;
    pthread_mutex_lock(&p->mu);
    bool r = false;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        r = r || s->state == SLOT_PENDING;
    pthread_mutex_unlock(&p->mu);
    return r;
}

static void *sigcont_after_300ms(void *arg)
{
    usleep(300 * 1000);
    kill(*(pid_t *)arg, SIGCONT);
    return NULL;
}

/* A process exits while a thread's acquire is on its way (Redis slow: stopped for 300 ms): exit
 * waits for its reply, within its one DBTHROTTLE_REDIS_TIMEOUT, and withdraws the place it made.
 * Before, exit withdrew only the places it knew queued, and this one waited out its thread's
 * whole wait in the queue, then a lease had the thread died with the process. */
Test(recovery, exit_withdraws_a_place_whose_acquire_was_on_its_way)
{
    dbt_client *hc = fx_client(NULL), *xc = fx_client("DBTHROTTLE_REDIS_TIMEOUT=3s", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "recovery"), *xp = dbt_client_pool(xc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    kill(fx_redis.pid, SIGSTOP);
    worker_arg w = {.pool = xp, .wait_ms = 8000, .release_at_once = true};
    pthread_t t, cont;
    pthread_create(&t, NULL, worker, &w);
    pool_ref xr = {xp};
    bool sent = test_wait_until(acquire_in_flight, &xr, 10000);
    pthread_create(&cont, NULL, sigcont_after_300ms, &fx_redis.pid);
    dbt_client_exit(xc);
    pthread_join(cont, NULL);
    cr_assert(sent, "the acquire was never sent");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 0, "exit left the place queued");
    dbt_client_renew_all_now(xc); /* the renewal that tells the thread its place is gone */
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_INTERRUPTED, "the wait ended with %d", (int)w.res);
    dbt_release(held);
}

/* ---- a release that failed is sent again --------------------------------------------- */

/* A release sent without waiting meets NOSCRIPT (SCRIPT FLUSH), and the process then goes idle:
 * nobody would read that reply, and the permit stayed held for a lease. Now its reply is read
 * soon and the release repaired (or owed and sent again until it lands): a newcomer is granted
 * within a second of the release. */
Test(recovery, failed_release_is_sent_again_when_idle, .timeout = 90)
{
    const char *lease = "DBTHROTTLE_LEASE=6s";
    dbt_client *xc = fx_client(lease, NULL), *nc = fx_client(lease, NULL);
    dbt_pool *xp = dbt_client_pool(xc, "recovery"), *np = dbt_client_pool(nc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(xp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    worker_arg n = {.pool = np, .wait_ms = 30000};
    pthread_t tn;
    pthread_create(&tn, NULL, worker, &n);
    zcard_is q1 = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));

    test_redis_int(&fx_redis, "SCRIPT FLUSH");
    int64_t t_end = test_now_ms();
    dbt_release(held); /* then this process does nothing more */
    int64_t ms = granted_after(dbt_client_id(nc), t_end);
    atomic_store(&n.go, true);
    pthread_join(tn, NULL);
    cr_expect_eq(n.res, DBT_ACQ_GRANTED);
    cr_expect_leq(ms, 1000, "the newcomer was granted %lld ms after the release", (long long)ms);
}

/* A script that never ends, until SCRIPT KILL: meanwhile Redis answers BUSY to everyone else. */
static void *busy_script(void *arg)
{
    (void)arg;
    redisContext *c = test_redis_connect(&fx_redis);
    redisReply *rep =
        c ? redisCommand(c, "EVAL %s 0", "local i = 0 while true do i = i + 1 end") : NULL;
    freeReplyObject(rep);
    redisFree(c);
    return NULL;
}

static bool busy(void *arg)
{
    (void)arg;
    return test_redis_int(&fx_redis, "PING") == -1000; /* a BUSY error, not PONG */
}

/* The same when the release's reply is an error a SCRIPT LOAD does not repair (BUSY: another
 * client's script runs too long): it is owed, and sent again until Redis takes it. */
Test(recovery, release_refused_as_busy_is_sent_again, .timeout = 90)
{
    const char *lease = "DBTHROTTLE_LEASE=60s"; /* no renewal pumps the queue meanwhile */
    /* Kept permits off: a holder that keeps permits listens too, and someone_blocked must see
     * the waiter's listener. */
    const char *uncached = "DBTHROTTLE_CACHE_PERMITS=off";
    dbt_client *xc = fx_client(lease, uncached, NULL), *nc = fx_client(lease, uncached, NULL);
    dbt_pool *xp = dbt_client_pool(xc, "recovery"), *np = dbt_client_pool(nc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(xp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    worker_arg n = {.pool = np, .wait_ms = 40000};
    pthread_t tn;
    pthread_create(&tn, NULL, worker, &n);
    zcard_is q1 = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));
    /* Its listener's BLPOP is in before Redis gets busy: one sent during the script would be
     * answered BUSY, an outage (the waiter would run unthrottled, as it should then). */
    cr_assert(test_wait_until(someone_blocked, NULL, 10000), "the waiter never listened");

    test_redis_int(&fx_redis, "CONFIG SET busy-reply-threshold 100");
    pthread_t tb;
    pthread_create(&tb, NULL, busy_script, NULL);
    cr_assert(test_wait_until(busy, NULL, 10000), "Redis never got busy");
    dbt_release(held);
    usleep(1500000); /* the fault lasts: the release meets it at least once */
    test_redis_int(&fx_redis, "SCRIPT KILL");
    pthread_join(tb, NULL);
    int64_t t_end = test_now_ms();
    int64_t ms = granted_after(dbt_client_id(nc), t_end);
    atomic_store(&n.go, true);
    pthread_join(tn, NULL);
    cr_expect_eq(n.res, DBT_ACQ_GRANTED);
    cr_expect_leq(ms, 1000, "the newcomer was granted %lld ms after Redis was free again",
                  (long long)ms);
}
