/* The scripts' protocol without Redis (sem/script_protocol.c): each reply parser is fed RESP
 * bytes through hiredis' own reader, as a connection would deliver them, and each argument
 * builder is checked against the positions the scripts read (the scripts in lua/). A reply of the
 * wrong shape (element count, element type, nil, an error reply) gives a clear message naming the
 * script, never a crash. */
#include "script_protocol.h"

#include <criterion/criterion.h>
#include <hiredis.h>
#include <string.h>

/* The reply RESP bytes make, as a connection would read it. */
static redisReply *reply_of(const char *resp)
{
    redisReader *rd = redisReaderCreate();
    cr_assert_not_null(rd);
    cr_assert_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    void *r = NULL;
    cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK, "bad RESP in the test: %s", resp);
    cr_assert_not_null(r, "incomplete RESP in the test: %s", resp);
    redisReaderFree(rd);
    return r;
}

/* Feeds each malformed reply to parse: false, with a message naming the script. */
static void assert_rejects(dbt_reply_parser parse, const char *script, const char *const *bad,
                           size_t n, size_t out_size)
{
    for (size_t i = 0; i < n; i++) {
        redisReply *r = reply_of(bad[i]);
        char err[DBT_ERRLEN] = "";
        unsigned char out[4096]; /* the largest reply struct (status: both kinds) fits */
        cr_assert(out_size <= sizeof out);
        memset(out, 0xa5, sizeof out);
        cr_expect_not(parse(r, out, err), "%s accepted %s", script, bad[i]);
        cr_expect_not_null(strstr(err, script), "message for %s: \"%s\"", bad[i], err);
        cr_expect_not_null(strstr(err, "unexpected reply"), "message for %s: \"%s\"", bad[i], err);
        freeReplyObject(r);
    }
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- acquire.lua ----------------------------------------------------------------------------- */

Test(acquire_reply, granted_at_once)
{
    redisReply *r = reply_of("*8\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n");
    dbt_acquire_reply a;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ACQUIRE_GRANTED);
    cr_expect_eq(a.holders, 3);
    cr_expect_eq(a.queue, 0);
    cr_expect_eq(a.limit_seen, 0, "nil: the limit did not change");
    cr_expect_eq(a.ticket, 0);
    cr_expect_not(a.sole);
    freeReplyObject(r);
}

Test(acquire_reply, queued_with_a_verdict_and_another_limit)
{
    redisReply *r = reply_of("*8\r\n:2\r\n:5\r\n:7\r\n$2\r\n10\r\n:42\r\n:1\r\n:0\r\n$-1\r\n");
    dbt_acquire_reply a;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ACQUIRE_QUEUED);
    cr_expect_eq(a.holders, 5);
    cr_expect_eq(a.queue, 7);
    cr_expect_eq(a.limit_seen, 10);
    cr_expect_eq(a.ticket, 42);
    cr_expect(a.sole);
    freeReplyObject(r);
}

Test(acquire_reply, not_granted)
{
    redisReply *r = reply_of("*8\r\n:0\r\n:5\r\n:2\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n");
    dbt_acquire_reply a;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ACQUIRE_NOT_GRANTED);
    freeReplyObject(r);
}

Test(acquire_reply, refused_by_a_class_queue_cap)
{
    redisReply *r = reply_of("*11\r\n:3\r\n:4\r\n:9\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n"
                             "$5\r\nbatch\r\n:5000\r\n:100\r\n");
    dbt_acquire_reply a;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ACQUIRE_QUEUE_FULL);
    cr_expect_str_eq(a.class_name, "batch");
    cr_expect_eq(a.class_wait_ms, 5000);
    cr_expect_eq(a.class_cap, 100);
    freeReplyObject(r);
    /* without classes: no name, no wait, no cap */
    r = reply_of("*11\r\n:1\r\n:1\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n$-1\r\n:-1\r\n:-1\r\n");
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_str_eq(a.class_name, "");
    cr_expect_eq(a.class_wait_ms, -1);
    cr_expect_eq(a.class_cap, -1);
    freeReplyObject(r);
}

/* Shadow mode: a grant that says what enforcing would have done; a reply of the scripts before
 * shadow mode (11 fields) reads as "would have run". */
Test(acquire_reply, shadow_says_what_enforcing_would_have_done)
{
    redisReply *r = reply_of("*12\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n"
                             "$-1\r\n:-1\r\n:-1\r\n:1\r\n");
    dbt_acquire_reply a;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ACQUIRE_GRANTED);
    cr_expect_eq(a.would, DBT_WOULD_WAIT);
    freeReplyObject(r);
    r = reply_of("*11\r\n:1\r\n:1\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n$-1\r\n:-1\r\n:-1\r\n");
    cr_assert(dbt_parse_acquire(r, &a, err), "%s", err);
    cr_expect_eq(a.would, DBT_WOULD_RUN);
    freeReplyObject(r);
}

Test(acquire_reply, malformed)
{
    static const char *const bad[] = {
        "*7\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n$-1\r\n",                  /* one short */
        "*9\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",      /* one more */
        "*0\r\n",                                                              /* empty */
        "*-1\r\n",                                                             /* nil array */
        "$-1\r\n",                                                             /* nil */
        ":1\r\n",                                                              /* an integer */
        "$2\r\nok\r\n",                                                        /* a string */
        "-ERR something\r\n",                                                  /* an error reply */
        "*8\r\n$1\r\n1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",       /* status as text */
        "*8\r\n:1\r\n$-1\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",           /* holders nil */
        "*8\r\n:1\r\n:3\r\n:0\r\n*0\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",             /* seen an array */
        "*8\r\n:1\r\n:3\r\n:0\r\n:5\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",             /* seen an integer */
        "*8\r\n:1\r\n:3\r\n:0\r\n$-1\r\n*1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",      /* ticket an array */
        "*8\r\n:9\r\n:3\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n",            /* unknown status */
        "*8\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:0\r\n-ERR in place\r\n:0\r\n$-1\r\n", /* an error element
                                                                                */
        "*11\r\n:1\r\n:1\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n:7\r\n:-1\r\n:-1\r\n", /* class
                                                                                   an integer */
        "*11\r\n:1\r\n:1\r\n:0\r\n$-1\r\n:0\r\n:0\r\n:0\r\n$-1\r\n$-1\r\n$1\r\n5\r\n:-1\r\n", /* wait
                                                                                   text */
    };
    assert_rejects(dbt_parse_acquire, "acquire.lua", bad, N(bad), sizeof(dbt_acquire_reply));
}

