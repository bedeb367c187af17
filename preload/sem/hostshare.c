/* hostshare.c - the host's segment: a file per pool and user, mapped shared by the processes of
 * this host that share the pool, through which a permit given back by one process goes to the
 * longest-waiting thread of another with no Redis command (hostshare.h; docs/design.md,
 * "Host-level sharing: the segment").
 *
 * Whatever is in the file, a process here must not crash or hang: the segment is written by other
 * processes, which may die at any instruction, run another version of this library, or be
 * hostile (same user). So every call re-validates the header under the lock, checks every record
 * it reads (indexes bounded, strings terminated, states known) before using it, and every write
 * is ordered so that a writer killed half-way leaves either the old record or a new one
 * (the record's state, or a process' pid, is stored last): what a dead lock holder may have left
 * half-done is only the host's sole state, which the next locker resets (not sole: permits go
 * through Redis, the safe side). A segment that fails a check is poisoned: every process gives it
 * up, and the next attach rebuilds it. The last process to detach removes the file (retire). */
#include "hostshare.h"
#include "clock.h"
#include "hostshare_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A registration handle: bit 63 "unregistered" (the table had no room), 20 bits of the
 * attachment's epoch (a new process record, after fork or in another attachment, makes the old
 * handles name nothing), 32 bits of the entry's serial (a reused entry is another registration),
 * 11 bits of the entry's index + 1 (so that no handle is 0). */
#define H_UNREG        (UINT64_C(1) << 63)
#define H_EPOCH_SHIFT  43
#define H_EPOCH_MASK   UINT64_C(0xfffff)
#define H_SERIAL_SHIFT 11
#define H_INDEX_MASK   UINT64_C(0x7ff)

_Static_assert(DBT_SEG_REGS < H_INDEX_MASK, "a registration index fits its handle");

struct dbt_share {
    dbt_seg *seg;
    int fd;  /* the segment's file */
    int dfd; /* its directory, the user's: segments and wake sockets are named relative to it */
    dev_t dev, ddev;
    ino_t ino, dino;
    uid_t uid;
    uint64_t key_hash;
    char path[PATH_MAX];
    char name[64]; /* the segment's file name in dfd */
    /* What names the directory in a socket address: "/proc/self/fd/<dfd>" (this process' own
     * descriptor, whatever is renamed above it), or its path when /proc is not ours. */
    char wake_dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char note[512]; /* what was surprising on the way in (dbt_share_note) */
    char group[DBT_SHARE_GROUP_LEN];
    char why[256]; /* why it is broken */
    bool broken;
    int proc; /* this process' record in procs[], -1: none (yet) */
    uint64_t nonce;
    pid_t pid;       /* the process the record is for */
    int sock;        /* the wake socket, -1: none (yet) */
    bool proc_bound; /* sock is bound to this process' name (pid, nonce) */
    uint32_t epoch;
};

/* ---- small helpers ---- */

static uint64_t fnv1a64_from(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static uint64_t fnv1a64(const char *s)
{
    return fnv1a64_from(UINT64_C(0xcbf29ce484222325), s);
}

uint64_t dbt_share_key_sum(const char *key)
{
    return fnv1a64_from(UINT64_C(0x6462746872736b79), key); /* another start: another hash */
}

/* This thread's id (the lock word names its holder by it) and this process' (the records and the
 * wake sockets by it): each asked of the kernel once, not at each use (gettid twice and getpid
 * once or twice per lock, 19 system calls per contended command of pgbench -S -c16 -j16 at a
 * limit of 4). A fork()ed child forgets both (the forking thread's copy of its id is its parent's
 * thread's): its handler is set up by a constructor, so before those of the rest of the library,
 * and child handlers run in the order they were set up. */
static __thread uint32_t my_tid;
static _Atomic pid_t my_pid;

static uint32_t self_tid(void)
{
    if (my_tid == 0)
        my_tid = (uint32_t)gettid();
    return my_tid;
}

static pid_t self_pid(void)
{
    pid_t pid = atomic_load_explicit(&my_pid, memory_order_relaxed);
    if (pid == 0) {
        pid = getpid();
        atomic_store_explicit(&my_pid, pid, memory_order_relaxed);
    }
    return pid;
}

static void forget_ids_in_child(void)
{
    my_tid = 0;
    atomic_store(&my_pid, 0);
}

__attribute__((constructor)) static void ids_after_fork(void)
{
    pthread_atfork(NULL, NULL, forget_ids_in_child);
}

static uint64_t random64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v && v != 0)
        return v;
    /* No entropy to be had (early boot, a seccomp filter): unique enough for a name. */
    static _Atomic uint64_t counter;
    v = (uint64_t)dbt_now_us() * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)self_pid() << 32 ^
        (uint64_t)(uintptr_t)&v ^ atomic_fetch_add(&counter, 1);
    return v ? v : 1;
}

static void say(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t cap, const char *fmt, ...)
{
    if (!why || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(why, cap, fmt, ap) < 0)
        why[0] = '\0';
    va_end(ap);
}

static bool valid_group(const char *g)
{
    for (int i = 0; i < DBT_SHARE_GROUP_LEN - 1; i++)
        if (!((g[i] >= '0' && g[i] <= '9') || (g[i] >= 'a' && g[i] <= 'f')))
            return false;
    return g[DBT_SHARE_GROUP_LEN - 1] == '\0';
}

static uint32_t next_epoch(uint32_t e)
{
    e = (e + 1) & (uint32_t)H_EPOCH_MASK;
    return e ? e : 1;
}

static bool bad_kind(int kind)
{
    return kind < 0 || kind >= DBT_SHARE_KINDS;
}

/* ---- giving up ---- */

static int give_up(dbt_share *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int give_up(dbt_share *sh, const char *fmt, ...)
{
    if (!sh->broken) {
        sh->broken = true;
        va_list ap;
        va_start(ap, fmt);
        if (vsnprintf(sh->why, sizeof sh->why, fmt, ap) < 0)
            sh->why[0] = '\0';
        va_end(ap);
    }
    return -1;
}

/* The segment cannot be trusted: every process leaves it (they see `poisoned`), and the next
 * attach rebuilds it. */
static int damaged(dbt_share *sh, const char *what)
{
    atomic_store(&sh->seg->poisoned, SEG_POISONED);
    return give_up(sh, "%s: %s: poisoned it", sh->path, what);
}

/* ---- validation ---- */

/* The fields that never change after creation: read without the lock too. */
static bool header_constant_ok(const dbt_share *sh, const dbt_seg *g)
{
    return g->magic == DBT_SEG_MAGIC && g->version == DBT_SEG_VERSION &&
           g->size == sizeof(dbt_seg) && g->nprocs == DBT_SEG_PROCS && g->nregs == DBT_SEG_REGS &&
           g->key_hash == sh->key_hash && memcmp(g->group, sh->group, sizeof g->group) == 0;
}

static bool header_ok(const dbt_share *sh)
{
    const dbt_seg *g = sh->seg;
    return header_constant_ok(sh, g) && g->proc_hw <= DBT_SEG_PROCS && g->reg_hw <= DBT_SEG_REGS;
}

/* A word of the segment read once: another process may write garbage into it while this one
 * holds the lock, so a value checked and then used as a bound or an index must be the same read
 * (the compiler may not load it again). */
static uint32_t once32(const uint32_t *w)
{
    return *(const volatile uint32_t *)w;
}

/* The tables' high-water marks, read once and bounded by the tables' sizes: every loop over a
 * table runs to these, so no garbage makes one run past its table. */
static uint32_t regs_used(const dbt_seg *g)
{
    uint32_t n = once32(&g->reg_hw);
    return n < DBT_SEG_REGS ? n : DBT_SEG_REGS;
}

static uint32_t procs_used(const dbt_seg *g)
{
    uint32_t n = once32(&g->proc_hw);
    return n < DBT_SEG_PROCS ? n : DBT_SEG_PROCS;
}

static bool proc_ok(const dbt_seg_proc *p)
{
    return p->pid >= 0 && p->unregistered <= DBT_SEG_UNREG_MAX;
}

/* A registration that is not free: its state known, its process a live record with its nonce,
 * its kind in range, its strings terminated. */
static bool reg_ok(const dbt_seg *g, const dbt_seg_reg *r)
{
    if (r->state != REG_WAITING && r->state != REG_OFFERED && r->state != REG_SHELVED)
        return false;
    uint32_t owner = once32(&r->proc);
    if (owner >= procs_used(g))
        return false;
    const dbt_seg_proc *p = &g->procs[owner];
    if (p->pid <= 0 || p->nonce != r->nonce)
        return false;
    if (bad_kind(r->kind) || !memchr(r->klass, '\0', sizeof r->klass))
        return false;
    if ((r->state == REG_OFFERED || r->state == REG_SHELVED) &&
        (!memchr(r->id, '\0', sizeof r->id) || r->id[0] == '\0'))
        return false;
    return true;
}

/* A waiting thread's registration (a shelf entry is not one). */
static bool is_waiter(uint32_t state)
{
    return state == REG_WAITING || state == REG_OFFERED;
}

static void shrink_reg_hw(dbt_seg *g)
{
    uint32_t n = regs_used(g);
    while (n > 0 && g->regs[n - 1].state == REG_FREE)
        n--;
    g->reg_hw = n;
}

static void shrink_proc_hw(dbt_seg *g)
{
    uint32_t n = procs_used(g);
    while (n > 0 && g->procs[n - 1].pid == 0)
        n--;
    g->proc_hw = n;
}

static void free_reg(dbt_seg *g, uint32_t i)
{
    g->regs[i].state = REG_FREE;
    g->generation++;
    shrink_reg_hw(g);
}

/* A process gone: its registrations go first (a permit offered to one is lost to its lease),
 * then its record; a locker killed half-way leaves a record with fewer registrations. */
static void purge_proc(dbt_seg *g, uint32_t idx)
{
    if (idx >= DBT_SEG_PROCS)
        return;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++)
        if (g->regs[i].state != REG_FREE && g->regs[i].proc == idx)
            g->regs[i].state = REG_FREE;
    shrink_reg_hw(g);
    g->procs[idx].pid = 0;
    g->procs[idx].unregistered = 0;
    g->generation++;
    shrink_proc_hw(g);
}

