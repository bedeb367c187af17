/* Host groups in Redis (host-level sharing, docs/design.md): a process that shares with its host
 * has the cid "<G>~<cid>"; the scripts count the host's waiters under one owner, G, so that
 * acquire.lua's sole verdict is the host's, and the first waiter of another owner pushes
 * "f<kind>:<ticket>" to wake:<G>, while grants still go to each place's own process. renew.lua
 * replies each kind's sole owner, and takes who holds a permit now. Driven through the real
 * scripts as the library builds them, and through a client whose pool is grouped, judged from
 * Redis' own keys (owners, the wake lists, info, holders). */
#include "listener.h"
#include "pool.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G    "0123456789abcdef"
#define H    "fedcba9876543210"
#define BASE "dbthrottle:{hg}:"
#define P    BASE "q:"
#define WAKE BASE "wake:"

static dbt_config cfg;
static dbt_redis *conn;
static dbt_keys keys;

static void start(void)
{
    fx_redis_start();
    char err[DBT_ERRLEN];
    test_config(&cfg, &fx_redis, NULL);
    conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "hg"));
}

static void stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

TestSuite(host_group, .init = start, .fini = stop);

static dbt_acquire_reply acq(const char *id, int limit)
{
    dbt_acquire_call a = {.id = id, .limit = limit, .who = "hostA 1 c1"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "acquire %s: %s", id, err);
    freeReplyObject(rep);
    return reply;
}

static void rel(const char *id)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
    bool held = false;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_release, &held, err);
    cr_assert_not_null(rep, "release %s: %s", id, err);
    freeReplyObject(rep);
}

/* A renewal of the query holders and waiters given, with a process record and, per held id,
 * doing[i] (NULL: no doing args). */
static dbt_renew_reply renew(char **held, int nh, char **queued, int nq, char **doing)
{
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{held, nh, nh}, {queued, nq, nq}}};
    dbt_local_counts local[DBT_NKINDS] = {{0, 0, 0}, {0, 0, 0}};
    const char *args[DBT_RENEW_NARGS(8) + DBT_RENEW_RECORD_ARGS + 8];
    cr_assert(nh + nq <= 8);
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    dbt_renew_add_record(&c, &keys, "00000000000000aa", "v1\thostA", 60000, false);
    if (doing)
        dbt_renew_add_doing(&c, doing, nh);
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "renew: %s", err);
    freeReplyObject(rep);
    return rr;
}

/* The wake list's messages, joined by ' ' ("" when empty). */
static void wake_list(const char *cid, char *out, size_t cap)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "LRANGE " WAKE "%s 0 -1", cid);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", i ? " " : "",
                                r->element[i]->str);
    freeReplyObject(r);
    redisFree(rc);
}

/* Redis' clock (ms), as the scripts read it (TIME). */
static long long redis_now_ms(void)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "TIME");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    redisFree(rc);
    return ms;
}

static char *hget(const char *key, const char *field)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "HGET %s %s", key, field);
    cr_assert_not_null(r);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