/* ---- release.lua, cancel.lua ----------------------------------------------------------------- */

Test(release_reply, held_or_not)
{
    char err[DBT_ERRLEN];
    bool held = false;
    redisReply *r = reply_of(":1\r\n");
    cr_assert(dbt_parse_release(r, &held, err), "%s", err);
    cr_expect(held);
    freeReplyObject(r);
    r = reply_of(":0\r\n");
    cr_assert(dbt_parse_release(r, &held, err), "%s", err);
    cr_expect_not(held);
    freeReplyObject(r);
}

Test(release_reply, malformed)
{
    static const char *const bad[] = {"$-1\r\n", "$1\r\n1\r\n", "*1\r\n:1\r\n", "-ERR x\r\n",
                                      "+OK\r\n"};
    assert_rejects(dbt_parse_release, "release.lua", bad, N(bad), sizeof(bool));
}

Test(cancel_reply, each_outcome)
{
    static const struct {
        const char *resp;
        dbt_cancel_outcome want;
    } cases[] = {{":0\r\n", DBT_CANCEL_WITHDRAWN},
                 {":1\r\n", DBT_CANCEL_RETURNED},
                 {":-1\r\n", DBT_CANCEL_UNKNOWN}};
    for (size_t i = 0; i < N(cases); i++) {
        char err[DBT_ERRLEN];
        dbt_cancel_outcome got;
        redisReply *r = reply_of(cases[i].resp);
        cr_assert(dbt_parse_cancel(r, &got, err), "%s", err);
        cr_expect_eq(got, cases[i].want, "%s", cases[i].resp);
        freeReplyObject(r);
    }
}

Test(cancel_reply, malformed)
{
    static const char *const bad[] = {":2\r\n",       ":-2\r\n",         "$-1\r\n", "$1\r\n1\r\n",
                                      "*1\r\n:1\r\n", "-NOSCRIPT x\r\n", "*-1\r\n"};
    assert_rejects(dbt_parse_cancel, "cancel.lua", bad, N(bad), sizeof(dbt_cancel_outcome));
}

/* ---- renew.lua ------------------------------------------------------------------------------- */

Test(renew_reply, named_lists_and_counts)
{
    redisReply *r = reply_of("*9\r\n"
                             "*2\r\n$3\r\nh.1\r\n$3\r\nh.2\r\n"
                             "*1\r\n$3\r\nw.1\r\n"
                             "*0\r\n"
                             "*2\r\n:4\r\n:0\r\n"
                             "*2\r\n:1\r\n:0\r\n"
                             "*2\r\n:2500\r\n:0\r\n"
                             "*2\r\n$4\r\nlost\r\n$-1\r\n"
                             "*2\r\n:3\r\n:0\r\n"
                             "*2\r\n$16\r\n0123456789abcdef\r\n$-1\r\n");
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_renew(r, &rr, err), "%s", err);
    cr_expect_eq(rr.lost_holders.n, 2);
    cr_expect_str_eq(dbt_reply_id(&rr.lost_holders, 0), "h.1");
    cr_expect_str_eq(dbt_reply_id(&rr.lost_holders, 1), "h.2");
    cr_expect_eq(rr.lost_waiters.n, 1);
    cr_expect_str_eq(dbt_reply_id(&rr.lost_waiters, 0), "w.1");
    cr_expect_eq(rr.granted_waiters.n, 0);
    cr_expect_eq(rr.queue[DBT_KIND_QUERY], 4);
    cr_expect_eq(rr.queue[DBT_KIND_CONN], 0);
    cr_expect(rr.handover_allowed[DBT_KIND_QUERY]);
    cr_expect_not(rr.handover_allowed[DBT_KIND_CONN]);
    cr_expect_eq(rr.quarantine_ms[DBT_KIND_QUERY], 2500);
    cr_expect_str_eq(rr.why[DBT_KIND_QUERY], "lost");
    cr_expect_str_eq(rr.why[DBT_KIND_CONN], "", "none");
    cr_expect_eq(rr.reasserted[DBT_KIND_QUERY], 3);
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_QUERY], "0123456789abcdef", "a host group's G");
    cr_expect_str_eq(rr.sole_owner[DBT_KIND_CONN], "", "none");
    cr_expect_eq(rr.now_ms, 0, "a reply of the scripts before now says no time");
    freeReplyObject(r);
}