/* After a lock holder died (its lock taken over): drop whatever does not hold together. The
 * holder's single-word stores are whole; what it may have left half-done (`dirty`) is the sole
 * state (reset: not sole is the safe side) and its own records (dropped: it is dead). */
static void repair(dbt_share *sh)
{
    dbt_seg *g = sh->seg;
    if (!header_ok(sh))
        return; /* the caller's check poisons it */
    uint32_t dirty = g->dirty;
    if (dirty != 0) {
        memset(g->sole, 0, sizeof g->sole);
        memset(g->share, 0, sizeof g->share);
        /* nothing shelved until a grant with nobody queued says so again */
        for (int k = 0; k < DBT_SHARE_KINDS; k++)
            g->keep[k].contended = 1;
        if (dirty != DBT_SEG_DIRTY_NOPROC && dirty - 1 < procs_used(g))
            purge_proc(g, dirty - 1);
    }
    for (uint32_t i = 0, n = procs_used(g); i < n; i++)
        if (!proc_ok(&g->procs[i])) {
            g->procs[i].pid = 0;
            g->procs[i].unregistered = 0;
        }
    for (uint32_t i = 0, n = regs_used(g); i < n; i++)
        if (g->regs[i].state != REG_FREE && !reg_ok(g, &g->regs[i]))
            g->regs[i].state = REG_FREE;
    shrink_reg_hw(g);
    shrink_proc_hw(g);
    g->generation++;
    g->dirty = 0;
}

/* ---- the lock ---- */

/* The lock is a futex word in the segment: 0 free, else the holder's thread id, with LOCK_WAITERS
 * when someone may sleep on it. Not a pthread mutex: a robust one links itself into its
 * holder's robust list through pointers kept inside it, which glibc writes through when it
 * unlocks; garbage written there by another process would be written through. A word holds
 * nothing to follow. A holder that died is found by its waiters (its thread id gone: kill(tid, 0)
 * fails with ESRCH), who take the lock over and repair; one that does not let go in time
 * (stopped) makes the others poison the segment. */
#define LOCK_TID     UINT32_C(0x3fffffff)
#define LOCK_WAITERS UINT32_C(0x80000000)
/* How long a waiter sleeps before it looks whether the holder is still alive. */
#define LOCK_SLICE_NS 10000000L

static _Atomic uint32_t *lock_word(dbt_seg *g)
{
    return &g->lock;
}

static void futex_sleep(_Atomic uint32_t *w, uint32_t expect, long ns)
{
    struct timespec rel = {ns / 1000000000L, ns % 1000000000L};
    /* Not FUTEX_PRIVATE_FLAG: the word is in memory other processes map. */
    (void)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, expect, &rel, NULL, 0);
}

