/* listener.c - waiting threads take turns listening for the grants pushed to their process.
 *
 * Grants arrive by BLPOP on the process' own wake list ("<prefix>{pool}:wake:<cid>") over one
 * connection per process and pool. Rather than a dedicated thread that receives each grant and
 * wakes its waiter (two thread wake-ups between Redis and the waiter), one of the waiting threads
 * is the leader: it polls that connection and its own eventfd at once, hands other threads'
 * grants to them, and, when its own grant comes or it gives up, passes the role to another
 * waiter. A process with a single waiting thread (the common case) thus gets its grant straight
 * from the socket. A BLPOP in flight outlives leaders: whoever leads next reads its reply. */
#include "listener.h"
#include "clock.h"
#include "cluster.h"
#include "fork.h"
#include "handover.h"
#include "lease.h"
#include "pool.h"
#include "relay.h"
#include "route.h"
#include "route_step.h"
#include "sharing.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* BLPOP's own timeout. Only bounds how long a blocked BLPOP outlives the last waiter. */
#define BLPOP_SECONDS "30"
/* With Redis Cluster, a BLPOP blocked on a node the pool's slot has just left is told MOVED only
 * when that node's client cron reaches it (up to a second later): meanwhile the grants pushed to
 * the wake list on the new node wait. A BLPOP that ends every half second is sent again, meets
 * the MOVED at once, and follows it (follow_redirect). */
#define BLPOP_SECONDS_CLUSTER "0.5"

/* BLPOPs kept in flight at most. With several threads of the process waiting, several grants can
 * be on their way at once: Redis serves the next pipelined BLPOP as soon as it answered the one
 * before, so each grant is delivered without waiting for the leader to ask again. */
#define MAX_BLPOPS 8

struct dbt_slot *dbt_find_slot(dbt_pool *p, const char *id)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

void dbt_fail_waiters(dbt_pool *p)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_QUEUED && !s->orphan) {
            dbt_lw_remove(p, s);
            s->state = SLOT_DOWN;
            p->nqueued--;
            dbt_slot_wake(s);
        }
    /* Places no thread waits on: the renewer withdraws them once Redis answers again. */
    dbt_pool_forget_verdicts(p);
}

/* A grant "g<kind>:<id>" arrived, or "r<kind>": somebody queued, so permits this process keeps
 * between commands go back (the renewer sends them), and none is kept until a grant with nobody
 * queued; or "f<kind>:<ticket>": another process queued behind ours (see handover.c). Call with
 * p->mu held. A grant for a slot that is no longer waiting (it timed out and is being cancelled) is
 * ignored: cancel.lua gives it back. */
