/* The host relay's decisions (relay_core.h), driven by hand: what each client is answered, what
 * goes to Redis on each connection, and in which order. Pure: no socket, no Redis, no clock. The
 * replies Redis would send are parsed from RESP text, as the driver's reader would. */
#include "relay_core.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <string.h>

#define WAKE "dbt:{p}:wake:relay-1"

static dbt_relay *relay(const char *user, const char *password)
{
    dbt_relay_conf conf = {.user = user, .password = password, .db = 0, .wake_key = WAKE};
    dbt_relay *r = dbt_relay_new(&conf);
    cr_assert_not_null(r);
    return r;
}

/* A command as a client sends it (RESP). */
static void send_cmd(dbt_relay *r, int c, int64_t now, int argc, ...)
{
    char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf, "*%d\r\n", argc);
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) {
        const char *a = va_arg(ap, const char *);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "$%zu\r\n%s\r\n", strlen(a), a);
    }
    va_end(ap);
    cr_assert(dbt_relay_input(r, c, buf, n, now), "the relay took the command");
}

/* Takes (and clears) what the relay has for a buffer, as a string. */
static char *take(dbt_relay_buf *b)
{
    static char out[8][8192];
    static int k;
    char *s = out[k++ % 8];
    size_t n = b->len - b->off;
    cr_assert_lt(n, sizeof out[0]);
    memcpy(s, b->p + b->off, n);
    s[n] = '\0';
    dbt_relay_buf_consumed(b, n);
    return s;
}

static char *client_out(dbt_relay *r, int c)
{
    return take(dbt_relay_client_out(r, c));
}

static char *link_out(dbt_relay *r, dbt_relay_link l)
{
    return take(dbt_relay_link_out(r, l));
}

/* Feeds Redis' reply (RESP text) on connection l. */
static void redis_says(dbt_relay *r, dbt_relay_link l, const char *resp, int64_t now)
{
    redisReader *rd = redisReaderCreate();
    cr_assert_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
    void *got = NULL;
    cr_assert_eq(redisReaderGetReply(rd, &got), REDIS_OK);
    cr_assert_not_null(got, "a whole reply: %s", resp);
    redisReaderFree(rd);
    dbt_relay_reply(r, l, got, now);
}

static const char *pop_reply(const char *key, const char *value)
{
    static char buf[4][256];
    static int k;
    char *s = buf[k++ % 4];
    snprintf(s, sizeof buf[0], "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(key), key,
             strlen(value), value);
    return s;
}

Test(relay_core, commands_of_two_clients_share_one_connection_and_get_their_own_replies)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r);
    send_cmd(r, a, 0, 2, "PING", "a");
    send_cmd(r, b, 0, 3, "EVALSHA", "abc", "0");
    send_cmd(r, a, 0, 1, "PING");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD),
                     "*2\r\n$4\r\nPING\r\n$1\r\na\r\n"
                     "*3\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n"
                     "*1\r\n$4\r\nPING\r\n",
                     "each sent once, in the order they came");
    cr_expect_str_eq(client_out(r, a), "", "nothing before Redis answers");
    redis_says(r, DBT_RELAY_CMD, "$1\r\na\r\n", 0);
    redis_says(r, DBT_RELAY_CMD, "-NOSCRIPT No matching script.\r\n", 0);
    redis_says(r, DBT_RELAY_CMD, "+PONG\r\n", 0);
    cr_expect_str_eq(client_out(r, a), "$1\r\na\r\n+PONG\r\n");
    cr_expect_str_eq(client_out(r, b), "-NOSCRIPT No matching script.\r\n",
                     "an error reply is the client's, as Redis said it");
    dbt_relay_free(r);
}