static void futex_wake_one(_Atomic uint32_t *w)
{
    (void)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Whether the thread `tid` is gone (same user: kill may probe it). A process killed but not yet
 * reaped by its parent is still there to kill() (a zombie): its state in /proc says it is dead. */
static bool thread_gone(uint32_t tid)
{
    if (kill((pid_t)tid, 0) != 0)
        return errno == ESRCH;
    char path[48], buf[256];
    snprintf(path, sizeof path, "/proc/%u/stat", (unsigned)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *state = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
    return state && (state[1] == ' ') && (state[2] == 'Z' || state[2] == 'X');
}

__attribute__((weak)) void dbt_share_lock_seam(uint32_t tid)
{
    (void)tid;
}

/* How long this thread's look at a segment's file (fstat: its size, its name), made at the start
 * of one of the library's calls (dbt_share_precheck), serves that call's locks of the segment:
 * they follow each other within microseconds (7 for a command that waits and passes permits
 * within the host), and a cut made in between was never caught anyway (see dbt_share_lock). A
 * call that waited longer (for Redis, for a permit) looks again. */
#define SEG_LOOK_FRESH_US 50

static __thread struct {
    bool set;
    dev_t dev;
    ino_t ino;
    off_t size;
    nlink_t nlink;
    int64_t at_us;
} looked;

static void remember_look(const struct stat *st, int64_t now)
{
    looked.set = true;
    looked.dev = st->st_dev;
    looked.ino = st->st_ino;
    looked.size = st->st_size;
    looked.nlink = st->st_nlink;
    looked.at_us = now;
}

void dbt_share_precheck(int seg_fd)
{
    struct stat st;
    if (seg_fd >= 0 && fstat(seg_fd, &st) == 0)
        remember_look(&st, dbt_now_us());
}

void dbt_share_precheck_end(void)
{
    looked.set = false;
}

/* The segment's file now: the look of this thread's current call if it was at this file (device
 * and inode: a look made through a stale fd vouches for no other) and is fresh, else fstat(2),
 * which the rest of the call uses in turn. False when it cannot be read. */
static bool seg_stat(const dbt_share *sh, struct stat *st)
{
    int64_t now = dbt_now_us();
    bool in_call = looked.set;
    if (in_call && looked.dev == sh->dev && looked.ino == sh->ino &&
        now - looked.at_us <= SEG_LOOK_FRESH_US) {
        st->st_size = looked.size;
        st->st_nlink = looked.nlink;
        return true;
    }
    if (fstat(sh->fd, st) != 0)
        return false;
    if (in_call)
        remember_look(st, now);
    return true;
}

int dbt_share_lock(dbt_share *sh)
{
    if (sh->broken)
        return -1;
    /* A file cut short under its mapping (truncate(1) by hand or by a hostile process: this
     * library never shrinks one) makes every access past its new end a SIGBUS in the host
     * program: its size is checked before the first access, here or ahead of the caller's own
     * lock (dbt_share_precheck). Only a cut made during the microseconds of one call escapes
     * this. The segment is not written to (no poison): the others see the size as this process
     * did. */
    struct stat st;
    if (!seg_stat(sh, &st) || st.st_size < (off_t)sizeof(dbt_seg))
        return give_up(sh, "%s: the segment was cut short (%lld of %zu bytes)", sh->path,
                       (long long)st.st_size, sizeof(dbt_seg));
    dbt_seg *g = sh->seg;
    uint32_t poisoned = atomic_load(&g->poisoned);
    if (poisoned == SEG_RETIRED)
        return give_up(sh, "%s: retired by the last process that used it", sh->path);
    if (poisoned)
        return give_up(sh,
                       "%s: poisoned by another process (damaged, or its lock not free in "
                       "time)",
                       sh->path);
    /* Its name gone (an operator's rm; or a retire that, stalled between its check and its
     * unlink, removed a newer segment's name, or was killed between its unlink and its mark):
     * nobody new can find it, so whoever still maps it leaves it, and an attach under way makes a
     * new one. */
    if (st.st_nlink == 0) {
        atomic_store(&g->poisoned, SEG_RETIRED);
        return give_up(sh, "%s: the segment was removed or replaced", sh->path);
    }
    if (!header_constant_ok(sh, g))
        return damaged(sh, "header damaged");
    _Atomic uint32_t *w = lock_word(g);
    uint32_t me = self_tid() & LOCK_TID;
    dbt_share_lock_seam(me);
    int64_t deadline = dbt_now_us() + DBT_SHARE_LOCK_TIMEOUT_MS * INT64_C(1000);
    bool waited = false, took_over = false;
    for (;;) {
        uint32_t v = 0;
        /* once it slept, others may sleep too: it keeps the bit, so that its unlock wakes one */
        if (atomic_compare_exchange_strong(w, &v, waited ? me | LOCK_WAITERS : me))
            break;
        uint32_t owner = v & LOCK_TID;
        if (owner == me)
            return damaged(sh, "its lock word names this thread");
        if (owner == 0 || (waited && thread_gone(owner))) {
            /* free (someone sleeps on it), or its holder died: ours, keeping the waiters bit */
            if (atomic_compare_exchange_strong(w, &v, me | (v & LOCK_WAITERS))) {
                took_over = owner != 0;
                break;
            }
            continue;
        }
        int64_t left = deadline - dbt_now_us();
        if (left <= 0) {
            char what[80];
            snprintf(what, sizeof what, "its lock was not free within %d ms",
                     DBT_SHARE_LOCK_TIMEOUT_MS);
            return damaged(sh, what);
        }
        if (!(v & LOCK_WAITERS) && !atomic_compare_exchange_strong(w, &v, v | LOCK_WAITERS))
            continue;
        long slice = left * 1000 < LOCK_SLICE_NS ? (long)left * 1000 : LOCK_SLICE_NS;
        futex_sleep(w, v | LOCK_WAITERS, slice);
        waited = true;
    }
    if (took_over)
        repair(sh);
    if (!header_ok(sh)) {
        dbt_share_unlock(sh);
        return damaged(sh, "header damaged");
    }
    if ((poisoned = atomic_load(&g->poisoned)) != 0) {
        dbt_share_unlock(sh);
        return give_up(sh, "%s: %s", sh->path,
                       poisoned == SEG_RETIRED ? "retired by the last process that used it"
                                               : "poisoned by another process");
    }
    if (sh->proc >= 0 &&
        ((uint32_t)sh->proc >= procs_used(g) || g->procs[sh->proc].pid != sh->pid ||
         g->procs[sh->proc].nonce != sh->nonce)) {
        dbt_share_unlock(sh);
        return give_up(sh, "%s: this process' record was removed by another", sh->path);
    }
    return 0;
}

void dbt_share_unlock(dbt_share *sh)
{
    dbt_seg *g = sh->seg;
    g->dirty = 0;
    _Atomic uint32_t *w = lock_word(g);
    uint32_t me = self_tid() & LOCK_TID;
    dbt_share_lock_seam(me);
    uint32_t v = atomic_load(w);
    while ((v & LOCK_TID) == me && !atomic_compare_exchange_weak(w, &v, 0))
        ;
    if ((v & LOCK_TID) != me) {
        /* Written into while held (garbage, or another let in by garbage): not ours to free. */
        damaged(sh, "its lock word was written into while held");
        return;
    }
    if (v & LOCK_WAITERS)
        futex_wake_one(w);
}

/* Marks a multi-field update under way: a holder that dies meanwhile leaves it set. */
static void begin_update(dbt_share *sh)
{
    sh->seg->dirty = sh->proc >= 0 ? (uint32_t)sh->proc + 1 : DBT_SEG_DIRTY_NOPROC;
    sh->seg->generation++;
}

/* ---- wake sockets ---- */

/* A process' wake socket is a socket file in the user's directory (mode 0700, owned by the
 * user): only a process of the user (or root) can bind there, or connect there. Not an abstract
 * name: any local user can read those in /proc/net/unix and bind one once its process died, which
 * made a dead record look alive (probes connected, offers "delivered" to nobody: each such
 * permit lost for a lease). */
static socklen_t wake_addr(const dbt_share *sh, int32_t pid, uint64_t nonce, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, "%s/" DBT_SEG_WAKE_FMT, sh->wake_dir,
                     (int)pid, nonce);
    if (n < 0 || (size_t)n >= sizeof a->sun_path)
        n = 0; /* never: wake_dir was sized for the longest name at attach */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

/* Removes the socket file of a process judged gone (its socket refused: closed with it). The
 * name is its pid's and a random nonce's: no other process binds it. */
static void unlink_wake(const dbt_share *sh, int32_t pid, uint64_t nonce)
{
    char name[64];
    snprintf(name, sizeof name, DBT_SEG_WAKE_FMT, (int)pid, nonce);
    (void)unlinkat(sh->dfd, name, 0);
}

/* This process' wake socket goes: its file too, unless it is a fork()ed child's copy (the
 * parent's socket, still bound). */
static void close_wake(dbt_share *sh)
{
    if (sh->sock < 0)
        return;
    if (sh->proc_bound && sh->pid == self_pid())
        unlink_wake(sh, sh->pid, sh->nonce);
    close(sh->sock);
    sh->sock = -1;
    sh->proc_bound = false;
}

/* Whether this process' descriptor of the directory still names it. Wake names go through it
 * (/proc/self/fd/N/...): a host program that closed it (a double close(), a closefrom()) would
 * make every peer's name "not found", and a refusal then says nothing of the peer. */
static bool dir_still_ours(const dbt_share *sh)
{
    struct stat dst;
    return fstat(sh->dfd, &dst) == 0 && S_ISDIR(dst.st_mode) && dst.st_dev == sh->ddev &&
           dst.st_ino == sh->dino;
}

/* 0: sent; 1: nobody there (the process is gone); 2: not sent, no room (its queue is full, or
 * this socket's send buffer is: on AF_UNIX datagram sockets unread datagrams are charged to
 * their sender, so receivers that never read can fill it): the receiver is not told; -1: could
 * not tell. */
static int send_wake(const dbt_share *sh, int32_t pid, uint64_t nonce)
{
    struct sockaddr_un a;
    socklen_t len = wake_addr(sh, pid, nonce, &a);
    char byte = 1;
    for (int i = 0; i < 3; i++) {
        if (sendto(sh->sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len) >=
            0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return 2;
        if (errno == ECONNREFUSED || errno == ENOENT)
            return dir_still_ours(sh) ? 1 : -1;
        return -1;
    }
    return -1;
}

/* Whether a process' wake socket is there, without waking it: a datagram socket connects to a
 * bound name at once, and is refused when none is bound. 1: gone. */
static int probe_gone(const dbt_share *sh, int probe, int32_t pid, uint64_t nonce)
{
    struct sockaddr_un a;
    socklen_t len = wake_addr(sh, pid, nonce, &a);
    if (connect(probe, (struct sockaddr *)&a, len) == 0)
        return 0;
    return (errno == ECONNREFUSED || errno == ENOENT) && dir_still_ours(sh);
}

/* ---- this process' record ---- */

static void forget_process(dbt_share *sh)
{
    if (sh->sock >= 0)
        close(sh->sock); /* a child's copy: the name stays the parent's */
    sh->sock = -1;
    sh->proc_bound = false;
    sh->proc = -1;
    sh->pid = self_pid();
    sh->epoch = next_epoch(sh->epoch);
}

/* Makes this process' record and wake socket if it has none (after attach, or in a fork()ed
 * child). */
static bool ensure_process(dbt_share *sh)
{
    if (sh->broken)
        return false;
    pid_t me = self_pid();
    if (sh->pid != me)
        forget_process(sh); /* a child that did not say so: the parent's record is not its own */
    if (sh->proc >= 0)
        return true;
    /* The wake names go through this process' descriptor of the directory: one the host
     * program closed (and whose number now names something else) would bind elsewhere. */
    if (!dir_still_ours(sh)) {
        give_up(sh, "%s: its directory's descriptor was closed under it", sh->path);
        return false;
    }
    uint64_t nonce = random64();
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        give_up(sh, "%s: no wake socket: %s", sh->path, strerror(errno));
        return false;
    }
    struct sockaddr_un a;
    socklen_t len = wake_addr(sh, me, nonce, &a);
    if (bind(s, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(s);
        give_up(sh, "%s: cannot bind its wake socket: %s", sh->path, strerror(e));
        return false;
    }
    /* bind() made the file with the host program's umask: one without the owner's write bit
     * (0277, say) would refuse every wake and probe from this user's other processes. The
     * directory keeps others out; the file only has to let the user in. */
    char name[64];
    snprintf(name, sizeof name, DBT_SEG_WAKE_FMT, (int)me, nonce);
    (void)!fchmodat(sh->dfd, name, 0600, 0);
    sh->sock = s;
    sh->nonce = nonce;
    sh->pid = me;
    sh->proc_bound = true; /* its file goes with it (close_wake) */
    if (dbt_share_lock(sh) != 0) {
        close_wake(sh);
        return false;
    }
    dbt_seg *g = sh->seg;
    uint32_t used = procs_used(g), idx = used;
    for (uint32_t i = 0; i < used; i++) {
        if (!proc_ok(&g->procs[i])) {
            dbt_share_unlock(sh);
            close_wake(sh);
            damaged(sh, "a process record is damaged");
            return false;
        }
        if (g->procs[i].pid == 0 && idx == used)
            idx = i;
    }
    if (idx == DBT_SEG_PROCS) {
        dbt_share_unlock(sh);
        close_wake(sh);
        give_up(sh, "%s: its table of %d processes is full", sh->path, DBT_SEG_PROCS);
        return false;
    }
    begin_update(sh);
    if (idx == used)
        g->proc_hw = used + 1;
    g->procs[idx].nonce = nonce;
    g->procs[idx].unregistered = 0;
    g->procs[idx].pid = me; /* last: the record is live */
    dbt_share_unlock(sh);
    sh->proc = (int)idx;
    return !sh->broken;
}

/* ---- attach ---- */

/* Whether the directory open at dfd is the user's own: a directory owned by uid, with no group or
 * other permission bit (so that nobody else may make, remove or bind anything in it). NULL when
 * it is, else what is wrong with it (in buf). */
static const char *not_own_dir(int dfd, uid_t uid, char *buf, size_t cap)
{
    struct stat st;
    if (fstat(dfd, &st) != 0)
        snprintf(buf, cap, "cannot be looked at: %s", strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        snprintf(buf, cap, "is not a directory");
    else if (st.st_uid != uid)
        snprintf(buf, cap, "is owned by uid %u, not by this process' uid %u", (unsigned)st.st_uid,
                 (unsigned)uid);
    else if (st.st_mode & 077)
        snprintf(buf, cap, "has mode %04o: group or others may use it (0700 wanted)",
                 (unsigned)(st.st_mode & 07777));
    else
        return NULL;
    return buf;
}

/* Opens <parent>/<name> as the user's directory: its fd, or -1 with what is wrong (in buf).
 * made: this process just made it (its mode is then set whatever the umask). */
static int open_own_dir(int pfd, const char *name, uid_t uid, bool made, char *buf, size_t cap)
{
    int dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(buf, cap, "%s",
                 errno == ELOOP || errno == ENOTDIR ? "is not a directory (a symlink?)"
                 : errno == EACCES                  ? "cannot be opened (another user's?)"
                                                    : strerror(errno));
        return -1;
    }
    if (made)
        (void)fchmod(dfd, 0700);
    if (not_own_dir(dfd, uid, buf, cap)) {
        close(dfd);
        return -1;
    }
    return dfd;
}

/* The fall-back directories' names: "dbthrottle-<uid>." and 24 hex digits (the time it was made,
 * in ns, then random bits: the oldest sorts first). */
#define FALLBACK_HEX 24

static bool fallback_name(const char *name, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || strlen(name + n) != FALLBACK_HEX)
        return false;
    for (const char *c = name + n; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return false;
    return true;
}

/* The first (by name) of the fall-back directories in the parent that is the user's own (made by
 * a process of the user: nobody else can make a directory owned by this uid, root aside): its fd
 * and name in out, or -1. Entries of other owners (another user's, made to look like ours) are
 * passed over. */
static int find_fallback(int pfd, const char *prefix, uid_t uid, char *out, size_t cap)
{
    /* A descriptor of its own (not dup: that shares the offset, and a second scan would start
     * at the end of the first). */
    int dup_fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup_fd < 0)
        return -1;
    DIR *d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        return -1;
    }
    char best[NAME_MAX + 1] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!fallback_name(e->d_name, prefix) || (best[0] && strcmp(e->d_name, best) >= 0))
            continue;
        char buf[128];
        int fd = open_own_dir(pfd, e->d_name, uid, false, buf, sizeof buf);
        if (fd >= 0) {
            close(fd);
            snprintf(best, sizeof best, "%s", e->d_name);
        }
    }
    closedir(d);
    if (!best[0])
        return -1;
    char buf[128];
    int fd = open_own_dir(pfd, best, uid, false, buf, sizeof buf);
    if (fd >= 0)
        snprintf(out, cap, "%s", best);
    return fd;
}