static void dispatch(dbt_pool *p, const char *msg)
{
    /* "<letter><kind letter>..." (lua/protocol/_common.def's wake letters) */
    dbt_kind k;
    if (!msg[0] || !dbt_kind_of_letter(msg[1], &k))
        return;
    if (msg[0] == DBT_WAKE_RECALL) {
        dbt_queue_event ev = {.type = DBT_QEV_REVOKE,
                              .ticket = msg[2] == ':' ? strtoull(msg + 3, NULL, 10) : 0,
                              .now_us = dbt_now_us()};
        ev.lease_us = dbt_lease_shortest_us(p, ev.now_us);
        /* It ends an older sole verdict too (pool_core.c): the queue was empty meanwhile. */
        unsigned act = dbt_queue_step(&p->queue[k], &ev);
        if (((act & DBT_QACT_RETURN_KEPT) && p->nparked > 0) ||
            ((act & DBT_QACT_SOLE_ENDED) && p->norphans > 0))
            dbt_pool_wake_bg(p);
        dbt_sharing_keep_event(p, k, &ev); /* the host's shelf, whoever kept what is on it */
        return;
    }
    if (msg[0] == DBT_WAKE_FOREIGN && msg[2] == ':') {
        /* Another process queued: no more local handover (handover.c). */
        dbt_handover_foreign(p, k, strtoull(msg + 3, NULL, 10));
        return;
    }
    if (msg[0] == DBT_WAKE_SHARE && msg[2] == ':') {
        /* "s<kind>:<share>:<ticket>": the host group's share changed: above it, its releases
         * go back to Redis until it holds its share; -1: no share is in force any more
         * (docs/design.md, "Shares"). */
        char *end;
        long long share = strtoll(msg + 3, &end, 10);
        if (*end != ':' || share < -1)
            return;
        dbt_shev ev = {
            .type = DBT_SHEV_PUSH, .share = share, .ticket = strtoull(end + 1, NULL, 10)};
        dbt_sharing_share_event(p, k, NULL, &ev);
        return;
    }
    if (msg[0] != DBT_WAKE_GRANT || msg[2] != ':')
        return;
    struct dbt_slot *s = dbt_find_slot(p, msg + 3);
    dbt_grant_facts f = {.waiting = s && (s->state == SLOT_QUEUED || s->state == SLOT_PENDING)};
    if (dbt_core_grant(&f) == DBT_GRANT_IGNORE)
        return;
    /* Counted as held from here, whether the acquirer has read its reply (QUEUED) or not. */
    dbt_handover_granted(p, s);
}

/* The listener connection broke and could not be replaced: drop it. The leader's own call to
 * Redis failed, so it gives up (open or closed) rather than hang; the other waiters' places are
 * still valid in Redis, so they keep waiting (the next one to lead connects anew). Pushes may
 * have been lost with the connection: what Redis said of the queue is forgotten. Called without
 * p->mu; s is the leader's slot. */
static void listener_failed(dbt_pool *p, struct dbt_slot *s, const char *err)
{
    dbt_pool_note_error(p, "listen", err);
    pthread_mutex_lock(&p->mu);
    dbt_redis *l = p->listener;
    p->listener = NULL;
    dbt_redis_disown(l);
    p->blpop_in_flight = 0;
    if (s->state == SLOT_QUEUED && !s->orphan) {
        dbt_lw_remove(p, s);
        s->state = SLOT_DOWN;
        p->nqueued--;
    }
    dbt_pool_forget_verdicts(p);
    pthread_mutex_unlock(&p->mu);
    dbt_redis_free(l);
}

/* The wake lists the listener pops, one BLPOP for all (the same hash tag as the pool's keys, so
 * one Cluster slot): the pool's own (dbt_pool_cid), and while it shares with its host the
 * group's, "<wake prefix><G>" (where end_sole pushes "f<kind>:<ticket>" to the host); and the
 * lists of the cids the pool had before (attach, a broken segment let go, attach anew) that its
 * places in flight or queued and its kept permits were made under: their grants and revokes are
 * pushed there. At most MAX_WAKE_KEYS in all: the grants of places made under still older cids
 * come with the next renewal (its granted waiters). */
enum { MAX_WAKE_KEYS = 5 };
typedef struct {
    char *key[MAX_WAKE_KEYS];
    int n;
} wake_keys;

static void wake_keys_free(wake_keys *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->key[i]);
    w->n = 0;
}

/* Adds "<prefix><the first len bytes of cid>" unless it is there already or w is full; false when
 * out of memory. */
static bool wake_key_add(wake_keys *w, const char *prefix, const char *cid, size_t len)
{
    if (len == 0 || w->n >= MAX_WAKE_KEYS)
        return true;
    size_t plen = strlen(prefix);
    for (int i = 0; i < w->n; i++)
        if (strlen(w->key[i]) == plen + len && memcmp(w->key[i] + plen, cid, len) == 0)
            return true;
    char *k = malloc(plen + len + 1);
    if (!k)
        return false;
    memcpy(k, prefix, plen);
    memcpy(k + plen, cid, len);
    k[plen + len] = '\0';
    w->key[w->n++] = k;
    return true;
}