Test(renew_reply, malformed)
{
    static const char *const bad[] = {
        "*8\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n*2\r\n:"
        "0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* one short */
        "*9\r\n*0\r\n*0\r\n*0\r\n*1\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-"
        "1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* one kind */
        "*9\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*3\r\n:1\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*"
        "2\r\n$-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* three kinds */
        "*9\r\n*1\r\n:7\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*"
        "2\r\n$-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* an id integer */
        "*9\r\n*0\r\n*1\r\n$-1\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*"
        "2\r\n$-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* an id nil */
        "*9\r\n*0\r\n*0\r\n*1\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*"
        "2\r\n$-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* an id array */
        "*9\r\n$-1\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-"
        "1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* a list nil */
        "*9\r\n*0\r\n*0\r\n*0\r\n*2\r\n$1\r\n0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$"
        "-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* a length text */
        "*9\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-"
        "1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* allowed nil */
        "*9\r\n*0\r\n*0\r\n*0\r\n:2\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n*"
        "2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n", /* lengths integer */
        "*9\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-"
        "1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*2\r\n:7\r\n$-1\r\n", /* a sole owner integer */
        "*9\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n*2\r\n:0\r\n:0\r\n*2\r\n$-"
        "1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n*1\r\n$-1\r\n", /* sole owners of one kind */
        "-ERR oom\r\n",
        "$-1\r\n",
        "*0\r\n",
    };
    assert_rejects(dbt_parse_renew, "renew.lua", bad, N(bad), sizeof(dbt_renew_reply));
}

/* ---- status.lua ------------------------------------------------------------------------------ */

/* A semaphore as status.lua reports it: limit seen "4", no override, not drained, 2 holders
 * (listed oldest last, to see them sorted), 1 waiter, two counters and an unknown field. */
#define STATUS_KIND                                                                                \
    "*10\r\n$1\r\n4\r\n$-1\r\n:0\r\n:2\r\n:1\r\n"                                                  \
    "*6\r\n"                                                                                       \
    "$3\r\nb.2\r\n$4\r\n9000\r\n$20\r\n2000 hostb 22 conn-b\r\n"                                   \
    "$3\r\na.1\r\n$4\r\n8000\r\n$20\r\n1000 hosta 11 conn-a\r\n"                                   \
    "*2\r\n$3\r\nc.3\r\n$0\r\n\r\n"                                                                \
    "*6\r\n$6\r\ngrants\r\n$2\r\n12\r\n$7\r\nwait_ms\r\n$3\r\n345\r\n$5\r\nother\r\n$1\r\n9\r\n"   \
    ":1200\r\n$7\r\nchanged\r\n"

#define EMPTY_KIND "*10\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n$-1\r\n"

Test(status_reply, a_snapshot_by_name)
{
    redisReply *r = reply_of("*3\r\n:5000\r\n" STATUS_KIND EMPTY_KIND);
    dbt_status_reply s;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_status(r, &s, err), "%s", err);
    freeReplyObject(r); /* the entries are copies */
    cr_expect_eq(s.now_ms, 5000);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(q->limit_seen, 4);
    cr_expect_eq(q->override, 0);
    cr_expect_not(q->drained);
    cr_expect_eq(q->nholders, 2);
    cr_expect_eq(q->nwaiters, 1);
    cr_assert_eq(q->nh, 2);
    cr_expect_str_eq(q->holders[0].permit, "a.1", "oldest grant first");
    cr_expect_str_eq(q->holders[0].host, "hosta");
    cr_expect_eq(q->holders[0].pid, 11);
    cr_expect_str_eq(q->holders[0].conn, "conn-a");
    cr_expect_eq(q->holders[0].since_ms, 1000);
    cr_expect_eq(q->holders[0].expiry_ms, 8000);
    cr_expect_str_eq(q->holders[1].permit, "b.2");
    cr_assert_eq(q->nw, 1);
    cr_expect_str_eq(q->waiters[0].permit, "c.3");
    cr_expect_str_eq(q->waiters[0].host, "", "no info: fields stay empty");
    cr_expect_eq(q->counters[DBT_CTR_GRANTS], 12);
    cr_expect_eq(q->counters[DBT_CTR_WAIT_MS], 345);
    cr_expect_eq(q->counters[DBT_CTR_QUEUED], 0);
    cr_expect_eq(q->quarantine_ms, 1200);
    cr_expect_str_eq(q->why, "changed");
    cr_expect(q->used);
    cr_expect_not(s.kind[DBT_KIND_CONN].used);
    dbt_status_free(&s);
}

Test(status_reply, malformed)
{
    static const char *const bad[] = {
        "*2\r\n:5000\r\n" EMPTY_KIND,                       /* one kind */
        "*4\r\n:5000\r\n" EMPTY_KIND EMPTY_KIND EMPTY_KIND, /* three kinds */
        "*3\r\n*0\r\n" EMPTY_KIND EMPTY_KIND,               /* now an array */
        "*3\r\n:5000\r\n:1\r\n" EMPTY_KIND,                 /* a kind an integer */
        "*3\r\n:5000\r\n*9\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n" EMPTY_KIND,
        "*3\r\n:5000\r\n" STATUS_KIND
        "*10\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n$-1\r\n:0\r\n$-1\r\n",
        /* why an integer */
        "*3\r\n:5000\r\n" EMPTY_KIND
        "*10\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n:1\r\n",
        /* holders not in threes (the query kind's entries must be freed, not leaked) */
        "*3\r\n:5000\r\n" STATUS_KIND
        "*10\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*2\r\n$1\r\na\r\n:1\r\n*0\r\n*0\r\n:0\r\n$-1\r\n",
        /* a holder's id an integer */
        "*3\r\n:5000\r\n*8\r\n$-1\r\n$-1\r\n:0\r\n:1\r\n:0\r\n*3\r\n:1\r\n:2\r\n$0\r\n\r\n*0\r\n*"
        "0\r\n" EMPTY_KIND,
        /* a waiter's id nil */
        "*3\r\n:5000\r\n*8\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:1\r\n*0\r\n*2\r\n$-1\r\n$0\r\n\r\n*"
        "0\r\n" EMPTY_KIND,
        /* the holders' count an array */
        "*3\r\n:5000\r\n*8\r\n$-1\r\n$-1\r\n:0\r\n*0\r\n:0\r\n*0\r\n*0\r\n*0\r\n" EMPTY_KIND,
        "-ERR busy\r\n",
        "$-1\r\n",
    };
    assert_rejects(dbt_parse_status, "status.lua", bad, N(bad), sizeof(dbt_status_reply));
}

