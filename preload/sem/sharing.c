/* sharing.c - a pool's side of host sharing: the processes of one host that use a pool pass
 * held permits among themselves without Redis while the host's waiters are the whole queue
 * (docs/design.md, "Host-level sharing"; the segment itself is hostshare.c's).
 *
 * Held permits move between processes; places never do. A waiting thread is registered in the
 * segment for as long as it waits (dbt_lw_push / dbt_lw_remove call in here); a releasing thread
 * of another process may write its permit into that registration (handover.c) and wake this
 * process' socket; whoever polls it (a waiting thread, acquire.c's wait_wake; the leader in
 * dbt_listen; or the renewer, for waits no thread runs) takes the permit through here
 * (dbt_handover_receive): the waiting thread holds it from then on, and its place in
 * Redis' queue stays this process', an orphan for its next waiter, as with local handover. This
 * file says what the segment gave; handover.c decides what becomes of it, and calls in here. */
#include "sharing.h"
#include "clock.h"
#include "fork.h"
#include "lease.h"
#include "log.h"
#include "pool.h"
#include "relay.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pool that could not attach tries again this often (a share directory fixed meanwhile), and
 * one whose segment broke attaches anew no sooner (a segment that keeps breaking costs one
 * attach per period, not one per command). */
#define ATTACH_RETRY_US INT64_C(10000000)
#define REATTACH_US     INT64_C(1000000)

/* The share directory's usual name was not the user's own: said once per process. */
static _Atomic bool dir_warned;

bool dbt_sharing_attach_due(const dbt_pool *p, int64_t now)
{
    if (!p->client->cfg->host_share || p->share_attaching || p->exiting)
        return false;
    if (p->share)
        return dbt_share_broken(p->share);
    return now >= p->share_retry_us;
}

/* The namespace `which` of this process ("pid:[4026531836]"), in out; false (why said) when it
 * cannot be read. */
static bool namespace_of(const char *which, char *out, size_t cap, char *why, size_t whycap)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/self/ns/%s", which);
    ssize_t n = readlink(path, out, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) {
        snprintf(why, whycap, "cannot read %s: %s", path,
                 n < 0 ? strerror(errno) : "an unexpected link");
        return false;
    }
    out[n] = '\0';
    return true;
}

/* dbt_sharing_key for a lease of lease_ms. */
static char *sharing_key(const dbt_pool *p, int64_t lease_ms, char *why, size_t whycap)
{
    /* The segment judges a process dead by kill(tid, 0) and names its wake socket by its pid:
     * both mean something only within one pid namespace (and the network namespace is kept in
     * the key as before: segments of other namespaces stay apart whatever the socket's kind).
     * Processes of other namespaces (containers on one /dev/shm) get segments of their own. */
    char pid_ns[64], net_ns[64];
    if (!namespace_of("pid", pid_ns, sizeof pid_ns, why, whycap) ||
        !namespace_of("net", net_ns, sizeof net_ns, why, whycap))
        return NULL;
    /* And the lease in force (the process' own or the pool's live one): processes of
     * different leases keep apart. A permit's expiry in Redis follows the lease of its last
     * accepted renewal: a giver says its renewal time for the segment's lease, never later than
     * the truth (dbt_lease_renewed_for), and a receiver counts from there by that lease; a
     * process whose lease changed lets the segment go and attaches to its new lease's. */
    const char *url = p->client->cfg->redis_url_redacted ? p->client->cfg->redis_url_redacted : "";
    size_t n = strlen(url) + strlen(p->keys.base) + strlen(pid_ns) + strlen(net_ns) + 40;
    char *key = malloc(n);
    if (key)
        snprintf(key, n, "%s %s %s %s lease=%lld", url, p->keys.base, pid_ns, net_ns,
                 (long long)lease_ms);
    else
        snprintf(why, whycap, "out of memory");
    return key;
}

char *dbt_sharing_key(const dbt_pool *p, char *why, size_t whycap)
{
    return sharing_key(p, dbt_lease_us(p) / 1000, why, whycap);
}

