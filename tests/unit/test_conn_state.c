/* The permit state machine of one connection (conn_state.c), driven row by row through the state
 * table of docs/design.md ("The interposer") with a fake semaphore that records what it is asked.
 *
 * Each test feeds the events the hooks would send, with the facts libpq would report, and checks
 * the permit operations the machine asked for, in order: "acquire q1" (a query permit, the first
 * permit the fake handed out), "release q1", "park q1" (kept), "unpark q1", "idle q1" / "busy q1"
 * (marked idle inside a transaction, or not any more). Questions with no effect (whether a kind
 * is throttled, whether a permit is lost) are not recorded. */
#include "conn_state.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define MAX_PERMITS 32

typedef struct {
    /* How the fake answers. */
    bool throttled[DBT_NKINDS]; /* default: both kinds throttled */
    dbt_verdict answer;         /* what acquire answers (default DBT_PROCEED) */
    bool unthrottled;           /* acquire proceeds without a permit (Redis down, open) */
    bool keeps;                 /* park keeps the permit (DBTHROTTLE_CACHE_PERMITS, uncontended) */
    bool taken_back;            /* unpark finds the kept permit given back meanwhile */
    dbt_permit *lost;           /* this permit is lost (its lease ran out) */
    /* What it was asked. */
    int issued;
    char kinds[MAX_PERMITS]; /* 'q' or 'c', by permit number */
    char calls[2048];
} fake_semaphore;

static max_align_t tokens[MAX_PERMITS]; /* a permit is the address of one: never dereferenced */
static fake_semaphore fake;
static dbt_conn_state st;
static const dbt_permit_ops *ops;

static const char *name_of(const dbt_permit *p)
{
    static char name[16];
    ptrdiff_t i = (const max_align_t *)(const void *)p - tokens;
    cr_assert(i >= 0 && i < fake.issued, "a permit the fake never issued");
    snprintf(name, sizeof name, "%c%d", fake.kinds[i], (int)i + 1);
    return name;
}

static void record(const char *what, const dbt_permit *p)
{
    size_t n = strlen(fake.calls);
    snprintf(fake.calls + n, sizeof fake.calls - n, "%s%s %s", n ? "; " : "", what, name_of(p));
}

static bool fake_throttled(void *ctx, dbt_kind kind)
{
    cr_assert_eq(ctx, &fake);
    return fake.throttled[kind];
}

static dbt_verdict fake_acquire(void *ctx, dbt_kind kind, const char *query, dbt_permit **slot)
{
    (void)query;
    cr_assert_eq(ctx, &fake);
    cr_assert_null(*slot, "acquire into a slot that holds a permit");
    if (fake.answer == DBT_REFUSE) {
        size_t n = strlen(fake.calls);
        snprintf(fake.calls + n, sizeof fake.calls - n, "%srefused %c", n ? "; " : "",
                 kind == DBT_KIND_QUERY ? 'q' : 'c');
        return DBT_REFUSE;
    }
    if (fake.answer == DBT_DEFER) {
        size_t n = strlen(fake.calls);
        snprintf(fake.calls + n, sizeof fake.calls - n, "%squeued %c", n ? "; " : "",
                 kind == DBT_KIND_QUERY ? 'q' : 'c');
        return DBT_DEFER;
    }
    if (fake.unthrottled) {
        size_t n = strlen(fake.calls);
        snprintf(fake.calls + n, sizeof fake.calls - n, "%sunthrottled %c", n ? "; " : "",
                 kind == DBT_KIND_QUERY ? 'q' : 'c');
        return DBT_PROCEED;
    }
    cr_assert_lt(fake.issued, MAX_PERMITS);
    fake.kinds[fake.issued] = kind == DBT_KIND_QUERY ? 'q' : 'c';
    *slot = (dbt_permit *)(void *)&tokens[fake.issued++];
    record("acquire", *slot);
    return DBT_PROCEED;
}

