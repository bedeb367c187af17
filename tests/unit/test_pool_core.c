/* The pool's decisions (pool_core.c), driven row by row through the tables of docs/design.md
 * ("The pool's decisions"): what the pool knows of a kind's queue, moved by events, and where a
 * permit goes, from the facts a driver gathers.
 *
 * Tests named "twin_*" are the pure twins of regression tests of tests/sem about a decision: the
 * same interleaving, fed as events, without Redis or threads (the tests/sem test is named). */
#include "pool_core.h"

#include <criterion/criterion.h>
#include <string.h>

#define LEASE_US INT64_C(30000000)
/* Q as dbt_quarantine_ms makes it for this lease, a 1 s DBTHROTTLE_REDIS_TIMEOUT: below half a
 * lease (lease / 3 + 2 s < lease / 2 for leases over 12 s). */
#define QUARANTINE_US (LEASE_US / 3 + INT64_C(2000000))
#define T0            INT64_C(1000000000) /* a monotonic "now" far from 0 */

static dbt_queue_state q;

static void reset(void)
{
    memset(&q, 0, sizeof q);
}

TestSuite(pool_core, .init = reset);

/* ---- events ---- */

static unsigned verdict_at(uint64_t ticket, bool sole, bool waiters_here, int64_t now)
{
    dbt_queue_event ev = {.type = DBT_QEV_VERDICT,
                          .ticket = ticket,
                          .sole = sole,
                          .waiters_here = waiters_here,
                          .now_us = now,
                          .lease_us = LEASE_US};
    return dbt_queue_step(&q, &ev);
}

static unsigned verdict(uint64_t ticket, bool sole)
{
    return verdict_at(ticket, sole, true, T0);
}

static unsigned foreign(uint64_t ticket)
{
    dbt_queue_event ev = {.type = DBT_QEV_FOREIGN, .ticket = ticket};
    return dbt_queue_step(&q, &ev);
}

static unsigned revoke_at(uint64_t ticket, int64_t now)
{
    dbt_queue_event ev = {
        .type = DBT_QEV_REVOKE, .ticket = ticket, .now_us = now, .lease_us = LEASE_US};
    return dbt_queue_step(&q, &ev);
}

static unsigned granted_at(bool from_queue, long long queue, uint64_t ticket, int64_t now)
{
    dbt_queue_event ev = {.type = DBT_QEV_GRANTED,
                          .from_queue = from_queue,
                          .queue = queue,
                          .ticket = ticket,
                          .now_us = now,
                          .lease_us = LEASE_US};
    return dbt_queue_step(&q, &ev);
}

static unsigned renewed(long long queue, long long mine, bool attached, bool host_sole_owner,
                        bool handover_allowed)
{
    dbt_queue_event ev = {.type = DBT_QEV_RENEWED,
                          .queue = queue,
                          .mine = mine,
                          .attached = attached,
                          .host_sole_owner = host_sole_owner,
                          .handover_allowed = handover_allowed};
    return dbt_queue_step(&q, &ev);
}

static unsigned renewed_reasserting(void)
{
    dbt_queue_event ev = {.type = DBT_QEV_RENEWED, .handover_allowed = true, .reasserted = true};
    return dbt_queue_step(&q, &ev);
}

static unsigned simple(dbt_queue_event_type t)
{
    dbt_queue_event ev = {.type = t};
    return dbt_queue_step(&q, &ev);
}

static bool sole(void)
{
    return q.sole.sole != 0;
}

/* ---- sole: verdicts and foreign tickets ---- */

Test(pool_core, a_sole_verdict_makes_us_sole)
{
    cr_assert_eq(verdict(5, true), DBT_QACT_NONE);
    cr_assert(sole());
    cr_assert_eq(q.sole.sole, 5);
    cr_assert_eq(q.sole.verdict_ticket, 5);
    cr_assert_eq(q.sole.verdict_us, T0);
}

Test(pool_core, a_verdict_of_others_queued_is_not_sole)
{
    cr_assert_eq(verdict(5, false), DBT_QACT_NONE);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.verdict_ticket, 5);
}

Test(pool_core, a_verdict_that_ends_sole_says_so)
{
    verdict(5, true);
    cr_assert_eq(verdict(6, false), DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
}

Test(pool_core, an_older_verdict_read_late_changes_nothing)
{
    verdict(6, false);
    cr_assert_eq(verdict(5, true), DBT_QACT_NONE);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.verdict_ticket, 6);
    verdict(8, true);
    cr_assert_eq(verdict(8, false), DBT_QACT_NONE, "the same ticket twice: the first stands");
    cr_assert(sole());
}

Test(pool_core, a_verdict_of_ticket_zero_is_no_verdict)
{
    cr_assert_eq(verdict(0, true), DBT_QACT_NONE);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.verdict_ticket, 0);
}

Test(pool_core, a_foreign_waiter_after_our_verdict_ends_sole)
{
    verdict(5, true);
    cr_assert_eq(foreign(7), DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.foreign_ticket, 7);
    cr_assert_eq(foreign(9), DBT_QACT_NONE, "ended once");
}

Test(pool_core, a_foreign_waiter_our_later_verdict_counted_does_not_end_it)
{
    verdict(9, true); /* queued after the foreigner: its verdict saw it gone */
    cr_assert_eq(foreign(7), DBT_QACT_NONE);
    cr_assert(sole());
}

Test(pool_core, ticket_zero_ends_any_sole_verdict)
{
    verdict(9, true);
    cr_assert_eq(foreign(0), DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.foreign_ticket, 0, "no ticket to order by: none recorded");
}

Test(pool_core, a_recall_after_our_verdict_ends_it)
{
    /* "r" with ticket 7: a waiter queued behind an empty queue after our verdict 5 (no "f" comes:
     * Redis forgot its sole owner when the queue emptied). */
    verdict(5, true);
    cr_assert(revoke_at(7, T0) & DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.foreign_ticket, 6, "our own waiter's verdict (7) may still come");
    verdict(6, true);
    cr_assert_not(sole(), "a verdict before the recall, read after it, made us sole again");
    verdict(7, true);
    cr_assert(sole(), "our own waiter's verdict, the recall's ticket, did not count");
}