Test(relay_core, auth_is_checked_by_the_relay_and_commands_before_it_are_refused)
{
    dbt_relay *r = relay("app", "s3cret");
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 1, "PING");
    cr_expect_str_eq(client_out(r, c), "-NOAUTH Authentication required.\r\n");
    send_cmd(r, c, 0, 3, "AUTH", "app", "wrong");
    send_cmd(r, c, 0, 2, "AUTH", "s3cret");
    send_cmd(r, c, 0, 3, "AUTH", "other", "s3cret");
    send_cmd(r, c, 0, 3, "AUTH", "app", "s3cre");
    cr_expect_str_eq(client_out(r, c),
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
                     "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
                     "a wrong password, a missing user, another user, a prefix of the password");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "", "nothing reached Redis");
    send_cmd(r, c, 0, 3, "AUTH", "app", "s3cret");
    send_cmd(r, c, 0, 1, "PING");
    cr_expect_str_eq(client_out(r, c), "+OK\r\n");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "*1\r\n$4\r\nPING\r\n");
    dbt_relay_free(r);
}

Test(relay_core, auth_with_a_password_alone_is_for_the_default_user)
{
    dbt_relay *r = relay(NULL, "pw");
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 3, "AUTH", "default", "pw");
    send_cmd(r, c, 0, 2, "AUTH", "pw");
    cr_expect_str_eq(client_out(r, c), "+OK\r\n+OK\r\n");
    dbt_relay_free(r);
}

Test(relay_core, select_of_another_database_and_unrelayed_commands_are_refused)
{
    dbt_relay *r = relay(NULL, NULL);
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 2, "SELECT", "0");
    send_cmd(r, c, 0, 2, "select", "3");
    send_cmd(r, c, 0, 1, "MULTI");
    send_cmd(r, c, 0, 3, "BRPOP", "k", "1");
    cr_expect_str_eq(client_out(r, c),
                     "+OK\r\n"
                     "-ERR dbthrottle relay: SELECT 3: it speaks for database 0\r\n"
                     "-ERR dbthrottle relay: MULTI is not relayed\r\n"
                     "-ERR dbthrottle relay: BRPOP is not relayed\r\n");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "");
    dbt_relay_free(r);
}

Test(relay_core, a_reply_answered_here_waits_for_the_replies_before_it)
{
    dbt_relay *r = relay(NULL, NULL);
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 1, "PING");
    send_cmd(r, c, 0, 2, "SELECT", "0");
    cr_expect_str_eq(client_out(r, c), "", "SELECT's OK may not pass PING's reply");
    redis_says(r, DBT_RELAY_CMD, "+PONG\r\n", 0);
    cr_expect_str_eq(client_out(r, c), "+PONG\r\n+OK\r\n");
    dbt_relay_free(r);
}

Test(relay_core, blpops_of_many_clients_are_one_listening_blpop_on_the_union_of_their_keys)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r);
    send_cmd(r, a, 0, 4, "BLPOP", "w:a", "w:G", "30");
    char *first = link_out(r, DBT_RELAY_LISTEN);
    cr_expect(
        strstr(first, "*5\r\n$5\r\nBLPOP\r\n$20\r\n" WAKE "\r\n$3\r\nw:G\r\n$3\r\nw:a\r\n$2\r\n30"),
        "the client's keys and the wake list: %s", first);
    cr_expect_eq(dbt_relay_count(r).blpops, DBT_RELAY_MAX_BLPOPS, "pipelined, as many as allowed");
    send_cmd(r, b, 0, 4, "BLPOP", "w:b", "w:G", "30");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD),
                     "*10\r\n$5\r\nRPUSH\r\n$20\r\n" WAKE "\r\n"
                     "$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n$1\r\nx\r\n"
                     "$1\r\nx\r\n"
                     "*3\r\n$7\r\nPEXPIRE\r\n$20\r\n" WAKE "\r\n$5\r\n60000\r\n",
                     "w:b is in none of the BLPOPs in flight: each is ended by a wake");
    cr_expect_str_eq(link_out(r, DBT_RELAY_LISTEN), "", "none sent beyond the most in flight");
    redis_says(r, DBT_RELAY_LISTEN, pop_reply(WAKE, "x"), 0);
    char *again = link_out(r, DBT_RELAY_LISTEN);
    cr_expect(strstr(again, "$3\r\nw:G\r\n$3\r\nw:a\r\n$3\r\nw:b\r\n"),
              "the next one names both clients' keys, each once: %s", again);
    cr_expect_str_eq(client_out(r, a), "", "a wake is for nobody");
    cr_expect_str_eq(client_out(r, b), "");
    dbt_relay_free(r);
}