/* The user's directory in `parent`, as an fd (-1: none, why said), its name in sub_name.
 * <parent>/dbthrottle-<uid>, made 0700 if missing, when it is the user's own. When it is not
 * (another user made it first, or it is a symlink, or its mode lets others in), a directory
 * nobody else can take from the user: the first of the user's own "dbthrottle-<uid>.<hex>" there,
 * made if there is none; note then says so (the caller warns). Two processes that make one at the
 * same moment each keep the first by name they see; a later process picks the first by name:
 * a rare split of the host into two groups, each its own owner in Redis (safe: each judges
 * "sole" for itself), never a shared segment of another user. */
static int open_user_dir(int pfd, const char *parent, uid_t uid, char *sub_name, size_t subcap,
                         char *note, size_t notecap, char *why, size_t cap)
{
    char name[32], prefix[40], wrong[160];
    snprintf(name, sizeof name, "dbthrottle-%u", (unsigned)uid);
    bool made = mkdirat(pfd, name, 0700) == 0;
    if (!made && errno != EEXIST) {
        say(why, cap, "cannot make %s/%s: %s", parent, name, strerror(errno));
        return -1;
    }
    int dfd = open_own_dir(pfd, name, uid, made, wrong, sizeof wrong);
    if (dfd >= 0) {
        snprintf(sub_name, subcap, "%s", name);
        return dfd;
    }
    snprintf(prefix, sizeof prefix, "%s.", name);
    for (int round = 0; round < 3 && dfd < 0; round++) {
        dfd = find_fallback(pfd, prefix, uid, sub_name, subcap);
        if (dfd >= 0)
            break;
        char mine[96];
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(mine, sizeof mine, "%s%016" PRIx64 "%08" PRIx32, prefix,
                 (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec,
                 (uint32_t)random64());
        if (mkdirat(pfd, mine, 0700) != 0) {
            if (errno == EEXIST)
                continue; /* someone else's, made to look like ours: another name */
            say(why, cap, "%s/%s %s, and cannot make %s/%s: %s", parent, name, wrong, parent, mine,
                strerror(errno));
            return -1;
        }
        char unused[8];
        int fd = open_own_dir(pfd, mine, uid, true, unused, sizeof unused); /* its mode set */
        if (fd >= 0)
            close(fd);
        /* Another process of the user may have made one meanwhile: the first by name wins, and
         * an unused one of ours goes (rmdir: only while empty). */
        dfd = find_fallback(pfd, prefix, uid, sub_name, subcap);
        if (dfd >= 0 && strcmp(sub_name, mine) != 0)
            (void)unlinkat(pfd, mine, AT_REMOVEDIR);
    }
    if (dfd < 0) {
        say(why, cap, "%s/%s %s, and no directory of this user's could be made beside it", parent,
            name, wrong);
        return -1;
    }
    say(note, notecap,
        "%s/%s %s (another user may have made it first): using %s/%s, which only this user can "
        "make",
        parent, name, wrong, parent, sub_name);
    return dfd;
}

/* Removes the segment's name, only if it still names the file judged (another process may have
 * rebuilt it since). */
static void unlink_if_same(int dfd, const char *name, const struct stat *judged)
{
    struct stat now;
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == judged->st_ino &&
        now.st_dev == judged->st_dev)
        (void)unlinkat(dfd, name, 0);
}

/* Opens and maps the segment <name>: 1 attached; 0 there is none, or it was judged damaged (or
 * poisoned) and unlinked: make one; -1 this process cannot share (why). */
static int open_segment(dbt_share *sh, int dfd, const char *name, const char *key, char *why,
                        size_t cap)
{
    int fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        say(why, cap, "%s: %s", sh->path,
            errno == ELOOP ? "a symlink, not the segment" : strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        say(why, cap, "%s: %s", sh->path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        say(why, cap, "%s: not a regular file", sh->path);
    } else if (st.st_uid != sh->uid) {
        say(why, cap, "%s is owned by uid %u, not by this process' uid %u", sh->path,
            (unsigned)st.st_uid, (unsigned)sh->uid);
    } else if (st.st_mode & 077) {
        say(why, cap, "%s has mode %04o: group or others may use it (0600 wanted)", sh->path,
            (unsigned)(st.st_mode & 07777));
    } else if (st.st_size != (off_t)sizeof(dbt_seg)) {
        /* Not ours (mapping past its end would fault): rebuilt. */
        unlink_if_same(dfd, name, &st);
        close(fd);
        return 0;
    } else if (posix_fallocate(fd, 0, (off_t)sizeof(dbt_seg)) != 0) {
        /* A sparse file on a full tmpfs would fault when a page is first written. */
        say(why, cap, "%s: no room for the segment", sh->path);
    } else {
        void *map = mmap(NULL, sizeof(dbt_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            say(why, cap, "%s: mmap: %s", sh->path, strerror(errno));
            close(fd);
            return -1;
        }
        dbt_seg *g = map;
        memcpy(sh->group, g->group, sizeof sh->group);
        bool sound = valid_group(sh->group) && header_constant_ok(sh, g) &&
                     memchr(g->key, '\0', sizeof g->key) && dbt_share_key_sum(g->key) == g->key_sum;
        if (sound && !atomic_load(&g->poisoned) && strcmp(g->key, key) != 0) {
            say(why, cap, "%s holds another pool's key (their hashes collide): not shared",
                sh->path);
            munmap(map, sizeof(dbt_seg));
            close(fd);
            return -1;
        }
        if (!sound || atomic_load(&g->poisoned)) {
            atomic_store(&g->poisoned, SEG_POISONED); /* whoever still maps it leaves it */
            munmap(map, sizeof(dbt_seg));
            unlink_if_same(dfd, name, &st);
            close(fd);
            return 0;
        }
        sh->seg = g;
        sh->fd = fd;
        sh->dev = st.st_dev;
        sh->ino = st.st_ino;
        return 1;
    }
    close(fd);
    return -1;
}

/* Temp files of creators that died before linking theirs (".tmp.<pid>.<random>"), and the wake
 * sockets of processes that died with no other process left to purge their records (any pool's:
 * the directory is the user's; one that refuses a connect is closed, its process gone). */
static void remove_dead_files(dbt_share *sh, int dfd)
{
    /* A descriptor of its own: a dup would share dfd's offset (a second scan would see nothing) */
    int dup_fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup_fd < 0)
        return;
    DIR *d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        return;
    }
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid;
        uint64_t nonce;
        char end;
        if (sscanf(e->d_name, ".tmp.%d.", &pid) == 1 && pid > 0 && kill(pid, 0) != 0 &&
            errno == ESRCH)
            (void)unlinkat(dfd, e->d_name, 0);
        else if (probe >= 0 && sscanf(e->d_name, "w.%d.%16" SCNx64 "%c", &pid, &nonce, &end) == 2 &&
                 probe_gone(sh, probe, pid, nonce))
            unlink_wake(sh, pid, nonce);
    }
    if (probe >= 0)
        close(probe);
    closedir(d);
}

/* Makes a segment and links it as <name>, initialised before anyone can open it: 1 attached to
 * it; 0 another process linked one first (open that); -1 cannot (why). */