Test(pool_core, a_recall_after_the_counter_restarted_ends_an_old_verdict)
{
    /* The pool's keys expired (idle for three leases): tickets start again from 1. */
    verdict_at(5000, true, true, T0);
    cr_assert(revoke_at(2, T0 + 4 * LEASE_US) & DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
    cr_assert_eq(verdict_at(3, true, true, T0 + 4 * LEASE_US), DBT_QACT_NONE);
    cr_assert(sole(), "a verdict of the new counter did not count");
}

Test(pool_core, a_recall_of_our_own_waiters_ticket_leaves_its_verdict)
{
    verdict(7, true);
    cr_assert_not(revoke_at(7, T0) & DBT_QACT_SOLE_ENDED);
    cr_assert(sole());
    reset();
    cr_assert_not(revoke_at(7, T0) & DBT_QACT_SOLE_ENDED, "nothing to end");
    verdict(7, true);
    cr_assert(sole(), "our verdict read after our own recall");
    cr_assert(revoke_at(0, T0) & DBT_QACT_SOLE_ENDED, "no ticket: it ends any verdict");
}

Test(pool_core, a_verdict_that_forgets_a_stale_sole_says_it_ended)
{
    verdict_at(5, true, true, T0);
    cr_assert_eq(verdict_at(2, false, false, T0 + 2 * LEASE_US), DBT_QACT_SOLE_ENDED);
    cr_assert_not(sole());
}

Test(pool_core, a_push_that_outran_the_verdict_wins)
{
    cr_assert_eq(foreign(7), DBT_QACT_NONE);
    cr_assert_eq(verdict(5, true), DBT_QACT_NONE);
    cr_assert_not(sole(), "the foreigner queued after our place (7 > 5)");
    verdict(9, true);
    cr_assert(sole(), "a later verdict saw the queue after the foreigner left");
}

/* tests/sem: hostshare/verdicts_and_foreign_tickets_in_any_order */
Test(pool_core, twin_verdicts_and_foreign_tickets_in_any_order)
{
    /* Every order of verdict(5, sole), foreign(7), verdict(9, sole) ends sole after the last
     * verdict, and not sole whenever foreign(7) came after the last verdict applied (5). */
    const char *orders[] = {"vfw", "vwf", "fvw", "fwv", "wvf", "wfv"};
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        reset();
        for (const char *c = orders[i]; *c; c++) {
            if (*c == 'v')
                verdict(5, true);
            else if (*c == 'w')
                verdict(9, true);
            else
                foreign(7);
        }
        cr_assert(sole(), "order %s: the verdict of ticket 9 counted the foreigner", orders[i]);
        cr_assert_eq(q.sole.sole, 9, "order %s", orders[i]);
    }
    for (size_t i = 0; i < 2; i++) {
        reset();
        if (i == 0) {
            verdict(5, true);
            foreign(7);
        } else {
            foreign(7);
            verdict(5, true);
        }
        cr_assert_not(sole(), "order %zu: the foreigner queued after ticket 5", i);
    }
}

/* tests/sem: hostshare/a_verdict_older_than_a_lease_is_history_unless_the_host_waits */
Test(pool_core, twin_a_verdict_older_than_a_lease_is_history_unless_we_wait)
{
    verdict_at(100, false, true, T0);
    foreign(120);
    /* The keys expired; tickets restart from 1. Within a lease: a push may have overtaken the
     * reply, ticket 1 is old. */
    cr_assert_eq(verdict_at(1, true, false, T0 + LEASE_US), DBT_QACT_NONE);
    cr_assert_not(sole());
    cr_assert(dbt_sole_verdict_stale(&q.sole, T0 + LEASE_US + 1, LEASE_US));
    cr_assert_not(dbt_sole_verdict_stale(&q.sole, T0 + LEASE_US, LEASE_US));
    /* Over a lease later with a waiter of ours queued: still history kept. */
    verdict_at(2, true, true, T0 + LEASE_US + 1);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.verdict_ticket, 100);
    /* Over a lease later, none of ours queued: what was said is forgotten, the new one applies. */
    verdict_at(3, true, false, T0 + LEASE_US + 1);
    cr_assert(sole());
    cr_assert_eq(q.sole.verdict_ticket, 3);
    cr_assert_eq(q.sole.foreign_ticket, 0);
}

Test(pool_core, forget_and_fork_make_us_know_nothing)
{
    verdict(5, true);
    foreign(3);
    cr_assert_eq(simple(DBT_QEV_FORGET), DBT_QACT_NONE);
    cr_assert_not(sole());
    cr_assert_eq(q.sole.verdict_ticket, 0);
    cr_assert_eq(q.sole.foreign_ticket, 0);
    verdict(5, true);
    revoke_at(4, T0);
    simple(DBT_QEV_FORK);
    cr_assert_not(sole());
    cr_assert_not(q.keep.contended, "a child keeps nothing of its parent's");
    cr_assert_eq(q.keep.revoke_ticket, 0);
}

/* A forget (a listener broke, a waiter was queued again) voids what was said, not when: a push
 * about a waiter that queued after our place may still outrun our next reply within a lease. */
Test(pool_core, a_push_that_outran_a_reply_after_a_forget_still_wins)
{
    verdict_at(3, true, true, T0);
    simple(DBT_QEV_FORGET);
    cr_assert_eq(q.sole.verdict_us, T0, "forgotten, but not when it was said");
    foreign(7);
    verdict_at(5, true, false, T0 + 1000); /* our reply, read after the push; none queued yet */
    cr_assert_not(sole(), "the foreigner queued after ticket 5");
    simple(DBT_QEV_FORK);
    cr_assert_eq(q.sole.verdict_us, T0 + 1000, "a child too");
}

Test(pool_core, forget_leaves_the_keep_half_alone)
{
    revoke_at(4, T0);
    simple(DBT_QEV_FORGET);
    cr_assert(q.keep.contended);
}

Test(pool_core, the_segment_half_alone_ignores_the_keep_events)
{
    dbt_sole_view v = {0};
    dbt_queue_event ev = {.type = DBT_QEV_GRANTED, .ticket = 4};
    cr_assert_eq(dbt_sole_step(&v, &ev), DBT_QACT_NONE);
    ev = (dbt_queue_event){.type = DBT_QEV_REVOKE, .ticket = 4};
    cr_assert_eq(dbt_sole_step(&v, &ev), DBT_QACT_NONE, "no verdict to end");
    ev = (dbt_queue_event){.type = DBT_QEV_VERDICT,
                           .ticket = 4,
                           .sole = true,
                           .now_us = T0,
                           .lease_us = LEASE_US,
                           .waiters_here = true};
    dbt_sole_step(&v, &ev);
    cr_assert_eq(v.sole, 4);
    ev = (dbt_queue_event){.type = DBT_QEV_FOREIGN, .ticket = 5};
    cr_assert_eq(dbt_sole_step(&v, &ev), DBT_QACT_SOLE_ENDED);
}

/* ---- keep: revokes and grants ---- */

Test(pool_core, a_revoke_makes_us_contended_and_returns_kept_permits)
{
    cr_assert_eq(revoke_at(10, T0), DBT_QACT_RETURN_KEPT);
    cr_assert(q.keep.contended);
    cr_assert_eq(q.keep.revoke_ticket, 10);
    cr_assert_eq(q.keep.revoke_us, T0);
}

Test(pool_core, a_grant_with_nobody_queued_ends_contention)
{
    revoke_at(10, T0);
    cr_assert_eq(granted_at(false, 0, 12, T0 + 1), DBT_QACT_NONE);
    cr_assert_not(q.keep.contended);
}

Test(pool_core, a_grant_from_the_queue_or_past_waiters_leaves_it_contended)
{
    granted_at(true, 0, 12, T0);
    cr_assert(q.keep.contended, "it waited: others may");
    reset();
    granted_at(false, 2, 12, T0);
    cr_assert(q.keep.contended, "granted past two waiters (a class under its guarantee)");
}

Test(pool_core, queuing_makes_us_contended)
{
    cr_assert_eq(simple(DBT_QEV_QUEUED), DBT_QACT_NONE);
    cr_assert(q.keep.contended);
}

/* tests/sem: recovery/late_grant_does_not_undo_a_revoke */
Test(pool_core, twin_late_grant_does_not_undo_a_revoke)
{
    revoke_at(10, T0);               /* someone queued at ticket 10 ... */
    granted_at(false, 0, 8, T0 + 5); /* ... after Redis granted us at counter 8: read late */
    cr_assert(q.keep.contended);
    cr_assert(dbt_keep_revoked_since(&q.keep, 8, T0 + 5, LEASE_US));
    granted_at(false, 0, 0, T0 + 5);
    cr_assert(q.keep.contended, "a grant with no ticket is older than any revoke");
    granted_at(false, 0, 11, T0 + 6); /* given after the revoke: nobody queued since */
    cr_assert_not(q.keep.contended);
}