static void fake_release(void *ctx, dbt_permit *p)
{
    cr_assert_eq(ctx, &fake);
    cr_assert_not_null(p);
    record("release", p);
}

static bool fake_park(void *ctx, dbt_permit *p)
{
    cr_assert_eq(ctx, &fake);
    record(fake.keeps ? "park" : "park refused", p);
    return fake.keeps;
}

static void fake_unpark(void *ctx, dbt_permit **p)
{
    cr_assert_eq(ctx, &fake);
    record(fake.taken_back ? "unpark gone" : "unpark", *p);
    if (fake.taken_back)
        *p = NULL; /* the real one frees it: given back already */
}

static bool fake_lost(void *ctx, dbt_permit *p)
{
    cr_assert_eq(ctx, &fake);
    return p == fake.lost;
}

static void fake_note_idle(void *ctx, dbt_permit *p, bool idle)
{
    cr_assert_eq(ctx, &fake);
    record(idle ? "idle" : "busy", p);
}

static void fake_unthrottled(void *ctx)
{
    cr_assert_eq(ctx, &fake);
    size_t n = strlen(fake.calls);
    snprintf(fake.calls + n, sizeof fake.calls - n, "%sran unthrottled", n ? "; " : "");
}

static const dbt_permit_ops fake_ops = {.throttled = fake_throttled,
                                        .acquire = fake_acquire,
                                        .release = fake_release,
                                        .park = fake_park,
                                        .unpark = fake_unpark,
                                        .lost = fake_lost,
                                        .note_idle = fake_note_idle,
                                        .unthrottled = fake_unthrottled};

static void setup(void)
{
    memset(&fake, 0, sizeof fake);
    fake.throttled[DBT_KIND_QUERY] = fake.throttled[DBT_KIND_CONN] = true;
    fake.answer = DBT_PROCEED;
    memset(&st, 0, sizeof st);
    ops = &fake_ops;
}

TestSuite(conn_state, .init = setup);

/* The facts libpq reports when a command ends. */
static const dbt_conn_facts IDLE = {DBT_TX_IDLE, DBT_PIPELINE_OFF, false};
static const dbt_conn_facts ACTIVE = {DBT_TX_ACTIVE, DBT_PIPELINE_OFF,
                                      false}; /* COPY in progress */
static const dbt_conn_facts INTRANS = {DBT_TX_INTRANS, DBT_PIPELINE_OFF, false};
static const dbt_conn_facts INERROR = {DBT_TX_INERROR, DBT_PIPELINE_OFF, false};
static const dbt_conn_facts UNKNOWN = {DBT_TX_UNKNOWN, DBT_PIPELINE_OFF, false};
static const dbt_conn_facts PIPE_BUSY = {DBT_TX_ACTIVE, DBT_PIPELINE_ON, false};
static const dbt_conn_facts PIPE_IDLE = {DBT_TX_IDLE, DBT_PIPELINE_ON, false};
static const dbt_conn_facts PIPE_ABORTED = {DBT_TX_IDLE, DBT_PIPELINE_ABORTED, false};
static const dbt_conn_facts PIPE_INTRANS = {DBT_TX_INTRANS, DBT_PIPELINE_ON, false};

/* The events, as the hooks send them. */
static dbt_verdict command(void)
{
    return dbt_conn_state_command(&st, ops, &fake, "SELECT 1");
}

static void ended(dbt_conn_facts f)
{
    dbt_conn_state_ended(&st, ops, &fake, f);
}

static void sent(bool ok, dbt_conn_facts f)
{
    dbt_conn_state_sent(&st, ops, &fake, ok, f);
}

static void synced(dbt_conn_facts f)
{
    dbt_conn_state_pipeline_synced(&st, ops, &fake, f);
}

/* The calls recorded since the last check are exactly `want`; the record starts afresh. */
#define expect_calls(want)                                                                         \
    do {                                                                                           \
        cr_expect_str_eq(fake.calls, want);                                                        \
        fake.calls[0] = '\0';                                                                      \
    } while (0)

