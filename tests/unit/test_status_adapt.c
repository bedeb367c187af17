/* status.lua's last two fields per semaphore (issue 20): the override's PTTL and the adaptive
 * controller's record (HGETALL of "<override key>:adapt"), parsed by dbt_parse_status from RESP
 * bytes through hiredis' own reader. The record's fields are all text, written by another program
 * (dbthrottle adapt, or anyone with write access to Redis): a field missing or malformed is named
 * in `unreadable`, never a failed parse or a crash; a reply of the wrong shape still fails with a
 * message naming the script. */
#include "script_protocol.h"

#include <criterion/criterion.h>
#include <hiredis.h>
#include <string.h>

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

/* A semaphore's first 16 fields (limit seen 4, override "12", nothing held, no classes, no
 * histograms, no lapsed holders), no sole owner, then what the test appends. */
#define KIND19(tail)                                                                               \
    "*19\r\n$1\r\n4\r\n$2\r\n12\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n$-1\r\n"              \
    "*2\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n:0\r\n*0\r\n$-1\r\n" tail
/* The same of an older status.lua: 16 fields, no PTTL and no record. */
#define KIND16                                                                                     \
    "*16\r\n$1\r\n4\r\n$2\r\n12\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n$-1\r\n"              \
    "*2\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n:0\r\n*0\r\n"
#define NO_ADAPT KIND19(":-2\r\n*0\r\n")

static dbt_status_reply parse_ok(const char *resp)
{
    redisReply *r = reply_of(resp);
    dbt_status_reply s;
    char err[DBT_ERRLEN] = "";
    cr_assert(dbt_parse_status(r, &s, err), "%s", err);
    freeReplyObject(r); /* the record is a copy */
    return s;
}

Test(status_adapt, a_leading_controller_by_name)
{
    dbt_status_reply s =
        parse_ok("*3\r\n:5000\r\n" KIND19(":29000\r\n*26\r\n"
                                          "$5\r\nowner\r\n$26\r\nweb1:4242:0123456789abcdef\r\n"
                                          "$4\r\nhost\r\n$4\r\nweb1\r\n"
                                          "$3\r\npid\r\n$4\r\n4242\r\n"
                                          "$11\r\nlease_until\r\n$5\r\n15000\r\n"
                                          "$5\r\nsince\r\n$4\r\n1000\r\n"
                                          "$3\r\nmin\r\n$1\r\n2\r\n"
                                          "$3\r\nmax\r\n$2\r\n64\r\n"
                                          "$5\r\nlimit\r\n$2\r\n12\r\n"
                                          "$10\r\nchanged_at\r\n$4\r\n4000\r\n"
                                          "$6\r\nreason\r\n$19\r\nhold rose 40%, flat\r\n"
                                          "$6\r\nttl_ms\r\n$5\r\n30000\r\n"
                                          "$11\r\ninterval_ms\r\n$4\r\n1000\r\n"
                                          "$9\r\nwindow_ms\r\n$4\r\n5000\r\n") NO_ADAPT);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(q->override, 12);
    cr_expect_eq(q->override_pttl_ms, 29000);
    const dbt_status_adapt *a = q->adapt;
    cr_assert_not_null(a);
    cr_expect_str_eq(a->owner, "web1:4242:0123456789abcdef");
    cr_expect_str_eq(a->host, "web1");
    cr_expect_eq(a->pid, 4242);
    cr_expect_eq(a->lease_until_ms, 15000);
    cr_expect_eq(a->since_ms, 1000);
    cr_expect_eq(a->min, 2);
    cr_expect_eq(a->max, 64);
    cr_expect_eq(a->limit, 12);
    cr_expect_eq(a->changed_at_ms, 4000);
    cr_expect_str_eq(a->reason, "hold rose 40%, flat");
    cr_expect_eq(a->ttl_ms, 30000);
    cr_expect_eq(a->interval_ms, 1000);
    cr_expect_eq(a->window_ms, 5000);
    cr_expect_str_eq(a->unreadable, "");
    cr_expect_not(a->lease_unknown);
    cr_expect(dbt_status_adapt_leads(a, s.now_ms), "lease until 15000, now 5000");
    cr_expect_not(dbt_status_adapt_leads(a, 15000), "a lease runs out at its end");
    cr_expect_null(s.kind[DBT_KIND_CONN].adapt, "{} is no record");
    cr_expect_eq(s.kind[DBT_KIND_CONN].override_pttl_ms, -2);
    dbt_status_free(&s);
}