/* The cid part of an id, as the scripts' cid_of reads it: up to its first '.', '/' or '#'. */
static size_t cid_len(const char *id)
{
    return strcspn(id, "./#");
}

/* With p->mu held. False when out of memory (err set). */
static bool wake_keys_of(dbt_pool *p, wake_keys *w, char *err)
{
    w->n = 0;
    const char *prefix = p->keys.wake_prefix, *cid = dbt_pool_cid(p);
    bool ok = wake_key_add(w, prefix, cid, strlen(cid)) &&
              wake_key_add(w, prefix, p->group, strlen(p->group));
    for (struct dbt_slot *s = p->slots; ok && s; s = s->next) {
        bool placed = s->state == SLOT_PENDING || s->state == SLOT_QUEUED;
        bool kept = s->state == SLOT_HELD && s->parked;
        /* Only lists of this process' own cids. A permit another process of the host made and
         * passed here, kept on the host's shelf, keeps its maker's id: its recall comes by the
         * group's list too (lua's K.recall). A BLPOP naming the maker's list popped the grants
         * of the maker's places when the maker's own BLPOP was not first in line: dropped here
         * as unknown, the maker's thread waited on until its renewal (~400 ms) while its
         * permit was held by nobody. Places are always made here. */
        if ((placed || kept) && s->gen == p->gen && dbt_sharing_id_ours(p, s->id))
            ok = wake_key_add(w, prefix, s->id, cid_len(s->id));
    }
    if (ok)
        ok = wake_key_add(w, prefix, p->prev_cid, strlen(p->prev_cid));
    if (!ok) {
        wake_keys_free(w);
        snprintf(err, DBT_ERRLEN, "listen: out of memory");
    }
    return ok;
}

static dbt_redis *ready_listener_steps(dbt_pool *p, char *err);

/* Listener connections to the host's relay that may break in a row, each replaced at once. */
#define RELAY_TRIES 3

/* Whether the listener's connection is one to the host's relay, and broke. */
static bool relay_broke(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    bool broke = p->listener && p->listener->relayed && dbt_redis_broken(p->listener);
    pthread_mutex_unlock(&p->mu);
    return broke;
}

/* Connects the listener if needed and makes sure a BLPOP is in flight. Leader only. All of it
 * within one DBTHROTTLE_REDIS_TIMEOUT counted from here, not from the start of the listen: a wait
 * for pushes lasts seconds, and a connection the server or a proxy closed in the middle of it
 * (CLIENT KILL, an idle timeout), or one that broke while this process was stopped, was replaced
 * with no time left ("timed out") and Redis taken for unreachable when it answered at once:
 * commands refused (closed) or run unthrottled (open) for the outage's backoff. */
static dbt_redis *ready_listener(dbt_pool *p, char *err)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    dbt_redis *l = ready_listener_steps(p, err);
    dbt_redis_budget_end(b);
    /* A connection to the host's relay that broke as the BLPOPs went (the relay ended, or
     * stalled): not Redis' doing. Again, with a budget of its own, on a new connection (to the
     * next speaker, or to Redis): a few times, as speakers may end one after another when the
     * host's processes all do. */
    for (int tries = 0; !l && tries < RELAY_TRIES && relay_broke(p); tries++) {
        b = dbt_redis_budget_anew(p->client->cfg->redis_timeout_ms);
        l = ready_listener_steps(p, err);
        dbt_redis_budget_end(b);
    }
    /* Still the relay's doing: directly to Redis, which alone can say it is unreachable (make
     * test once saw a waiter refused, "redis lost while waiting", just after its speaker was
     * killed, Redis answering throughout). */
    if (!l && relay_broke(p)) {
        dbt_relay_avoid();
        b = dbt_redis_budget_anew(p->client->cfg->redis_timeout_ms);
        l = ready_listener_steps(p, err);
        dbt_redis_budget_end(b);
    }
    return l;
}