Test(host_group, two_processes_of_one_host_are_sole_and_another_host_ends_it)
{
    cr_assert_eq(acq("00000000000000aa.1.1", 1).status, DBT_ACQUIRE_GRANTED);
    dbt_acquire_reply a = acq(G "~00000000000000a1.2.1", 1);
    cr_assert_eq(a.status, DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply b = acq(G "~00000000000000b1.3.1", 1);
    cr_assert_eq(b.status, DBT_ACQUIRE_QUEUED);
    cr_expect(b.sole, "two processes of host group G queued with nobody else: the host is sole");
    char *own = hget(P "owners", G);
    cr_expect_str_eq(own ? own : "(nil)", "2", "OWN counts both under G");
    free(own);
    char *sole = hget(P "owners", "*");
    cr_expect_str_eq(sole ? sole : "(nil)", G);
    free(sole);

    /* renew.lua tells the host it is sole: the 9th element. */
    char *held[] = {"00000000000000aa.1.1"};
    char *queued[] = {G "~00000000000000a1.2.1", G "~00000000000000b1.3.1"};
    dbt_renew_reply rr = renew(held, 1, queued, 2, NULL);
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_QUERY], G, "renew names the sole owner");
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_CONN], "", "none for the other kind");

    /* A waiter of another host ends it: f on wake:<G>, not on the processes' own lists. */
    dbt_acquire_reply c = acq(H "~00000000000000c1.4.1", 1);
    cr_assert_eq(c.status, DBT_ACQUIRE_QUEUED);
    cr_expect_not(c.sole);
    char list[512];
    wake_list(G, list, sizeof list);
    char want[64];
    snprintf(want, sizeof want, "fq:%lld", c.ticket + 1);
    cr_expect_str_eq(list, want, "the host's list has the f, whose ticket follows H~c's");
    wake_list(G "~00000000000000a1", list, sizeof list);
    cr_expect_str_eq(list, "", "nothing on G~a's own list");
    wake_list(G "~00000000000000b1", list, sizeof list);
    cr_expect_str_eq(list, "", "nothing on G~b's own list");
    rr = renew(held, 1, queued, 2, NULL);
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_QUERY], "", "no sole owner once another host waits");

    /* Grants still go to the process that queued the place. */
    rel("00000000000000aa.1.1");
    wake_list(G "~00000000000000a1", list, sizeof list);
    cr_expect_str_eq(list, "gq:" G "~00000000000000a1.2.1");
    wake_list(G, list, sizeof list);
    cr_expect_str_eq(list, want, "no grant on the host's list");
}

