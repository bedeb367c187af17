/* lapse.c - closed mode promises never to run more than the limit. A held permit's lease ends in
 * Redis at the latest one lease after its last renewal Redis accepted was *sent* (Redis starts the
 * lease when the renewal arrives, never before it was sent). If Redis cannot be reached (stopped,
 * cut off, slow) while a command runs longer than that, the lease lapses, Redis reaps the permit
 * when it answers again and grants it to another process, while the command still runs at the
 * server: one more than the limit. So before that moment the renewer cancels the command at the
 * server (docs/design.md, "Why it is safe", "A lease that lapses under a running command").
 *
 * Nothing runs under a kept permit or a transaction idle between statements: those are only
 * marked lost when the lease has run out (the next command acquires again), as before. A
 * connection permit is not cancelled either: it bounds sessions, and a cancel ends a statement,
 * not a session. Open mode runs on: it may exceed the limit while Redis is unreachable. */
#include "lapse.h"
#include "clock.h"
#include "pool.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

/* Room for the renewer to wake late (a loaded machine) and for the cancel to reach the server (a
 * connect and one packet; loopback or a LAN). */
#define LAPSE_SLACK_US INT64_C(250000)

int64_t dbt_lapse_margin_us(const dbt_pool *p, int64_t lease)
{
    /* The renewer checks between its Redis calls, each of which may take a whole
     * DBTHROTTLE_REDIS_TIMEOUT; Redis' clock may run up to 0.5% fast against ours. */
    int64_t margin = p->client->cfg->redis_timeout_ms * 1000 + LAPSE_SLACK_US + lease / 200;
    /* Never before a renewal due at lease/3 could have answered: a healthy Redis confirms it in
     * well under a lease/3, so no command is cancelled while Redis answers. With a timeout this
     * long against the lease, the margin is short of what the bound needs (docs/design.md). */
    if (margin > lease / 3)
        margin = lease / 3;
    return margin;
}

/* A permit whose command runs now (not kept, not idle in a transaction), not cancelled yet, and
 * either held or lost as its lease ran out. p->mu held. */
static bool running(const dbt_pool *p, const struct dbt_slot *s)
{
    return s->state == SLOT_HELD && (!s->lost || s->lapsed) && !s->lapse_cancelled &&
           s->gen == p->gen && s->kind == DBT_KIND_QUERY && !s->parked && !s->idle_since_us &&
           s->conn[0];
}

int64_t dbt_lapse_take_due(dbt_pool *p, int64_t now, bool can_cancel, dbt_cancels *out)
{
    /* Without the interposer (dbthrottle acquire -- CMD, a test of this layer) nothing can be
     * cancelled: the lease is lost when it runs out, as before. */
    if (!can_cancel || atomic_load(&p->on_redis_error) != DBT_ON_ERROR_CLOSED)
        return -1;
    int64_t next = -1;
    for (struct dbt_slot *s = p->slots; s; s = s->next) {
        if (!running(p, s) || dbt_pool_shadow(p, s->kind)) /* shadow mode ends no command */
            continue;
        /* the lease Redis expires it by: the one its last accepted renewal carried */
        int64_t lease = s->lease_us, at = s->t_renewed_us + lease - dbt_lapse_margin_us(p, lease);
        if (!s->lost && at > now) {
            if (next < 0 || at < next)
                next = at;
            continue;
        }
        if (out->n == DBT_MAX_CANCELS) {
            next = now; /* the rest at once, after these */
            continue;
        }
        if (!s->lost) {
            char cause[160], why[340];
            bool known = dbt_slot_unrenewed_cause(p, s, now, cause, sizeof cause);
            snprintf(why, sizeof why,
                     "not renewed for %" PRId64 " ms of a %" PRId64 " ms lease%s%s%s; closed mode: "
                     "its command is cancelled before the lease can run out in Redis",
                     (now - s->t_renewed_us) / 1000, lease / 1000, known ? ": " : " (", cause,
                     known ? "" : ")");
            dbt_slot_mark_lost(p, s, DBT_LOG_ERROR, why);
            s->lapsed = true;
        }
        /* Else its lease already ran out (this process was stopped past the cancel's time, or
         * Redis reaped it): cancelled now, which shortens the overlap it may already have. */
        s->lapse_cancelled = true;
        snprintf(out->conn[out->n], sizeof out->conn[0], "%s", s->conn);
        out->event[out->n++] = "lapse_cancel";
    }
    return next;
}

/* Before a command uses a permit it holds (kept between commands, or a transaction's next
 * statement): lost when its lease has run out, and in closed mode already once its cancel's time
 * has passed. A command started then would run past the renewer's cancel, which it plans only for
 * the commands running when it looks (an idle transaction's was not one): the command acquires
 * again instead, through Redis, which answers or refuses. */
bool dbt_permit_lost(dbt_permit *s)
{
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us();
    bool lost = s->gen != p->gen || dbt_slot_expire_unrenewed(p, s, now);
    if (!lost && s->state == SLOT_HELD && s->kind == DBT_KIND_QUERY &&
        atomic_load(&p->on_redis_error) == DBT_ON_ERROR_CLOSED && !dbt_pool_shadow(p, s->kind) &&
        now - s->t_renewed_us > s->lease_us - dbt_lapse_margin_us(p, s->lease_us)) {
        char cause[160], why[340];
        bool known = dbt_slot_unrenewed_cause(p, s, now, cause, sizeof cause);
        snprintf(why, sizeof why,
                 "not renewed for %" PRId64 " ms of a %" PRId64 " ms lease%s%s%s; closed mode: "
                 "a command may no longer start under it",
                 (now - s->t_renewed_us) / 1000, s->lease_us / 1000, known ? ": " : " (", cause,
                 known ? "" : ")");
        dbt_slot_mark_lost(p, s, DBT_LOG_ERROR, why);
        s->lapsed = true;
        lost = true;
    }
    pthread_mutex_unlock(&p->mu);
    return lost;
}