static dbt_redis *ready_listener_steps(dbt_pool *p, char *err)
{
    pthread_mutex_lock(&p->mu);
    dbt_redis *l = p->listener;
    bool reset = p->listener_reset || (l && (dbt_redis_broken(l) || dbt_redis_outdated(l)));
    if (reset) {
        /* A BLPOP of the connection let go may have popped a grant since the change that asked
         * for it (a cid change renews at once, but may come before that): lost with it, it would
         * come back only at the next renewal. A renewal after the loss brings it at once. */
        if (l && p->blpop_in_flight > 0) {
            p->renew_now = true;
            if (p->thread_started)
                dbt_pool_wake_bg(p);
        }
        p->listener = NULL;
        dbt_redis_disown(l);
        p->blpop_in_flight = 0;
        p->listener_reset = false;
    }
    /* One BLPOP per waiting thread (at least one), and one more, MAX_BLPOPS at most. The spare
     * is for a message that waits in the list from before: a recall pushed while this process
     * held a permit it did not keep (Redis pushes one to every holder), which nobody read. The
     * first BLPOP pops it at once; without a second one already there, the grant that follows
     * within a round trip (a kept permit given back) waited for the BLPOP sent after it: a round
     * trip more on the path of every first waiter behind a kept permit. A process that shares
     * with its host may find two: Redis pushes the recall to the host's list too (lua's
     * K.recall), which nobody read if nobody of the host listened: one spare more. */
    int want = (p->nqueued < 1 ? 1 : p->nqueued) + (p->group[0] ? 2 : 1);
    if (want > MAX_BLPOPS)
        want = MAX_BLPOPS;
    if (p->bg_leading && p->bg_reads_only)
        want = 0;
    int more = want - p->blpop_in_flight;
    pthread_mutex_unlock(&p->mu);
    if (reset) {
        dbt_redis_free(l);
        l = NULL;
    }
    if (!l) {
        l = dbt_pool_connect(p, err);
        if (!l)
            return NULL;
        pthread_mutex_lock(&p->mu);
        p->listener = l;
        dbt_redis_adopt(l); /* a fork()ed child closes it with the listener now */
        pthread_mutex_unlock(&p->mu);
    }
    if (more > 0) {
        wake_keys w;
        pthread_mutex_lock(&p->mu);
        bool have = wake_keys_of(p, &w, err);
        pthread_mutex_unlock(&p->mu);
        if (!have)
            return NULL;
        const char *argv[2 + MAX_WAKE_KEYS] = {"BLPOP"};
        int argc = 1;
        for (int i = 0; i < w.n; i++)
            argv[argc++] = w.key[i];
        argv[argc++] = l->route.slot >= 0 && dbt_cluster_routing(p->client->cfg)
                           ? BLPOP_SECONDS_CLUSTER
                           : BLPOP_SECONDS;
        bool sent = true;
        for (int i = 0; i < more && sent; i++)
            sent = dbt_redis_append(l, argc, argv, NULL, err);
        wake_keys_free(&w);
        if (!sent || !dbt_redis_flush(l, err))
            return NULL;
        pthread_mutex_lock(&p->mu);
        p->blpop_in_flight += more;
        pthread_mutex_unlock(&p->mu);
    }
    return l;
}

/* Whether the listener's error is a cluster redirection to follow now, as the routing policy
 * (dbt_route_next) decides, all within one DBTHROTTLE_REDIS_TIMEOUT from the first (*until_us,
 * 0 until then): MOVED at once (the map names the new node); TRYAGAIN and CLUSTERDOWN after a
 * short pause (a migration or a failover in progress: BLPOP on a wake list that is not there yet
 * is redirected until it ends). ASK too: the BLPOP stays with the slot's owner rather than block
 * on the importing node, so a wake list in migration is waited out as TRYAGAIN. Each BLPOP sent
 * again is a call of its own, so its MOVED is the first of that call: every one is followed. */