/* A reply with the lapsed holders (status.lua since drain --wait refuses them): the count in
 * units and the permits whose lease ran out without a release; a 14-field reply (without them)
 * still parses, with none. */
Test(status_reply, lapsed_holders)
{
    redisReply *r = reply_of("*3\r\n:5000\r\n"
                             "*16\r\n$1\r\n1\r\n$-1\r\n:1\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n"
                             "$-1\r\n*2\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n:2\r\n"
                             "*3\r\n$3\r\nd.4\r\n$4\r\n4000\r\n$20\r\n3000 hostd 44 conn-d\r\n"
                             "*14\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n"
                             "$-1\r\n*2\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n");
    dbt_status_reply s;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_status(r, &s, err), "%s", err);
    freeReplyObject(r);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(q->nholders, 0);
    cr_expect_eq(q->nlapsed, 2, "units, as nholders");
    cr_assert_eq(q->nl, 1);
    cr_expect_str_eq(q->lapsed[0].permit, "d.4");
    cr_expect_eq(q->lapsed[0].pid, 44);
    cr_expect_eq(q->lapsed[0].expiry_ms, 4000);
    cr_expect_eq(s.kind[DBT_KIND_CONN].nlapsed, 0);
    cr_expect_eq(s.kind[DBT_KIND_CONN].nl, 0);
    dbt_status_free(&s);
}

/* ---- admin.lua ------------------------------------------------------------------------------- */

Test(admin_reply, evicted_and_not)
{
    char err[DBT_ERRLEN];
    dbt_admin_reply a;
    redisReply *r = reply_of("*5\r\n:1\r\n:3\r\n:1\r\n$16\r\n1000 h 42 conn-7\r\n:2500\r\n");
    cr_assert(dbt_parse_admin(r, &a, err), "%s", err);
    cr_expect_eq(a.granted, 1);
    cr_expect_eq(a.holders, 3);
    cr_expect(a.evicted);
    cr_expect_str_eq(a.info, "1000 h 42 conn-7");
    cr_expect_eq(a.now_ms, 2500);
    freeReplyObject(r);
    r = reply_of("*5\r\n:0\r\n:2\r\n:0\r\n$-1\r\n:2600\r\n");
    cr_assert(dbt_parse_admin(r, &a, err), "%s", err);
    cr_expect_not(a.evicted);
    cr_expect_str_eq(a.info, "");
    cr_expect_eq(a.now_ms, 2600);
    freeReplyObject(r);
}

Test(admin_reply, malformed)
{
    static const char *const bad[] = {
        "*2\r\n:1\r\n:3\r\n",
        "*4\r\n:1\r\n:3\r\n:0\r\n$-1\r\n",
        "*6\r\n:1\r\n:3\r\n:0\r\n$-1\r\n:1\r\n:1\r\n",
        "*5\r\n$1\r\n1\r\n:3\r\n:0\r\n$-1\r\n:1\r\n",
        "*5\r\n:1\r\n:3\r\n:0\r\n*0\r\n:1\r\n",
        "*5\r\n:1\r\n:3\r\n:0\r\n$-1\r\n$-1\r\n",
        "-ERR admin.lua: unknown operation x\r\n",
        ":1\r\n",
    };
    assert_rejects(dbt_parse_admin, "admin.lua", bad, N(bad), sizeof(dbt_admin_reply));
}

/* ---- argument builders ----------------------------------------------------------------------- */

static dbt_keys keys;
static const dbt_config cfg = {.lease_ms = 3000, .redis_timeout_ms = 1000};

static void make_keys(void)
{
    cr_assert(dbt_keys_init(&keys, "dbt:", "p"));
}

static void free_keys(void)
{
    dbt_keys_free(&keys);
}

static void expect_base(const dbt_script_call *c, const char *kind)
{
    cr_expect_str_eq(c->args[DBT_ARG_WAKE_PREFIX], keys.wake_prefix);
    cr_expect_str_eq(c->args[DBT_ARG_KIND], kind);
    cr_expect_str_eq(c->args[DBT_ARG_LEASE], "3000");
    cr_expect_str_eq(c->args[DBT_ARG_TTL], "9000", "three leases");
    cr_expect_str_eq(c->args[DBT_ARG_ERA_TOKEN], "", "no era check until bound to a connection");
    cr_expect_str_eq(c->args[DBT_ARG_QUARANTINE], "3000", "lease/3 + redis timeout + 1 s");
}

Test(script_args, acquire_in_the_order_acquire_lua_reads, .init = make_keys, .fini = free_keys)
{
    dbt_script_call c;
    dbt_acquire_call a = {.id = "cid.1.5", .limit = 5, .try_only = true, .who = "h 1 -"};
    dbt_build_acquire(&c, &keys, DBT_KIND_CONN, &cfg, &a);
    cr_expect_eq(c.script, &dbt_script_acquire);
    cr_expect_eq(c.nkeys, DBT_NKEYS_SENT);
    cr_expect_str_eq(c.keys[DBT_K_HOLDERS], keys.keys[DBT_KIND_CONN][DBT_K_HOLDERS]);
    cr_expect_str_eq(c.keys[DBT_K_OWNERS], keys.keys[DBT_KIND_CONN][DBT_K_OWNERS]);
    cr_expect_str_eq(c.keys[DBT_K_TAGS], keys.keys[DBT_KIND_CONN][DBT_K_TAGS]);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 7);
    expect_base(&c, "c");
    cr_expect_str_eq(c.args[9], "cid.1.5");
    cr_expect_str_eq(c.args[10], "5");
    cr_expect_str_eq(c.args[11], "1");
    cr_expect_str_eq(c.args[12], "h 1 -");
    cr_expect_str_eq(c.args[13], "", "no shipped class definitions");
    a.shipped_classes = "aging=0;default=;web:50:1:-:-";
    dbt_build_acquire(&c, &keys, DBT_KIND_CONN, &cfg, &a);
    cr_expect_str_eq(c.args[13], "aging=0;default=;web:50:1:-:-");
    cr_expect_str_eq(c.args[14], "", "no session");
    a.session = "42\x1f"
                "app\x1fuser\x1f"
                "db";
    dbt_build_acquire(&c, &keys, DBT_KIND_CONN, &cfg, &a);
    cr_expect_str_eq(c.args[14], "42\x1f"
                                 "app\x1fuser\x1f"
                                 "db");
    cr_expect_str_eq(c.args[15], "0", "enforcing");
    a.shadow = true;
    dbt_build_acquire(&c, &keys, DBT_KIND_CONN, &cfg, &a);
    cr_expect_str_eq(c.args[15], "1", "shadow mode");
}

