/* The process record (script_protocol.h): what a process sends with its renewals and dbthrottle
 * status reads back; a record with a tab or a newline in a field stays one record; status.lua's
 * reply with and without the processes. */
#include "script_protocol.h"

#include <criterion/criterion.h>
#include <hiredis.h>
#include <stdio.h>
#include <string.h>

Test(proc_record, round_trip_with_unsafe_text)
{
    dbt_proc_record r = {.pid = 42,
                         .ppid = 7,
                         .pgid = 7,
                         .unthrottled = 12,
                         .refused = 3,
                         .timeouts = 1,
                         .outage_since_ms = 1700000000000LL,
                         .outage_until_ms = 1700000005000LL,
                         .outage_unthrottled = 12,
                         .every_ms = 10000,
                         .silent_after_ms = 12000,
                         .held = 2,
                         .waiting = 1,
                         .idle_in_tx = 1};
    snprintf(r.host, sizeof r.host, "web1");
    snprintf(r.program, sizeof r.program, "my\tprog\n");
    snprintf(r.version, sizeof r.version, "0.14.0");
    snprintf(r.state, sizeof r.state, "refusing");
    snprintf(r.mode, sizeof r.mode, "closed");
    snprintf(r.reason, sizeof r.reason, "WRONGPASS: fix DBTHROTTLE_REDIS_URL");
    char text[768], stored[800];
    cr_assert(dbt_format_record(&r, text, sizeof text));
    cr_expect_null(strchr(text, '\n'), "one line");
    snprintf(stored, sizeof stored, "5000\t%s", text); /* as renew.lua stores it */
    dbt_proc_record back;
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_eq(back.seen_ms, 5000);
    cr_expect_str_eq(back.program, "my_prog_", "a tab or a newline becomes '_'");
    cr_expect_str_eq(back.host, "web1");
    cr_expect_str_eq(back.state, "refusing");
    cr_expect_str_eq(back.reason, "WRONGPASS: fix DBTHROTTLE_REDIS_URL");
    cr_expect_eq(back.pid, 42);
    cr_expect_eq(back.pgid, 7);
    cr_expect_eq(back.unthrottled, 12);
    cr_expect_eq(back.refused, 3);
    cr_expect_eq(back.outage_until_ms, 1700000005000LL);
    cr_expect_eq(back.silent_after_ms, 12000);
    cr_expect_eq(back.idle_in_tx, 1);
    cr_expect_not(dbt_parse_record("5000\tv2\tweb1", &back), "another format is not read");
    cr_expect_not(dbt_parse_record("5000\tv1\tweb1\tp", &back), "cut short");
    char small[16];
    cr_expect_not(dbt_format_record(&r, small, sizeof small), "too small a buffer");
}

static redisReply *reply_of(const char *resp)
{
    redisReader *rd = redisReaderCreate();
    cr_assert_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    void *r = NULL;
    cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK);
    cr_assert_not_null(r);
    redisReaderFree(rd);
    return r;
}

#define EMPTY_KIND "*10\r\n$-1\r\n$-1\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n:0\r\n$-1\r\n"

Test(proc_record, status_lists_the_readable_records)
{
    dbt_proc_record r = {.pid = 9, .every_ms = 3000};
    snprintf(r.host, sizeof r.host, "h");
    snprintf(r.state, sizeof r.state, "disabled");
    char text[768], resp[2048];
    cr_assert(dbt_format_record(&r, text, sizeof text));
    int len = (int)strlen(text) + 5;
    snprintf(resp, sizeof resp,
             "*4\r\n:6000\r\n" EMPTY_KIND EMPTY_KIND
             "*6\r\n$16\r\n0123456789abcdef\r\n:9000\r\n$%d\r\n5000\t%s\r\n"
             "$16\r\nfedcba9876543210\r\n:9000\r\n$5\r\nwhat?\r\n",
             len, text);
    redisReply *rep = reply_of(resp);
    dbt_status_reply s;
    char err[DBT_ERRLEN];
    cr_assert(dbt_parse_status(rep, &s, err), "%s", err);
    freeReplyObject(rep);
    cr_assert_eq(s.nprocs, 1, "a record this version cannot read is left out");
    cr_expect_str_eq(s.procs[0].cid, "0123456789abcdef");
    cr_expect_eq(s.procs[0].expiry_ms, 9000);
    cr_expect_eq(s.procs[0].seen_ms, 5000);
    cr_expect_str_eq(s.procs[0].state, "disabled");
    dbt_status_free(&s);
    rep = reply_of("*3\r\n:6000\r\n" EMPTY_KIND EMPTY_KIND);
    cr_assert(dbt_parse_status(rep, &s, err), "an older script's reply: %s", err);
    freeReplyObject(rep);
    cr_expect_eq(s.nprocs, 0);
    dbt_status_free(&s);
}