Test(host_group, a_tagged_waiter_is_owned_by_the_group_and_its_shape)
{
    cr_assert_eq(acq("00000000000000aa.1.1", 1).status, DBT_ACQUIRE_GRANTED);
    dbt_acquire_reply a = acq(G "~00000000000000a1.2.gold.1.1", 1);
    cr_assert_eq(a.status, DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply b = acq(G "~00000000000000b1.3.gold.1.1", 1);
    cr_expect(b.sole, "the same shape of one host: sole");
    char *own = hget(P "owners", G "/gold.1");
    cr_expect_str_eq(own ? own : "(nil)", "2");
    free(own);
    /* Another shape of the same host ends it like a foreign waiter (as for one process). */
    dbt_acquire_reply c = acq(G "~00000000000000b1.4.silver.1.1", 1);
    cr_expect_not(c.sole);
    char list[256], want[64];
    wake_list(G, list, sizeof list);
    snprintf(want, sizeof want, "fq:%lld", c.ticket + 1);
    cr_expect_str_eq(list, want, "f to wake:<G> (cid_of stops at '/')");
}

/* Who holds the permit, from the info's head "<since> <host> <pid> <conn>". */
static void info_of(const char *id, char *head, size_t hcap, char *state, size_t scap)
{
    char *v = hget(P "info", id);
    cr_assert_not_null(v, "no info for %s", id);
    char *us = strchr(v, '\x1f');
    cr_assert_not_null(us);
    snprintf(head, hcap, "%.*s", (int)(us - v), v);
    char *us2 = strchr(us + 1, '\x1f');
    snprintf(state, scap, "%.*s", us2 ? (int)(us2 - us - 1) : (int)strlen(us + 1), us + 1);
    free(v);
}

Test(host_group, a_doing_with_who_rewrites_the_holder_and_one_without_does_not)
{
    const char *id = G "~00000000000000a1.1.1";
    cr_assert_eq(acq(id, 2).status, DBT_ACQUIRE_GRANTED);
    char head0[128], head[128], state[32];
    info_of(id, head0, sizeof head0, state, sizeof state);
    const char *sp = strchr(head0, ' ');
    cr_assert_not_null(sp);
    cr_assert_str_eq(sp + 1, "hostA 1 c1");
    char since[32];
    snprintf(since, sizeof since, "%.*s", (int)(sp - head0), head0);

    char who[DBT_WHO_LEN], doing[DBT_DOING_LEN];
    dbt_format_who("hostB", 42, "c9", who, sizeof who);
    dbt_format_doing('r', "", who, -1, doing, sizeof doing);
    char *held[] = {(char *)id}, *d[] = {doing};
    renew(held, 1, NULL, 0, d);
    info_of(id, head, sizeof head, state, sizeof state);
    char want[128];
    snprintf(want, sizeof want, "%s hostB 42 c9", since);
    cr_expect_str_eq(head, want, "a 3-field doing rewrites who, keeps since");
    cr_expect_str_eq(state, "running");

    /* A 2-field doing (an older client): who stays. */
    dbt_format_doing('i', "", NULL, -1, doing, sizeof doing);
    cr_assert_str_eq(doing, "i\x1f");
    renew(held, 1, NULL, 0, d);
    info_of(id, head, sizeof head, state, sizeof state);
    cr_expect_str_eq(head, want, "a 2-field doing leaves who as it was");
    cr_expect_str_eq(state, "idle_tx");

    /* With a session (the 5-field form) and who (6 fields): both written. */
    char session[DBT_SESSION_LEN];
    cr_assert(dbt_format_session(777, "app", "usr", "db", session, sizeof session));
    dbt_format_who("hostC", 43, "c3", who, sizeof who);
    dbt_format_doing('r', session, who, -1, doing, sizeof doing);
    renew(held, 1, NULL, 0, d);
    info_of(id, head, sizeof head, state, sizeof state);
    snprintf(want, sizeof want, "%s hostC 43 c3", since);
    cr_expect_str_eq(head, want);
    char *v = hget(P "info", id);
    cr_expect(v && strstr(v, "\x1f"
                             "777\x1f"
                             "app\x1fusr\x1f"
                             "db") != NULL,
              "the session: %s", v ? v : "(nil)");
    cr_expect(v && strstr(v, "hostC 43 c3\x1f") == v + strlen(since) + 1, "who only in the head");
    free(v);

    /* And a 5-field doing (a session, no who): who stays. */
    dbt_format_doing('k', session, NULL, -1, doing, sizeof doing);
    renew(held, 1, NULL, 0, d);
    info_of(id, head, sizeof head, state, sizeof state);
    cr_expect_str_eq(head, want);
    cr_expect_str_eq(state, "kept");
}

/* A doing that names another holder with its own hold (the 7- and 4-field forms) sets since to
 * Redis' now minus that hold: HELD is the holder's own time. The same holder again keeps since. */
Test(host_group, a_new_holder_brings_its_own_since)
{
    const char *id = G "~00000000000000a2.1.1";
    cr_assert_eq(acq(id, 2).status, DBT_ACQUIRE_GRANTED);
    char head[128], state[32];
    char session[DBT_SESSION_LEN], who[DBT_WHO_LEN], doing[DBT_DOING_LEN];
    cr_assert(dbt_format_session(778, "app", "usr", "db", session, sizeof session));
    dbt_format_who("hostB", 44, "c1", who, sizeof who);
    /* Granted at Redis' now; hostB says it has held it 50 s (longer than anything here took). */
    dbt_format_doing('r', session, who, 50000, doing, sizeof doing);
    char *held[] = {(char *)id}, *d[] = {doing};
    long long before = redis_now_ms();
    renew(held, 1, NULL, 0, d);
    long long after = redis_now_ms();
    info_of(id, head, sizeof head, state, sizeof state);
    long long since = atoll(head);
    cr_expect(since >= before - 50000 && since <= after - 50000,
              "since %lld, not Redis' now minus 50 s (%lld..%lld)", since, before - 50000,
              after - 50000);
    cr_expect_str_eq(strchr(head, ' ') + 1, "hostB 44 c1");

    /* The same holder again, with a hold that disagrees: since stays (it changes with a holder). */
    dbt_format_doing('i', session, who, 1, doing, sizeof doing);
    renew(held, 1, NULL, 0, d);
    info_of(id, head, sizeof head, state, sizeof state);
    cr_expect_eq(atoll(head), since);
    cr_expect_str_eq(state, "idle_tx");

    /* Without a session (4 fields): another holder, its own since. */
    dbt_format_who("hostC", 45, "c2", who, sizeof who);
    dbt_format_doing('r', "", who, 20000, doing, sizeof doing);
    before = redis_now_ms();
    renew(held, 1, NULL, 0, d);
    after = redis_now_ms();
    info_of(id, head, sizeof head, state, sizeof state);
    since = atoll(head);
    cr_expect(since >= before - 20000 && since <= after - 20000, "since %lld (%lld..%lld)", since,
              before - 20000, after - 20000);
    cr_expect_str_eq(strchr(head, ' ') + 1, "hostC 45 c2");
}

/* ---- through a client whose pool is grouped -------------------------------------------------- */

typedef struct {
    dbt_pool *p;
    dbt_acquire_opts o;
    dbt_acq_result r;
    dbt_permit *pm;
} waiter;

static void *wait_for_permit(void *arg)
{
    waiter *w = arg;
    w->r = dbt_acquire(w->p, DBT_KIND_QUERY, &w->o, &w->pm);
    return NULL;
}

typedef struct {
    const char *key;
    long long n;
} llen_is;

static bool list_len_is(void *arg)
{
    llen_is *c = arg;
    return test_redis_int(&fx_redis, "LLEN %s", c->key) == c->n;
}

static bool someone_queued(void *arg)
{
    (void)arg;
    return test_redis_int(&fx_redis, "ZCARD " P "queue") == 1;
}

Test(host_group, a_grouped_pool_makes_ids_of_its_group_and_listens_on_both_lists)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "hg");
    cr_assert_not_null(p);
    pthread_mutex_lock(&p->mu);
    cr_expect_str_eq(dbt_pool_cid(p), dbt_client_id(c), "ungrouped: the client's cid");
    dbt_pool_set_group(p, G);
    char cid[DBT_POOL_CID_MAX];
    snprintf(cid, sizeof cid, "%s", dbt_pool_cid(p));
    pthread_mutex_unlock(&p->mu);
    char want[DBT_POOL_CID_MAX];
    snprintf(want, sizeof want, G "~%s", dbt_client_id(c));
    cr_assert_str_eq(cid, want);

    /* The pool is full (a holder of another process): the client's acquire queues, its id made
     * with the grouped cid, and its leader BLPOPs its own list and wake:<G>. */
    cr_assert_eq(acq(H "~00000000000000c1.1.1", 1).status, DBT_ACQUIRE_GRANTED);
    waiter w = {.p = p, .o = {.limit = 1, .wait_ms = 30000, .conn = "hg"}};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_for_permit, &w), 0);
    cr_assert(test_wait_until(someone_queued, NULL, 20000), "the client never queued");
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *q = redisCommand(rc, "ZRANGE " P "queue 0 -1");
    cr_assert(q && q->type == REDIS_REPLY_ARRAY && q->elements == 1);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", cid);
    cr_expect(strncmp(q->element[0]->str, prefix, strlen(prefix)) == 0, "queued as %s",
              q->element[0]->str);
    freeReplyObject(q);
    /* Something on the group's list is popped by the listener (a message it ignores). */
    freeReplyObject(redisCommand(rc, "RPUSH " WAKE G " probe"));
    llen_is gone = {WAKE G, 0};
    cr_expect(test_wait_until(list_len_is, &gone, 20000), "nobody pops wake:<G>");
    /* The grant comes on its own list. */
    rel(H "~00000000000000c1.1.1");
    pthread_join(t, NULL);
    cr_assert_eq(w.r, DBT_ACQ_GRANTED);
    redisReply *h = redisCommand(rc, "ZRANGE " P "holders 0 -1");
    cr_assert(h && h->type == REDIS_REPLY_ARRAY && h->elements == 1);
    cr_expect(strncmp(h->element[0]->str, prefix, strlen(prefix)) == 0, "held as %s",
              h->element[0]->str);
    freeReplyObject(h);
    redisFree(rc);
    dbt_release(w.pm);

    pthread_mutex_lock(&p->mu);
    dbt_pool_set_group(p, NULL);
    cr_expect_str_eq(dbt_pool_cid(p), dbt_client_id(c), "ungrouped again");
    pthread_mutex_unlock(&p->mu);
}