Test(script_args, release_cancel_admin, .init = make_keys, .fini = free_keys)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, "x.1.1", -1);
    cr_expect_eq(c.script, &dbt_script_release);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 2);
    expect_base(&c, "q");
    cr_expect_str_eq(c.args[9], "x.1.1");
    cr_expect_str_eq(c.args[10], "", "a hold not known: Redis counts from the grant");
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, "x.1.1", 2500);
    cr_expect_str_eq(c.args[10], "2500");
    dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, "x.2.1", true);
    cr_expect_eq(c.script, &dbt_script_cancel);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 2);
    cr_expect_str_eq(c.args[9], "x.2.1");
    cr_expect_str_eq(c.args[10], "1");
    dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, "x.2.1", false);
    cr_expect_str_eq(c.args[10], "0");
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, DBT_ADMIN_EVICT, "x.3.1");
    cr_expect_eq(c.script, &dbt_script_admin);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 2);
    cr_expect_str_eq(c.args[9], "evict");
    cr_expect_str_eq(c.args[10], "x.3.1");
    dbt_build_admin(&c, &keys, DBT_KIND_CONN, &cfg, DBT_ADMIN_DRAIN, NULL);
    cr_expect_str_eq(c.args[9], "drain");
    cr_expect_str_eq(c.args[10], "");
}

Test(script_args, renew_counts_ids_then_local_counts, .init = make_keys, .fini = free_keys)
{
    char *held_q[] = {"q.1.1", "q.2.1"}, *queued_c[] = {"c.3.1"};
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {
        [DBT_KIND_QUERY] = {[DBT_RENEW_HELD] = {.ids = held_q, .n = 2}},
        [DBT_KIND_CONN] = {[DBT_RENEW_QUEUED] = {.ids = queued_c, .n = 1}}};
    dbt_local_counts local[DBT_NKINDS] = {{.grants = 7, .queued = 2, .wait_us = 45678}, {0}};
    const char *args[DBT_RENEW_NARGS(3)];
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    cr_expect_eq(c.script, &dbt_script_renew);
    cr_expect_eq(c.nkeys, 2 * DBT_NKEYS_SENT);
    cr_expect_str_eq(c.keys[DBT_NKEYS_SENT + DBT_K_QUEUE], keys.keys[DBT_KIND_CONN][DBT_K_QUEUE]);
    cr_assert_eq(c.nargs, (int)DBT_RENEW_NARGS(3));
    expect_base(&c, "q");
    const char *want[] = {"2", "0", "0",  "1", "q.1.1", "q.2.1", "c.3.1",
                          "7", "2", "45", "0", "0",     "0"};
    for (size_t i = 0; i < N(want); i++)
        cr_expect_str_eq(c.args[DBT_BASE_ARGS + i], want[i], "ARGV[%zu]", DBT_BASE_ARGS + 1 + i);
    dbt_build_renew(&c, &keys, &cfg, NULL, local, args);
    cr_assert_eq(c.nargs, (int)DBT_RENEW_NARGS(0), "a renewal of nothing, for its counts");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS], "0");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS + 4], "7");
}

/* A whole renewal, as the renewer builds it (the ids, the record, the doings per kind, the local
 * waits, until): each group starts where renew.def's layout puts it (dbt_renew_layout, the
 * computation renew.lua's GROUP makes too: tests/sem/test_protocol.c runs that one), each argument
 * in its member's place, and nothing is left unset. */