Test(pool_core, a_revoke_older_than_a_lease_races_no_reply)
{
    revoke_at(10, T0);
    granted_at(false, 0, 8, T0 + LEASE_US + 1);
    cr_assert_not(q.keep.contended, "Redis may have restarted its counter since");
}

Test(pool_core, revokes_keep_their_highest_ticket_within_a_lease)
{
    revoke_at(10, T0);
    revoke_at(4, T0 + 1);
    cr_assert_eq(q.keep.revoke_ticket, 10);
    cr_assert_eq(q.keep.revoke_us, T0 + 1);
    revoke_at(3, T0 + 1 + LEASE_US + 1);
    cr_assert_eq(q.keep.revoke_ticket, 3, "over a lease later the counter may have restarted");
    revoke_at(0, T0 + 1 + LEASE_US + 2);
    cr_assert_eq(q.keep.revoke_ticket, 3, "a revoke with no ticket orders nothing");
}

/* tests/sem: cache/a_kept_permit_goes_back_at_the_next_renewal_if_the_push_is_lost */
Test(pool_core, twin_a_kept_permit_goes_back_at_the_next_renewal_if_the_push_is_lost)
{
    cr_assert_eq(renewed(0, 0, false, false, true), DBT_QACT_NONE);
    cr_assert_not(q.keep.contended);
    cr_assert_eq(renewed(1, 0, false, false, true), DBT_QACT_RETURN_KEPT | DBT_QACT_NOT_ALONE);
    cr_assert(q.keep.contended);
}

/* tests/faults: stopped_keeper_admits_no_one_extra (the keeper's renewer re-asserts first) */
Test(pool_core, a_renewal_that_reasserted_ids_of_ours_returns_kept_permits_and_passes_none)
{
    cr_assert_eq(renewed(0, 0, false, false, true), DBT_QACT_NONE);
    cr_assert_eq(renewed_reasserting(), DBT_QACT_RETURN_KEPT | DBT_QACT_NOT_ALONE,
                 "Redis had lost them: taken back after Q, they may have been granted again");
    cr_assert(q.keep.contended, "none kept until a grant with nobody queued");
    cr_assert_eq(granted_at(false, 0, 9, T0), DBT_QACT_NONE);
    cr_assert_not(q.keep.contended);
}

/* tests/sem: handover/a_lost_push_is_caught_by_the_next_renewal */
Test(pool_core, twin_a_lost_push_is_caught_by_the_next_renewal)
{
    verdict(5, true);
    unsigned act = renewed(3, 3, false, false, true);
    cr_assert_eq(act & DBT_QACT_NOT_ALONE, 0, "the three waiters are ours");
    act = renewed(4, 3, false, false, true);
    cr_assert(act & DBT_QACT_NOT_ALONE, "one more than ours: another queued");
    cr_assert(foreign(0) & DBT_QACT_SOLE_ENDED, "which the driver feeds back as FOREIGN 0");
}

Test(pool_core, a_renewal_that_finds_only_ours_queued_still_returns_kept_permits)
{
    unsigned act = renewed(2, 2, false, false, true);
    cr_assert_eq(act, DBT_QACT_RETURN_KEPT, "our own waiters want them");
    cr_assert(q.keep.contended);
    reset();
    act = renewed(2, 0, true, true, true);
    cr_assert_eq(act, DBT_QACT_RETURN_KEPT, "attached, the host's own waiters");
}

/* tests/sem: handover/a_drain_stops_it */
Test(pool_core, twin_a_drain_stops_it)
{
    unsigned act = renewed(0, 0, false, false, false);
    cr_assert_eq(act, DBT_QACT_RETURN_KEPT | DBT_QACT_NOT_ALONE);
    cr_assert(q.keep.contended);
}

/* tests/sem: host_group/drifted_owner_counts_never_make_a_host_sole_beside_a_foreign_waiter */
Test(pool_core, twin_attached_the_host_is_alone_only_as_redis_sole_owner)
{
    cr_assert_eq(renewed(2, 0, true, true, true) & DBT_QACT_NOT_ALONE, 0,
                 "the queue is the host's group's");
    cr_assert(renewed(2, 2, true, false, true) & DBT_QACT_NOT_ALONE,
              "another owner queues, whatever our own count");
    cr_assert_eq(renewed(0, 0, true, false, true), DBT_QACT_NONE, "nobody queues");
}

/* ---- grants ---- */

static dbt_grant_fate grant(bool waiting, bool orphan, bool was_queued, bool have_waiter,
                            int64_t waiter_since, int64_t since)
{
    dbt_grant_facts f = {.waiting = waiting,
                         .orphan = orphan,
                         .was_queued = was_queued,
                         .have_waiter = have_waiter,
                         .waiter_since_us = waiter_since,
                         .since_us = since};
    return dbt_core_grant(&f);
}

/* tests/sem: cancel/grant_racing_a_timeout_is_never_lost */
Test(pool_core, twin_a_grant_to_a_slot_that_stopped_waiting_is_left_to_cancel)
{
    cr_assert_eq(grant(false, false, true, true, 1, 2), DBT_GRANT_IGNORE);
}

Test(pool_core, a_grant_goes_to_the_thread_that_waited_longest)
{
    cr_assert_eq(grant(true, false, true, false, 0, 5), DBT_GRANT_TO_OWN, "alone");
    cr_assert_eq(grant(true, false, true, true, 3, 5), DBT_GRANT_TO_OLDEST, "3 waited longer");
    cr_assert_eq(grant(true, false, true, true, 7, 5), DBT_GRANT_TO_OWN, "it waited longest");
    cr_assert_eq(grant(true, false, false, true, 3, 5), DBT_GRANT_TO_OWN,
                 "still reading its reply: it keeps the grant");
}

Test(pool_core, an_orphan_places_grant_goes_to_a_waiter_or_back)
{
    cr_assert_eq(grant(true, true, true, true, 9, 5), DBT_GRANT_TO_OLDEST,
                 "whoever waits, however late");
    cr_assert_eq(grant(true, true, true, false, 0, 5), DBT_GRANT_GIVE_BACK);
}

/* ---- where a permit goes ---- */

static dbt_permit_facts facts(void)
{
    /* A held permit of this process, handover on, this process sole, a waiter, fresh lease. */
    return (dbt_permit_facts){.handover_on = true,
                              .current_gen = true,
                              .held = true,
                              .sole_here = true,
                              .have_waiter = true,
                              .made_here = true,
                              .lease = {.lost = false,
                                        .unrenewed_us = 0,
                                        .lease_us = LEASE_US,
                                        .quarantine_us = QUARANTINE_US}};
}

static dbt_route_to to(dbt_move m, dbt_permit_facts f)
{
    return dbt_core_route(m, &f).to;
}

Test(pool_core, a_release_passes_to_our_waiter_while_we_are_sole)
{
    dbt_permit_facts f = facts();
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_WAITER);
    f.have_waiter = false;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS);
}

/* tests/sem: handover/a_waiter_of_another_process_is_served_in_its_turn,
 * handover/off_means_every_grant_goes_through_redis,
 * handover/a_process_that_ends_with_exit_leaves_nothing_queued */