Test(relay_core, a_value_of_a_shared_key_goes_to_the_client_blocked_longest)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:G", "30");
    send_cmd(r, b, 0, 3, "BLPOP", "w:G", "30");
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:G", "f0:7"), 0);
    cr_expect_str_eq(client_out(r, a), "*2\r\n$3\r\nw:G\r\n$4\r\nf0:7\r\n");
    cr_expect_str_eq(client_out(r, b), "");
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:G", "f0:8"), 0);
    cr_expect_str_eq(client_out(r, b), "*2\r\n$3\r\nw:G\r\n$4\r\nf0:8\r\n");
    cr_expect_eq(dbt_relay_count(r).blocked, 0);
    dbt_relay_free(r);
}

Test(relay_core, a_value_popped_for_a_client_that_left_goes_to_the_next_blpop_of_its_list)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:a", "30");
    link_out(r, DBT_RELAY_LISTEN);
    dbt_relay_close(r, a);
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:a", "g0:1"), 0);
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:a", "g0:2"), 0);
    cr_expect_eq(dbt_relay_count(r).held, 2, "kept, as Redis would have kept them in the list");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "", "nothing written back to Redis");
    int b = dbt_relay_open(r);
    send_cmd(r, b, 0, 4, "BLPOP", "w:other", "w:a", "30");
    cr_expect_str_eq(client_out(r, b), "*2\r\n$3\r\nw:a\r\n$4\r\ng0:1\r\n",
                     "at once, the oldest first, with no BLPOP sent for it");
    send_cmd(r, b, 0, 3, "BLPOP", "w:a", "30");
    cr_expect_str_eq(client_out(r, b), "*2\r\n$3\r\nw:a\r\n$4\r\ng0:2\r\n");
    cr_expect_eq(dbt_relay_count(r).held, 0);
    dbt_relay_free(r);
}

Test(relay_core, a_value_held_too_long_is_dropped)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:a", "30");
    dbt_relay_close(r, a);
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:a", "g0:1"), 1000);
    cr_expect_eq(dbt_relay_next_deadline(r), 1000 + DBT_RELAY_HOLD_US);
    dbt_relay_tick(r, 1000 + DBT_RELAY_HOLD_US);
    cr_expect_eq(dbt_relay_count(r).held, 0);
    cr_expect_eq(dbt_relay_count(r).dropped, 1);
    dbt_relay_free(r);
}

Test(relay_core, a_blpop_waits_for_the_commands_before_it_and_holds_up_those_after_it)
{
    dbt_relay *r = relay(NULL, NULL);
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 3, "EVALSHA", "abc", "0");
    send_cmd(r, c, 0, 3, "BLPOP", "w:c", "30");
    send_cmd(r, c, 0, 1, "PING");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "*3\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n",
                     "PING waits behind the BLPOP");
    cr_expect_str_eq(link_out(r, DBT_RELAY_LISTEN), "", "the BLPOP waits for EVALSHA's reply");
    redis_says(r, DBT_RELAY_CMD, ":1\r\n", 0);
    cr_expect_str_eq(client_out(r, c), ":1\r\n");
    cr_expect_neq(strlen(link_out(r, DBT_RELAY_LISTEN)), 0, "now it blocks");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "");
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:c", "g0:2"), 0);
    cr_expect_str_eq(client_out(r, c), "*2\r\n$3\r\nw:c\r\n$4\r\ng0:2\r\n");
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "*1\r\n$4\r\nPING\r\n", "then PING goes");
    dbt_relay_free(r);
}

Test(relay_core, a_blpop_times_out_at_its_own_deadline_with_a_nil_reply)
{
    dbt_relay *r = relay(NULL, NULL);
    int c = dbt_relay_open(r);
    send_cmd(r, c, 1000000, 3, "BLPOP", "w:c", "0.5");
    cr_expect_eq(dbt_relay_next_deadline(r), 1500000);
    dbt_relay_tick(r, 1499999);
    cr_expect_str_eq(client_out(r, c), "");
    dbt_relay_tick(r, 1500000);
    cr_expect_str_eq(client_out(r, c), "*-1\r\n");
    cr_expect_eq(dbt_relay_next_deadline(r), INT64_MAX);
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:c", "g0:3"), 1600000);
    cr_expect_str_eq(client_out(r, c), "", "a value that came after its timeout is not its...");
    send_cmd(r, c, 1700000, 3, "BLPOP", "w:c", "0.5");
    cr_expect_str_eq(client_out(r, c), "*2\r\n$3\r\nw:c\r\n$4\r\ng0:3\r\n",
                     "... but its next BLPOP's");
    dbt_relay_free(r);
}