Test(script_args, renew_groups_where_the_layout_puts_them, .init = make_keys, .fini = free_keys)
{
    char *held_q[] = {"q.1.1", "q.2.1"}, *queued_q[] = {"q.3.1"}, *held_c[] = {"c.4.1"},
         *queued_c[] = {"c.5.1", "c.6.1"};
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {
        [DBT_KIND_QUERY] = {[DBT_RENEW_HELD] = {.ids = held_q, .n = 2},
                            [DBT_RENEW_QUEUED] = {.ids = queued_q, .n = 1}},
        [DBT_KIND_CONN] = {[DBT_RENEW_HELD] = {.ids = held_c, .n = 1},
                           [DBT_RENEW_QUEUED] = {.ids = queued_c, .n = 2}}};
    dbt_local_counts local[DBT_NKINDS] = {{.grants = 7, .queued = 2, .wait_us = 45678},
                                          {.grants = 1, .queued = 0, .wait_us = 9000}};
    int total = dbt_renew_nargs(lists);
    cr_assert_eq(total, DBT_RENEW_NARGS_FIXED + 6 * DBT_RENEW_IDS_SIZE + 3 * DBT_RENEW_DOING_SIZE,
                 "six ids, three of them held");
    const char *args[DBT_RENEW_NARGS_FIXED + 9 + 1];
    for (size_t i = 0; i < N(args); i++)
        args[i] = NULL;
    long long n[DBT_RENEW_ARG_REST] = {0};
    n[DBT_RENEW_ARG_HELD_Q] = 2, n[DBT_RENEW_ARG_QUEUED_Q] = 1;
    n[DBT_RENEW_ARG_HELD_C] = 1, n[DBT_RENEW_ARG_QUEUED_C] = 2;
    int at[DBT_RENEW_NGROUPS + 1];
    cr_assert_eq(dbt_renew_layout(n, at), total);

    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    cr_expect_str_eq(c.args[DBT_RENEW_ARG_HELD_Q], "2");
    cr_expect_str_eq(c.args[DBT_RENEW_ARG_QUEUED_C], "2");
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_RECORD]);
    const char *ids[] = {"q.1.1", "q.2.1", "q.3.1", "c.4.1", "c.5.1", "c.6.1"};
    for (int i = 0; i < 6; i++)
        cr_expect_str_eq(args[at[DBT_RENEW_G_IDS] + i * DBT_RENEW_IDS_SIZE + DBT_RENEW_IDS_ID],
                         ids[i]);
    const char *counts[DBT_NKINDS][3] = {{"7", "2", "45"}, {"1", "0", "9"}};
    for (int k = 0; k < DBT_NKINDS; k++) {
        int g = at[DBT_RENEW_G_COUNTS] + k * DBT_RENEW_COUNTS_SIZE;
        cr_expect_str_eq(args[g + DBT_RENEW_COUNTS_GRANTS], counts[k][0]);
        cr_expect_str_eq(args[g + DBT_RENEW_COUNTS_QUEUED], counts[k][1]);
        cr_expect_str_eq(args[g + DBT_RENEW_COUNTS_WAIT_MS], counts[k][2]);
    }

    dbt_renew_add_record(&c, &keys, "00000000000000aa", "v1\th", 60000, true);
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_DOING]);
    cr_expect_eq(c.nkeys, 2 * DBT_NKEYS_SENT + 2, "the registry's two keys follow");
    cr_expect_str_eq(args[at[DBT_RENEW_G_RECORD] + DBT_RENEW_RECORD_CID], "00000000000000aa");
    cr_expect_str_eq(args[at[DBT_RENEW_G_RECORD] + DBT_RENEW_RECORD_RECORD], "v1\th");
    cr_expect_str_eq(args[at[DBT_RENEW_G_RECORD] + DBT_RENEW_RECORD_TTL], "60000");
    cr_expect_str_eq(args[at[DBT_RENEW_G_RECORD] + DBT_RENEW_RECORD_GOODBYE], "1");

    char *doing_q[] = {"r\x1f", "i\x1f"}, *doing_c[] = {"k\x1f"};
    dbt_renew_add_doing(&c, doing_q, 2);
    dbt_renew_add_doing(&c, doing_c, 1);
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_WAITS]);
    const char *doings[] = {"r\x1f", "i\x1f", "k\x1f"};
    for (int i = 0; i < 3; i++)
        cr_expect_str_eq(
            args[at[DBT_RENEW_G_DOING] + i * DBT_RENEW_DOING_SIZE + DBT_RENEW_DOING_DOING],
            doings[i]);

    const char *waits[DBT_NKINDS] = {". 3 0:1", ""};
    dbt_renew_add_local_hist(&c, waits);
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_BELIEVED]);
    for (int k = 0; k < DBT_NKINDS; k++)
        cr_expect_str_eq(
            args[at[DBT_RENEW_G_WAITS] + k * DBT_RENEW_WAITS_SIZE + DBT_RENEW_WAITS_WAITS],
            waits[k]);

    dbt_renew_add_until(&c, 12000000, NULL);
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_HOLDS]);
    cr_expect_eq(c.until_arg, at[DBT_RENEW_G_BELIEVED] + DBT_RENEW_BELIEVED_UNTIL);
    const char *holds[DBT_NKINDS] = {"", ". 3000 12:1"};
    dbt_renew_add_local_holds(&c, holds);
    cr_assert_eq(c.nargs, at[DBT_RENEW_G_LIVE]);
    for (int k = 0; k < DBT_NKINDS; k++)
        cr_expect_str_eq(
            args[at[DBT_RENEW_G_HOLDS] + k * DBT_RENEW_HOLDS_SIZE + DBT_RENEW_HOLDS_HOLDS],
            holds[k]);
    dbt_renew_add_live(&c, 7);
    cr_assert_eq(c.nargs, total);
    cr_expect_str_eq(args[at[DBT_RENEW_G_LIVE] + DBT_RENEW_LIVE_VERSION], "7");
    for (int i = 0; i < total; i++)
        cr_expect_not_null(args[i], "ARGV[%d] left unset", i + 1);
    cr_expect_null(args[total], "written past the layout's end");
}

/* renew.lua names a lost holder the operator evicted "<mark>:<id>" (DBT_EVICTED_*, _common.def):
 * its id and its mark; any other id is lost, unmarked (a mark is one of those letters only). */
Test(renew_reply, evicted_holders_by_their_marks)
{
    redisReply *r = reply_of("*4\r\n$7\r\ne:a.1.1\r\n$7\r\nx:b.2.1\r\n$5\r\nc.3.1\r\n"
                             "$7\r\nq:d.4.1\r\n");
    dbt_reply_ids ids = {.items = r->element, .n = r->elements};
    char mark = 1;
    cr_expect_str_eq(dbt_renew_lost_holder(&ids, 0, &mark), "a.1.1");
    cr_expect_eq(mark, DBT_EVICTED_PLAIN);
    cr_expect_str_eq(dbt_renew_lost_holder(&ids, 1, &mark), "b.2.1");
    cr_expect_eq(mark, DBT_EVICTED_CANCEL);
    cr_expect_str_eq(dbt_renew_lost_holder(&ids, 2, &mark), "c.3.1");
    cr_expect_eq(mark, 0);
    cr_expect_str_eq(dbt_renew_lost_holder(&ids, 3, &mark), "q:d.4.1");
    cr_expect_eq(mark, 0);
    freeReplyObject(r);
}