/* p->mu held: the registrations of the segment being let go are forgotten (they go with it),
 * and the pool's new ids are made with the plain cid again. */
static dbt_share *let_go(dbt_pool *p)
{
    dbt_share *old = p->share;
    p->share = NULL;
    atomic_store(&p->share_fd1, 0);
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        s->share_reg = 0;
    dbt_pool_set_group(p, NULL);
    /* What the host's sole state allowed is over: ask Redis again. */
    dbt_pool_forget_verdicts(p);
    if (p->norphans > 0)
        dbt_pool_wake_bg(p);
    return old;
}

/* FNV-1a of a reason, never 0 (0 is "none said"). */
static uint64_t reason_hash(const char *why)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (const unsigned char *c = (const unsigned char *)why; *c; c++)
        h = (h ^ *c) * UINT64_C(1099511628211);
    return h ? h : 1;
}

void dbt_sharing_attach(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us();
    if (!dbt_sharing_attach_due(p, now)) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    dbt_share *broken = p->share ? let_go(p) : NULL;
    p->share_attaching = true;
    p->share_retry_us = now + (broken ? REATTACH_US : ATTACH_RETRY_US);
    uint64_t gen = p->gen;
    pthread_mutex_unlock(&p->mu);

    if (broken) {
        const char *why_broken = dbt_share_why(broken);
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("reason", why_broken && why_broken[0] ? why_broken : "-"),
                         DBT_S("effect", "permits go through Redis until the segment is rebuilt")};
        dbt_log(DBT_LOG_INFO, "host_share_broken", f, 3);
        dbt_share_detach(broken);
        /* Attached anew a period later (the renewer's or a command's call): not at once, or a
         * segment that breaks as soon as it is used would cost an attach per command. */
        pthread_mutex_lock(&p->mu);
        p->share_attaching = false;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    char why[256] = "";
    int64_t lease_us = dbt_lease_us(p);
    char *key = sharing_key(p, lease_us / 1000, why, sizeof why);
    dbt_share *sh = key ? dbt_share_attach(p->client->cfg->share_dir, key, why, sizeof why) : NULL;
    free(key);
    /* The usual directory was not the user's own (another user made it first?): said once per
     * process, at warn, though sharing goes on in the user's own. */
    if (sh && dbt_share_note(sh)[0] && !atomic_exchange(&dir_warned, true)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("reason", dbt_share_note(sh)),
                         DBT_S("effect", "shares through the directory named, with this user's "
                                         "processes that find it")};
        dbt_log(DBT_LOG_WARN, "host_share_dir_taken", f, 3);
    }

    pthread_mutex_lock(&p->mu);
    p->share_attaching = false;
    bool keep = sh && p->gen == gen && !p->exiting && !p->share;
    /* The lease changed while it attached: that segment is not its lease's. Again soon. */
    if (keep && lease_us != dbt_lease_us(p)) {
        keep = false;
        p->share_retry_us = dbt_now_us() + REATTACH_US;
    }
    if (keep) {
        p->share = sh;
        p->share_lease_us = lease_us;
        atomic_store(&p->share_fd1, dbt_share_seg_fd(sh) + 1);
        if (p->client->cfg->host_relay)
            dbt_relay_set_dir(dbt_share_dir_fd(sh)); /* the relay's socket lives there */
        dbt_pool_set_group(p, dbt_share_group(sh));
        sh = NULL;
    }
    uint64_t why_hash = reason_hash(why);
    bool say = !keep && !sh && p->share_why_said != why_hash;
    if (say)
        p->share_why_said = why_hash;
    else if (keep)
        p->share_why_said = 0; /* a later failure is news again */
    pthread_mutex_unlock(&p->mu);
    dbt_share_detach(sh); /* a fork or an exit came meanwhile */
    if (say) {
        /* A warning, not a note: the processes of this host then compete for Redis' permits
         * one by one instead of passing them among themselves, and an operator who set a share
         * directory expects it used (a full or read-only /dev/shm, another user's directory). */
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("dir", p->client->cfg->share_dir),
                         DBT_S("reason", why),
                         DBT_S("effect", "this process passes permits among its own threads only")};
        dbt_log(DBT_LOG_WARN, "host_share_unavailable", f, 4);
    }
}