static dbt_permit *permit(int n)
{
    return (dbt_permit *)(void *)&tokens[n - 1];
}

/* ---- idle: a command takes a permit, or is refused ------------------------------------------ */

Test(conn_state, idle_command_takes_a_query_permit_and_gives_it_back_when_idle)
{
    cr_assert_eq(command(), DBT_PROCEED);
    expect_calls("acquire q1");
    cr_expect_eq(st.query_permit, permit(1));
    ended(IDLE);
    expect_calls("park refused q1; release q1");
    cr_expect_null(st.query_permit);
}

Test(conn_state, each_command_outside_a_transaction_takes_its_own_permit)
{
    command();
    ended(IDLE);
    command();
    ended(IDLE);
    expect_calls(
        "acquire q1; park refused q1; release q1; acquire q2; park refused q2; release q2");
}

Test(conn_state, a_refusal_is_the_last_word_and_holds_nothing)
{
    fake.answer = DBT_REFUSE;
    cr_assert_eq(command(), DBT_REFUSE);
    expect_calls("refused q");
    cr_expect(dbt_conn_state_refused(&st));
    cr_expect_null(st.query_permit);
    ended(IDLE); /* a refused PQexec returns: nothing to give back */
    expect_calls("");
    cr_expect(dbt_conn_state_refused(&st), "only a command clears a refusal");
}

Test(conn_state, a_refusal_is_cleared_by_the_next_command)
{
    fake.answer = DBT_REFUSE;
    command();
    fake.answer = DBT_PROCEED;
    cr_assert_eq(command(), DBT_PROCEED);
    cr_expect_not(dbt_conn_state_refused(&st));
    expect_calls("refused q; acquire q1");
}

Test(conn_state, a_refusal_is_cleared_by_the_next_command_that_needs_no_permit)
{
    fake.answer = DBT_REFUSE;
    command();
    fake.throttled[DBT_KIND_QUERY] = false;
    cr_assert_eq(command(), DBT_PROCEED);
    cr_expect_not(dbt_conn_state_refused(&st));
}

Test(conn_state, a_refusal_of_the_caller_is_cleared_by_the_next_command)
{
    dbt_conn_state_refuse(&st); /* a bad configuration */
    cr_expect(dbt_conn_state_refused(&st));
    command();
    cr_expect_not(dbt_conn_state_refused(&st));
}

Test(conn_state, a_refusal_is_cleared_by_the_next_connect)
{
    fake.answer = DBT_REFUSE;
    command();
    fake.answer = DBT_PROCEED;
    cr_assert_eq(dbt_conn_state_connect(&st, ops, &fake), DBT_PROCEED);
    cr_expect_not(dbt_conn_state_refused(&st));
}

Test(conn_state, an_unthrottled_connection_takes_no_permit)
{
    fake.throttled[DBT_KIND_QUERY] = false; /* no limit, or DBTHROTTLE_EXEMPT matched */
    cr_assert_eq(command(), DBT_PROCEED);
    ended(IDLE);
    expect_calls("");
}

Test(conn_state, a_command_let_through_without_a_permit_asks_again_next_time)
{
    fake.unthrottled = true; /* Redis unreachable, DBTHROTTLE_ON_REDIS_ERROR=open */
    cr_assert_eq(command(), DBT_PROCEED);
    cr_expect_null(st.query_permit);
    ended(IDLE);
    fake.unthrottled = false;
    command();
    expect_calls("unthrottled q; acquire q1");
}

/* ---- busy: a command, a COPY ------------------------------------------------------------------
 */

Test(conn_state, an_asynchronous_command_holds_its_permit_until_its_results_end)
{
    command();
    sent(true, ACTIVE); /* PQsendQuery */
    expect_calls("acquire q1");
    ended(IDLE); /* PQgetResult returned NULL */
    expect_calls("park refused q1; release q1");
}