Test(pool_core, twin_a_release_goes_to_redis_unless_everything_allows_a_handover)
{
    dbt_permit_facts f;
    f = facts(), f.sole_here = false;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "another process queues");
    f = facts(), f.handover_on = false;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "DBTHROTTLE_LOCAL_HANDOVER off");
    f = facts(), f.exiting = true;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "exiting");
    f = facts(), f.current_gen = false;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "the parent's");
    f = facts(), f.held = false;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "not a permit");
    f = facts(), f.orphan = true;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "nobody's");
}

/* Shadow mode: a grant enforcing would not have made is never passed on, to a thread of ours or
 * to another process of the host (a waiter there may enforce: it would run past the limit), nor
 * kept. tests/sem shadow/an_over_limit_permit_goes_back_to_redis. */
Test(pool_core, a_shadow_grant_over_the_limit_goes_back_to_redis)
{
    dbt_permit_facts f = facts();
    f.over_limit = true;
    for (int m = DBT_MOVE_RELEASE; m <= DBT_MOVE_HELD_ORPHAN; m++)
        cr_assert_not(dbt_core_may_pass((dbt_move)m, &f), "move %d", m);
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS);
    f.attached = true;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "not offered to the host either");
}

Test(pool_core, a_permit_whose_lease_may_be_gone_goes_back_and_is_marked_once)
{
    dbt_permit_facts f = facts();
    f.lease.unrenewed_us = LEASE_US;
    dbt_permit_route r = dbt_core_route(DBT_MOVE_RELEASE, &f);
    cr_assert_eq(r.to, DBT_ROUTE_WAITER, "a lease to the microsecond is still held");
    f.lease.unrenewed_us = LEASE_US + 1;
    r = dbt_core_route(DBT_MOVE_RELEASE, &f);
    cr_assert_eq(r.to, DBT_ROUTE_REDIS);
    cr_assert(r.mark_unrenewed);
    f.lease.lost = true;
    r = dbt_core_route(DBT_MOVE_RELEASE, &f);
    cr_assert_eq(r.to, DBT_ROUTE_REDIS);
    cr_assert_not(r.mark_unrenewed, "marked lost already");
    f = facts(), f.handover_on = false, f.lease.unrenewed_us = LEASE_US + 1;
    cr_assert_not(dbt_core_route(DBT_MOVE_RELEASE, &f).mark_unrenewed,
                  "a release that passes nothing asks nothing of the lease");
}

Test(pool_core, attached_a_release_is_offered_to_the_host_first)
{
    dbt_permit_facts f = facts();
    f.attached = true;
    f.sole_here = false; /* the process' own verdict does not matter attached */
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_OFFER_HOST);
    f.lease.lost = true;
    cr_assert_eq(to(DBT_MOVE_RELEASE, f), DBT_ROUTE_REDIS, "a lost permit goes nowhere but back");
}

static dbt_offer_outcome after(dbt_move m, dbt_permit_facts f, dbt_offer_answer a, bool host_sole)
{
    f.attached = true;
    return dbt_core_after_offer(m, &f, a, host_sole);
}

/* tests/sem: hostshare/not_sole_means_the_permit_goes_back_to_redis */
Test(pool_core, twin_after_an_offer_a_release_goes_where_the_host_says)
{
    dbt_permit_facts f = facts();
    dbt_offer_outcome o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_TAKEN, false);
    cr_assert(o.taken);
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_LOCAL_FIRST, false);
    cr_assert(!o.taken && o.to == DBT_ROUTE_WAITER, "ours waited longest of the host's");
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_NOBODY, true);
    cr_assert_eq(o.to, DBT_ROUTE_WAITER, "nobody else on the host, the host sole");
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_NOBODY, false);
    cr_assert_eq(o.to, DBT_ROUTE_REDIS, "another host queues");
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_NOT_SOLE, true);
    cr_assert_eq(o.to, DBT_ROUTE_REDIS);
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_TOO_OLD, true);
    cr_assert_eq(o.to, DBT_ROUTE_WAITER, "not offered, but the host is sole");
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_TOO_OLD, false);
    cr_assert_eq(o.to, DBT_ROUTE_REDIS);
    f.have_waiter = false;
    o = after(DBT_MOVE_RELEASE, f, DBT_OFFER_LOCAL_FIRST, true);
    cr_assert_eq(o.to, DBT_ROUTE_REDIS, "no waiter of ours after all");
}

Test(pool_core, after_an_offer_every_answer_for_every_move)
{
    dbt_permit_facts f = facts();
    const dbt_offer_answer answers[] = {DBT_OFFER_LOCAL_FIRST, DBT_OFFER_NOBODY, DBT_OFFER_NOT_SOLE,
                                        DBT_OFFER_TOO_OLD};
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++)
        for (int host_sole = 0; host_sole < 2; host_sole++) {
            dbt_offer_answer a = answers[i];
            bool local = a == DBT_OFFER_LOCAL_FIRST ||
                         ((a == DBT_OFFER_NOBODY || a == DBT_OFFER_TOO_OLD) && host_sole);
            dbt_offer_outcome o = after(DBT_MOVE_KEPT, f, a, host_sole);
            cr_assert(!o.taken && o.to == DBT_ROUTE_REDIS, "kept, answer %zu: never ours", i);
            dbt_permit_facts g = f;
            g.orphan = true;
            g.made_here = true;
            o = after(DBT_MOVE_HELD_ORPHAN, g, a, host_sole);
            cr_assert_eq(o.to, DBT_ROUTE_WAITER, "held orphan made here, answer %zu", i);
            g.made_here = false;
            o = after(DBT_MOVE_HELD_ORPHAN, g, a, host_sole);
            cr_assert_eq(o.to, local ? DBT_ROUTE_WAITER : DBT_ROUTE_REDIS,
                         "held orphan from another process, answer %zu, host sole %d", i,
                         host_sole);
            g.have_waiter = false;
            g.made_here = true;
            o = after(DBT_MOVE_HELD_ORPHAN, g, a, host_sole);
            cr_assert_eq(o.to, DBT_ROUTE_REDIS, "nobody of ours waits, answer %zu", i);
            o = after(DBT_MOVE_RELEASE, f, a, host_sole);
            cr_assert_eq(o.to, local ? DBT_ROUTE_WAITER : DBT_ROUTE_REDIS,
                         "release, answer %zu, host sole %d", i, host_sole);
        }
}

Test(pool_core, the_cheap_gate_says_redis_exactly_when_the_route_does_on_those_facts)
{
    /* Every combination of the cheap facts, each move: may_pass false => route REDIS, and
     * may_pass true => a route that looked at the rest (here: a waiter, made here, fresh), but
     * for a permit lost already, which goes back whatever the rest says. */
    for (unsigned bits = 0; bits < 256; bits++) {
        dbt_permit_facts f = facts();
        f.handover_on = bits & 1;
        f.exiting = bits & 2;
        f.current_gen = bits & 4;
        f.held = bits & 8;
        f.orphan = bits & 16;
        f.attached = bits & 32;
        f.sole_here = bits & 64;
        f.lease.lost = bits & 128;
        for (int m = DBT_MOVE_RELEASE; m <= DBT_MOVE_HELD_ORPHAN; m++) {
            dbt_permit_route r = dbt_core_route((dbt_move)m, &f);
            if (!dbt_core_may_pass((dbt_move)m, &f) || f.lease.lost)
                cr_assert(r.to == DBT_ROUTE_REDIS && !r.mark_unrenewed, "bits %u move %d", bits, m);
            else
                cr_assert_neq(r.to, DBT_ROUTE_REDIS, "bits %u move %d", bits, m);
        }
    }
}

