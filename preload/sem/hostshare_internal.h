/* hostshare_internal.h - the layout of the host's segment (hostshare.c), and the segment lock as
 * a function of its own: for hostshare.c, and for the tests that write damage into a segment or
 * make a process die holding its lock. Nothing else in the library includes it. */
#ifndef DBT_HOSTSHARE_INTERNAL_H
#define DBT_HOSTSHARE_INTERNAL_H

#include "hostshare.h"
#include "pool_core.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>

/* Layout version: in the file's name (<hash>.<version>) and in the header. A library whose
 * layout differs uses another file, so versions never read each other's segments; a header of
 * another version in our file is damage. */
#define DBT_SEG_VERSION 4
#define DBT_SEG_MAGIC   UINT64_C(0x314d485354424444) /* "DDBTSHM1" read little-endian */
#define DBT_SEG_KEY_MAX 1024                         /* the pool's key, with its NUL */
#define DBT_SEG_PROCS   256
#define DBT_SEG_REGS    1024
/* dbt_seg.poisoned */
#define SEG_POISONED 1u
#define SEG_RETIRED  2u
/* More unregistered waiters than this in one process is not a count, it is damage. */
#define DBT_SEG_UNREG_MAX (1u << 24)

/* Every field is a fixed-width integer or a char array: no bool or enum, whose garbage values
 * would be undefined to load. */
enum { REG_FREE = 0, REG_WAITING = 1, REG_OFFERED = 2, REG_SHELVED = 3 };

typedef struct {
    int32_t pid;           /* 0: a free record; set last when a record is made */
    uint32_t unregistered; /* waiters of this process the registration table had no room for */
    uint64_t nonce;        /* names its wake socket (with the pid) */
} dbt_seg_proc;

/* A registration (a waiting thread: REG_WAITING, or REG_OFFERED once a permit was passed to it),
 * or an entry of the host's shelf (REG_SHELVED: a permit kept idle between commands, its process
 * the one that shelved it and renews it, t_request_us when it was shelved). */
typedef struct {
    uint32_t state;  /* REG_*; set last when a registration is made or offered */
    uint32_t proc;   /* its process' index in procs[] ... */
    uint64_t nonce;  /* ... and that record's nonce (a reused record is another process) */
    uint32_t serial; /* bumped each time the entry is taken: handles name (index, serial) */
    uint64_t seq;    /* the order registrations were made in: breaks ties of t_request_us */
    int32_t kind;
    int32_t limit;
    int32_t weight;
    char klass[33];
    char pad[3];
    int64_t t_request_us;
    char id[DBT_SHARE_ID_MAX]; /* REG_OFFERED: the permit offered to it; REG_SHELVED: the permit */
    int64_t renewed_us;
} dbt_seg_reg;

/* Whether the host's waiters are the whole queue of a kind: the pool's own view (pool_core.h),
 * shared, moved by dbt_sole_step under the segment's lock. Its layout is the segment's. */
typedef dbt_sole_view dbt_seg_sole;
_Static_assert(sizeof(dbt_seg_sole) == 32 && offsetof(dbt_seg_sole, sole) == 0 &&
                   offsetof(dbt_seg_sole, verdict_ticket) == 8 &&
                   offsetof(dbt_seg_sole, foreign_ticket) == 16 &&
                   offsetof(dbt_seg_sole, verdict_us) == 24,
               "the segment's layout (DBT_SEG_VERSION)");

/* Whether permits of a kind may be kept on the host's shelf: the pool's dbt_keep_view, moved by
 * dbt_keep_step under the segment's lock, in fixed-width fields (no bool in the segment). */
typedef struct {
    uint64_t contended; /* nonzero: someone queued; nothing is shelved, the shelf goes back */
    uint64_t revoke_ticket;
    int64_t revoke_us;
} dbt_seg_keep;

typedef struct {
    uint64_t magic;
    uint32_t version;
    uint32_t nprocs; /* DBT_SEG_PROCS */
    uint64_t size;   /* sizeof(dbt_seg) */
    uint32_t nregs;  /* DBT_SEG_REGS */
    /* Nonzero: everyone leaves it. SEG_POISONED: a process found the segment damaged or could
     * not lock it; SEG_RETIRED: its last process detached and took its name away (a process that
     * opened it meanwhile makes a new one). Read and written without the lock. */
    _Atomic uint32_t poisoned;
    uint64_t key_hash; /* the hash in the file's name */
    /* dbt_share_key_sum of key: a key that does not match it is damage (rebuilt); a key that
     * does but is not the attacher's is another pool's, whose hash collides (not shared). */
    uint64_t key_sum;
    char key[DBT_SEG_KEY_MAX];
    char group[DBT_SHARE_GROUP_LEN];
    char pad[7];
    uint64_t generation; /* bumped by every change of the tables (under the lock) */
    uint64_t next_seq;   /* under the lock */
    /* The lock (hostshare.c): 0 free, else the holder's thread id, and a waiters bit. */
    _Atomic uint32_t lock;
    /* Under the lock: nonzero while a multi-field update is under way (the locker's proc index +
     * 1, or DBT_SEG_DIRTY_NOPROC): a locker that takes the lock over from a dead holder then
     * drops that process' records and resets the sole state. */
    uint32_t dirty;
    uint32_t proc_hw; /* procs[proc_hw..] are all free */
    uint32_t reg_hw;  /* regs[reg_hw..] are all free */
    dbt_seg_sole sole[DBT_SHARE_KINDS];
    dbt_seg_keep keep[DBT_SHARE_KINDS];
    /* The group's share of the limit per kind (pool_core's dbt_share_view, moved by
     * dbt_core_share_step under the lock; zeroed: none in force). Layout version 3. */
    dbt_share_view share[DBT_SHARE_KINDS];
    dbt_seg_proc procs[DBT_SEG_PROCS];
    dbt_seg_reg regs[DBT_SEG_REGS];
} dbt_seg;

#define DBT_SEG_DIRTY_NOPROC UINT32_MAX

/* A process' wake socket: a socket file of this name (its pid, its record's nonce) in the user's
 * directory, beside the segments. */
#define DBT_SEG_WAKE_FMT "w.%d.%016" PRIx64

/* A second hash of the pool's key, kept beside it in the header. */
uint64_t dbt_share_key_sum(const char *key);
/* The segment this attachment maps (for tests to damage), and the file's path. */
dbt_seg *dbt_share_segment(dbt_share *sh);
const char *dbt_share_path(const dbt_share *sh);
/* Takes the segment's lock as every call does (validating, repairing after a dead holder, or
 * poisoning and breaking the attachment): 0 when held. The tests' children hold it on purpose
 * and die or stop. The same thread unlocks. */
int dbt_share_lock(dbt_share *sh);
void dbt_share_unlock(dbt_share *sh);
/* Called by dbt_share_lock before it takes the lock word and by dbt_share_unlock before it lets
 * it go, with the id the word names the thread by: a test's window between two stores
 * (tests/sem/test_share_windows.c defines it). Weak and empty in the library. */
void dbt_share_lock_seam(uint32_t tid);

#endif