Test(host_group, the_longest_id_is_never_cut)
{
    /* The longest parts: a grouped cid, a 20-digit serial, a 32-character class, a 10-digit
     * limit (the weight's room is the limit's: at most 10 digits too). */
    const char *klass = "abcdefghijklmnopqrstuvwxyz012345";
    cr_assert_eq(strlen(klass), 32);
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "hg");
    pthread_mutex_lock(&p->mu);
    dbt_pool_set_group(p, G);
    pthread_mutex_unlock(&p->mu);
    atomic_store(&p->client->serial, UINT64_MAX - 1);
    dbt_acquire_opts o = {.limit = INT_MAX, .wait_ms = 0, .klass = klass};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    char want[256];
    snprintf(want, sizeof want, G "~%s.%" PRIu64 ".%s.1.%d", dbt_client_id(c), UINT64_MAX, klass,
             INT_MAX);
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *h = redisCommand(rc, "ZRANGE " P "holders 0 -1");
    cr_assert(h && h->type == REDIS_REPLY_ARRAY && h->elements == 1);
    cr_expect_str_eq(h->element[0]->str, want, "the id whole");
    freeReplyObject(h);
    redisFree(rc);
    dbt_release(pm);
    /* ... and with a 10-digit weight too, it has room in DBT_ID_MAX and the segment's. */
    int n = snprintf(want, sizeof want, G "~%s.%" PRIu64 ".%s.%d.%d", dbt_client_id(c), UINT64_MAX,
                     klass, INT_MAX, INT_MAX);
    cr_expect_lt(n, DBT_ID_MAX);
    cr_expect_leq(DBT_ID_MAX, DBT_SHARE_ID_MAX);
}