Test(pool_core, unattached_a_held_orphan_another_process_made_goes_back)
{
    dbt_permit_facts f = facts();
    f.orphan = true;
    f.made_here = false; /* passed here before the pool let its segment go */
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_REDIS);
}

Test(pool_core, a_permit_is_offered_with_half_a_lease_left_and_renewed_within_q)
{
    /* Q above half a lease (a short lease): half a lease bounds it. */
    dbt_lease_facts l = {
        .lease_us = LEASE_US, .unrenewed_us = LEASE_US / 2, .quarantine_us = LEASE_US};
    cr_assert(dbt_core_offerable(&l));
    l.unrenewed_us++;
    cr_assert_not(dbt_core_offerable(&l));
    /* Q below it: Q bounds it (tests/faults: stopped_keeper_admits_no_one_extra, the neighbour
     * that would take the stopped keeper's permit from the shelf). */
    l = (dbt_lease_facts){
        .lease_us = LEASE_US, .unrenewed_us = QUARANTINE_US, .quarantine_us = QUARANTINE_US};
    cr_assert(dbt_core_offerable(&l));
    l.unrenewed_us++;
    cr_assert_not(dbt_core_offerable(&l), "Redis may have restarted and granted it again");
    cr_assert_eq(dbt_core_offerable_age_us(LEASE_US, QUARANTINE_US), QUARANTINE_US);
    cr_assert_eq(dbt_core_offerable_age_us(LEASE_US, LEASE_US), LEASE_US / 2);
    l.unrenewed_us = 0;
    l.lost = true;
    cr_assert_not(dbt_core_offerable(&l));
}

Test(pool_core, a_permit_unrenewed_for_longer_than_q_serves_no_command_unasked)
{
    dbt_lease_facts l = {
        .lease_us = LEASE_US, .unrenewed_us = QUARANTINE_US, .quarantine_us = QUARANTINE_US};
    cr_assert_not(dbt_lease_stale(&l));
    l.unrenewed_us++;
    cr_assert(dbt_lease_stale(&l), "stopped across a restart: its unit may be another's");
    cr_assert_not(dbt_lease_gone(&l), "but Redis has not reaped it");
    l.unrenewed_us = 0;
    l.lost = true;
    cr_assert(dbt_lease_stale(&l));
    /* A short lease: Q above it, the lease bounds it. */
    l = (dbt_lease_facts){
        .lease_us = LEASE_US, .unrenewed_us = LEASE_US + 1, .quarantine_us = 2 * LEASE_US};
    cr_assert(dbt_lease_stale(&l));
}

/* tests/sem: cache/an_idle_kept_permit_goes_back_when_a_waiter_queues (with host sharing) */
Test(pool_core, a_kept_permit_goes_to_another_process_or_to_redis_never_to_ours)
{
    dbt_permit_facts f = facts();
    cr_assert_eq(to(DBT_MOVE_KEPT, f), DBT_ROUTE_REDIS, "unattached: Redis");
    f.attached = true;
    cr_assert_eq(to(DBT_MOVE_KEPT, f), DBT_ROUTE_OFFER_HOST);
    cr_assert(after(DBT_MOVE_KEPT, f, DBT_OFFER_TAKEN, false).taken);
    cr_assert_eq(after(DBT_MOVE_KEPT, f, DBT_OFFER_LOCAL_FIRST, true).to, DBT_ROUTE_REDIS);
    cr_assert_eq(after(DBT_MOVE_KEPT, f, DBT_OFFER_NOBODY, true).to, DBT_ROUTE_REDIS);
    dbt_permit_facts g = f;
    g.exiting = true;
    cr_assert_eq(to(DBT_MOVE_KEPT, g), DBT_ROUTE_REDIS);
    g = f, g.handover_on = false;
    cr_assert_eq(to(DBT_MOVE_KEPT, g), DBT_ROUTE_REDIS);
    g = f, g.lease.lost = true;
    cr_assert_eq(to(DBT_MOVE_KEPT, g), DBT_ROUTE_REDIS);
    g = f, g.lease.unrenewed_us = LEASE_US + 1;
    dbt_permit_route r = dbt_core_route(DBT_MOVE_KEPT, &g);
    cr_assert(r.to == DBT_ROUTE_REDIS && r.mark_unrenewed);
}

Test(pool_core, a_held_orphan_goes_to_our_waiter_whatever_the_verdict)
{
    dbt_permit_facts f = facts();
    f.orphan = true;
    f.sole_here = false;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_WAITER, "granted to our place");
    f.have_waiter = false;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_REDIS, "cancel.lua gives it back");
    f = facts(), f.orphan = true, f.lease.lost = true;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_REDIS);
    f = facts(), f.orphan = true, f.exiting = true;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_REDIS);
    f = facts(), f.orphan = true, f.handover_on = false;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_REDIS);
}

/* tests/sem: share_windows/a_held_orphan_from_another_process_goes_back_to_redis_when_not_sole */
Test(pool_core, twin_a_held_orphan_another_process_made_goes_back_unless_the_host_is_sole)
{
    dbt_permit_facts f = facts();
    f.orphan = true;
    f.attached = true;
    cr_assert_eq(to(DBT_MOVE_HELD_ORPHAN, f), DBT_ROUTE_OFFER_HOST);
    f.made_here = false;
    cr_assert_eq(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_NOT_SOLE, false).to, DBT_ROUTE_REDIS);
    cr_assert_eq(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_NOBODY, false).to, DBT_ROUTE_REDIS);
    cr_assert_eq(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_NOBODY, true).to, DBT_ROUTE_WAITER);
    cr_assert_eq(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_LOCAL_FIRST, false).to, DBT_ROUTE_WAITER);
    f.made_here = true;
    cr_assert_eq(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_NOT_SOLE, false).to, DBT_ROUTE_WAITER,
                 "granted to one of our places: ours");
    cr_assert(after(DBT_MOVE_HELD_ORPHAN, f, DBT_OFFER_TAKEN, false).taken);
}

/* ---- keeping a permit ---- */

static dbt_keep_facts keepable(void)
{
    return (dbt_keep_facts){.cache_on = true,
                            .held = true,
                            .current_gen = true,
                            .made_here = true,
                            .lease = {.lease_us = LEASE_US, .quarantine_us = QUARANTINE_US}};
}

static bool keeps(dbt_keep_facts f)
{
    return dbt_core_keep(&f).to == DBT_ROUTE_WAITER;
}

/* tests/sem: cache/a_child_never_uses_its_parents_kept_permit,
 * cache/an_idle_kept_permit_goes_back_when_a_waiter_queues,
 * cache/no_permit_is_kept_when_caching_is_off */
