/* Classes and weights (docs/design.md, "Classes and weights"), driven through the real scripts
 * (acquire, release, cancel, renew, admin, status as the library builds them), judged from
 * Redis' own keys: who holds (the holders ZSET, its unit members), and the order of the grants
 * pushed to the waiters' wake list. */
#include "redis_conn.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CID  "00000000000000c1"
#define P    "dbthrottle:{cls}:q:"
#define WAKE "dbthrottle:{cls}:wake:" CID

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
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "cls"));
}

static void stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(classes, .init = start, .fini = stop);

/* A permit id of the test's one process: untagged ("<cid>.<serial>.<limit>") when klass is NULL,
 * else tagged ("<cid>.<serial>.<class>.<weight>.<limit>"). Valid for a few dozen calls. */
static const char *tid(int serial, const char *klass, int weight, int limit)
{
    static char ring[64][96];
    static int next;
    char *b = ring[next++ % 64];
    if (klass)
        snprintf(b, sizeof ring[0], CID ".%d.%s.%d.%d", serial, klass, weight, limit);
    else
        snprintf(b, sizeof ring[0], CID ".%d.%d", serial, limit);
    return b;
}

static dbt_acquire_reply acquire_with(const char *id, int limit, bool try_only, const char *shipped)
{
    dbt_acquire_call a = {
        .id = id, .limit = limit, .try_only = try_only, .who = "h 1 c", .shipped_classes = shipped};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "acquire %s: %s", id, err);
    freeReplyObject(rep);
    return reply;
}

/* acquire.lua's status for id at its limit (queues when not granted). */
static int acq(const char *id, int limit)
{
    return (int)acquire_with(id, limit, false, NULL).status;
}

static bool rel(const char *id)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
    bool held = false;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_release, &held, err);
    cr_assert_not_null(rep, "release %s: %s", id, err);
    freeReplyObject(rep);
    return held;
}

static dbt_cancel_outcome cancel(const char *id)
{
    dbt_script_call c;
    dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, id, true);
    dbt_cancel_outcome out;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_cancel, &out, err);
    cr_assert_not_null(rep, "cancel %s: %s", id, err);
    freeReplyObject(rep);
    return out;
}

/* admin.lua; false with Redis' error in err when it refuses. */
static bool admin(dbt_admin_op op, const char *arg, char *err)
{
    dbt_script_call c;
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, op, arg);
    dbt_admin_reply a;
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_admin, &a, err);
    freeReplyObject(rep);
    return rep != NULL;
}

static void must_admin(dbt_admin_op op, const char *arg)
{
    char err[DBT_ERRLEN];
    cr_assert(admin(op, arg, err), "admin %s: %s", arg ? arg : "", err);
}

/* A renewal of the query holders and waiters given. */
static void renew(char **held, int nh, char **queued, int nq)
{
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{held, nh, nh}, {queued, nq, nq}}};
    dbt_local_counts local[DBT_NKINDS] = {{0, 0, 0}, {0, 0, 0}};
    const char *args[DBT_RENEW_NARGS(16)];
    cr_assert(nh + nq <= 16);
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "renew: %s", err);
    freeReplyObject(rep);
}

/* The operator's definition text, set as `dbthrottle class` would leave it. */
static void define(const char *text)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommand(rc, "SET " P "classes %s", text);
    cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    redisFree(rc);
}

static bool holds(const char *member)
{
    return test_redis_int(&fx_redis, "ZSCORE " P "holders %s", member) > 0;
}

static long long units(void)
{
    return test_redis_int(&fx_redis, "ZCARD " P "holders");
}

static long long stat(const char *field)
{
    long long v = test_redis_int(&fx_redis, "HGET " P "stats %s", field);
    return v == -1000 ? 0 : v;
}

/* The ids granted from the queue so far, in the order the grants were pushed ("gq:<id>"), as
 * one space-separated string (the serials only: "3 5 4"). */
static void grants(char *out, size_t cap)
{
    out[0] = '\0';
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommand(rc, "LRANGE %s 0 -1", WAKE);
    size_t len = 0;
    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        const char *m = rep->element[i]->str;
        if (strncmp(m, "gq:" CID ".", strlen("gq:" CID ".")) != 0)
            continue;
        int serial = atoi(m + strlen("gq:" CID "."));
        len += (size_t)snprintf(out + len, cap - len, "%s%d", len ? " " : "", serial);
    }
    freeReplyObject(rep);
    redisFree(rc);
}

#define expect_grants(want)                                                                        \
    do {                                                                                           \
        char got_[256];                                                                            \
        grants(got_, sizeof got_);                                                                 \
        cr_expect_str_eq(got_, want, "grants in the order %s, not %s", got_, want);                \
    } while (0)