/* The host group rides after the numbers: read back when it is 16 hex digits, nothing else; a
 * record without it (a process that does not share, or of an older version) has none; and an
 * older reader, which stops at the numbers, reads the numbers as before. */
Test(proc_record, host_group_after_the_numbers)
{
    dbt_proc_record r = {.pid = 42, .idle_in_tx = 3};
    snprintf(r.host, sizeof r.host, "web1");
    snprintf(r.group, sizeof r.group, "0123456789abcdef");
    char text[768], stored[800];
    cr_assert(dbt_format_record(&r, text, sizeof text));
    snprintf(stored, sizeof stored, "5000\t%s", text);
    dbt_proc_record back;
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "0123456789abcdef");
    cr_expect_eq(back.idle_in_tx, 3, "the last number is not taken with the group");
    r.group[0] = '\0';
    cr_assert(dbt_format_record(&r, text, sizeof text));
    snprintf(stored, sizeof stored, "5000\t%s", text);
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "");
    cr_expect_eq(back.idle_in_tx, 3);
    /* an older writer's record ends with its numbers */
    char *tail = strstr(stored, "\t3\t");
    cr_assert_not_null(tail);
    tail[2] = '\0';
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "");
    cr_expect_eq(back.live_version, -1, "an older writer says nothing of live settings");
    snprintf(stored + strlen(stored), sizeof stored - strlen(stored), "\tnot-a-group!");
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "", "what is not 16 hex digits is no group");
}

/* The live settings a process applied (docs/design.md, "Live settings per pool") ride after the
 * group, written whether it shares or not: the version, and the keys its parser refused; a tab
 * in a key written by hand into Redis stays within its field. */
Test(proc_record, live_settings_applied_after_the_group)
{
    dbt_proc_record r = {.pid = 42, .idle_in_tx = 3, .live_version = 1764590000123LL};
    snprintf(r.host, sizeof r.host, "web1");
    snprintf(r.live_refused, sizeof r.live_refused, "wait_timeout,odd\tkey");
    char text[1024], stored[1100];
    cr_assert(dbt_format_record(&r, text, sizeof text));
    snprintf(stored, sizeof stored, "5000\t%s", text);
    dbt_proc_record back;
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "");
    cr_expect_eq(back.live_version, 1764590000123LL);
    cr_expect_str_eq(back.live_refused, "wait_timeout,odd_key");
    snprintf(r.group, sizeof r.group, "0123456789abcdef");
    r.live_version = 0;
    r.live_refused[0] = '\0';
    cr_assert(dbt_format_record(&r, text, sizeof text));
    snprintf(stored, sizeof stored, "5000\t%s", text);
    cr_assert(dbt_parse_record(stored, &back));
    cr_expect_str_eq(back.group, "0123456789abcdef");
    cr_expect_eq(back.live_version, 0, "none applied is 0, not unknown");
    cr_expect_str_eq(back.live_refused, "");
}

/* A process' connections (dbthrottle clients): read back as written, a tab or a newline in a
 * client-given name made safe (it would split a row or a field), the count of those not shown
 * kept, and a buffer too small refused rather than cut mid-row. */
Test(proc_record, clients_round_trip)
{
    dbt_client_row rows[2] = {{.conn = "c1",
                               .state = DBT_CLIENT_RUNNING,
                               .for_ms = 1500,
                               .age_ms = 60000,
                               .app = "rapport\tété\nx",
                               .server = "db1:5432/app"},
                              {.conn = "c7",
                               .state = DBT_CLIENT_IDLE,
                               .for_ms = -1,
                               .age_ms = 5,
                               .app = "",
                               .server = "localhost:5432/postgres"}};
    char text[1024];
    cr_assert(dbt_format_clients(rows, 2, 9, text, sizeof text));
    dbt_client_row back[4];
    long known = 0;
    int n = dbt_parse_clients(text, back, 4, &known);
    cr_assert_eq(n, 2);
    cr_expect_eq(known, 9);
    cr_expect_str_eq(back[0].conn, "c1");
    cr_expect_str_eq(back[0].state, "running");
    cr_expect_eq(back[0].for_ms, 1500);
    cr_expect_eq(back[0].age_ms, 60000);
    cr_expect_str_eq(back[0].app, "rapport_été_x");
    cr_expect_str_eq(back[0].server, "db1:5432/app");
    cr_expect_str_eq(back[1].state, "idle");
    cr_expect_eq(back[1].for_ms, -1);
    cr_expect_str_eq(back[1].app, "");
    cr_expect_eq(dbt_parse_clients(text, back, 1, &known), 1, "no more rows than room");
    char small[40];
    cr_expect_not(dbt_format_clients(rows, 2, 9, small, sizeof small), "too small a buffer");
    cr_expect_eq(dbt_parse_clients("v1\thost", back, 4, &known), -1, "a record is not clients");
    cr_expect_eq(dbt_parse_clients("c1\t3\nc1\trunning", back, 4, &known), -1, "a short row");
}