Test(pool_core, twin_a_permit_is_kept_only_when_nothing_speaks_against_it)
{
    cr_assert(keeps(keepable()));
    dbt_keep_facts f;
    f = keepable(), f.cache_on = false;
    cr_assert_not(keeps(f), "caching off");
    f = keepable(), f.held = false;
    cr_assert_not(keeps(f));
    f = keepable(), f.already_kept = true;
    cr_assert_not(keeps(f));
    f = keepable(), f.current_gen = false;
    cr_assert_not(keeps(f), "the parent's");
    f = keepable(), f.contended = true;
    cr_assert_not(keeps(f), "a waiter queued");
    f = keepable(), f.over_limit = true;
    cr_assert_not(keeps(f), "a shadow grant enforcing would not have made");
    f = keepable(), f.redis_down = true;
    cr_assert_not(keeps(f), "Redis is out");
    f = keepable(), f.made_here = false;
    cr_assert_not(keeps(f), "passed here by another process of the host");
    f = keepable(), f.lease.lost = true;
    cr_assert_not(keeps(f));
    cr_assert_not(dbt_core_keep(&f).mark_unrenewed);
    f = keepable(), f.lease.unrenewed_us = LEASE_US + 1;
    cr_assert_not(keeps(f));
    cr_assert(dbt_core_keep(&f).mark_unrenewed);
    f = keepable(), f.lease.unrenewed_us = QUARANTINE_US + 1;
    cr_assert_not(keeps(f), "not offerable: it would serve a later command unasked");
    cr_assert_not(dbt_core_keep(&f).mark_unrenewed, "not lost: given back");
}

/* tests/sem: cache/a_kept_permit_goes_back_by_itself_after_the_idle_time */
Test(pool_core, twin_a_kept_permit_is_due_back_after_the_idle_time_or_at_once_when_contended)
{
    cr_assert_eq(dbt_core_kept_due_us(false, T0, 5000), T0 + 5000);
    cr_assert_eq(dbt_core_kept_due_us(true, T0, 5000), 0);
}

Test(pool_core, a_kept_permit_is_taken_again_only_while_nobody_queued_for_it)
{
    dbt_lease_facts fresh = {.lease_us = LEASE_US, .quarantine_us = QUARANTINE_US};
    cr_assert(dbt_core_reuse(&(dbt_reuse_facts){.ours = true, .lease = fresh}));
    cr_assert_not(dbt_core_reuse(&(dbt_reuse_facts){.ours = false, .lease = fresh}),
                  "given back meanwhile, taken from the shelf, or the parent's");
    cr_assert_not(
        dbt_core_reuse(&(dbt_reuse_facts){.ours = true, .contended = true, .lease = fresh}),
        "a recall was heard: one more command of ours would go before the waiter");
    cr_assert_not(
        dbt_core_reuse(&(dbt_reuse_facts){.ours = true, .message_waiting = true, .lease = fresh}),
        "a recall may be on the wire, unread");
    /* tests/faults: stopped_keeper_admits_no_one_extra (the keeper's next command comes first) */
    dbt_lease_facts stale = fresh;
    stale.unrenewed_us = QUARANTINE_US + 1;
    cr_assert_not(dbt_core_reuse(&(dbt_reuse_facts){.ours = true, .lease = stale}),
                  "stopped for longer than Q: Redis may have granted it again");
}

/* ---- orphans ---- */

Test(pool_core, an_orphan_is_due_at_once_when_held_or_not_sole_else_after_its_idle_time)
{
    cr_assert_eq(dbt_core_orphan_due_us(false, true, false, T0, 50000), T0 + 50000);
    cr_assert_eq(dbt_core_orphan_due_us(true, true, false, T0, 50000), 0,
                 "a permit nobody waits for");
    cr_assert_eq(dbt_core_orphan_due_us(false, false, false, T0, 50000), 0, "others queue");
    cr_assert_eq(dbt_core_orphan_due_us(false, true, true, T0, 50000), INT64_MAX,
                 "a statement of the process runs: the place is for its next wait");
    cr_assert_eq(dbt_core_orphan_due_us(false, false, true, T0, 50000), 0,
                 "others queue, in use or not");
    cr_assert_eq(dbt_core_orphan_due_us(true, true, true, T0, 50000), 0,
                 "granted: passed on or given back");
}

Test(pool_core, a_waiter_adopts_an_orphan_place_only_while_sole)
{
    cr_assert(dbt_core_may_adopt(true, 1, false, true));
    cr_assert_not(dbt_core_may_adopt(false, 1, false, true), "handover off");
    cr_assert_not(dbt_core_may_adopt(true, 0, false, true), "no orphan");
    cr_assert_not(dbt_core_may_adopt(true, 1, true, true), "exiting");
    cr_assert_not(dbt_core_may_adopt(true, 1, false, false), "not sole");
    cr_assert(dbt_core_adopt_worth_asking(true, 1, false));
    cr_assert_not(dbt_core_adopt_worth_asking(false, 1, false));
    cr_assert_not(dbt_core_adopt_worth_asking(true, 0, false));
    cr_assert_not(dbt_core_adopt_worth_asking(true, 1, true));
    cr_assert(dbt_core_orphan_adoptable(LEASE_US, LEASE_US));
    cr_assert_not(dbt_core_orphan_adoptable(LEASE_US + 1, LEASE_US), "Redis may have reaped it");
}

Test(pool_core, a_lease_is_gone_when_lost_or_unrenewed_past_a_lease)
{
    dbt_lease_facts l = {.lease_us = LEASE_US, .unrenewed_us = LEASE_US};
    cr_assert_not(dbt_lease_gone(&l));
    l.unrenewed_us++;
    cr_assert(dbt_lease_gone(&l));
    l.unrenewed_us = 0;
    l.lost = true;
    cr_assert(dbt_lease_gone(&l));
}

/* ---- what a renewal, an outage or a stall means for one slot ---- */

static dbt_slot_facts slot(bool held, bool queued, bool orphan, bool lost)
{
    return (dbt_slot_facts){
        .found = true, .held = held, .queued = queued, .orphan = orphan, .lost = lost};
}

/* tests/sem: evict_passing/both_renewals_of_an_evicted_permit_are_told_and_nothing_is_quarantined,
 * eras/lost_holders_are_reasserted_expired_ones_are_not */
Test(pool_core, twin_a_holder_redis_no_longer_has_is_evicted_or_lost_once)
{
    dbt_slot_facts f = slot(true, false, false, false);
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_LOSS), DBT_GONE_LOST);
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_EVICTION), DBT_GONE_EVICTED);
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_EVICTION_CANCEL), DBT_GONE_EVICTED_CANCEL);
    f.lost = true;
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_EVICTION), DBT_GONE_NOTHING,
                 "the second renewal that names it says nothing new");
    f = slot(false, true, false, false);
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_LOSS), DBT_GONE_NOTHING,
                 "passed on since: a place now");
    f = (dbt_slot_facts){.found = false};
    cr_assert_eq(dbt_core_holder_gone(&f, DBT_GONE_BY_LOSS), DBT_GONE_NOTHING);
}

/* tests/sem: eras/lagging_state_waiter_requeued_and_granted_after_quarantine */
Test(pool_core, twin_a_waiter_redis_forgot_queues_again_or_is_forgotten)
{
    dbt_slot_facts f = slot(false, true, false, false);
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_REQUEUE);
    f.orphan = true;
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_FORGET, "nobody waited on it");
    f = slot(true, false, false, false);
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_GRANT_LAPSED,
                 "granted after the renewal left, reaped before it ran");
    f.lost = true;
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_NOTHING);
    f = slot(false, false, false, false); /* cancelling, down, ... */
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_NOTHING);
    f = (dbt_slot_facts){.found = false};
    cr_assert_eq(dbt_core_waiter_gone(&f), DBT_GONE_NOTHING);
}