Test(conn_state, a_command_libpq_did_not_send_gives_its_permit_back_at_once)
{
    command();
    sent(false, IDLE); /* PQsendQuery failed */
    expect_calls("acquire q1; park refused q1; release q1");
    cr_expect_null(st.query_permit);
}

Test(conn_state, copy_holds_its_permit_to_the_end)
{
    command();     /* PQexec("COPY t FROM STDIN") */
    ended(ACTIVE); /* returns PGRES_COPY_IN: still busy */
    expect_calls("acquire q1");
    cr_expect_eq(st.query_permit, permit(1));
    command(); /* a command during COPY: libpq refuses it, the permit stays the one */
    ended(ACTIVE);
    expect_calls("");
    ended(IDLE); /* PQputCopyEnd, PQgetResult ... NULL */
    expect_calls("park refused q1; release q1");
}

Test(conn_state, a_connection_still_connecting_keeps_its_permits)
{
    command();
    ended(UNKNOWN);
    expect_calls("acquire q1");
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("release q1");
}

/* ---- a session the server ended (CONNECTION_BAD) -------------------------------------------- */

static const dbt_conn_facts DEAD = {DBT_TX_UNKNOWN, DBT_PIPELINE_OFF, true};

Test(conn_state, a_dead_connection_gives_both_permits_back_at_once_and_takes_none_after)
{
    cr_assert_eq(dbt_conn_state_connect(&st, ops, &fake), DBT_PROCEED);
    command(); /* BEGIN */
    ended(INTRANS);
    expect_calls("acquire c1; acquire q2; idle q2");
    ended(DEAD);
    expect_calls("release q2; release c1");
    cr_assert_eq(command(), DBT_PROCEED); /* libpq fails it */
    ended(DEAD);
    expect_calls("");
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("");
}

Test(conn_state, a_session_ended_while_idle_gives_a_kept_permit_back)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    expect_calls("acquire q1; park q1");
    dbt_conn_state_session_ended(&st, ops, &fake);
    expect_calls("release q1");
    cr_assert_not(dbt_conn_state_holds(&st));
}

/* ---- a transaction that began without a permit ------------------------------------------------
 */

Test(conn_state, a_transaction_begun_unthrottled_runs_to_its_end_without_queueing)
{
    fake.unthrottled = true;
    command(); /* BEGIN, Redis unreachable */
    ended(INTRANS);
    fake.unthrottled = false;             /* Redis answers again */
    cr_assert_eq(command(), DBT_PROCEED); /* UPDATE: no acquire */
    ended(INTRANS);
    cr_assert_eq(command(), DBT_PROCEED); /* COMMIT */
    ended(IDLE);
    expect_calls("unthrottled q; ran unthrottled; ran unthrottled");
    command(); /* the next transaction takes a permit again */
    expect_calls("acquire q1");
}

/* ---- in transaction -------------------------------------------------------------------------- */

Test(conn_state, begin_to_commit_is_one_permit)
{
    command(); /* BEGIN */
    ended(INTRANS);
    command(); /* UPDATE */
    ended(INTRANS);
    command(); /* COMMIT */
    ended(IDLE);
    expect_calls("acquire q1; idle q1; busy q1; idle q1; busy q1; park refused q1; release q1");
}

Test(conn_state, a_failed_transaction_keeps_its_permit_until_rollback)
{
    command();
    ended(INERROR);
    command(); /* ROLLBACK */
    ended(IDLE);
    expect_calls("acquire q1; idle q1; busy q1; park refused q1; release q1");
}

Test(conn_state, a_transaction_is_marked_idle_once)
{
    command();
    ended(INTRANS);
    ended(INTRANS); /* PQgetResult NULL after a synchronous call's own end */
    expect_calls("acquire q1; idle q1");
}