static int create_segment(dbt_share *sh, int dfd, const char *name, const char *key, char *why,
                          size_t cap)
{
    remove_dead_files(sh, dfd);
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".tmp.%d.%016" PRIx64, (int)self_pid(), random64());
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        say(why, cap, "cannot create a segment in %s: %s", sh->path, strerror(errno));
        return -1;
    }
    void *map = MAP_FAILED;
    int e = 0;
    if (fchmod(fd, 0600) != 0 || (e = posix_fallocate(fd, 0, (off_t)sizeof(dbt_seg))) != 0 ||
        (map = mmap(NULL, sizeof(dbt_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
            MAP_FAILED) {
        say(why, cap, "cannot create %s: %s", sh->path, strerror(e ? e : errno));
        (void)unlinkat(dfd, tmp, 0);
        close(fd);
        return -1;
    }
    dbt_seg *g = map;
    g->magic = DBT_SEG_MAGIC;
    g->version = DBT_SEG_VERSION;
    g->nprocs = DBT_SEG_PROCS;
    g->nregs = DBT_SEG_REGS;
    g->size = sizeof(dbt_seg);
    g->key_hash = sh->key_hash;
    snprintf(g->key, sizeof g->key, "%s", key);
    g->key_sum = dbt_share_key_sum(g->key);
    snprintf(g->group, sizeof g->group, "%016" PRIx64, random64());
    atomic_store(&g->lock, 0);
    if (linkat(dfd, tmp, dfd, name, 0) != 0) {
        int le = errno;
        (void)unlinkat(dfd, tmp, 0);
        munmap(map, sizeof(dbt_seg));
        close(fd);
        if (le == EEXIST)
            return 0;
        say(why, cap, "cannot create %s: %s", sh->path, strerror(le));
        return -1;
    }
    (void)unlinkat(dfd, tmp, 0);
    struct stat st;
    if (fstat(fd, &st) == 0) {
        sh->dev = st.st_dev;
        sh->ino = st.st_ino;
    }
    memcpy(sh->group, g->group, sizeof sh->group);
    sh->seg = g;
    sh->fd = fd;
    return 1;
}

static void unmap(dbt_share *sh)
{
    if (sh->seg)
        munmap(sh->seg, sizeof(dbt_seg));
    sh->seg = NULL;
    if (sh->fd >= 0)
        close(sh->fd);
    sh->fd = -1;
}

dbt_share *dbt_share_attach(const char *dir, const char *key, char *why, size_t cap)
{
    say(why, cap, "%s", "");
    if (!dir || dir[0] != '/') {
        say(why, cap, "share directory %s: not an absolute path", dir ? dir : "(none)");
        return NULL;
    }
    if (!key || strlen(key) >= DBT_SEG_KEY_MAX) {
        say(why, cap, "the pool's key is longer than %d bytes: not shared", DBT_SEG_KEY_MAX - 1);
        return NULL;
    }
    dbt_share *sh = calloc(1, sizeof *sh);
    if (!sh) {
        say(why, cap, "out of memory");
        return NULL;
    }
    sh->fd = sh->dfd = sh->sock = sh->proc = -1;
    sh->pid = self_pid();
    sh->uid = geteuid();
    sh->key_hash = fnv1a64(key);
    sh->epoch = next_epoch((uint32_t)random64());
    size_t dlen = strlen(dir);
    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    char parent[PATH_MAX], sub[NAME_MAX + 1];
    const char *name = sh->name;
    snprintf(sh->name, sizeof sh->name, "%016" PRIx64 ".%d", sh->key_hash, DBT_SEG_VERSION);
    if ((size_t)snprintf(parent, sizeof parent, "%.*s", (int)dlen, dir) >= sizeof parent) {
        say(why, cap, "share directory %s: path too long", dir);
        free(sh);
        return NULL;
    }
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
        say(why, cap, "share directory %s: %s", parent, strerror(errno));
        free(sh);
        return NULL;
    }
    int dfd =
        open_user_dir(pfd, parent, sh->uid, sub, sizeof sub, sh->note, sizeof sh->note, why, cap);
    close(pfd);
    struct stat dst;
    if (dfd >= 0 && fstat(dfd, &dst) != 0) {
        say(why, cap, "%s/%s: %s", parent, sub, strerror(errno));
        close(dfd);
        dfd = -1;
    }
    if (dfd < 0) {
        free(sh);
        return NULL;
    }
    sh->dfd = dfd;
    sh->ddev = dst.st_dev;
    sh->dino = dst.st_ino;
    if ((size_t)snprintf(sh->path, sizeof sh->path, "%s/%s/%s", parent, sub, name) >=
        sizeof sh->path) {
        say(why, cap, "share directory %s: path too long", dir);
        close(dfd);
        free(sh);
        return NULL;
    }
    /* Wake sockets are named through /proc/self/fd/<dfd>: short whatever the directory's path,
     * and this directory whatever is renamed above it. Where /proc is not this process' (not
     * mounted, another pid namespace's), the path, if a socket's name fits. */
    char longest[64];
    int wn = snprintf(longest, sizeof longest, DBT_SEG_WAKE_FMT, INT_MAX, UINT64_MAX);
    struct stat via;
    snprintf(sh->wake_dir, sizeof sh->wake_dir, "/proc/self/fd/%d", dfd);
    if (stat(sh->wake_dir, &via) != 0 || via.st_dev != dst.st_dev || via.st_ino != dst.st_ino) {
        if (strlen(parent) + strlen(sub) + 2 + (size_t)wn >= sizeof sh->wake_dir) {
            say(why, cap,
                "%s/%s: its path is too long to name a socket in it, and /proc/self/fd is not "
                "this process'",
                parent, sub);
            close(dfd);
            free(sh);
            return NULL;
        }
        size_t pl = strlen(parent), sl = strlen(sub); /* they fit: checked above */
        memcpy(sh->wake_dir, parent, pl);
        sh->wake_dir[pl] = '/';
        memcpy(sh->wake_dir + pl + 1, sub, sl + 1);
    }
    /* A few rounds: a segment found damaged is unlinked and made anew, and another process may
     * win the race to make it. */
    for (int round = 0; round < 4; round++) {
        int got = open_segment(sh, dfd, name, key, why, cap);
        if (got == 0)
            got = create_segment(sh, dfd, name, key, why, cap);
        if (got < 0)
            break;
        if (got == 0)
            continue;
        if (ensure_process(sh)) {
            say(why, cap, "%s", "");
            return sh;
        }
        bool poisoned = atomic_load(&sh->seg->poisoned) != 0;
        say(why, cap, "%s", sh->why);
        unmap(sh);
        if (!poisoned)
            break; /* not the segment's fault: a full table, no socket */
        sh->broken = false;
        sh->why[0] = '\0';
    }
    if (why && cap && !why[0])
        say(why, cap, "%s: could not attach (rebuilt, and rebuilt again)", sh->path);
    close_wake(sh);
    close(dfd);
    free(sh);
    return NULL;
}

/* Under the lock, by the last process of the segment as it detaches: the file's name goes, so
 * that a host does not keep a file per pool it ever used (a file is ~234 KB of tmpfs memory).
 * The name first: nobody else removes the name of a sound segment (only a damaged or poisoned
 * one's), so it still names this file. Then the mark: a process that opened the file before the
 * name went (it attaches without the lock) sees it under the lock, as for a poisoned one, and
 * makes a new segment; a fork()ed child that had no record yet gives it up the same way and
 * attaches anew. */
static void retire(dbt_share *sh)
{
    struct stat now;
    if (fstatat(sh->dfd, sh->name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == sh->ino &&
        now.st_dev == sh->dev)
        (void)unlinkat(sh->dfd, sh->name, 0);
    atomic_store(&sh->seg->poisoned, SEG_RETIRED);
}

void dbt_share_leave(dbt_share *sh)
{
    if (!sh)
        return;
    if (!sh->broken && sh->proc >= 0 && sh->pid == self_pid()) {
        /* Records of processes that died without detaching would keep the file for nobody. */
        dbt_share_purge_dead(sh);
        if (!sh->broken && dbt_share_lock(sh) == 0) {
            begin_update(sh);
            purge_proc(sh->seg, (uint32_t)sh->proc);
            sh->proc = -1; /* not this process' record any more */
            if (procs_used(sh->seg) == 0)
                retire(sh);
            dbt_share_unlock(sh);
        }
    }
    /* Its socket's name goes, broken or not (the socket itself stays open until detach: another
     * thread may still poll it); a fork()ed child's is its parent's. */
    if (sh->proc_bound && sh->pid == self_pid())
        unlink_wake(sh, sh->pid, sh->nonce);
    sh->proc_bound = false;
    give_up(sh, "%s: this process left it", sh->path);
}

void dbt_share_detach(dbt_share *sh)
{
    if (!sh)
        return;
    dbt_share_leave(sh);
    close_wake(sh);
    unmap(sh);
    if (sh->dfd >= 0)
        close(sh->dfd);
    free(sh);
}

void dbt_share_after_fork(dbt_share *sh)
{
    if (sh)
        forget_process(sh);
}

int dbt_share_dir_fd(const dbt_share *sh)
{
    return sh->dfd;
}

int dbt_share_seg_fd(const dbt_share *sh)
{
    return sh->fd;
}

bool dbt_share_ready(dbt_share *sh)
{
    return sh && ensure_process(sh);
}

const char *dbt_share_group(const dbt_share *sh)
{
    return sh ? sh->group : "";
}

bool dbt_share_broken(const dbt_share *sh)
{
    return !sh || sh->broken;
}

const char *dbt_share_why(const dbt_share *sh)
{
    return sh ? sh->why : "";
}

const char *dbt_share_note(const dbt_share *sh)
{
    return sh ? sh->note : "";
}

int dbt_share_fd(const dbt_share *sh)
{
    return !sh || sh->broken ? -1 : sh->sock;
}

void dbt_share_drain(dbt_share *sh)
{
    if (!sh || sh->sock < 0)
        return;
    char buf[64];
    for (int i = 0; i < 64; i++)
        if (recv(sh->sock, buf, sizeof buf, MSG_DONTWAIT) < 0 && errno != EINTR)
            break;
}

/* ---- the host's sole state ---- */

/* Under the lock: -1 damage (poisoned, unlocked), else whether a live process has a waiter the
 * registrations do not hold. */
static int any_unregistered(dbt_share *sh)
{
    dbt_seg *g = sh->seg;
    for (uint32_t i = 0, n = procs_used(g); i < n; i++) {
        if (!proc_ok(&g->procs[i])) {
            dbt_share_unlock(sh);
            return damaged(sh, "a process record is damaged");
        }
        if (g->procs[i].pid > 0 && g->procs[i].unregistered > 0)
            return 1;
    }
    return 0;
}

/* Whether the host passes permits of `kind` locally: sole, or (within_share) at or below its
 * share; and no process of it is unregistered (it could not be woken for a pass). */
static bool passes_locally(dbt_share *sh, int kind, bool within_share)
{
    if (!sh || bad_kind(kind) || dbt_share_lock(sh) != 0)
        return false;
    bool may = sh->seg->sole[kind].sole != 0 ||
               (within_share && dbt_core_within_share(&sh->seg->share[kind]));
    if (may) {
        int u = any_unregistered(sh);
        if (u < 0)
            return false;
        may = u == 0;
    }
    dbt_share_unlock(sh);
    return may && !sh->broken;
}

bool dbt_share_sole(dbt_share *sh, int kind)
{
    return passes_locally(sh, kind, false);
}

/* Under the lock: -1 damage (poisoned, unlocked), else whether a registration of the kind is
 * there. */
static int any_registration(dbt_share *sh, int kind)
{
    dbt_seg *g = sh->seg;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            return damaged(sh, "a registration is damaged");
        }
        if (r->kind == kind && is_waiter(r->state))
            return 1;
    }
    return 0;
}

bool dbt_share_verdict(dbt_share *sh, int kind, uint64_t ticket, bool sole, int64_t lease_us)
{
    if (!sh || bad_kind(kind) || dbt_share_lock(sh) != 0)
        return false;
    dbt_seg_sole *s = &sh->seg->sole[kind];
    dbt_queue_event ev = {.type = DBT_QEV_VERDICT,
                          .ticket = ticket,
                          .sole = sole,
                          .waiters_here = true,
                          .now_us = dbt_now_us(),
                          .lease_us = lease_us};
    begin_update(sh);
    /* A stale verdict is history unless a waiter of the host is registered. */
    if (dbt_sole_verdict_stale(s, ev.now_us, lease_us)) {
        int others = any_registration(sh, kind);
        if (others < 0)
            return false;
        ev.waiters_here = others != 0;
    }
    bool ended = dbt_sole_step(s, &ev) & DBT_QACT_SOLE_ENDED;
    dbt_share_unlock(sh);
    return ended;
}