/* A resign leaves owner "" and lease_until 0: the controller no longer leads, and that is known,
 * not unreadable. Fields only a change writes (limit, reason, changed_at) may be absent. */
Test(status_adapt, resigned_and_before_any_change)
{
    dbt_status_reply s = parse_ok("*3\r\n:5000\r\n" KIND19(":-1\r\n*12\r\n"
                                                           "$5\r\nowner\r\n$0\r\n\r\n"
                                                           "$4\r\nhost\r\n$2\r\nh1\r\n"
                                                           "$3\r\npid\r\n$2\r\n77\r\n"
                                                           "$11\r\nlease_until\r\n$1\r\n0\r\n"
                                                           "$3\r\nmin\r\n$1\r\n1\r\n"
                                                           "$3\r\nmax\r\n$1\r\n8\r\n") NO_ADAPT);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(q->override_pttl_ms, -1, "set by hand");
    cr_assert_not_null(q->adapt);
    cr_expect_str_eq(q->adapt->unreadable, "");
    cr_expect_not(q->adapt->lease_unknown);
    cr_expect_not(dbt_status_adapt_leads(q->adapt, s.now_ms));
    cr_expect_eq(q->adapt->limit, 0);
    cr_expect_eq(q->adapt->changed_at_ms, 0);
    cr_expect_str_eq(q->adapt->reason, "");
    dbt_status_free(&s);
}

/* Garbage in every kind of field: parsed, each bad field named with what it holds, the numbers
 * left 0, and whether it leads unknown. */
Test(status_adapt, garbage_fields_are_named_not_fatal)
{
    dbt_status_reply s =
        parse_ok("*3\r\n:5000\r\n" KIND19(":29000\r\n*14\r\n"
                                          "$5\r\nowner\r\n$1\r\nx\r\n"
                                          "$3\r\npid\r\n$3\r\nabc\r\n"
                                          "$11\r\nlease_until\r\n$4\r\nsoon\r\n"
                                          "$3\r\nmax\r\n$2\r\n-3\r\n"
                                          "$5\r\nlimit\r\n$3\r\n12x\r\n"
                                          "$6\r\nttl_ms\r\n$0\r\n\r\n"
                                          "$7\r\nunknown\r\n$1\r\n1\r\n") NO_ADAPT);
    const dbt_status_adapt *a = s.kind[DBT_KIND_QUERY].adapt;
    cr_assert_not_null(a);
    static const char *const named[] = {"host missing", "pid not a positive integer (\"abc\")",
                                        "lease_until not a number (\"soon\")", "min missing",
                                        "max not a positive integer (\"-3\")"};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        cr_expect_not_null(strstr(a->unreadable, named[i]), "\"%s\" not in \"%s\"", named[i],
                           a->unreadable);
    cr_expect_eq(a->pid, 0);
    cr_expect_eq(a->max, 0);
    cr_expect_eq(a->limit, 0);
    cr_expect(a->lease_unknown, "an owner without a readable lease");
    cr_expect_not(dbt_status_adapt_leads(a, s.now_ms));
    dbt_status_free(&s);
}

/* min above max, an absurdly long value (cut, not overflowing), a control byte in a value (kept
 * as is here: the renderers escape it). */