Test(conn_state, a_lost_permit_inside_a_transaction_queues_again)
{
    command(); /* BEGIN */
    ended(INTRANS);
    fake.lost = permit(1); /* its lease ran out unrenewed */
    cr_assert_eq(command(), DBT_PROCEED);
    expect_calls("acquire q1; idle q1; release q1; acquire q2");
    cr_expect_eq(st.query_permit, permit(2));
    ended(INTRANS); /* the new permit is marked idle in its turn */
    expect_calls("idle q2");
}

Test(conn_state, a_lost_permit_inside_a_transaction_may_be_refused)
{
    command();
    ended(INTRANS);
    fake.lost = permit(1);
    fake.answer = DBT_REFUSE;
    cr_assert_eq(command(), DBT_REFUSE);
    expect_calls("acquire q1; idle q1; release q1; refused q");
    cr_expect_null(st.query_permit);
    cr_expect(dbt_conn_state_refused(&st));
}

/* ---- in pipeline ----------------------------------------------------------------------------- */

Test(conn_state, a_pipeline_gives_its_permit_back_at_its_last_sync)
{
    command();
    sent(true, PIPE_BUSY);
    command(); /* the pipeline's second command: same permit */
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    ended(PIPE_BUSY); /* PQgetResult NULL after the first command's results */
    ended(PIPE_BUSY);
    expect_calls("acquire q1");
    synced(PIPE_IDLE); /* PGRES_PIPELINE_SYNC */
    expect_calls("park refused q1; release q1");
    cr_expect_null(st.query_permit);
}

Test(conn_state, a_pipeline_with_a_sync_unanswered_keeps_its_permit)
{
    command();
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    command();
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    synced(PIPE_IDLE);
    expect_calls("acquire q1");
    synced(PIPE_IDLE);
    expect_calls("park refused q1; release q1");
}

Test(conn_state, a_pipeline_with_a_command_after_its_last_sync_keeps_its_permit)
{
    command();
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    command();
    sent(true, PIPE_BUSY); /* queued after the sync */
    synced(PIPE_IDLE);
    expect_calls("acquire q1");
    dbt_conn_state_pipeline_sync(&st);
    synced(PIPE_IDLE);
    expect_calls("park refused q1; release q1");
}

Test(conn_state, an_aborted_pipeline_is_still_a_pipeline)
{
    command();
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    ended(PIPE_ABORTED); /* an error: the rest is skipped up to the sync */
    expect_calls("acquire q1");
    synced(PIPE_IDLE);
    expect_calls("park refused q1; release q1");
}

Test(conn_state, leaving_pipeline_mode_idle_gives_the_permit_back)
{
    command();
    sent(true, PIPE_BUSY);
    ended(PIPE_BUSY);
    expect_calls("acquire q1");
    ended(IDLE); /* PQexitPipelineMode */
    expect_calls("park refused q1; release q1");
    command(); /* the counts start afresh */
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    synced(PIPE_IDLE);
    expect_calls("acquire q2; park refused q2; release q2");
}

Test(conn_state, a_transaction_inside_a_pipeline_keeps_its_permit_past_the_sync)
{
    command(); /* BEGIN */
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    synced(PIPE_INTRANS);
    expect_calls("acquire q1; idle q1");
    command(); /* COMMIT */
    sent(true, PIPE_BUSY);
    dbt_conn_state_pipeline_sync(&st);
    synced(PIPE_IDLE);
    expect_calls("busy q1; park refused q1; release q1");
}

Test(conn_state, a_sync_result_without_a_sync_sent_is_harmless)
{
    synced(PIPE_IDLE);
    cr_expect_eq(st.pipe_syncs, 0);
    expect_calls("");
}

Test(conn_state, commands_outside_a_pipeline_are_not_counted)
{
    command();
    sent(true, ACTIVE);
    cr_expect_eq(st.pipe_sent, 0);
}

/* ---- kept permits (DBTHROTTLE_CACHE_PERMITS) ------------------------------------------------- */

Test(conn_state, a_kept_permit_serves_the_next_command)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    expect_calls("acquire q1; park q1");
    cr_expect(st.query_kept);
    command();
    cr_expect_not(st.query_kept);
    ended(IDLE);
    expect_calls("unpark q1; park q1");
}