bool dbt_share_foreign(dbt_share *sh, int kind, uint64_t ticket)
{
    if (!sh || bad_kind(kind) || dbt_share_lock(sh) != 0)
        return false;
    begin_update(sh);
    dbt_queue_event ev = {.type = DBT_QEV_FOREIGN, .ticket = ticket};
    bool ended = dbt_sole_step(&sh->seg->sole[kind], &ev) & DBT_QACT_SOLE_ENDED;
    dbt_share_unlock(sh);
    return ended;
}

unsigned dbt_share_reset(dbt_share *sh)
{
    if (!sh || dbt_share_lock(sh) != 0)
        return 0;
    begin_update(sh);
    unsigned ended = 0;
    for (int k = 0; k < DBT_SHARE_KINDS; k++)
        if (sh->seg->sole[k].sole != 0)
            ended |= 1u << k;
    memset(sh->seg->sole, 0, sizeof sh->seg->sole);
    /* No share in force until Redis tells one again; the count of what the group holds stays
     * (zeroed, a renewal could only raise it again after DBT_SHARE_AHEAD_US: the host passed
     * above its share meanwhile) */
    for (int k = 0; k < DBT_SHARE_KINDS; k++) {
        sh->seg->share[k].share1 = 0;
        sh->seg->share[k].ticket = 0;
    }
    dbt_share_unlock(sh);
    return sh->broken ? 0 : ended;
}

bool dbt_share_may_pass(dbt_share *sh, int kind)
{
    return passes_locally(sh, kind, true);
}

void dbt_share_share_view(dbt_share *sh, int kind, dbt_share_view *out)
{
    memset(out, 0, sizeof *out);
    if (!sh || bad_kind(kind) || dbt_share_lock(sh) != 0)
        return;
    *out = sh->seg->share[kind];
    dbt_share_unlock(sh);
}

bool dbt_share_share_event(dbt_share *sh, int kind, const dbt_shev *ev)
{
    if (!sh || bad_kind(kind) || !ev || dbt_share_lock(sh) != 0)
        return false;
    begin_update(sh);
    bool within = dbt_core_within_share(&sh->seg->share[kind]);
    dbt_core_share_step(&sh->seg->share[kind], ev);
    bool left =
        within && !dbt_core_within_share(&sh->seg->share[kind]) && sh->seg->sole[kind].sole == 0;
    dbt_share_unlock(sh);
    return left;
}

/* ---- other processes ---- */

typedef struct {
    uint32_t idx;
    int32_t pid;
    uint64_t nonce;
} proc_ref;

/* The other processes' records (only those with a registration, when waiting_only), without
 * the lock held on return: how many (-1: broken). */
static int other_processes(dbt_share *sh, proc_ref *out, bool waiting_only)
{
    if (dbt_share_lock(sh) != 0)
        return -1;
    dbt_seg *g = sh->seg;
    bool waits[DBT_SEG_PROCS] = {false};
    for (uint32_t i = 0, used = regs_used(g); waiting_only && i < used; i++) {
        uint32_t owner = once32(&g->regs[i].proc);
        if (is_waiter(once32(&g->regs[i].state)) && owner < DBT_SEG_PROCS)
            waits[owner] = true;
    }
    int n = 0;
    for (uint32_t i = 0, used = procs_used(g); i < used; i++) {
        const dbt_seg_proc *p = &g->procs[i];
        if (!proc_ok(p)) {
            dbt_share_unlock(sh);
            return damaged(sh, "a process record is damaged");
        }
        if (p->pid > 0 && (int)i != sh->proc && (!waiting_only || waits[i]))
            out[n++] = (proc_ref){i, p->pid, p->nonce};
    }
    dbt_share_unlock(sh);
    return n;
}

/* Purges those of `gone` whose records are still theirs, and removes their socket files (after
 * the lock: no system call is made under it). */
static void purge_gone(dbt_share *sh, const proc_ref *gone, int n)
{
    if (n == 0 || dbt_share_lock(sh) != 0)
        return;
    dbt_seg *g = sh->seg;
    begin_update(sh);
    for (int i = 0; i < n; i++)
        if (gone[i].idx < procs_used(g) && g->procs[gone[i].idx].pid == gone[i].pid &&
            g->procs[gone[i].idx].nonce == gone[i].nonce)
            purge_proc(g, gone[i].idx);
    dbt_share_unlock(sh);
    for (int i = 0; i < n; i++)
        unlink_wake(sh, gone[i].pid, gone[i].nonce);
}

void dbt_share_wake_all(dbt_share *sh)
{
    if (!sh || !ensure_process(sh))
        return;
    proc_ref others[DBT_SEG_PROCS], gone[DBT_SEG_PROCS];
    /* Only processes with waiting threads: they drain their sockets (their leader or renewer
     * polls it while they wait). A wake to one that waits for nothing would stay unread, charged
     * to this process' send buffer, until offers could not be sent any more; such a process
     * withdraws its orphans within ORPHAN_IDLE_US anyway. */
    int n = other_processes(sh, others, true), ngone = 0;
    for (int i = 0; i < n; i++)
        if (send_wake(sh, others[i].pid, others[i].nonce) == 1)
            gone[ngone++] = others[i];
    purge_gone(sh, gone, ngone);
}

void dbt_share_purge_dead(dbt_share *sh)
{
    if (!sh || sh->broken)
        return;
    /* A segment whose name was taken from it (a rebuild, an operator's rm) has no newcomers: its
     * processes go to the new one. */
    struct stat st;
    if (fstat(sh->fd, &st) == 0 && st.st_nlink == 0) {
        give_up(sh, "%s: the segment was removed or replaced", sh->path);
        return;
    }
    /* Without the directory no peer can be judged (every name would read "not found"), and
     * none can be woken: this process leaves sharing (reviewer's finding: a host program that
     * closed the descriptor made every live peer look dead, purged without a word). */
    if (!dir_still_ours(sh)) {
        give_up(sh, "%s: its directory's descriptor was closed under it", sh->path);
        return;
    }
    proc_ref others[DBT_SEG_PROCS], gone[DBT_SEG_PROCS];
    int n = other_processes(sh, others, false), ngone = 0;
    if (n <= 0)
        return;
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0)
        return;
    for (int i = 0; i < n; i++)
        if (probe_gone(sh, probe, others[i].pid, others[i].nonce))
            gone[ngone++] = others[i];
    close(probe);
    purge_gone(sh, gone, ngone);
}

/* ---- registrations ---- */

static uint64_t handle_of(const dbt_share *sh, uint32_t idx, uint32_t serial)
{
    return (uint64_t)(sh->epoch & H_EPOCH_MASK) << H_EPOCH_SHIFT |
           (uint64_t)serial << H_SERIAL_SHIFT | (uint64_t)(idx + 1);
}

/* A handle that names nothing: what wait_begin returns when it cannot register. */
#define H_NOTHING H_UNREG

/* Under the lock, begin_update made: entry idx (free, below the table's size) becomes this
 * process' of `shape` since t_us, holding `id` ("" none) renewed at renewed_us, in `state`,
 * stored last. Returns its handle. */
static uint64_t make_reg(dbt_share *sh, uint32_t idx, const dbt_share_shape *shape, int64_t t_us,
                         const char *id, size_t idlen, int64_t renewed_us, uint32_t state)
{
    dbt_seg *g = sh->seg;
    if (idx >= regs_used(g))
        g->reg_hw = idx + 1;
    dbt_seg_reg *r = &g->regs[idx];
    r->proc = (uint32_t)sh->proc;
    r->nonce = sh->nonce;
    r->serial++;
    r->seq = g->next_seq++;
    r->kind = shape->kind;
    r->limit = shape->limit;
    r->weight = shape->weight;
    snprintf(r->klass, sizeof r->klass, "%.*s", (int)sizeof r->klass - 1, shape->klass);
    r->t_request_us = t_us;
    memcpy(r->id, id, idlen);
    r->id[idlen] = '\0';
    r->renewed_us = renewed_us;
    r->state = state; /* last */
    return handle_of(sh, idx, r->serial);
}

uint64_t dbt_share_wait_begin(dbt_share *sh, const dbt_share_shape *shape, int64_t t_request_us)
{
    if (!sh || !shape || bad_kind(shape->kind) || !ensure_process(sh) || dbt_share_lock(sh) != 0)
        return H_NOTHING;
    dbt_seg *g = sh->seg;
    uint32_t used = regs_used(g), idx = used;
    for (uint32_t i = 0; i < used; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE) {
            if (idx == used)
                idx = i;
        } else if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a registration is damaged");
            return H_NOTHING;
        }
    }
    begin_update(sh);
    uint64_t h;
    if (idx == DBT_SEG_REGS) {
        /* No room: counted, and the host is not sole until it ends. */
        dbt_seg_proc *p = &g->procs[sh->proc];
        if (p->unregistered < DBT_SEG_UNREG_MAX)
            p->unregistered++;
        h = H_UNREG | (uint64_t)(sh->epoch & H_EPOCH_MASK) << H_EPOCH_SHIFT;
    } else {
        h = make_reg(sh, idx, shape, t_request_us, "", 0, 0, REG_WAITING);
    }
    dbt_share_unlock(sh);
    return sh->broken ? H_NOTHING : h;
}

static void copy_permit(dbt_share_permit *to, const dbt_seg_reg *r)
{
    /* reg_ok checked that the id ends within its room */
    memcpy(to->id, r->id, sizeof to->id);
    to->id[sizeof to->id - 1] = '\0';
    to->renewed_us = r->renewed_us;
}

