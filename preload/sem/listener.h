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
void dbt_listener_pass(dbt_pool *p);  /* p->mu held: wake a waiter to take over the role */
void dbt_listener_close(dbt_pool *p); /* frees the listener connection (no thread uses it) */
/* p->mu held: the pool's slot moved to another cluster node (a MOVED): the leader connects its
 * listener anew, to the node that has the wake list now. */
void dbt_listener_moved(dbt_pool *p);
/* p->mu held: the pool shares with its host as group `group` (16 hex digits; NULL or "": no
 * more). Its new Redis ids use the cid "<G>~<client cid>" (dbt_pool_cid), and its listener pops
 * both its own wake list and the group's ("<wake prefix><G>", where Redis pushes the host's
 * "f<kind>:<ticket>"), plus, until the next change, the list of its previous cid (grants of the
 * places made under it). A change makes the leader send new BLPOPs (as dbt_listener_moved). */
void dbt_pool_set_group(dbt_pool *p, const char *group);
struct dbt_slot *dbt_find_slot(dbt_pool *p, const char *id); /* p->mu held */
void dbt_fail_waiters(dbt_pool *p); /* p->mu held: every waiter gives up on a Redis that is gone */

/* In a fork()ed child: the parent's listener connection closed, nobody listening. */
void dbt_listener_after_fork(dbt_pool *p);

#endif