/* Redis' clock: renew.lua's last element, read as the time the renewal ran. */
Test(renew_reply, says_when_it_ran)
{
    redisReply *r = reply_of("*10\r\n*0\r\n*0\r\n*0\r\n*2\r\n:0\r\n:0\r\n*2\r\n:1\r\n:1\r\n"
                             "*2\r\n:0\r\n:0\r\n*2\r\n$-1\r\n$-1\r\n*2\r\n:0\r\n:0\r\n"
                             "*2\r\n$-1\r\n$-1\r\n:1795919822663\r\n");
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_renew(r, &rr, err), "%s", err);
    cr_expect_eq(rr.now_ms, 1795919822663LL);
    freeReplyObject(r);
}

/* renew.lua's last argument: the time until which the process believes in its leases (its
 * monotonic clock), carried to the clock of the server the call is sent to by the fresher reading
 * of that server's clock, with what it may have drifted since (1000 ppm of its age, and 2 ms);
 * "" when no reading is of that server, or no lease is named. */
Test(script_args, renew_states_until_when_on_the_servers_clock, .init = make_keys,
     .fini = free_keys)
{
    const char *args[DBT_RENEW_NARGS_FIXED];
    dbt_local_counts local[DBT_NKINDS] = {{0}, {0}};
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, NULL, local, args);
    dbt_redis_clock mine = {.run_id = "aaaa", .ahead_ms = 5000, .at_us = 10000000};
    dbt_renew_add_until(&c, 12000000, &mine);
    /* its place: after the groups left out (the record, the local waits), before the holds and
     * the live settings' version */
    cr_assert_eq(c.nargs, (int)(DBT_RENEW_NARGS_FIXED - DBT_RENEW_HOLDS_SIZE * DBT_NKINDS -
                                DBT_RENEW_LIVE_SIZE));
    const char *const *until = &c.args[c.nargs - 1];
    cr_expect_str_eq(*until, "", "not bound to a server yet");
    /* the renewer's reading (1 s old: 1 ms of drift), the connection's older */
    dbt_script_bind_clock(&c, "aaaa", 9000, 5000000, 11000000);
    cr_expect_str_eq(*until, "17003");
    /* the connection's reading is fresher (a new connection): it wins */
    dbt_script_bind_clock(&c, "aaaa", 7000, 10500000, 11000000);
    cr_expect_str_eq(*until, "19002");
    /* another server: only its connection's reading counts */
    dbt_script_bind_clock(&c, "bbbb", 100, 1000000, 11000000);
    cr_expect_str_eq(*until, "12112");
    dbt_script_bind_clock(&c, "bbbb", 0, 0, 11000000);
    cr_expect_str_eq(*until, "", "no reading of that server");
    dbt_script_bind_clock(&c, "", 0, 0, 11000000);
    cr_expect_str_eq(*until, "", "INFO refused: no server to tell");
    dbt_renew_add_until(&c, 0, &mine);
    dbt_script_bind_clock(&c, "aaaa", 9000, 5000000, 11000000);
    cr_expect_str_eq(*until, "", "no lease named");
}

Test(script_args, status_reads_without_lease, .init = make_keys, .fini = free_keys)
{
    dbt_script_call c;
    dbt_build_status(&c, &keys, 25);
    cr_expect_eq(c.script, &dbt_script_status);
    cr_expect_eq(c.nkeys, 2 * DBT_NKEYS_SENT + 2, "both kinds' keys, then the process registry's");
    cr_expect_str_eq(c.keys[2 * DBT_NKEYS_SENT], keys.procs);
    cr_expect_str_eq(c.keys[2 * DBT_NKEYS_SENT + 1], keys.procinfo);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 1);
    cr_expect_str_eq(c.args[0], keys.wake_prefix);
    cr_expect_str_eq(c.args[1], "q");
    cr_expect_str_eq(c.args[2], "0");
    cr_expect_str_eq(c.args[3], "0");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS], "25");
}

/* ---- adapt.lua (dbthrottle adapt) -------------------------------------------------------------
 */

/* adapt.lua's reply: status, owner, host, pid, lease left, override or false, its PTTL, granted,
 * now. */
#define ADAPT_REPLY(status, owner, host, pid, left, override, pttl, granted, now)                  \
    "*9\r\n" status owner host pid left override pttl granted now