bool dbt_share_wait_end(dbt_share *sh, uint64_t reg, dbt_share_permit *offered)
{
    if (!sh || reg == 0 || sh->proc < 0 || sh->pid != self_pid() ||
        ((reg >> H_EPOCH_SHIFT) & H_EPOCH_MASK) != sh->epoch || dbt_share_lock(sh) != 0)
        return false;
    dbt_seg *g = sh->seg;
    bool got = false;
    if (reg & H_UNREG) {
        dbt_seg_proc *p = &g->procs[sh->proc];
        if (p->unregistered > 0) {
            begin_update(sh);
            p->unregistered--;
        }
    } else {
        uint32_t idx = (uint32_t)(reg & H_INDEX_MASK) - 1;
        uint32_t serial = (uint32_t)(reg >> H_SERIAL_SHIFT);
        dbt_seg_reg *r = idx < regs_used(g) ? &g->regs[idx] : NULL;
        if (r && is_waiter(r->state) && r->serial == serial && r->proc == (uint32_t)sh->proc &&
            r->nonce == sh->nonce) {
            if (!reg_ok(g, r)) {
                dbt_share_unlock(sh);
                damaged(sh, "a registration is damaged");
                return false;
            }
            got = r->state == REG_OFFERED;
            if (got && offered)
                copy_permit(offered, r);
            begin_update(sh);
            free_reg(g, idx);
        }
    }
    dbt_share_unlock(sh);
    return got;
}

int dbt_share_take(dbt_share *sh, dbt_share_taken *out, int cap)
{
    if (!sh || !out || cap <= 0 || sh->proc < 0 || sh->pid != self_pid() || dbt_share_lock(sh) != 0)
        return 0;
    dbt_seg *g = sh->seg;
    int n = 0;
    for (uint32_t i = 0, used = regs_used(g); i < used && n < cap; i++) {
        dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a registration is damaged");
            return n; /* those taken are the caller's: the segment had them whole */
        }
        if (r->state != REG_OFFERED || r->proc != (uint32_t)sh->proc || r->nonce != sh->nonce)
            continue;
        begin_update(sh);
        out[n].reg = handle_of(sh, i, r->serial);
        copy_permit(&out[n].permit, r);
        out[n].t_request_us = r->t_request_us;
        n++;
        free_reg(g, i);
    }
    dbt_share_unlock(sh);
    return n;
}

static bool same_shape(const dbt_seg_reg *r, const dbt_share_shape *s)
{
    return r->kind == s->kind && r->limit == s->limit && r->weight == s->weight &&
           strncmp(r->klass, s->klass, sizeof r->klass) == 0;
}

/* Under the lock: the longest-waiting registration of the shape in another process, not one of
 * those marked in skip (-1: none; -2: damage, poisoned and unlocked). */
static int oldest_elsewhere(dbt_share *sh, const dbt_share_shape *shape, const bool *skip)
{
    dbt_seg *g = sh->seg;
    int best = -1;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a registration is damaged");
            return -2;
        }
        if (r->state != REG_WAITING || (int)r->proc == sh->proc || !same_shape(r, shape) ||
            skip[r->proc])
            continue;
        const dbt_seg_reg *b = best >= 0 ? &g->regs[best] : NULL;
        if (!b || r->t_request_us < b->t_request_us ||
            (r->t_request_us == b->t_request_us && r->seq < b->seq))
            best = (int)i;
    }
    return best;
}

/* Under the lock: whether a registration of the kind but of another shape (limit, weight or
 * class), in any process, has waited since before t_us. Redis serves the host's waiters in its own
 * order (FIFO; classes); passing a permit past such a waiter to a younger one of the permit's
 * shape would let permits go round one shape while the other waits at Redis' head for as long as
 * they do: a caller of limit 2 at the head holds callers of limit 4 at 2 at once, a waiter of
 * weight 2 never sees 2 units free. Such a permit goes back to Redis, which decides. */
static bool other_shape_waited_longer(dbt_share *sh, const dbt_share_shape *shape, int64_t t_us)
{
    const dbt_seg *g = sh->seg;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_WAITING && r->kind == shape->kind && !same_shape(r, shape) &&
            r->t_request_us < t_us)
            return true;
    }
    return false;
}

dbt_share_offer_result dbt_share_offer(dbt_share *sh, const dbt_share_shape *shape,
                                       const dbt_share_permit *permit, int64_t local_oldest_us,
                                       int64_t *waited_us)
{
    if (!sh || !shape || !permit || bad_kind(shape->kind))
        return DBT_SHARE_NOT_SOLE;
    size_t idlen = strnlen(permit->id, sizeof permit->id);
    if (idlen == 0 || idlen == sizeof permit->id || !ensure_process(sh))
        return DBT_SHARE_NOT_SOLE;
    /* Each round that finds its receiver gone purges it, or one that cannot be told skips it:
     * at most one round per process. */
    bool skip[DBT_SEG_PROCS] = {false};
    for (int round = 0; round <= DBT_SEG_PROCS; round++) {
        if (dbt_share_lock(sh) != 0)
            return DBT_SHARE_NOT_SOLE;
        dbt_seg *g = sh->seg;
        /* Sole, or holding no more than its share while other hosts wait (docs/design.md,
         * "Shares"): above its share, its releases go back to Redis. */
        if (g->sole[shape->kind].sole == 0 && !dbt_core_within_share(&g->share[shape->kind])) {
            dbt_share_unlock(sh);
            return DBT_SHARE_NOT_SOLE;
        }
        int u = any_unregistered(sh);
        if (u != 0) {
            if (u > 0)
                dbt_share_unlock(sh);
            return DBT_SHARE_NOT_SOLE;
        }
        int best = oldest_elsewhere(sh, shape, skip);
        if (best == -2)
            return DBT_SHARE_NOT_SOLE;
        if (best < 0) {
            /* the caller's own waiter of the shape may have it, unless another shape is older */
            bool older =
                local_oldest_us >= 0 && other_shape_waited_longer(sh, shape, local_oldest_us);
            dbt_share_unlock(sh);
            return sh->broken || older ? DBT_SHARE_NOT_SOLE : DBT_SHARE_NOBODY;
        }
        dbt_seg_reg *r = &g->regs[best];
        bool local_first = local_oldest_us >= 0 && local_oldest_us <= r->t_request_us;
        if (other_shape_waited_longer(sh, shape, local_first ? local_oldest_us : r->t_request_us)) {
            dbt_share_unlock(sh);
            return DBT_SHARE_NOT_SOLE;
        }
        if (local_first) {
            dbt_share_unlock(sh);
            return sh->broken ? DBT_SHARE_NOT_SOLE : DBT_SHARE_LOCAL_FIRST;
        }
        begin_update(sh);
        memcpy(r->id, permit->id, idlen + 1);
        r->renewed_us = permit->renewed_us;
        r->state = REG_OFFERED; /* last */
        uint32_t serial = r->serial, pidx = once32(&r->proc);
        uint64_t nonce = r->nonce;
        int32_t pid = pidx < DBT_SEG_PROCS ? g->procs[pidx].pid : 0;
        int64_t t_request = r->t_request_us;
        dbt_share_unlock(sh);
        if (sh->broken)
            return DBT_SHARE_OFFERED; /* it may be taken: never give it back twice */
        int sent = send_wake(sh, pid, nonce);
        if (sent == 0) {
            if (waited_us)
                *waited_us = dbt_now_us() - t_request;
            return DBT_SHARE_OFFERED;
        }
        /* Not delivered (gone, or its wake found no room: nothing would tell it the permit is
         * there): take it back unless its receiver took it meanwhile. Should the segment fail us
         * now, it stays there, lost to its lease: never given twice. */
        if (dbt_share_lock(sh) != 0)
            return DBT_SHARE_OFFERED;
        bool back =
            r->state == REG_OFFERED && r->serial == serial && r->proc == pidx && r->nonce == nonce;
        bool purged = false;
        if (back) {
            begin_update(sh);
            if (sent == 1 && pidx < procs_used(g) && g->procs[pidx].nonce == nonce) {
                purge_proc(g, pidx);
                purged = true;
            } else {
                r->state = REG_WAITING;
            }
        }
        dbt_share_unlock(sh);
        if (purged)
            unlink_wake(sh, pid, nonce);
        if (!back)
            return DBT_SHARE_OFFERED;
        /* The unlock found the lock word not ours: another was let in meanwhile and may have
         * taken the permit as we took it back. Written once, it is never given twice: lost to
         * its lease rather than released again. */
        if (sh->broken)
            return DBT_SHARE_OFFERED;
        if (sent == 2 && pidx < DBT_SEG_PROCS)
            skip[pidx] = true; /* the next one, if there is one */
        else if (sent != 1)
            return DBT_SHARE_NOBODY;
    }
    return DBT_SHARE_NOBODY;
}

/* ---- the shelf: the host's permits kept idle between commands ---- */

/* Under the lock: -1 damage (poisoned, unlocked), else whether a permit of `kind` may be kept on
 * the shelf: nobody queued (the keep half), or everybody queued is the host's (sole, and no
 * process of it unregistered): then nobody else waits for it, and a waiter of another host ends
 * the sole state with "f", which recalls the shelf (docs/design.md, "Keeping while the host is
 * sole"). Given back to Redis instead, it would be granted straight back to one of the host's
 * places: a release.lua and an acquire.lua for nothing. */
static int shelf_keepable(dbt_share *sh, const dbt_share_shape *shape)
{
    const dbt_seg *g = sh->seg;
    int kind = shape->kind;
    if (!g->keep[kind].contended)
        return 1;
    /* Sole for an untagged shape only: Redis' owner of a tagged place is the group with its class
     * and weight, so "sole" then says nothing of the host's other shapes, whose waiters Redis
     * would serve in its class order. And not while a waiter of another shape of the host waits
     * (another limit): the shelf would keep from it what Redis would grant it. */
    if (g->sole[kind].sole == 0 || shape->klass[0] != '\0' || shape->weight > 1)
        return 0;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            return damaged(sh, "a registration is damaged");
        }
        if (r->kind == kind && is_waiter(r->state) && !same_shape(r, shape))
            return 0;
    }
    int u = any_unregistered(sh);
    return u < 0 ? -1 : u == 0;
}