Test(relay_core, a_broken_command_connection_closes_the_clients_with_a_command_in_flight)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r), idle = dbt_relay_open(r);
    send_cmd(r, a, 0, 1, "PING");
    send_cmd(r, b, 0, 1, "PING");
    redis_says(r, DBT_RELAY_CMD, "+PONG\r\n", 0); /* a's */
    dbt_relay_link_lost(r, DBT_RELAY_CMD);
    cr_expect_not(dbt_relay_doomed(r, a), "a's reply came before the break");
    cr_expect(dbt_relay_doomed(r, b), "b's command is in doubt: b sees its connection break");
    cr_expect_not(dbt_relay_doomed(r, idle));
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "");
    send_cmd(r, a, 0, 1, "PING");
    dbt_relay_link_ready(r, DBT_RELAY_CMD, 0);
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "*1\r\n$4\r\nPING\r\n",
                     "what came meanwhile goes once it is up");
    redis_says(r, DBT_RELAY_CMD, "+PONG\r\n", 0);
    cr_expect_str_eq(client_out(r, a), "+PONG\r\n+PONG\r\n");
    dbt_relay_free(r);
}

Test(relay_core, a_broken_listening_connection_closes_the_blocked_clients)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), idle = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:a", "30");
    dbt_relay_link_lost(r, DBT_RELAY_LISTEN);
    cr_expect(dbt_relay_doomed(r, a));
    cr_expect_not(dbt_relay_doomed(r, idle));
    cr_expect_eq(dbt_relay_count(r).blpops, 0);
    dbt_relay_close(r, a);
    dbt_relay_link_ready(r, DBT_RELAY_LISTEN, 0);
    cr_expect_eq(dbt_relay_count(r).blpops, 0, "nobody blocked: nothing sent");
    dbt_relay_free(r);
}

Test(relay_core, another_server_closes_every_client_and_drops_what_waited)
{
    /* Redis restarted: every client connects anew and reads the era (run_id) again, as a
     * restart closes every connection to Redis; what they sent meanwhile is not sent to it. */
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r), idle = dbt_relay_open(r);
    send_cmd(r, b, 0, 3, "BLPOP", "w:b", "30");
    dbt_relay_link_lost(r, DBT_RELAY_CMD);
    send_cmd(r, a, 0, 3, "EVALSHA", "abc", "0");
    dbt_relay_server_changed(r);
    cr_expect(dbt_relay_doomed(r, a) && dbt_relay_doomed(r, b) && dbt_relay_doomed(r, idle));
    cr_expect_str_eq(link_out(r, DBT_RELAY_CMD), "", "a's EVALSHA is not sent to the new server");
    cr_expect_str_eq(link_out(r, DBT_RELAY_LISTEN), "");
    dbt_relay_free(r);
}

Test(relay_core, a_reply_nothing_was_asked_for_is_out_of_step)
{
    dbt_relay *r = relay(NULL, NULL);
    redisReader *rd = redisReaderCreate();
    redisReaderFeed(rd, "+OK\r\n", 5);
    void *got = NULL;
    redisReaderGetReply(rd, &got);
    redisReaderFree(rd);
    cr_expect_not(dbt_relay_reply(r, DBT_RELAY_CMD, got, 0), "the driver breaks the connection");
    dbt_relay_free(r);
}