Test(status_adapt, min_above_max_and_long_values)
{
    char resp[2048], host[301];
    memset(host, 'h', 300);
    host[300] = '\0';
    snprintf(resp, sizeof resp,
             "*3\r\n:5000\r\n" KIND19(":10\r\n*14\r\n"
                                      "$5\r\nowner\r\n$3\r\na:1\r\n"
                                      "$4\r\nhost\r\n$300\r\n%s\r\n"
                                      "$3\r\npid\r\n$1\r\n9\r\n"
                                      "$11\r\nlease_until\r\n$4\r\n9000\r\n"
                                      "$3\r\nmin\r\n$1\r\n9\r\n"
                                      "$3\r\nmax\r\n$1\r\n3\r\n"
                                      "$6\r\nreason\r\n$3\r\na\x1b"
                                      "b\r\n") NO_ADAPT,
             host);
    dbt_status_reply s = parse_ok(resp);
    const dbt_status_adapt *a = s.kind[DBT_KIND_QUERY].adapt;
    cr_assert_not_null(a);
    cr_expect_eq(strlen(a->host), sizeof a->host - 1);
    cr_expect_not_null(strstr(a->unreadable, "min 9 above max 3"), "%s", a->unreadable);
    cr_expect_str_eq(a->reason, "a\x1b"
                                "b");
    cr_expect(dbt_status_adapt_leads(a, s.now_ms));
    dbt_status_free(&s);
}

/* The key holds another type: status.lua passes Redis' refusal as text; the record says so. */
Test(status_adapt, a_key_of_another_type)
{
    dbt_status_reply s = parse_ok("*3\r\n:5000\r\n" KIND19(
        ":29000\r\n$65\r\nWRONGTYPE Operation against a key holding the wrong kind of value\r\n")
                                      NO_ADAPT);
    const dbt_status_adapt *a = s.kind[DBT_KIND_QUERY].adapt;
    cr_assert_not_null(a);
    cr_expect_not_null(strstr(a->unreadable, "WRONGTYPE"), "%s", a->unreadable);
    cr_expect(a->lease_unknown);
    dbt_status_free(&s);
}

/* An older status.lua (16 fields): no record, and an override taken as an operator's (PTTL -1):
 * every override was one then. */
Test(status_adapt, an_older_reply)
{
    dbt_status_reply s = parse_ok("*3\r\n:5000\r\n" KIND16 KIND16);
    cr_expect_null(s.kind[DBT_KIND_QUERY].adapt);
    cr_expect_eq(s.kind[DBT_KIND_QUERY].override_pttl_ms, -1);
    cr_expect_eq(s.kind[DBT_KIND_QUERY].override, 12);
    dbt_status_free(&s);
}

/* The wrong shape fails the parse with a message naming the script, the other kind's record freed
 * (no leak under ASan). */
Test(status_adapt, malformed)
{
    static const char *const bad[] = {
        /* the PTTL as text */
        "*3\r\n:5000\r\n" KIND19("$2\r\n10\r\n*0\r\n") NO_ADAPT,
        /* the record an integer */
        "*3\r\n:5000\r\n" KIND19(":10\r\n:1\r\n") NO_ADAPT,
        /* the record not in pairs, after a good one in the query kind */
        "*3\r\n:5000\r\n" KIND19(":10\r\n*2\r\n$3\r\npid\r\n$1\r\n1\r\n")
            KIND19(":10\r\n*1\r\n$3\r\npid\r\n"),
        /* a value an array */
        "*3\r\n:5000\r\n" KIND19(":10\r\n*2\r\n$3\r\npid\r\n*0\r\n") NO_ADAPT,
        /* 18 fields: the sole owner and the PTTL without the record */
        "*3\r\n:5000\r\n"
        "*18\r\n$1\r\n4\r\n$2\r\n12\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n$-1\r\n"
        "*2\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n:0\r\n*0\r\n$-1\r\n:10\r\n" NO_ADAPT,
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        redisReply *r = reply_of(bad[i]);
        dbt_status_reply s;
        char err[DBT_ERRLEN] = "";
        cr_expect_not(dbt_parse_status(r, &s, err), "accepted %s", bad[i]);
        cr_expect_not_null(strstr(err, "status.lua"), "message: \"%s\"", err);
        cr_expect_null(s.kind[DBT_KIND_QUERY].adapt, "freed and cleared");
        freeReplyObject(r);
    }
}