static bool follow_redirect(dbt_pool *p, const char *err, int64_t *until_us)
{
    int64_t now = dbt_now_us();
    int64_t until = *until_us ? *until_us : now + p->client->cfg->redis_timeout_ms * 1000;
    int moves = 0;
    dbt_route_step step =
        dbt_route_next(dbt_cluster_redirect_of(err, NULL, NULL), &moves, until - now);
    if (step == DBT_ROUTE_STOP)
        return false;
    *until_us = until; /* the window opens at the first redirection followed */
    if (step != DBT_ROUTE_MOVED) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    return true;
}

/* Reads what the listener socket has and dispatches every complete reply. */
static bool read_grants(dbt_pool *p, dbt_redis *l, char *err)
{
    if (!dbt_redis_read_available(l, err))
        return false;
    for (;;) {
        redisReply *rep = NULL;
        int got = dbt_redis_next_reply(l, &rep, err);
        if (got < 0)
            return false;
        if (got == 0)
            return true;
        pthread_mutex_lock(&p->mu);
        if (p->blpop_in_flight > 0)
            p->blpop_in_flight--;
        dbt_deliver_collect(p); /* a parked command granted here is sent here */
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
            rep->element[1]->type == REDIS_REPLY_STRING)
            dispatch(p, rep->element[1]->str);
        pthread_mutex_unlock(&p->mu);
        dbt_deliver_flush();
        bool bad = rep->type == REDIS_REPLY_ERROR;
        if (bad) {
            snprintf(err, DBT_ERRLEN, "redis: %s", rep->str);
            (void)dbt_cluster_note_moved(rep->str, l->node_host, l->node_port);
        }
        freeReplyObject(rep);
        if (bad)
            return false;
    }
}