void dbt_sharing_shape(const struct dbt_slot *s, dbt_share_shape *out)
{
    memset(out, 0, sizeof *out);
    out->kind = (int)s->kind;
    out->limit = s->limit;
    out->weight = s->weight;
    snprintf(out->klass, sizeof out->klass, "%s", s->klass);
}

/* How long ago a shelf entry may have been renewed and still be taken: a permit is used only
 * while offerable since its last accepted renewal (as a passed one: half a lease left, renewed
 * within Q); an older entry is its shelver's to give back. Its renewal time is said for the
 * segment's lease (dbt_lease_renewed_for). */
static int64_t shelf_fresh_us(const dbt_pool *p)
{
    int64_t lease = p->share_lease_us;
    return dbt_core_offerable_age_us(lease,
                                     dbt_quarantine_for_ms(lease / 1000, p->client->cfg) * 1000);
}

void dbt_sharing_wait_begin(dbt_pool *p, struct dbt_slot *s)
{
    if (!p->share || s->share_reg || s->orphan || s->gen != p->gen || p->exiting)
        return;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    s->share_reg = dbt_share_wait_begin(p->share, &shape, s->t_request_us);
    /* A permit kept on the shelf meanwhile (while this one's acquire was on its way): its, now,
     * rather than idle there until its keeper's DBTHROTTLE_CACHE_IDLE ends. */
    if (s->share_reg && p->client->cfg->cache_permits)
        (void)dbt_share_shelf_to_waiter(p->share, &shape, s->share_reg,
                                        dbt_now_us() - shelf_fresh_us(p));
}

bool dbt_sharing_wait_end(dbt_pool *p, struct dbt_slot *s, dbt_share_permit *offered)
{
    uint64_t reg = s->share_reg;
    if (!reg)
        return false;
    s->share_reg = 0;
    return p->share && dbt_share_wait_end(p->share, reg, offered);
}

bool dbt_sharing_registered(const dbt_pool *p)
{
    if (!p->share)
        return false;
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->share_reg)
            return true;
    return false;
}

bool dbt_sharing_parked_registered(const dbt_pool *p)
{
    if (!p->share)
        return false;
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->share_reg && !s->thread_waits)
            return true;
    return false;
}

void dbt_sharing_parked_wait(dbt_pool *p, const struct dbt_slot *s)
{
    if (!s->share_reg || s->thread_waits)
        return;
    p->share_threads_watch = false;
    if (p->bg_leading && !p->bg_watches_share)
        dbt_pool_wake_bg(p); /* its listen starts again, with the socket */
}

int dbt_sharing_fd(const dbt_pool *p)
{
    return p->share ? dbt_share_fd(p->share) : -1;
}

static struct dbt_slot *find_registered(dbt_pool *p, uint64_t reg)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->share_reg == reg)
            return s;
    return NULL;
}

int dbt_sharing_take(dbt_pool *p, struct dbt_slot **to, dbt_share_permit *permits, int cap)
{
    enum { BATCH = 16 };
    dbt_share_taken taken[BATCH];
    int n = dbt_share_take(p->share, taken, cap < BATCH ? cap : BATCH);
    for (int i = 0; i < n; i++) {
        to[i] = find_registered(p, taken[i].reg);
        permits[i] = taken[i].permit;
        if (to[i]) {
            to[i]->share_reg = 0; /* the segment took the registration away */
        } else {
            /* Never: a registration ends (dbt_sharing_wait_end) before its slot leaves
             * waiting, and a permit offered to it comes back then. Without its slot its
             * kind is not known here: its lease gives it back. */
            dbt_field f[] = {DBT_S("pool", p->name), DBT_S("permit", taken[i].permit.id),
                             DBT_S("effect", "its lease gives it back")};
            dbt_log(DBT_LOG_WARN, "host_share_unclaimed", f, 3);
        }
    }
    return n;
}

