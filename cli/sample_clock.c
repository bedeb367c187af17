/* sample_clock.c - a sample's members placed on Redis' clock by the least delay of their clock
 * (sample_clock.h). */
#include "sample_clock.h"

#include <stdlib.h>
#include <string.h>

/* A member that says its clock: the clock it is placed by (a group of processes), its call's
 * time, its offset (call time less build time: the clock's offset to Redis' plus its delay). */
typedef struct {
    size_t at; /* its index in the caller's chunks */
    uint64_t proc, clock;
    size_t group;
    int64_t called_us, offset_us;
} member;

/* One process: its kernel's clock and the least offset of its members. */
typedef struct {
    uint64_t proc, clock;
    int64_t least_us;
    size_t group;
} process;

static int by_clock_then_least(const void *a, const void *b)
{
    const process *x = a, *y = b;
    if (x->clock != y->clock)
        return x->clock < y->clock ? -1 : 1;
    return (x->least_us > y->least_us) - (x->least_us < y->least_us);
}

static int by_proc(const void *a, const void *b)
{
    const process *x = a, *y = b;
    return (x->proc > y->proc) - (x->proc < y->proc);
}

static int by_group_then_call(const void *a, const void *b)
{
    const member *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return (x->called_us > y->called_us) - (x->called_us < y->called_us);
}

static int by_member_proc(const void *a, const void *b)
{
    const member *x = a, *y = b;
    return (x->proc > y->proc) - (x->proc < y->proc);
}

/* The process of proc in procs[0..n), sorted by proc. */
static const process *find(const process *procs, size_t n, uint64_t proc)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (procs[mid].proc < proc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && procs[lo].proc == proc ? &procs[lo] : NULL;
}

bool dbt_sample_clock_place(const dbt_sample_chunk *chunks, size_t n, int64_t *late)
{
    memset(late, 0, n * sizeof *late);
    member *m = malloc((n ? n : 1) * sizeof *m);
    process *procs = malloc((n ? n : 1) * sizeof *procs);
    if (!m || !procs) {
        free(m);
        free(procs);
        return false;
    }
    size_t nm = 0;
    for (size_t i = 0; i < n; i++)
        if (chunks[i].built_us >= 0)
            m[nm++] = (member){.at = i,
                               .proc = chunks[i].proc,
                               .clock = chunks[i].clock,
                               .called_us = chunks[i].called_us,
                               .offset_us = chunks[i].called_us - chunks[i].built_us};
    /* The processes, each with its least offset. A member that does not say its kernel is on a
     * clock of its own process: its clock is its process' value (a 64-bit hash, as a kernel's
     * is: the two meet by chance only). */
    qsort(m, nm, sizeof *m, by_member_proc);
    size_t np = 0;
    for (size_t i = 0; i < nm; i++) {
        if (np == 0 || procs[np - 1].proc != m[i].proc)
            procs[np++] = (process){.proc = m[i].proc,
                                    .clock = m[i].clock ? m[i].clock : m[i].proc,
                                    .least_us = m[i].offset_us};
        else if (m[i].offset_us < procs[np - 1].least_us)
            procs[np - 1].least_us = m[i].offset_us;
    }
    /* Groups: the processes of one kernel, split where their least offsets part by more than
     * DBT_CLOCK_SPLIT_US (a time namespace's clock is another). */
    qsort(procs, np, sizeof *procs, by_clock_then_least);
    size_t group = 0;
    for (size_t i = 0; i < np; i++) {
        if (i > 0 && (procs[i].clock != procs[i - 1].clock ||
                      procs[i].least_us - procs[i - 1].least_us > DBT_CLOCK_SPLIT_US))
            group++;
        procs[i].group = group;
    }
    qsort(procs, np, sizeof *procs, by_proc);
    for (size_t i = 0; i < nm; i++)
        m[i].group = find(procs, np, m[i].proc)->group;
    /* Each member against the least offset of its group within the window around it: a
     * sliding minimum (a queue of members whose offsets rise, the oldest first), so that a sample
     * of a hundred thousand one-hold members costs a pass, not a pass per member. */
    qsort(m, nm, sizeof *m, by_group_then_call);
    size_t *queue = malloc((nm ? nm : 1) * sizeof *queue);
    if (!queue) {
        free(m);
        free(procs);
        return false;
    }
    size_t head = 0, tail = 0, next = 0;
    for (size_t i = 0; i < nm; i++) {
        if (i == 0 || m[i].group != m[i - 1].group)
            head = tail = 0, next = i;
        while (next < nm && m[next].group == m[i].group &&
               m[next].called_us - m[i].called_us <= DBT_CLOCK_WINDOW_US) {
            while (tail > head && m[queue[tail - 1]].offset_us >= m[next].offset_us)
                tail--;
            queue[tail++] = next++;
        }
        while (m[i].called_us - m[queue[head]].called_us > DBT_CLOCK_WINDOW_US)
            head++;
        late[m[i].at] = m[i].offset_us - m[queue[head]].offset_us;
    }
    free(queue);
    free(m);
    free(procs);
    return true;
}