Test(adapt_reply, each_status_by_name)
{
    char err[DBT_ERRLEN];
    dbt_adapt_reply a;
    redisReply *r =
        reply_of(ADAPT_REPLY("$2\r\nok\r\n", "$9\r\nh:1:00aa1\r\n", "$1\r\nh\r\n", ":1\r\n",
                             ":9500\r\n", ":12\r\n", ":29000\r\n", ":2\r\n", ":5000\r\n"));
    cr_assert(dbt_parse_adapt(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ADAPT_OK);
    cr_expect_str_eq(a.owner, "h:1:00aa1");
    cr_expect_str_eq(a.owner_host, "h");
    cr_expect_eq(a.owner_pid, 1);
    cr_expect_eq(a.lease_left_ms, 9500);
    cr_expect_eq(a.override, 12);
    cr_expect_eq(a.override_pttl, 29000);
    cr_expect_eq(a.granted, 2);
    cr_expect_eq(a.now_ms, 5000);
    freeReplyObject(r);
    /* a standby: another leads; no override (false) */
    r = reply_of(ADAPT_REPLY("$10\r\nnot_leader\r\n", "$3\r\nx:2\r\n", "$1\r\nx\r\n", ":2\r\n",
                             ":100\r\n", "$-1\r\n", ":-2\r\n", ":0\r\n", ":6000\r\n"));
    cr_assert(dbt_parse_adapt(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ADAPT_NOT_LEADER);
    cr_expect_str_eq(a.owner, "x:2");
    cr_expect_eq(a.override, 0, "no override: 0");
    cr_expect_eq(a.override_pttl, -2);
    freeReplyObject(r);
    /* the operator's limit (no TTL); nobody leads after a resignation: "" */
    r = reply_of(ADAPT_REPLY("$8\r\noperator\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n",
                             ":7\r\n", ":-1\r\n", ":0\r\n", ":7000\r\n"));
    cr_assert(dbt_parse_adapt(r, &a, err), "%s", err);
    cr_expect_eq(a.status, DBT_ADAPT_OPERATOR);
    cr_expect_str_eq(a.owner, "");
    cr_expect_eq(a.override, 7);
    cr_expect_eq(a.override_pttl, -1);
    freeReplyObject(r);
}

Test(adapt_reply, malformed)
{
    static const char *const bad[] = {
        /* too few, too many */
        "*8\r\n$2\r\nok\r\n$0\r\n\r\n$0\r\n\r\n:0\r\n:0\r\n$-1\r\n:-2\r\n:0\r\n",
        "*10\r\n$2\r\nok\r\n$0\r\n\r\n$0\r\n\r\n:0\r\n:0\r\n$-1\r\n:-2\r\n:0\r\n:1\r\n:1\r\n",
        /* an unknown status */
        ADAPT_REPLY("$4\r\nboss\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "$-1\r\n",
                    ":-2\r\n", ":0\r\n", ":1\r\n"),
        /* a status that is not a string */
        ADAPT_REPLY(":1\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "$-1\r\n", ":-2\r\n",
                    ":0\r\n", ":1\r\n"),
        /* nil owner */
        ADAPT_REPLY("$2\r\nok\r\n", "$-1\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "$-1\r\n",
                    ":-2\r\n", ":0\r\n", ":1\r\n"),
        /* a pid as text */
        ADAPT_REPLY("$2\r\nok\r\n", "$0\r\n\r\n", "$0\r\n\r\n", "$1\r\n1\r\n", ":0\r\n", "$-1\r\n",
                    ":-2\r\n", ":0\r\n", ":1\r\n"),
        /* an override as text, an array */
        ADAPT_REPLY("$2\r\nok\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "$1\r\n5\r\n",
                    ":-2\r\n", ":0\r\n", ":1\r\n"),
        ADAPT_REPLY("$2\r\nok\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "*0\r\n",
                    ":-2\r\n", ":0\r\n", ":1\r\n"),
        /* nil clock */
        ADAPT_REPLY("$2\r\nok\r\n", "$0\r\n\r\n", "$0\r\n\r\n", ":0\r\n", ":0\r\n", "$-1\r\n",
                    ":-2\r\n", ":0\r\n", "$-1\r\n"),
        "-ERR dbthrottle: adapt.lua: unknown operation x\r\n",
        ":1\r\n",
    };
    assert_rejects(dbt_parse_adapt, "adapt.lua", bad, N(bad), sizeof(dbt_adapt_reply));
}

Test(script_args, adapt_in_the_order_adapt_lua_reads, .init = make_keys, .fini = free_keys)
{
    dbt_script_call c;
    dbt_adapt_args a = {.op = DBT_ADAPT_LEASE,
                        .token = "h:1:0123456789abcdef",
                        .lease_ms = 10000,
                        .host = "h",
                        .pid = 1,
                        .min = 2,
                        .max = 64,
                        .ttl_ms = 30000,
                        .interval_ms = 1000,
                        .window_ms = 5000};
    dbt_build_adapt(&c, &keys, DBT_KIND_CONN, &cfg, &a);
    cr_expect_eq(c.script, &dbt_script_adapt);
    cr_expect_eq(c.nkeys, DBT_NKEYS_SENT);
    /* the connection semaphore's keys; its limit among them no more (keys.def, sent=no: the
     * script names it, and a worker's ACL need not let it write it) */
    cr_expect_str_eq(c.keys[DBT_K_HOLDERS], keys.keys[DBT_KIND_CONN][DBT_K_HOLDERS]);
    for (int i = 0; i < c.nkeys; i++)
        cr_expect_str_neq(c.keys[i], keys.keys[DBT_KIND_CONN][DBT_K_LIMIT]);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 10);
    expect_base(&c, "c");
    static const char *const want[] = {
        "lease", "h:1:0123456789abcdef", "10000", "h", "1", "2", "64", "30000", "1000", "5000"};
    for (int i = 0; i < 10; i++)
        cr_expect_str_eq(c.args[DBT_BASE_ARGS + i], want[i], "ARGV[%d]", DBT_BASE_ARGS + i + 1);
    a = (dbt_adapt_args){.op = DBT_ADAPT_SET, .token = "t", .limit = 17, .reason = "why"};
    dbt_build_adapt(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 4);
    expect_base(&c, "q");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS], "set");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS + 1], "t");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS + 2], "17");
    cr_expect_str_eq(c.args[DBT_BASE_ARGS + 3], "why");
    a = (dbt_adapt_args){.op = DBT_ADAPT_RESIGN, .token = "t"};
    dbt_build_adapt(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    cr_assert_eq(c.nargs, DBT_BASE_ARGS + 2);
    cr_expect_str_eq(c.args[DBT_BASE_ARGS], "resign");
}
