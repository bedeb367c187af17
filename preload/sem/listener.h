/* listener.h - the waiting threads' turns at listening for grants (listener.c). */
#ifndef DBT_LISTENER_H
#define DBT_LISTENER_H

#include "pool_types.h"

/* How a wait for a grant ended: on the slot's eventfd (acquire's wait_wake) or as the listener
 * (dbt_listen). */
typedef enum {
    DBT_WAIT_WOKEN,      /* something happened: look at the slot's state */
    DBT_WAIT_TIMED_OUT,  /* the deadline passed */
    DBT_WAIT_INTERRUPTED /* a signal interrupted it and o->interrupted said stop */
} dbt_wait_result;
/* Leads for one step: polls the listener connection and s's eventfd until something happens,
 * the deadline passes or a signal interrupts and o->interrupted says stop. Only the thread that
 * set p->leader_active calls it, without p->mu. */
dbt_wait_result dbt_listen(dbt_pool *p, struct dbt_slot *s, int64_t deadline_us,
                           const dbt_acquire_opts *o);
/* p->mu held: the role goes to a waiter whose thread waits, or else, while waits are parked, to
 * the renewer (dbt_pool_bg_may_lead) or, Redis being down, to a parked waiter given a thread. */
void dbt_listener_pass(dbt_pool *p);
void dbt_listener_close(dbt_pool *p); /* frees the listener connection (no thread uses it) */
/* p->mu held. Whether a message waits unread on the listener while no thread of ours waits for a
 * grant, so that it is a recall, the end of sole, or a stale grant: one poll() that does not wait.
 * A kept permit is not taken again then (dbt_core_reuse). */
bool dbt_listener_unread(dbt_pool *p);
/* The listener's notices come through pool.h: dbt_listener_moved (connect anew) and
 * dbt_pool_set_group (pop other wake lists). */
struct dbt_slot *dbt_find_slot(dbt_pool *p, const char *id); /* p->mu held */
void dbt_fail_waiters(dbt_pool *p); /* p->mu held: every waiter gives up on a Redis that is gone */

#endif