/* A client of an older version on the same Redis takes a grouped waiter out of the queue counting
 * it under its whole cid ("G~c"), so OWN[G] stays one too high: the host's count then equals the
 * queue's length while another host's waiter is queued. The counts of OWN must add up to the
 * queue's length before the host is told it is alone. */
Test(host_group, drifted_owner_counts_never_make_a_host_sole_beside_a_foreign_waiter)
{
    cr_assert_eq(acq("00000000000000aa.1.1", 1).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(G "~00000000000000a1.2.1", 1).status, DBT_ACQUIRE_QUEUED);
    /* The drift: a G waiter the older client removed without counting it under G. */
    cr_assert_eq(test_redis_int(&fx_redis, "HINCRBY " P "owners " G " 1"), 2);
    dbt_acquire_reply f = acq(H "~00000000000000c1.3.1", 1);
    cr_assert_eq(f.status, DBT_ACQUIRE_QUEUED);
    cr_assert_not(f.sole);
    dbt_acquire_reply b = acq(G "~00000000000000b1.4.1", 1);
    cr_assert_eq(b.status, DBT_ACQUIRE_QUEUED);
    cr_expect_not(b.sole, "H's waiter is queued: G is not alone, whatever OWN[G] says");
    char *sole = hget(P "owners", "*");
    cr_expect_null(sole, "OWN['*'] is %s", sole ? sole : "(nil)");
    free(sole);
    char *held[] = {"00000000000000aa.1.1"};
    char *queued[] = {G "~00000000000000a1.2.1", G "~00000000000000b1.4.1"};
    dbt_renew_reply rr = renew(held, 1, queued, 2, NULL);
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_QUERY], "", "renew names no sole owner");
    /* The counts were rebuilt from the queue: G's two waiters, H's one. */
    char *own = hget(P "owners", G);
    cr_expect_str_eq(own ? own : "(nil)", "2");
    free(own);
}