/* The cid part of an id (before its first '.'): "<cid>" or "<G>~<cid>". */
static size_t cid_part(const char *id)
{
    const char *dot = strchr(id, '.');
    return dot ? (size_t)(dot - id) : strlen(id);
}

bool dbt_sharing_id_ours(const dbt_pool *p, const char *id)
{
    size_t n = cid_part(id), mine = strlen(p->client->cid);
    if (n < mine || memcmp(id + n - mine, p->client->cid, mine) != 0)
        return false;
    return n == mine || id[n - mine - 1] == '~';
}

bool dbt_sharing_id_grouped(const dbt_pool *p, const char *id)
{
    if (!p->share)
        return false;
    const char *g = dbt_share_group(p->share);
    size_t glen = strlen(g);
    return strncmp(id, g, glen) == 0 && id[glen] == '~';
}

/* ---- the host's shelf ---- */

void dbt_sharing_share_event(dbt_pool *p, dbt_kind kind, const char *id, const dbt_shev *ev)
{
    /* Counted until the process leaves the segment, its exit's wait for acquires in flight too:
     * a grant read then is given back by the exit, which counts it (dbt_sharing_gave_back_at_exit)
     */
    if (!p->share || p->share_left)
        return;
    if (id && !dbt_sharing_id_grouped(p, id))
        return;
    if (dbt_share_share_event(p->share, (int)kind, ev) && !p->exiting) {
        /* above its share now, or none in force: the places kept here and elsewhere go */
        dbt_share_wake_all(p->share);
        if (p->norphans > 0)
            dbt_pool_wake_bg(p);
    }
}

void dbt_sharing_gave_back(dbt_pool *p, dbt_kind kind, const char *id, bool lost)
{
    if (!lost)
        dbt_sharing_share_event(p, kind, id, &(dbt_shev){.type = DBT_SHEV_RETURNED});
}

void dbt_sharing_gave_back_at_exit(dbt_pool *p)
{
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_HELD && s->gen == p->gen && s->kind < DBT_NKINDS)
            dbt_sharing_gave_back(p, s->kind, s->id, s->lost);
}

void dbt_sharing_share_view(dbt_pool *p, dbt_kind kind, dbt_share_view *out)
{
    memset(out, 0, sizeof *out);
    if (p->share)
        dbt_share_share_view(p->share, (int)kind, out);
}

void dbt_sharing_keep_event(dbt_pool *p, dbt_kind kind, const dbt_queue_event *ev)
{
    if (!p->share || p->exiting)
        return;
    if ((dbt_share_keep_event(p->share, (int)kind, ev) & DBT_QACT_RETURN_KEPT) &&
        !p->shelf_recall[kind]) {
        p->shelf_recall[kind] = true;
        dbt_pool_wake_bg(p);
    }
}

bool dbt_sharing_shelf_keepable(dbt_pool *p, const struct dbt_slot *s)
{
    if (!p->share || p->exiting)
        return false;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    return dbt_share_shelf_keepable(p->share, &shape);
}

bool dbt_sharing_shelve(dbt_pool *p, struct dbt_slot *s)
{
    if (!p->share || p->exiting || s->gen != p->gen || !dbt_sharing_id_grouped(p, s->id))
        return false;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    dbt_share_permit permit = {.renewed_us = dbt_lease_renewed_for(s, p->share_lease_us)};
    snprintf(permit.id, sizeof permit.id, "%s", s->id);
    s->shelf = dbt_share_shelve(p->share, &shape, &permit, dbt_now_us());
    return s->shelf != 0;
}

bool dbt_sharing_unshelve_own(dbt_pool *p, struct dbt_slot *s)
{
    if (!s->shelf)
        return true;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    dbt_share_permit permit;
    uint64_t was = 0;
    /* no fresh entry is old enough for INT64_MAX: only its own */
    bool got = p->share &&
               dbt_share_unshelve(p->share, &shape, s->shelf, INT64_MAX, &permit, &was) &&
               was == s->shelf;
    s->shelf = 0;
    return got;
}