Test(pool_core, a_place_unrenewed_for_a_lease_has_expired_unless_an_orphan)
{
    dbt_slot_facts f = slot(false, true, false, false);
    cr_assert_not(dbt_core_place_expired(&f, LEASE_US, LEASE_US));
    cr_assert(dbt_core_place_expired(&f, LEASE_US + 1, LEASE_US));
    f.orphan = true;
    cr_assert_not(dbt_core_place_expired(&f, LEASE_US + 1, LEASE_US), "withdrawn instead");
    f = slot(true, false, false, false);
    cr_assert_not(dbt_core_place_expired(&f, LEASE_US + 1, LEASE_US), "a permit, not a place");
}

/* tests/sem: outage/open_runs_unthrottled_and_recovers, outage/closed_refuses_and_recovers,
 * error_classes/a_name_that_never_resolved_is_a_configuration_error: the first rule */
Test(pool_core, an_outage_runs_unthrottled_only_in_open_mode_and_never_when_misconfigured)
{
    cr_assert_eq(dbt_core_outage(false, true), DBT_OUTAGE_UNTHROTTLED);
    cr_assert_eq(dbt_core_outage(false, false), DBT_OUTAGE_REFUSED);
    cr_assert_eq(dbt_core_outage(true, true), DBT_OUTAGE_MISCONFIGURED);
    cr_assert_eq(dbt_core_outage(true, false), DBT_OUTAGE_MISCONFIGURED);
}

/* tests/faults/fleet_state_visible.sh: a cut is one outage in the log and in status */
Test(pool_core, a_reply_to_a_call_sent_before_the_failure_does_not_end_the_outage)
{
    dbt_outage_view v = {.in_outage = true, .last_error_us = 5000, .ended_us = 0};
    cr_assert_not(dbt_core_outage_ends(&v, 4999), "sent before the failure: says nothing since");
    cr_assert(dbt_core_outage_ends(&v, 5000), "sent as it was noted");
    cr_assert(dbt_core_outage_ends(&v, 7000), "sent after");
    v.in_outage = false;
    cr_assert_not(dbt_core_outage_ends(&v, 7000), "no outage to end");
}

Test(pool_core, a_failure_within_the_backoff_of_the_last_outage_resumes_it)
{
    const int64_t backoff = 1000000;
    dbt_outage_view v = {.in_outage = false, .last_error_us = 0, .ended_us = 0};
    cr_assert(dbt_core_outage_begins(&v, 10, backoff), "the first failure begins one");
    v.in_outage = true;
    cr_assert_not(dbt_core_outage_begins(&v, 20, backoff), "one lasts");
    v = (dbt_outage_view){.in_outage = false, .last_error_us = 20, .ended_us = 3000000};
    cr_assert_not(dbt_core_outage_begins(&v, 3000000 + backoff - 1, backoff),
                  "Redis answered for less than the backoff: the same outage");
    cr_assert(dbt_core_outage_begins(&v, 3000000 + backoff, backoff), "a new one after");
}

/* ---- the host's share of the limit (docs/design.md, "Shares") ---- */

static void share_ev(dbt_share_view *v, dbt_shev_type type, int64_t share, int64_t held,
                     uint64_t ticket, bool allowed)
{
    dbt_shev ev = {
        .type = type, .share = share, .held = held, .ticket = ticket, .handover_allowed = allowed};
    dbt_core_share_step(v, &ev);
}

Test(pool_core, zeroed_share_state_is_none_in_force_never_a_share_of_zero)
{
    dbt_share_view v;
    memset(&v, 0, sizeof v);
    cr_assert_not(dbt_core_within_share(&v), "a fresh or reset segment passes nothing");
}

Test(pool_core, a_host_at_or_below_its_share_passes_locally_above_it_gives_back)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_RENEWED, 1, 0, 0, true);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert(dbt_core_within_share(&v), "holds 1 of a share of 1");
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert_not(dbt_core_within_share(&v), "holds 2 of 1: releases go to Redis");
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    cr_assert(dbt_core_within_share(&v), "back at its share");
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    cr_assert_eq(v.held, 0, "never below 0");
}

Test(pool_core, a_renewal_without_a_share_or_with_handover_stopped_ends_local_passing)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_RENEWED, 2, 1, 0, true);
    cr_assert(dbt_core_within_share(&v));
    share_ev(&v, DBT_SHEV_RENEWED, -1, 1, 0, true);
    cr_assert_not(dbt_core_within_share(&v), "nobody else waits: the sole rule decides");
    share_ev(&v, DBT_SHEV_RENEWED, 2, 1, 0, false);
    cr_assert_not(dbt_core_within_share(&v), "drained or above the override");
}

Test(pool_core, a_share_push_sets_the_share_and_the_newest_ticket_wins)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_RENEWED, 3, 0, 0, true);
    for (int i = 0; i < 3; i++)
        share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert_eq(v.held, 3);
    cr_assert(dbt_core_within_share(&v));
    share_ev(&v, DBT_SHEV_PUSH, 1, 0, 10, false);
    cr_assert_not(dbt_core_within_share(&v), "holds 3 of 1");
    share_ev(&v, DBT_SHEV_PUSH, 3, 0, 9, false);
    cr_assert_eq(v.share1, 2, "an older push is history");
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    cr_assert(dbt_core_within_share(&v), "back at its share of 1");
    /* a push of a share that rose lets a host that was above it pass again */
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert_not(dbt_core_within_share(&v), "holds 2 of 1");
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 11, false);
    cr_assert(dbt_core_within_share(&v), "holds 2 of 2");
    cr_assert_eq(v.held, 2, "a push leaves the count alone");
}

/* tests/sem: shares/a_host_above_its_share_gives_back_and_the_other_host_gets_its_share, which
 * once passed a permit locally above the share: a renewal computed between the host's two grants
 * and read after the second said it held 1. */
Test(pool_core, twin_a_renewal_older_than_a_grant_or_a_push_does_not_undo_them)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    dbt_share_view at_send = v; /* the renewal leaves */
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_PUSH, 1, 0, 4, false);
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = -1,
                   .held = 1,
                   .handover_allowed = true,
                   .events_sent = at_send.events,
                   .grants_sent = at_send.grants,
                   .ticket_sent = at_send.ticket};
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "Redis' 1 of before the second grant, plus the grant since");
    cr_assert_eq(v.share1, 2, "the push's share is newer than the renewal's");
    cr_assert_not(dbt_core_within_share(&v), "holds 2 of 1: releases go to Redis");
    /* a renewal sent after both counts as Redis says, down too */
    at_send = v;
    ev.events_sent = at_send.events;
    ev.grants_sent = at_send.grants;
    ev.ticket_sent = at_send.ticket;
    ev.share = 1;
    ev.held = 1;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 1);
    cr_assert(dbt_core_within_share(&v));
    /* a count that drifted (a path that does not count) is re-anchored by a renewal across
     * which nothing was counted here */
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert_eq(v.held, 3);
    at_send = v;
    ev.events_sent = at_send.events;
    ev.grants_sent = at_send.grants;
    ev.held = 1; /* two of those permits went back unseen here (their leases lapsed) */
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 1, "Redis' count: nothing crossed the renewal");
}

/* A saturated host (tests/faults/hosts_pass_within_their_shares, 2 hosts x 4 processes at 4): its
 * renewal left, a grant Redis made before applying the renewal was read after it left, and the
 * count became Redis' (which had it) plus that grant again: one more than the host held, so it
 * saw itself above its share and gave back every permit, at 2 Redis calls a statement, until the
 * next renewal. Events that crossed the renewal may or may not be in Redis' count: the count kept
 * here stands. */