bool dbt_share_shelf_keepable(dbt_share *sh, const dbt_share_shape *shape)
{
    if (!sh || !shape || bad_kind(shape->kind) || dbt_share_lock(sh) != 0)
        return false;
    int k = shelf_keepable(sh, shape);
    if (k < 0)
        return false;
    dbt_share_unlock(sh);
    return k == 1 && !sh->broken;
}

unsigned dbt_share_keep_event(dbt_share *sh, int kind, const dbt_queue_event *ev)
{
    if (!sh || !ev || bad_kind(kind) || dbt_share_lock(sh) != 0)
        return DBT_QACT_NONE;
    dbt_seg_keep *sk = &sh->seg->keep[kind];
    dbt_keep_view k = {.contended = sk->contended != 0,
                       .revoke_ticket = sk->revoke_ticket,
                       .revoke_us = sk->revoke_us};
    unsigned act = dbt_keep_step(&k, ev);
    begin_update(sh);
    /* A recall also says the host's sole verdict is history (pool_core.c, sole_recalled): the
     * shelf must not go on keeping under it while another host waits. */
    if (ev->type == DBT_QEV_REVOKE)
        act |= dbt_sole_step(&sh->seg->sole[kind], ev);
    sk->contended = k.contended ? 1 : 0;
    sk->revoke_ticket = k.revoke_ticket;
    sk->revoke_us = k.revoke_us;
    dbt_share_unlock(sh);
    return sh->broken ? DBT_QACT_NONE : act;
}

/* Under the lock: the index of this process' entry `handle` if it is on the shelf (-1: not; -2:
 * damage, poisoned and unlocked). */
static int own_entry(dbt_share *sh, uint64_t handle)
{
    dbt_seg *g = sh->seg;
    if (handle == 0 || (handle & H_UNREG) ||
        ((handle >> H_EPOCH_SHIFT) & H_EPOCH_MASK) != sh->epoch)
        return -1;
    uint32_t idx = (uint32_t)(handle & H_INDEX_MASK) - 1;
    uint32_t serial = (uint32_t)(handle >> H_SERIAL_SHIFT);
    if (idx >= regs_used(g))
        return -1;
    dbt_seg_reg *r = &g->regs[idx];
    if (r->state != REG_SHELVED || r->serial != serial || r->proc != (uint32_t)sh->proc ||
        r->nonce != sh->nonce)
        return -1;
    if (!reg_ok(g, r)) {
        dbt_share_unlock(sh);
        damaged(sh, "a shelf entry is damaged");
        return -2;
    }
    return (int)idx;
}

uint64_t dbt_share_shelve(dbt_share *sh, const dbt_share_shape *shape,
                          const dbt_share_permit *permit, int64_t now_us)
{
    if (!sh || !shape || !permit || bad_kind(shape->kind))
        return 0;
    size_t idlen = strnlen(permit->id, sizeof permit->id);
    if (idlen == 0 || idlen == sizeof permit->id || !ensure_process(sh) || dbt_share_lock(sh) != 0)
        return 0;
    dbt_seg *g = sh->seg;
    int keepable = shelf_keepable(sh, shape);
    if (keepable <= 0) {
        if (keepable == 0)
            dbt_share_unlock(sh);
        return 0;
    }
    uint32_t used = regs_used(g), idx = used;
    for (uint32_t i = 0; i < used; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state == REG_FREE) {
            if (idx == used)
                idx = i;
        } else if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a registration is damaged");
            return 0;
        } else if (r->state == REG_WAITING && same_shape(r, shape)) {
            /* a waiter of the shape: it is offered the permit (dbt_share_offer), not shelved */
            dbt_share_unlock(sh);
            return 0;
        }
    }
    if (idx == DBT_SEG_REGS) {
        dbt_share_unlock(sh);
        return 0; /* no room: the permit goes back to Redis */
    }
    begin_update(sh);
    uint64_t h =
        make_reg(sh, idx, shape, now_us, permit->id, idlen, permit->renewed_us, REG_SHELVED);
    dbt_share_unlock(sh);
    return sh->broken ? 0 : h;
}

/* Under the lock: the shelf entry of `shape` renewed at or after fresh_since_us that was renewed
 * last (the longest lease left); -1: none; -2: damage (poisoned, unlocked). */
static int freshest_shelved(dbt_share *sh, const dbt_share_shape *shape, int64_t fresh_since_us)
{
    dbt_seg *g = sh->seg;
    int best = -1;
    for (uint32_t i = 0, n = regs_used(g); i < n; i++) {
        const dbt_seg_reg *r = &g->regs[i];
        if (r->state != REG_SHELVED)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a shelf entry is damaged");
            return -2;
        }
        if (!same_shape(r, shape) || r->renewed_us < fresh_since_us)
            continue;
        if (best < 0 || r->renewed_us > g->regs[best].renewed_us)
            best = (int)i;
    }
    return best;
}

bool dbt_share_unshelve(dbt_share *sh, const dbt_share_shape *shape, uint64_t prefer,
                        int64_t fresh_since_us, dbt_share_permit *out, uint64_t *was)
{
    if (!sh || !shape || !out || bad_kind(shape->kind) || sh->proc < 0 || sh->pid != self_pid() ||
        dbt_share_lock(sh) != 0)
        return false;
    dbt_seg *g = sh->seg;
    int best = own_entry(sh, prefer);
    if (best == -2)
        return false;
    if (best >= 0 && !same_shape(&g->regs[best], shape))
        best = -1;
    if (best < 0)
        best = freshest_shelved(sh, shape, fresh_since_us);
    if (best == -2)
        return false;
    if (best >= 0) {
        dbt_seg_reg *r = &g->regs[best];
        if (was)
            *was = r->proc == (uint32_t)sh->proc && r->nonce == sh->nonce
                       ? handle_of(sh, (uint32_t)best, r->serial)
                       : 0;
        begin_update(sh);
        copy_permit(out, r);
        free_reg(g, (uint32_t)best);
    }
    dbt_share_unlock(sh);
    return best >= 0;
}

bool dbt_share_shelf_to_waiter(dbt_share *sh, const dbt_share_shape *shape, uint64_t reg,
                               int64_t fresh_since_us)
{
    if (!sh || !shape || bad_kind(shape->kind) || reg == 0 || (reg & H_UNREG) || sh->proc < 0 ||
        sh->pid != self_pid() || ((reg >> H_EPOCH_SHIFT) & H_EPOCH_MASK) != sh->epoch ||
        dbt_share_lock(sh) != 0)
        return false;
    dbt_seg *g = sh->seg;
    uint32_t idx = (uint32_t)(reg & H_INDEX_MASK) - 1;
    uint32_t serial = (uint32_t)(reg >> H_SERIAL_SHIFT);
    dbt_seg_reg *w = idx < regs_used(g) ? &g->regs[idx] : NULL;
    if (!w || w->state != REG_WAITING || w->serial != serial || w->proc != (uint32_t)sh->proc ||
        w->nonce != sh->nonce || !same_shape(w, shape)) {
        dbt_share_unlock(sh);
        return false;
    }
    /* Only while the shelf may keep permits at all (sole, or nobody queued): otherwise a recall
     * is on its way, and another host's waiter is owed them first. */
    int keepable = shelf_keepable(sh, shape);
    if (keepable <= 0) {
        if (keepable == 0)
            dbt_share_unlock(sh);
        return false;
    }
    int best = freshest_shelved(sh, shape, fresh_since_us);
    if (best < 0) {
        if (best == -1)
            dbt_share_unlock(sh);
        return false;
    }
    begin_update(sh);
    dbt_seg_reg *r = &g->regs[best];
    memcpy(w->id, r->id, sizeof w->id);
    w->renewed_us = r->renewed_us;
    free_reg(g, (uint32_t)best);
    w->state = REG_OFFERED; /* last */
    dbt_share_unlock(sh);
    if (sh->broken)
        return false;
    /* Taken as any offer is: by whoever watches this process' wake socket (dbt_share_take). */
    (void)send_wake(sh, sh->pid, sh->nonce);
    return true;
}

bool dbt_share_shelf_renewed(dbt_share *sh, uint64_t handle, int64_t renewed_us)
{
    if (!sh || sh->proc < 0 || sh->pid != self_pid() || dbt_share_lock(sh) != 0)
        return false;
    int i = own_entry(sh, handle);
    if (i == -2)
        return false;
    if (i >= 0 && renewed_us > sh->seg->regs[i].renewed_us) {
        begin_update(sh);
        sh->seg->regs[i].renewed_us = renewed_us;
    }
    dbt_share_unlock(sh);
    return i >= 0 && !sh->broken;
}

int dbt_share_shelf_take_kind(dbt_share *sh, int kind, dbt_share_permit *out, uint64_t *was,
                              int cap)
{
    if (!sh || !out || cap <= 0 || bad_kind(kind) || sh->proc < 0 || sh->pid != self_pid() ||
        dbt_share_lock(sh) != 0)
        return 0;
    dbt_seg *g = sh->seg;
    int n = 0;
    for (uint32_t i = 0, used = regs_used(g); i < used && n < cap; i++) {
        dbt_seg_reg *r = &g->regs[i];
        if (r->state != REG_SHELVED)
            continue;
        if (!reg_ok(g, r)) {
            dbt_share_unlock(sh);
            damaged(sh, "a shelf entry is damaged");
            return n; /* those taken are the caller's: the segment had them whole */
        }
        if (r->kind != kind)
            continue;
        begin_update(sh);
        if (was)
            was[n] = r->proc == (uint32_t)sh->proc && r->nonce == sh->nonce
                         ? handle_of(sh, i, r->serial)
                         : 0;
        copy_permit(&out[n++], r);
        free_reg(g, i);
    }
    dbt_share_unlock(sh);
    return n;
}

dbt_seg *dbt_share_segment(dbt_share *sh)
{
    return sh ? sh->seg : NULL;
}

const char *dbt_share_path(const dbt_share *sh)
{
    return sh ? sh->path : "";
}