/* ---- the id's shape and class names (for the client and the command) ------------------------ */

Test(classes, id_shapes_and_class_names)
{
    char k[33];
    int w, l;
    cr_expect(dbt_parse_id_shape("00000000000000c1.7.12", k, &w, &l));
    cr_expect_str_eq(k, "");
    cr_expect_eq(w, 1);
    cr_expect_eq(l, 12);
    cr_expect(dbt_parse_id_shape("00000000000000c1.7.batch.4.8", k, &w, &l));
    cr_expect_str_eq(k, "batch");
    cr_expect_eq(w, 4);
    cr_expect_eq(l, 8);
    cr_expect(dbt_parse_id_shape("00000000000000c1.7.-.2.8", k, &w, NULL));
    cr_expect_str_eq(k, "-");
    cr_expect_eq(w, 2);
    cr_expect_not(dbt_parse_id_shape("00000000000000c1.7", k, &w, &l));
    cr_expect_not(dbt_parse_id_shape("00000000000000c1.7.x.8", k, &w, &l));
    cr_expect_not(dbt_parse_id_shape("00000000000000c1.7.Bad.1.8", k, &w, &l));
    cr_expect_not(dbt_parse_id_shape("00000000000000c1.7.b.0.8", k, &w, &l));
    cr_expect_not(dbt_parse_id_shape("00000000000000c1.7.b.1.x", k, &w, &l));
    cr_expect(dbt_class_name_ok("interactive"));
    cr_expect(dbt_class_name_ok("a_b-9"));
    cr_expect_not(dbt_class_name_ok("-"));
    cr_expect_not(dbt_class_name_ok(""));
    cr_expect_not(dbt_class_name_ok("Batch"));
    cr_expect_not(dbt_class_name_ok("a.b"));
    cr_expect_not(dbt_class_name_ok("123456789012345678901234567890123"));
}

/* ---- without classes: today's behaviour, with weights -------------------------------------- */

/* No definitions, untagged ids: FIFO, one unit each, and no key of the classes is made. */
Test(classes, without_classes_untagged_ids_are_served_as_before)
{
    cr_assert_eq(acq(tid(1, NULL, 1, 2), 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, NULL, 1, 2), 2), DBT_ACQUIRE_GRANTED);
    for (int i = 3; i <= 5; i++)
        cr_assert_eq(acq(tid(i, NULL, 1, 2), 2), DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply r = acquire_with(tid(6, NULL, 1, 2), 2, true, NULL);
    cr_expect_eq(r.status, DBT_ACQUIRE_NOT_GRANTED);
    cr_expect_str_eq(r.class_name, "", "a class named without definitions: %s", r.class_name);
    cr_expect_eq(r.class_wait_ms, -1);
    cr_expect_eq(r.class_cap, -1);
    rel(tid(2, NULL, 1, 2));
    rel(tid(1, NULL, 1, 2));
    rel(tid(3, NULL, 1, 2));
    expect_grants("3 4 5");
    cr_expect_eq(units(), 2);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS " P "tags " P "queue:- " P "holders:-"), 0,
                 "per-tag keys made for untagged ids without classes");
}

/* A weight-w permit is w members of the holders; a heavy head is not overtaken by lighter
 * waiters (strict), and the units in use never pass the limit. */