bool dbt_sharing_take_shelved(dbt_pool *p, struct dbt_slot *s)
{
    if (!p->share || p->exiting || !p->client->cfg->cache_permits)
        return false;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    dbt_share_permit permit;
    int64_t now = dbt_now_us(), lease = p->share_lease_us;
    if (!dbt_share_unshelve(p->share, &shape, 0, now - shelf_fresh_us(p), &permit, NULL))
        return false;
    snprintf(s->id, sizeof s->id, "%s", permit.id);
    s->named_round = 0;
    dbt_lease_renewed(s, permit.renewed_us, lease / 1000);
    s->share_got_us = now;
    return true;
}

bool dbt_sharing_shelf_check(dbt_pool *p, struct dbt_slot *s, int64_t sent)
{
    return s->shelf && p->share && dbt_share_shelf_renewed(p->share, s->shelf, sent);
}

int dbt_sharing_shelf_take_kind(dbt_pool *p, dbt_kind kind, dbt_share_permit *ids,
                                struct dbt_slot **own, int cap)
{
    if (!p->share || cap <= 0)
        return 0;
    uint64_t was[64];
    if (cap > 64)
        cap = 64;
    int n = dbt_share_shelf_take_kind(p->share, (int)kind, ids, was, cap);
    for (int i = 0; i < n; i++) {
        own[i] = NULL;
        for (struct dbt_slot *s = p->slots; was[i] && s && !own[i]; s = s->next)
            if (s->shelf == was[i])
                own[i] = s;
    }
    return n;
}

struct dbt_share *dbt_sharing_let_go_for_lease(dbt_pool *p)
{
    if (!p->share || p->share_lease_us == dbt_lease_us(p))
        return NULL;
    p->share_retry_us = dbt_now_us() + REATTACH_US;
    return let_go(p);
}

void dbt_sharing_detach_left(dbt_pool *p, struct dbt_share *old)
{
    if (!old)
        return;
    dbt_field f[] = {DBT_S("pool", p->name),
                     DBT_S("reason", "the pool's lease changed (a live setting)"),
                     DBT_S("effect", "permits go through Redis until the new lease's segment is "
                                     "attached (a second)")};
    dbt_log(DBT_LOG_INFO, "host_share_left", f, 3);
    dbt_share_detach(old);
}

void dbt_sharing_leave(dbt_pool *p)
{
    dbt_share_leave(p->share);
    p->share_left = true;
}

void dbt_sharing_free(dbt_pool *p)
{
    atomic_store(&p->share_fd1, 0);
    dbt_share_detach(p->share);
    p->share = NULL;
}

void dbt_sharing_precheck(dbt_pool *p)
{
    int fd1 = atomic_load_explicit(&p->share_fd1, memory_order_relaxed);
    if (fd1 > 0)
        dbt_share_precheck(fd1 - 1);
}

void dbt_sharing_precheck_end(void)
{
    dbt_share_precheck_end();
}

/* In a fork()ed child: the registrations and the wake socket are the parent's; the child's ids
 * use its plain cid until dbt_sharing_group_ready. */
static void after_fork(dbt_pool *p)
{
    p->share_attaching = false;
    p->nwait_threads = 0; /* the parent's threads are not here */
    p->share_watcher = NULL;
    p->share_threads_watch = false;
    p->bg_watches_share = false;
    if (!p->share)
        return;
    dbt_share_after_fork(p->share);
    /* The child's ids name the group only once it has a record of its own in the segment
     * (dbt_sharing_group_ready, before its first new id): if it cannot make one, its waiters
     * must not count under G in Redis. Until then its plain (new) cid. */
    dbt_pool_set_group(p, NULL);
}

/* Last: its change of group asks the listener and the renewer, reset by then, to start over. */
__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_LAST, after_fork);
}

void dbt_sharing_group_ready(dbt_pool *p)
{
    if (p->share && !p->group[0] && !p->exiting && dbt_share_ready(p->share))
        dbt_pool_set_group(p, dbt_share_group(p->share));
}