Test(pool_core, a_renewal_crossed_by_grants_or_returns_leaves_the_count_kept_here)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 5, false);
    for (int i = 0; i < 3; i++)
        share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    dbt_share_view at_send = v; /* the renewal leaves */
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false); /* Redis made it before the renewal */
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = 2,
                   .held = 3, /* the return not applied yet, the grant already */
                   .handover_allowed = true,
                   .events_sent = at_send.events,
                   .grants_sent = at_send.grants,
                   .ticket_sent = at_send.ticket};
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 3, "the count kept here, not 3 + 0 nor any sum of the two");
    /* the return applied before the renewal and the grant after: Redis says 2 */
    at_send = v;
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    ev.events_sent = at_send.events;
    ev.grants_sent = at_send.grants;
    ev.held = 2;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 3, "still the count kept here");
    cr_assert_not(dbt_core_within_share(&v), "holds 3 of 2");
}

/* The same host's first renewal (the case above): Redis made two grants, then applied the
 * renewals of two of its processes, whose replies were read before the two grants (those come on
 * other connections). Nothing was counted while they were in flight, yet Redis' count already had
 * the grants: taken, then counted again as they were read, they made 4 of the 2 the host held. A
 * count above the one here is taken only once renewals have said so for DBT_SHARE_AHEAD_US with
 * nothing counted meanwhile. */
Test(pool_core, a_renewal_ahead_of_grants_in_flight_does_not_count_them_twice)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 5, false);
    int64_t t = 1000000;
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = 2,
                   .held = 2,
                   .handover_allowed = true,
                   .events_sent = v.events,
                   .grants_sent = v.grants,
                   .ticket_sent = v.ticket,
                   .now_us = t};
    dbt_core_share_step(&v, &ev);
    ev.now_us = t + 2000; /* another process' renewal, 2 ms later */
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 0, "not yet: the two grants may be on their way");
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert_eq(v.held, 2, "each counted once");
    cr_assert(dbt_core_within_share(&v), "holds 2 of 2: passes locally");
    ev.events_sent = v.events;
    ev.grants_sent = v.grants;
    ev.now_us = t + 2 * DBT_SHARE_AHEAD_US;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "the next renewal agrees");
    /* a count really below Redis' (a return counted here for a permit Redis still holds): said
     * by renewals over DBT_SHARE_AHEAD_US with nothing counted meanwhile, it is taken */
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    ev.events_sent = v.events;
    ev.grants_sent = v.grants;
    t = ev.now_us;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 1, "once: perhaps a grant in flight");
    ev.now_us = t + DBT_SHARE_AHEAD_US - 1;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 1, "not long enough");
    ev.now_us = t + DBT_SHARE_AHEAD_US;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "Redis' count, said for DBT_SHARE_AHEAD_US");
    /* it rises by the least excess seen over that time: a renewal that saw one more grant in
     * flight than the others does not count it */
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false); /* 0 here; Redis holds 2 */
    ev.events_sent = v.events;
    ev.grants_sent = v.grants;
    t = ev.now_us + 10;
    ev.now_us = t;
    ev.held = 3; /* 2 + a grant in flight */
    dbt_core_share_step(&v, &ev);
    ev.held = 2;
    ev.now_us = t + DBT_SHARE_AHEAD_US;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "raised by the least excess (2), not by 3");
    /* a renewal of permits re-asserted after Redis lost its data counts only those re-asserted
     * yet: it neither lowers nor raises the count */
    ev.reasserted = true;
    ev.held = 0;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "a re-assertion's count is not the group's");
    ev.reasserted = false;
    /* below: at once */
    ev.held = 0;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 0, "a permit that went back unseen here");
}

/* "s<kind>:-1:<ticket>": shares stopped being in force (the queue emptied, a plain process or a
 * shaped waiter waits, more hosts wait than the limit): the host passes by no share from then
 * on, and the renewal in flight across it does not bring the old one back. */
Test(pool_core, a_push_of_none_ends_the_share_told)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 5, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    cr_assert(dbt_core_within_share(&v), "holds 1 of 2");
    dbt_share_view at_send = v;
    share_ev(&v, DBT_SHEV_PUSH, -1, 0, 6, false);
    cr_assert_eq(v.share1, 0, "none in force");
    cr_assert_not(dbt_core_within_share(&v));
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = 2,
                   .held = 1,
                   .handover_allowed = true,
                   .events_sent = at_send.events,
                   .grants_sent = at_send.grants,
                   .ticket_sent = at_send.ticket};
    dbt_core_share_step(&v, &ev);
    cr_assert_not(dbt_core_within_share(&v), "the push of none is newer than the renewal");
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 6, false);
    cr_assert_eq(v.share1, 0, "a push of the same ticket is history");
}

/* tests/sem: shares/a_renewal_naming_no_id_of_the_group_leaves_its_share_alone: a renewal of a
 * process of the host that holds and waits nothing of the kind (or only under its plain cid)
 * says share -1 and held 0, which are not the group's. */
Test(pool_core, a_renewal_naming_no_id_of_the_group_leaves_its_view_alone)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_PUSH, 2, 0, 5, false);
    for (int i = 0; i < 3; i++)
        share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false);
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = -1,
                   .held = 0,
                   .handover_allowed = true,
                   .events_sent = v.events,
                   .grants_sent = v.grants,
                   .ticket_sent = v.ticket,
                   .named_none = true};
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.share1, 3, "the share told stays");
    cr_assert_eq(v.held, 3, "the count stays");
    cr_assert_not(dbt_core_within_share(&v), "holds 3 of 2");
    share_ev(&v, DBT_SHEV_PUSH, 1, 0, 6, false);
    cr_assert_not(dbt_core_within_share(&v), "a later push does not meet a wiped count");
    /* but whatever it names, a renewal that says handover stopped (drained) ends passing */
    ev.handover_allowed = false;
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.share1, 0);
}

/* A count too high (a permit that went back unseen: a process killed while holding) while grants
 * and returns keep crossing every renewal: Redis' count plus the grants counted since the renewal
 * was sent is never below what the host holds, so the count comes down to it at once. */
Test(pool_core, a_count_above_redis_plus_the_grants_since_comes_down_however_busy)
{
    dbt_share_view v = {0};
    share_ev(&v, DBT_SHEV_PUSH, 1, 0, 5, false);
    for (int i = 0; i < 3; i++)
        share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false); /* 3 counted; 1 held in truth */
    dbt_share_view at_send = v;
    share_ev(&v, DBT_SHEV_RETURNED, 0, 0, 0, false);
    share_ev(&v, DBT_SHEV_GRANTED, 0, 0, 0, false); /* crossing the renewal */
    dbt_shev ev = {.type = DBT_SHEV_RENEWED,
                   .share = 1,
                   .held = 1,
                   .handover_allowed = true,
                   .events_sent = at_send.events,
                   .grants_sent = at_send.grants,
                   .ticket_sent = at_send.ticket,
                   .now_us = 1000000};
    dbt_core_share_step(&v, &ev);
    cr_assert_eq(v.held, 2, "Redis' 1 + the grant since: the most the host can hold");
    cr_assert_not(dbt_core_within_share(&v), "holds (at most) 2 of 1");
}