Test(conn_state, a_kept_permit_given_back_meanwhile_is_taken_anew)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    fake.taken_back = true; /* a waiter queued, or DBTHROTTLE_CACHE_IDLE passed */
    cr_assert_eq(command(), DBT_PROCEED);
    expect_calls("acquire q1; park q1; unpark gone q1; acquire q2");
}

Test(conn_state, a_kept_permit_is_parked_once)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    ended(IDLE);
    expect_calls("acquire q1; park q1");
}

Test(conn_state, a_lost_kept_permit_queues_again)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    fake.lost = permit(1);
    command();
    expect_calls("acquire q1; park q1; unpark q1; release q1; acquire q2");
}

Test(conn_state, a_kept_permit_goes_back_when_the_connection_closes)
{
    fake.keeps = true;
    command();
    ended(IDLE);
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("acquire q1; park q1; release q1");
    cr_expect_not(st.query_kept);
}

/* ---- connection permits (DBTHROTTLE_MAX_CONNECTIONS) ----------------------------------------- */

Test(conn_state, a_connection_holds_its_permit_from_connect_to_close)
{
    cr_assert_eq(dbt_conn_state_connect(&st, ops, &fake), DBT_PROCEED);
    command();
    ended(IDLE);
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("acquire c1; acquire q2; park refused q2; release q2; release c1");
    cr_expect_null(st.conn_permit);
}

Test(conn_state, a_connect_holding_a_permit_takes_no_other)
{
    dbt_conn_state_connect(&st, ops, &fake);
    dbt_conn_state_connect(&st, ops, &fake); /* the next host of a multi-host string */
    expect_calls("acquire c1");
}

Test(conn_state, a_failed_connect_gives_its_permit_back)
{
    dbt_conn_state_connect(&st, ops, &fake);
    dbt_conn_state_connect_failed(&st, ops, &fake);
    expect_calls("acquire c1; release c1");
    cr_expect_null(st.conn_permit);
    dbt_conn_state_connect_failed(&st, ops, &fake); /* once only */
    expect_calls("");
}

Test(conn_state, a_refused_connect_takes_no_permit_at_commands)
{
    fake.answer = DBT_REFUSE;
    cr_assert_eq(dbt_conn_state_connect(&st, ops, &fake), DBT_REFUSE);
    cr_expect(dbt_conn_state_refused(&st));
    fake.answer = DBT_PROCEED;
    command();
    expect_calls("refused c; acquire q1");
}

Test(conn_state, an_unthrottled_connect_takes_no_permit)
{
    fake.throttled[DBT_KIND_CONN] = false; /* no DBTHROTTLE_MAX_CONNECTIONS, or exempt */
    cr_assert_eq(dbt_conn_state_connect(&st, ops, &fake), DBT_PROCEED);
    command();
    expect_calls("acquire q1");
}

Test(conn_state, a_connect_let_through_without_a_permit_takes_one_at_the_next_command)
{
    fake.unthrottled = true;
    dbt_conn_state_connect(&st, ops, &fake);
    fake.unthrottled = false;
    command();
    expect_calls("unthrottled c; acquire c1; acquire q2");
}

Test(conn_state, a_lost_connection_permit_is_taken_again_at_the_next_command)
{
    dbt_conn_state_connect(&st, ops, &fake);
    fake.lost = permit(1);
    cr_assert_eq(command(), DBT_PROCEED);
    expect_calls("acquire c1; release c1; acquire c2; acquire q3");
}

Test(conn_state, a_lost_connection_permit_refused_again_refuses_the_command)
{
    dbt_conn_state_connect(&st, ops, &fake);
    fake.lost = permit(1);
    fake.answer = DBT_REFUSE;
    cr_assert_eq(command(), DBT_REFUSE);
    expect_calls("acquire c1; release c1; refused c");
    cr_expect(dbt_conn_state_refused(&st));
    cr_expect_null(st.query_permit);
}