Test(relay_core, wakes_end_every_blpop_up_to_the_last_that_lacks_a_new_key)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r), b = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:a", "30"); /* 8 BLPOPs on {wake, w:a} */
    link_out(r, DBT_RELAY_LISTEN);
    send_cmd(r, b, 0, 3, "BLPOP", "w:b", "30");
    cr_expect(strstr(link_out(r, DBT_RELAY_CMD), "*10\r\n$5\r\nRPUSH"), "8 wakes, one each");
    /* Two of them return with values of w:a (a's, then one held), six with wakes: each is sent
     * again naming w:b, and no further wake is pushed for them. */
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:a", "g0:1"), 0);
    redis_says(r, DBT_RELAY_LISTEN, pop_reply("w:a", "g0:2"), 0);
    for (int i = 0; i < 6; i++)
        redis_says(r, DBT_RELAY_LISTEN, pop_reply(WAKE, "x"), 0);
    cr_expect_str_eq(client_out(r, a), "*2\r\n$3\r\nw:a\r\n$4\r\ng0:1\r\n");
    char *again = link_out(r, DBT_RELAY_LISTEN);
    cr_expect(strstr(again, "w:b"), "sent again with b's key: %s", again);
    /* A third client's new key: every BLPOP in flight lacks it; 2 wakes are still out (8 pushed,
     * 6 popped), so 6 more are pushed. */
    int c = dbt_relay_open(r);
    send_cmd(r, c, 0, 3, "BLPOP", "w:c", "30");
    char *w = link_out(r, DBT_RELAY_CMD);
    cr_expect(strstr(w, "*8\r\n$5\r\nRPUSH"), "6 wakes: %s", w);
    dbt_relay_free(r);
}

Test(relay_core, an_error_to_a_listening_blpop_goes_to_the_clients_blocked_on_its_keys)
{
    dbt_relay *r = relay(NULL, NULL);
    int a = dbt_relay_open(r);
    send_cmd(r, a, 0, 3, "BLPOP", "w:a", "30");
    redis_says(r, DBT_RELAY_LISTEN, "-NOPERM this user has no permissions\r\n", 0);
    cr_expect_str_eq(client_out(r, a), "-NOPERM this user has no permissions\r\n");
    cr_expect_eq(dbt_relay_count(r).blocked, 0);
    dbt_relay_free(r);
}

Test(relay_core, a_client_that_breaks_the_protocol_is_closed)
{
    dbt_relay *r = relay(NULL, NULL);
    int c = dbt_relay_open(r);
    cr_expect_not(dbt_relay_input(r, c, "+OK\r\n", 5, 0), "a reply is no command");
    cr_expect(dbt_relay_doomed(r, c));
    dbt_relay_free(r);
}

/* A connection that stood long, or the first that broke at once, is made again at once: a
 * restart, a speaker resumed (stopped_keeper_admits_no_one_extra: a 200 ms pause outlived its
 * DBTHROTTLE_REDIS_TIMEOUT=200ms). */
Test(relay_core, a_link_that_stood_is_made_again_at_once)
{
    int brief = 0;
    cr_expect_eq(dbt_relay_reconnect_after(5000000, &brief), 0);
    cr_expect_eq(dbt_relay_reconnect_after(DBT_RELAY_BRIEF_LINK_US, &brief), 0);
    cr_expect_eq(dbt_relay_reconnect_after(1000, &brief), 0, "the first break at once waited");
    cr_expect_eq(brief, 1);
}

/* One that breaks as soon as made, again and again (a proxy that closes each connection once
 * it is ready, a server at maxclients): 0, then 200 ms doubled up to 5 s, not a new connection to
 * Redis per round trip; once one stands again, at once. */
Test(relay_core, a_link_that_keeps_breaking_at_once_backs_off)
{
    int brief = 0;
    int64_t want[] = {0, 200000, 400000, 800000, 1600000, 3200000, 5000000, 5000000};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int64_t after = dbt_relay_reconnect_after(2000, &brief);
        cr_expect_eq(after, want[i], "break %zu in a row: %lld us, want %lld", i + 1,
                     (long long)after, (long long)want[i]);
    }
    for (int i = 0; i < 40; i++)
        cr_expect_leq(dbt_relay_reconnect_after(0, &brief), DBT_RELAY_RECONNECT_MAX_US);
    cr_expect_eq(dbt_relay_reconnect_after(DBT_RELAY_BRIEF_LINK_US + 1, &brief), 0,
                 "a link that stood again was not made again at once");
    cr_expect_eq(brief, 0);
    cr_expect_eq(dbt_relay_reconnect_after(0, &brief), 0);
}