dbt_wait_result dbt_listen(dbt_pool *p, struct dbt_slot *s, int64_t deadline_us,
                           const dbt_acquire_opts *o)
{
    char err[DBT_ERRLEN];
    dbt_wait_result result = DBT_WAIT_WOKEN;
    bool reconnected = false;
    int relay_breaks = 0; /* the relay's connections that broke in this call */
    int64_t redirect_until_us = 0;
    dbt_redis *l = ready_listener(p, err);
    if (!l) {
        listener_failed(p, s, err);
        goto out;
    }
    /* Permits other processes of the host pass to ours come by the segment's wake socket. */
    pthread_mutex_lock(&p->mu);
    /* The renewer's unless waiting threads watch the socket themselves (acquire.c) and no
     * registered wait is parked (no thread of its own). */
    int share_fd = s != p->bg_slot || !p->share_threads_watch || dbt_sharing_parked_registered(p)
                       ? dbt_sharing_fd(p)
                       : -1;
    if (s == p->bg_slot)
        p->bg_watches_share = share_fd >= 0;
    pthread_mutex_unlock(&p->mu);
    for (;;) {
        int ms = -1;
        if (deadline_us >= 0) {
            int64_t left = deadline_us - dbt_now_us();
            if (left <= 0) {
                result = DBT_WAIT_TIMED_OUT;
                break;
            }
            ms = (int)((left + 999) / 1000);
        }
        struct pollfd pfd[3] = {{.fd = dbt_redis_fd(l), .events = POLLIN},
                                {.fd = s->efd, .events = POLLIN},
                                {.fd = share_fd, .events = POLLIN}};
        /* Replies (or TLS bytes) already read are invisible to poll: take them first. */
        int n;
        if (dbt_redis_readable_now(l)) {
            pfd[0].revents = POLLIN;
            pfd[1].revents = pfd[2].revents = 0;
            n = 1;
        } else {
            n = poll(pfd, share_fd >= 0 ? 3 : 2, ms);
        }
        if (n < 0 && errno == EINTR) {
            if (o->interrupted && o->interrupted(o->arg)) {
                result = DBT_WAIT_INTERRUPTED;
                break;
            }
            continue;
        }
        if (n == 0)
            continue; /* the deadline check above ends it */
        if (share_fd >= 0 && pfd[2].revents) {
            /* The caller looks at its slot again (it may hold a passed permit now) and leads
             * on; the socket may have changed meanwhile (a segment given up, or rebuilt). */
            dbt_handover_receive(p);
            break;
        }
        if (pfd[0].revents) {
            if (!read_grants(p, l, err)) {
                /* A cluster redirection (the slot moved or is moving): connect again, to the
                 * node the map names now, within one DBTHROTTLE_REDIS_TIMEOUT. */
                if (follow_redirect(p, err, &redirect_until_us)) {
                    pthread_mutex_lock(&p->mu);
                    p->listener_reset = true;
                    pthread_mutex_unlock(&p->mu);
                    if ((l = ready_listener(p, err)) != NULL)
                        continue;
                }
                /* Once per call, a listener that failed (it may have sat on a Redis that has
                 * restarted since) is replaced before the waiters are told Redis is gone:
                 * grants pushed meanwhile wait in the wake list for the new BLPOPs. */
                else if (!reconnected || (relay_broke(p) && ++relay_breaks < RELAY_TRIES)) {
                    reconnected = true;
                    pthread_mutex_lock(&p->mu);
                    p->listener_reset = true;
                    pthread_mutex_unlock(&p->mu);
                    if ((l = ready_listener(p, err)) != NULL)
                        continue;
                }
                listener_failed(p, s, err);
                break;
            }
            /* Keep a BLPOP in flight for the others, unless our own grant just came. */
            pthread_mutex_lock(&p->mu);
            bool mine = s->state == SLOT_HELD;
            pthread_mutex_unlock(&p->mu);
            if (!mine && !ready_listener(p, err))
                listener_failed(p, s, err);
            break;
        }
        if (pfd[1].revents) {
            uint64_t v;
            ssize_t rd = read(s->efd, &v, sizeof v);
            (void)rd;
            break;
        }
    }
out:
    return result;
}

void dbt_listener_pass(dbt_pool *p)
{
    /* A waiter whose thread waits takes the role (it finds no leader). The others have no
     * thread (parked, held.c; or about to be): the renewer listens for them (renewer.c,
     * waits_unheard), rather than a thread of ours woken to lead and passing the role on again at
     * its own grant (pgbench -S -c16 -j16 at a limit of 4 handed the role on every fifth command:
     * five thread switches each). */
    struct dbt_slot *any = NULL;
    for (struct dbt_slot *w = p->slots; w; w = w->next)
        if (w->state == SLOT_QUEUED && !w->orphan) {
            if (w->thread_waits) {
                dbt_slot_wake(w);
                return;
            }
            if (!any)
                any = w;
        }
    if (!any)
        return;
    if (dbt_pool_bg_may_lead(p))
        dbt_pool_wake_bg(p);
    else
        dbt_slot_wake(any); /* a thread of ours leads for it (Redis down: it finds that out) */
}

bool dbt_listener_unread(dbt_pool *p)
{
    if (!p->listener || p->blpop_in_flight == 0 || p->nqueued > 0)
        return false;
    struct pollfd pfd = {.fd = dbt_redis_fd(p->listener), .events = POLLIN};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN);
}

void dbt_listener_close(dbt_pool *p)
{
    dbt_redis_free(p->listener);
    p->listener = NULL;
    p->blpop_in_flight = 0;
}

/* In a fork()ed child: the parent's listener connection closed, nobody listening. */
static void after_fork(dbt_pool *p)
{
    dbt_redis_free(p->listener); /* closes the socket, sends nothing (its leader is not here) */
    p->listener = NULL;
    p->leader_active = p->listener_reset = false;
    p->blpop_in_flight = 0;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