/* ---- the end of a connection, fork ----------------------------------------------------------- */

Test(conn_state, closing_inside_a_transaction_gives_everything_back)
{
    dbt_conn_state_connect(&st, ops, &fake);
    command();
    ended(INTRANS);
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("acquire c1; acquire q2; idle q2; release q2; release c1");
    cr_expect_null(st.query_permit);
    cr_expect_not(st.idle_in_tx);
}

Test(conn_state, closing_a_connection_that_holds_nothing_gives_nothing_back)
{
    dbt_conn_state_forget(&st, ops, &fake);
    expect_calls("");
}

static char forgotten[64];

static void forget_in_child(dbt_permit *p)
{
    size_t n = strlen(forgotten);
    snprintf(forgotten + n, sizeof forgotten - n, "%s%s", n ? " " : "", name_of(p));
}

Test(conn_state, a_child_forgets_the_parents_permits_and_takes_its_own)
{
    forgotten[0] = '\0';
    fake.keeps = true;
    dbt_conn_state_connect(&st, ops, &fake);
    command();
    ended(IDLE);
    expect_calls("acquire c1; acquire q2; park q2");
    dbt_conn_state_after_fork(&st, forget_in_child);
    cr_expect_str_eq(forgotten, "q2 c1");
    cr_expect_null(st.query_permit);
    cr_expect_null(st.conn_permit);
    cr_expect_not(st.query_kept);
    command(); /* the child's own permits, nothing released or unparked of the parent's */
    expect_calls("acquire c3; acquire q4");
}

/* ---- a PQsend* command whose wait another thread runs (held.c) ------------------------------ */

Test(conn_state, a_deferred_command_holds_the_permit_its_wait_brings)
{
    fake.answer = DBT_DEFER;
    cr_assert_eq(command(), DBT_DEFER);
    expect_calls("queued q");
    cr_expect_null(st.query_permit);
    cr_expect_not(dbt_conn_state_refused(&st));
    fake.kinds[fake.issued++] = 'q'; /* the permit the wait brought, as the fake names them */
    dbt_conn_state_deferred_end(&st, DBT_PROCEED, permit(1));
    cr_expect_eq(st.query_permit, permit(1));
    sent(true, ACTIVE);
    ended(INTRANS); /* BEGIN: kept to the transaction's end */
    expect_calls("idle q1");
    fake.answer = DBT_PROCEED;
    cr_assert_eq(command(), DBT_PROCEED);
    ended(IDLE);
    expect_calls("busy q1; park refused q1; release q1");
}

Test(conn_state, a_deferred_command_refused_at_the_end_of_its_wait_is_the_last_word)
{
    fake.answer = DBT_DEFER;
    cr_assert_eq(command(), DBT_DEFER);
    dbt_conn_state_deferred_end(&st, DBT_REFUSE, NULL);
    cr_expect(dbt_conn_state_refused(&st));
    cr_expect_null(st.query_permit);
    ended(IDLE); /* the stand-in's answer was read: nothing to give back */
    cr_expect(dbt_conn_state_refused(&st));
    fake.answer = DBT_PROCEED;
    cr_assert_eq(command(), DBT_PROCEED);
    cr_expect_not(dbt_conn_state_refused(&st));
    expect_calls("queued q; acquire q1");
}

Test(conn_state, a_deferred_command_let_through_unthrottled_keeps_its_transaction_so)
{
    fake.answer = DBT_DEFER;
    cr_assert_eq(command(), DBT_DEFER);
    dbt_conn_state_deferred_end(&st, DBT_PROCEED, NULL); /* Redis unreachable, open mode */
    ended(INTRANS);
    fake.answer = DBT_PROCEED;
    cr_assert_eq(command(), DBT_PROCEED); /* no permit taken mid-transaction */
    expect_calls("queued q; ran unthrottled");
}