Test(classes, weights_take_units_and_the_heavy_head_is_not_overtaken)
{
    const char *a = tid(1, "-", 1, 4), *b = tid(2, "-", 3, 4);
    cr_assert_eq(acq(a, 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(b, 4), DBT_ACQUIRE_GRANTED);
    cr_expect_eq(units(), 4);
    char m[96];
    snprintf(m, sizeof m, "%s#3", b);
    cr_expect(holds(b) && holds(m), "the weight-3 permit is not 3 members");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders:-"), 4);
    const char *heavy = tid(3, "-", 3, 4), *light = tid(4, "-", 1, 4);
    cr_assert_eq(acq(heavy, 4), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(light, 4), DBT_ACQUIRE_QUEUED);
    rel(a); /* one unit free: the heavy head does not fit, and the light one waits behind it */
    cr_expect_eq(units(), 3);
    expect_grants("");
    rel(b); /* four free: the heavy head, then the light one */
    expect_grants("3 4");
    cr_expect_eq(units(), 4);
    rel(heavy);
    rel(light);
    cr_expect_eq(units(), 0);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders:-"), 0);
}

/* A weight above the limit is cut to the limit: the command runs alone, and it is counted. */
Test(classes, a_weight_above_the_limit_is_clamped_and_runs_alone)
{
    const char *one = tid(1, "-", 1, 2), *big = tid(2, "-", 5, 2);
    cr_assert_eq(acq(one, 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(big, 2), DBT_ACQUIRE_QUEUED);
    rel(one);
    expect_grants("2");
    cr_expect_eq(units(), 2, "the clamped permit holds %lld units", units());
    cr_expect_eq(stat("clamped"), 1);
    cr_expect_eq(acq(tid(3, "-", 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_expect(rel(big));
    cr_expect_eq(units(), 1, "all the clamped permit's units went back, the waiter came in");
}

/* ---- selection with classes ---------------------------------------------------------------- */

/* One class alone borrows the whole limit, queued or not. */
Test(classes, a_class_alone_borrows_the_whole_limit)
{
    define("aging=0;default=;interactive:75:1:-:-;batch:25:0:-:-");
    for (int i = 1; i <= 4; i++)
        cr_assert_eq(acq(tid(i, "batch", 1, 4), 4), DBT_ACQUIRE_GRANTED, "batch %d", i);
    for (int i = 5; i <= 8; i++)
        cr_assert_eq(acq(tid(i, "batch", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    for (int i = 1; i <= 4; i++)
        rel(tid(i, "batch", 1, 4));
    expect_grants("5 6 7 8");
    cr_expect_eq(units(), 4);
}

/* A class under its guarantee is served before older waiters of a class at or over its own. */
Test(classes, a_class_under_its_guarantee_goes_first)
{
    define("aging=0;default=;interactive:75:0:-:-;batch:25:0:-:-"); /* at 4: 3 and 1 */
    for (int i = 1; i <= 4; i++)
        cr_assert_eq(acq(tid(i, "batch", 1, 4), 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(5, "batch", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(6, "batch", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(7, "interactive", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(8, "interactive", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    for (int i = 1; i <= 4; i++)
        rel(tid(i, "batch", 1, 4));
    /* interactive holds 0, then 1 < 3: first; then batch, over its 1, FIFO */
    expect_grants("7 8 5 6");
}

/* Once interactive has its guarantee, the next free unit goes by priority, then FIFO. */
Test(classes, at_or_over_the_guarantees_priority_then_fifo)
{
    define("aging=0;default=;hi:0:5:-:-;lo:0:1:-:-");
    cr_assert_eq(acq(tid(1, "lo", 1, 1), 1), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "lo", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(3, "hi", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(4, "lo", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(5, "hi", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    const char *order[] = {tid(1, "lo", 1, 1), tid(3, "hi", 1, 1), tid(5, "hi", 1, 1),
                           tid(2, "lo", 1, 1), tid(4, "lo", 1, 1)};
    for (int i = 0; i < 5; i++)
        rel(order[i]);
    expect_grants("3 5 2 4");
}

/* Within a class FIFO, also across the tags it is served under (the default class: tag "-", an
 * untagged id, a tag no definition names). */
Test(classes, fifo_within_a_class_across_its_tags)
{
    define("aging=0;default=;batch:50:0:-:-");
    cr_assert_eq(acq(tid(1, "batch", 1, 2), 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "batch", 1, 2), 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(3, "-", 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(4, "nosuch", 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(5, NULL, 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(6, "-", 1, 2), 2), DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply r = acquire_with(tid(7, "nosuch", 1, 2), 2, true, NULL);
    cr_expect_str_eq(r.class_name, "default", "served as %s", r.class_name);
    rel(tid(1, "batch", 1, 2));
    rel(tid(2, "batch", 1, 2));
    rel(tid(3, "-", 1, 2));
    rel(tid(4, "nosuch", 1, 2));
    expect_grants("3 4 5 6");
}

/* Untagged ids in a pool with classes are the default class: a class under its guarantee goes
 * before them, and they keep their order among themselves. */
Test(classes, untagged_ids_in_a_pool_with_classes_are_the_default_class)
{
    define("aging=0;default=;interactive:50:0:-:-");
    cr_assert_eq(acq(tid(1, NULL, 1, 2), 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, NULL, 1, 2), 2), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(3, NULL, 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(4, NULL, 1, 2), 2), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(5, "interactive", 1, 2), 2), DBT_ACQUIRE_QUEUED);
    rel(tid(1, NULL, 1, 2));
    rel(tid(2, NULL, 1, 2));
    rel(tid(5, "interactive", 1, 2));
    expect_grants("5 3 4");
}

/* A waiter older than the aging bound is served next whatever its class. */
Test(classes, a_waiter_past_the_aging_bound_goes_first, .timeout = 30)
{
    define("aging=300;default=;interactive:75:1:-:-;batch:25:0:-:-");
    for (int i = 1; i <= 4; i++)
        cr_assert_eq(acq(tid(i, "batch", 1, 4), 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(5, "batch", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    usleep(400 * 1000); /* the batch waiter's age passes the bound: time must pass, no race */
    cr_assert_eq(acq(tid(6, "interactive", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    rel(tid(1, "batch", 1, 4));
    expect_grants("5");
    cr_expect_eq(stat("aged"), 1);
    rel(tid(2, "batch", 1, 4));
    expect_grants("5 6");
}

/* Shadow mode with classes: granted whatever the class pick or the cap says, and the reply says
 * what enforcing would have done: wait behind the class's waiter, or be refused at its cap. */
Test(classes, shadow_grants_past_the_pick_and_the_cap_and_says_so)
{
    define("aging=0;default=;batch:50:0:5000:1;bulk:0:0:-:0");
    cr_assert_eq(acq(tid(1, "batch", 1, 1), 1), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "batch", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    dbt_acquire_call a = {.limit = 1, .who = "h 1 c", .shadow = true};
    const char *ids[] = {tid(3, "batch", 1, 1), tid(4, "bulk", 1, 1), tid(5, "interactive", 1, 1)};
    const dbt_acquire_would want[] = {DBT_WOULD_REFUSE, DBT_WOULD_REFUSE, DBT_WOULD_WAIT};
    for (int i = 0; i < 3; i++) {
        a.id = ids[i];
        dbt_script_call c;
        dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
        dbt_acquire_reply r;
        char err[DBT_ERRLEN];
        redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &r, err);
        cr_assert_not_null(rep, "%s", err);
        freeReplyObject(rep);
        cr_expect_eq(r.status, DBT_ACQUIRE_GRANTED, "%s", ids[i]);
        cr_expect_eq(r.would, want[i], "%s: would %d", ids[i], (int)r.would);
    }
    cr_expect_eq(units(), 4, "the batch holder and the three shadow ones");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 1, "only the enforced waiter");
    cr_expect_eq(stat("would_refuse"), 2);
    cr_expect_eq(stat("would_wait"), 1);
    cr_expect_eq(stat("capped"), 0, "nothing refused");
}

/* A newcomer of a class under its guarantee is granted at once when it fits, although a heavy
 * waiter (of a class over its guarantee) waits for more units than are free. */
Test(classes, a_newcomer_under_its_guarantee_passes_a_heavy_waiter_that_does_not_fit)
{
    define("aging=0;default=;interactive:50:1:-:-;batch:50:0:-:-");
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(acq(tid(i, "batch", 1, 4), 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(4, "batch", 4, 4), 4), DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply r = acquire_with(tid(5, "interactive", 1, 4), 4, false, NULL);
    cr_expect_eq(r.status, DBT_ACQUIRE_GRANTED);
    cr_expect_eq(r.queue, 1, "granted past a waiter: the reply must say one waits (%lld)", r.queue);
    cr_expect_eq(units(), 4);
    /* another batch newcomer ranks behind the heavy batch waiter: it queues */
    cr_expect_eq(acq(tid(6, "batch", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    /* without classes the interactive newcomer would have queued (no barging) */
}

/* A class's queue cap: a command that would queue past it is refused at once (status 3), and
 * the reply names the class, its cap and its wait. Cap 0: never queue. */
Test(classes, the_queue_cap_refuses_at_once)
{
    define("aging=0;default=;batch:50:0:5000:1;bulk:0:0:-:0");
    cr_assert_eq(acq(tid(1, "batch", 1, 1), 1), DBT_ACQUIRE_GRANTED);
    dbt_acquire_reply r = acquire_with(tid(2, "batch", 1, 1), 1, false, NULL);
    cr_expect_eq(r.status, DBT_ACQUIRE_QUEUED);
    cr_expect_str_eq(r.class_name, "batch");
    cr_expect_eq(r.class_wait_ms, 5000);
    cr_expect_eq(r.class_cap, 1);
    r = acquire_with(tid(3, "batch", 1, 1), 1, false, NULL);
    cr_expect_eq(r.status, DBT_ACQUIRE_QUEUE_FULL);
    cr_expect_eq(r.class_cap, 1);
    r = acquire_with(tid(4, "bulk", 1, 1), 1, false, NULL);
    cr_expect_eq(r.status, DBT_ACQUIRE_QUEUE_FULL);
    cr_expect_eq(r.class_cap, 0);
    cr_expect_eq(stat("capped"), 2);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 1, "a capped command queued");
    /* once the waiter is served, the class may queue again */
    rel(tid(1, "batch", 1, 1));
    cr_expect_eq(acq(tid(5, "batch", 1, 1), 1), DBT_ACQUIRE_QUEUED);
}

/* A class removed while its waiters wait: they are served as the default class (FIFO with it),
 * no longer ahead by their old priority. */
Test(classes, waiters_of_a_removed_class_are_served_as_default)
{
    must_admin(DBT_ADMIN_CLASS_SET, "hi:0:5:-:-");
    must_admin(DBT_ADMIN_CLASS_SET, "lo:0:0:-:-:default");
    cr_assert_eq(acq(tid(1, "lo", 1, 1), 1), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "lo", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(3, "hi", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    must_admin(DBT_ADMIN_CLASS_CLEAR, "hi");
    dbt_acquire_reply r = acquire_with(tid(9, "hi", 1, 1), 1, true, NULL);
    cr_expect_str_eq(r.class_name, "lo", "a removed class' tag is served as %s", r.class_name);
    rel(tid(1, "lo", 1, 1));
    rel(tid(2, "lo", 1, 1));
    expect_grants("2 3");
}

/* ---- the operator's controls with classes and weights -------------------------------------- */

/* Evict frees all the units of a weighted permit (and its per-tag members); the waiter it made
 * room for is granted. */
Test(classes, evict_frees_every_unit)
{
    const char *big = tid(1, "batch", 3, 3), *next = tid(2, "batch", 2, 3);
    cr_assert_eq(acq(big, 3), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(next, 3), DBT_ACQUIRE_QUEUED);
    must_admin(DBT_ADMIN_EVICT, big);
    expect_grants("2");
    cr_expect_eq(units(), 2);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders:batch"), 2);
    cr_expect_eq(stat("evicted"), 1);
}

/* Drain stops grants of every class; resume grants by rank; the override is every caller's
 * limit in units. */
Test(classes, drain_resume_and_override_count_units)
{
    define("aging=0;default=;interactive:50:1:-:-;batch:50:0:-:-");
    must_admin(DBT_ADMIN_LIMIT, "3");
    cr_assert_eq(acq(tid(1, "batch", 2, 10), 10), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "batch", 2, 10), 10), DBT_ACQUIRE_QUEUED, "past the override of 3");
    must_admin(DBT_ADMIN_DRAIN, NULL);
    cr_assert_eq(acq(tid(3, "interactive", 1, 10), 10), DBT_ACQUIRE_QUEUED, "granted in a drain");
    rel(tid(1, "batch", 2, 10));
    expect_grants("");
    must_admin(DBT_ADMIN_RESUME, NULL);
    /* interactive (under its 1 of 3) first, then batch's 2 fit: 3 units */
    expect_grants("3 2");
    cr_expect_eq(units(), 3);
}

/* Renewal extends every unit of a permit; a permit Redis lost is re-asserted with all its units
 * (and its per-tag members), so it counts whole against the limit. */
Test(classes, renew_and_reassert_cover_every_unit)
{
    const char *big = tid(1, "batch", 3, 4);
    cr_assert_eq(acq(big, 4), DBT_ACQUIRE_GRANTED);
    char m3[96];
    snprintf(m3, sizeof m3, "%s#3", big);
    long long before = test_redis_int(&fx_redis, "ZSCORE " P "holders %s", m3);
    usleep(20 * 1000);
    char *held[] = {(char *)big};
    renew(held, 1, NULL, 0);
    long long after = test_redis_int(&fx_redis, "ZSCORE " P "holders %s", m3);
    cr_expect_gt(after, before, "the third unit was not renewed (%lld, %lld)", before, after);
    cr_expect_eq(test_redis_int(&fx_redis, "ZSCORE " P "holders:batch %s", m3), after);
    /* the holders deleted by hand: data lost; the renewal puts all three units back */
    cr_assert_eq(test_redis_int(&fx_redis, "DEL " P "holders " P "holders:batch"), 2);
    renew(held, 1, NULL, 0);
    cr_expect_eq(units(), 3, "re-asserted with %lld units", units());
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders:batch"), 3);
    cr_expect_eq(stat("reasserted"), 1);
}

/* A waiter cancelled leaves its tag's queue too; expired ones are reaped from both. */
Test(classes, cancel_leaves_the_tag_queue)
{
    define("aging=0;default=;batch:50:0:-:-");
    cr_assert_eq(acq(tid(1, "batch", 1, 1), 1), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, "batch", 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(tid(3, NULL, 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue:batch"), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue:-"), 1);
    cr_expect_eq(cancel(tid(2, "batch", 1, 1)), DBT_CANCEL_WITHDRAWN);
    cr_expect_eq(cancel(tid(3, NULL, 1, 1)), DBT_CANCEL_WITHDRAWN);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS " P "queue:batch " P "queue:-"), 0);
    cr_expect_eq(cancel(tid(1, "batch", 1, 1)), DBT_CANCEL_RETURNED);
    cr_expect_eq(units(), 0);
}

/* ---- definitions: the operator's, a worker's, validation, status --------------------------- */

Test(classes, admin_validates_and_names_the_bad_value)
{
    char err[DBT_ERRLEN];
    cr_expect_not(admin(DBT_ADMIN_CLASS_SET, "Bad:10:0:-:-", err));
    cr_expect(strstr(err, "ERR dbthrottle") && strstr(err, "Bad"), "%s", err);
    cr_expect_not(admin(DBT_ADMIN_CLASS_SET, "a:101:0:-:-", err));
    cr_expect(strstr(err, "101"), "%s", err);
    cr_expect_not(admin(DBT_ADMIN_CLASS_SET, "a:10:2000:-:-", err));
    cr_expect(strstr(err, "2000"), "%s", err);
    cr_expect_not(admin(DBT_ADMIN_CLASS_SET, "a:10:0:soon:-", err));
    cr_expect(strstr(err, "soon"), "%s", err);
    cr_expect(admin(DBT_ADMIN_CLASS_SET, "a:60:0:-:-", err), "%s", err);
    cr_expect_not(admin(DBT_ADMIN_CLASS_SET, "b:50:0:-:-", err));
    cr_expect(strstr(err, "110"), "the sum is not named: %s", err);
    cr_expect_not(admin(DBT_ADMIN_AGING, "-5", err));
    cr_expect_not(admin(DBT_ADMIN_CLASS_CLEAR, "nosuch", err));
    cr_expect(strstr(err, "nosuch"), "%s", err);
    cr_expect(admin(DBT_ADMIN_AGING, "30000", err), "%s", err);
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommand(rc, "GET " P "classes");
    cr_expect(rep && rep->type == REDIS_REPLY_STRING &&
                  strcmp(rep->str, "aging=30000;default=;a:60:0:-:-") == 0,
              "definitions: %s", rep && rep->str ? rep->str : "(none)");
    freeReplyObject(rep);
    redisFree(rc);
    cr_expect(admin(DBT_ADMIN_CLASS_CLEAR, "*", err), "%s", err);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS " P "classes"), 0);
}

/* A worker's shipped definitions apply while the operator has none; the operator's win. */
Test(classes, shipped_definitions_apply_until_the_operator_defines)
{
    dbt_acquire_reply r =
        acquire_with(tid(1, "web", 1, 4), 4, false, "aging=0;default=;web:50:1:250:-");
    cr_expect_eq(r.status, DBT_ACQUIRE_GRANTED);
    cr_expect_str_eq(r.class_name, "web");
    cr_expect_eq(r.class_wait_ms, 250);
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P "classes_seen"), 0, "shipped without a TTL");
    /* invalid shipped text is not written */
    acquire_with(tid(2, "web", 1, 4), 4, false, "web:500:1:-:-");
    r = acquire_with(tid(3, "web", 1, 4), 4, true, NULL);
    cr_expect_eq(r.class_wait_ms, 250, "bad shipped text replaced good");
    define("aging=0;default=;web:50:1:-:-");
    r = acquire_with(tid(4, "web", 1, 4), 4, true, "aging=0;default=;web:50:1:250:-");
    cr_expect_eq(r.class_wait_ms, -1, "the shipped definitions won over the operator's");
}

Test(classes, status_reports_each_class)
{
    define("aging=1000;default=batch;interactive:75:1:-:-;batch:25:0:-:10");
    cr_assert_eq(acq(tid(1, "batch", 3, 4), 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(2, NULL, 1, 4), 4), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(tid(3, "interactive", 1, 4), 4), DBT_ACQUIRE_QUEUED);
    dbt_script_call c;
    dbt_build_status(&c, &keys, 0);
    dbt_status_reply s;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_status, &s, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    dbt_status_kind *k = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(k->nholders, 4, "units in use");
    cr_expect_eq(k->nh, 2, "unit members listed as holders");
    for (int i = 0; i < k->nh; i++)
        if (strstr(k->holders[i].permit, ".batch."))
            cr_expect(k->holders[i].weight == 3 && strcmp(k->holders[i].klass, "batch") == 0);
    cr_expect_eq(k->aging_ms, 1000);
    cr_expect_not(k->classes_shipped);
    cr_assert_eq(k->nclasses, 2, "%d classes", k->nclasses);
    dbt_status_class *in = &k->classes[0], *ba = &k->classes[1];
    cr_expect_str_eq(in->name, "interactive");
    cr_expect_eq(in->guarantee, 3);
    cr_expect_eq(in->held, 0);
    cr_expect_eq(in->waiters, 1);
    cr_expect_str_eq(ba->name, "batch");
    cr_expect(ba->is_default);
    cr_expect_eq(ba->guarantee, 1);
    cr_expect_eq(ba->held, 4, "batch holds its 3 and the untagged 1: %lld", ba->held);
    cr_expect_eq(ba->borrowed, 3);
    cr_expect_eq(ba->cap, 10);
    dbt_status_free(&s);
}

/* ---- found in review ------------------------------------------------------------------------ */

/* Untagged waiters queued while classes were defined sit in the "-" tag queue too; granted after
 * the operator cleared every class (FIFO, no definitions), they must leave it as well: else,
 * once classes are defined again, they count as waiters of the default class (its queue cap
 * refuses a command although one waiter waits, and status shows them). */
Test(classes, untagged_waiters_granted_without_classes_leave_the_tag_queue)
{
    define("aging=0;default=;interactive:50:0:-:-");
    cr_assert_eq(acq(tid(1, NULL, 1, 1), 1), DBT_ACQUIRE_GRANTED);
    for (int i = 2; i <= 21; i++)
        cr_assert_eq(acq(tid(i, NULL, 1, 1), 1), DBT_ACQUIRE_QUEUED, "waiter %d", i);
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD " P "queue:-"), 20);
    must_admin(DBT_ADMIN_CLASS_CLEAR, "*");
    for (int i = 1; i <= 20; i++)
        rel(tid(i, NULL, 1, 1)); /* each release grants the next, FIFO */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 0);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue:-"), 0,
                 "granted waiters left behind in the tag queue: %lld",
                 test_redis_int(&fx_redis, "ZCARD " P "queue:-"));
    /* classes again, the default class capped at 5: one waiter queued, a second must queue too */
    must_admin(DBT_ADMIN_CLASS_SET, "web:50:0:-:5:default");
    cr_assert_eq(acq(tid(30, NULL, 1, 1), 1), DBT_ACQUIRE_QUEUED);
    cr_expect_eq(acq(tid(31, NULL, 1, 1), 1), DBT_ACQUIRE_QUEUED,
                 "refused by a cap of 5 with one waiter queued");
}

/* An evict naming one of a weighted permit's unit members ("id#2", as ZRANGE of the holders
 * shows them) evicts the permit, all its units: never a unit alone (the permit would run on with
 * fewer units counted than it takes, and its process would never learn of the eviction). */
Test(classes, evict_of_a_unit_member_evicts_the_whole_permit)
{
    const char *big = tid(1, "batch", 3, 3);
    cr_assert_eq(acq(big, 3), DBT_ACQUIRE_GRANTED);
    char unit[96];
    snprintf(unit, sizeof unit, "%s#2", big);
    must_admin(DBT_ADMIN_EVICT, unit);
    cr_expect_eq(units(), 0, "%lld units left held", units());
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders:batch"), 0);
    cr_expect_eq(acq(tid(2, "batch", 1, 3), 3), DBT_ACQUIRE_GRANTED);
    cr_expect_eq(units(), 1);
}

/* ---- a random walk over the scripts, the invariants checked after each step ---------------- */

/* The members of a ZSET key, as a reply (freed by the caller). */
static redisReply *members(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "ZRANGE %s 0 -1", key);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    return r;
}

/* A random permit id of the pool's ids (base ids only), from key; NULL when empty. */
static const char *pick_of(redisContext *rc, const char *key, unsigned *seed, char *out)
{
    redisReply *r = members(rc, key);
    const char *got = NULL;
    size_t n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (!strchr(r->element[i]->str, '#'))
            n++;
    if (n) {
        size_t k = (size_t)rand_r(seed) % n;
        for (size_t i = 0; i < r->elements; i++)
            if (!strchr(r->element[i]->str, '#') && k-- == 0) {
                snprintf(out, 96, "%s", r->element[i]->str);
                got = out;
                break;
            }
    }
    freeReplyObject(r);
    return got;
}

/* Units never above the limit; no waiter left queued while nothing is held (every weight fits
 * an empty pool); every tag queue's member queued; the tag holders' units held. */
static void check_invariants(redisContext *rc, int limit, int step)
{
    long long u = units(), q = test_redis_int(&fx_redis, "ZCARD " P "queue");
    bool drained = test_redis_int(&fx_redis, "EXISTS " P "drain") == 1;
    cr_assert_leq(u, limit, "step %d: %lld units held, limit %d", step, u, limit);
    cr_assert(drained || stat("quarantines") > 0 || !(q > 0 && u == 0),
              "step %d: %lld queued, nothing held", step, q);
    redisReply *tags = members(rc, P "tags");
    for (size_t t = 0; t < tags->elements; t++) {
        char key[160];
        snprintf(key, sizeof key, P "queue:%s", tags->element[t]->str);
        redisReply *tq = members(rc, key);
        for (size_t i = 0; i < tq->elements; i++)
            cr_assert_neq(test_redis_int(&fx_redis, "ZSCORE " P "queue %s", tq->element[i]->str),
                          -1000, "step %d: %s in %s, not queued", step, tq->element[i]->str, key);
        freeReplyObject(tq);
        snprintf(key, sizeof key, P "holders:%s", tags->element[t]->str);
        redisReply *th = members(rc, key);
        for (size_t i = 0; i < th->elements; i++)
            cr_assert(holds(th->element[i]->str), "step %d: %s in %s, not held", step,
                      th->element[i]->str, key);
        freeReplyObject(th);
    }
    freeReplyObject(tags);
    /* OWN: per owner ("<cid>" or "<cid>/<tag>.<w>"), its waiters queued */
    redisReply *own = redisCommand(rc, "HGETALL " P "owners");
    cr_assert(own && own->type == REDIS_REPLY_ARRAY);
    redisReply *qm = members(rc, P "queue");
    long long total = 0;
    for (size_t i = 0; i + 1 < own->elements; i += 2) {
        const char *owner = own->element[i]->str;
        if (strcmp(owner, "*") == 0)
            continue;
        long long n = 0;
        for (size_t j = 0; j < qm->elements; j++) {
            char k[33], o[96];
            int w, l;
            cr_assert(dbt_parse_id_shape(qm->element[j]->str, k, &w, &l));
            if (k[0])
                snprintf(o, sizeof o, CID "/%s.%d", k, w);
            else
                snprintf(o, sizeof o, CID);
            n += strcmp(o, owner) == 0;
        }
        cr_assert_eq(atoll(own->element[i + 1]->str), n, "step %d: owners[%s] = %s, %lld queued",
                     step, owner, own->element[i + 1]->str, n);
        total += n;
    }
    cr_assert_eq(total, (long long)qm->elements, "step %d: owners count %lld of %zu waiters", step,
                 total, qm->elements);
    freeReplyObject(qm);
    freeReplyObject(own);
}

Test(classes, a_random_walk_keeps_the_limit_and_never_stalls, .timeout = 120)
{
    static const char *const klass[] = {NULL, "a", "b", "zz", "-"};
    static const char *const defs[] = {"aging=0;default=;a:50:1:-:-;b:25:0:-:-",
                                       "aging=0;default=b;a:75:0:-:3;b:25:1:-:-",
                                       "aging=1;default=a;a:10:0:-:-", ""};
    const int limit = 4;
    unsigned seed = getenv("WALK_SEED") ? (unsigned)atoi(getenv("WALK_SEED")) : 17;
    redisContext *rc = test_redis_connect(&fx_redis);
    int serial = 0;
    for (int step = 0; step < 600; step++) {
        int op = rand_r(&seed) % 100;
        char id[96];
        if (op < 45) {
            const char *k = klass[rand_r(&seed) % 5];
            int w = k ? 1 + rand_r(&seed) % (limit + 1) : 1; /* limit + 1: clamped */
            int l = rand_r(&seed) % 3 ? limit : limit / 2;
            acq(tid(++serial, k, w, l), l);
        } else if (op < 75) {
            if (pick_of(rc, P "holders", &seed, id))
                rel(id);
        } else if (op < 85) {
            if (pick_of(rc, P "queue", &seed, id))
                cancel(id);
        } else if (op < 89) {
            if (pick_of(rc, P "holders", &seed, id))
                must_admin(DBT_ADMIN_EVICT, id);
        } else if (op < 97) {
            const char *d = defs[rand_r(&seed) % 4];
            if (d[0])
                define(d);
            else
                must_admin(DBT_ADMIN_CLASS_CLEAR, "*");
            /* a pump, as the next call would make */
            if (pick_of(rc, P "holders", &seed, id))
                rel(id);
        } else if (op < 98) {
            must_admin(rand_r(&seed) % 2 ? DBT_ADMIN_DRAIN : DBT_ADMIN_RESUME, NULL);
        } else if (op < 99) {
            if (rand_r(&seed) % 2)
                must_admin(DBT_ADMIN_LIMIT, rand_r(&seed) % 2 ? "2" : "3");
            else
                must_admin(DBT_ADMIN_CLEAR, NULL);
        } else {
            char h[96], w[96];
            char *hp = (char *)pick_of(rc, P "holders", &seed, h);
            char *wp = (char *)pick_of(rc, P "queue", &seed, w);
            renew(hp ? &hp : NULL, hp ? 1 : 0, wp ? &wp : NULL, wp ? 1 : 0);
        }
        check_invariants(rc, limit, step);
    }
    cr_log_info("queued %lld, granted %lld, clamped %lld, capped %lld, aged %lld, evicted %lld",
                stat("queued"), stat("grants"), stat("clamped"), stat("capped"), stat("aged"),
                stat("evicted"));
    redisFree(rc);
}
