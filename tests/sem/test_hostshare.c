/* The host's segment (hostshare.c): permits passed between the processes of one host. Each test's
 * "processes" are fork()ed children, each with its own share directory's segment (a temp dir:
 * two directories are two simulated hosts); no Redis. The segment's content is looked at (and
 * damaged) through its layout in hostshare_internal.h. */
#include "clock.h"
#include "hostshare.h"
#include "hostshare_internal.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEY   "redis://127.0.0.1:6379/0 dbthrottle: pool"
#define LEASE INT64_C(10000000)

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/dbt-hostshare-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    signal(SIGPIPE, SIG_IGN);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_dir(void)
{
    nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(hostshare, .init = make_dir, .fini = remove_dir);

/* ---- helpers ---- */

static dbt_share_shape shape_of(int kind, int limit, const char *klass)
{
    dbt_share_shape s = {.kind = kind, .limit = limit, .weight = 1};
    snprintf(s.klass, sizeof s.klass, "%s", klass);
    return s;
}

static dbt_share_permit permit_of(const char *id, int64_t renewed_us)
{
    dbt_share_permit p = {.renewed_us = renewed_us};
    snprintf(p.id, sizeof p.id, "%s", id);
    return p;
}

static dbt_share *attach_or_die(const char *d)
{
    char why[512];
    dbt_share *sh = dbt_share_attach(d, KEY, why, sizeof why);
    cr_assert_not_null(sh, "attach: %s", why);
    cr_assert_not(dbt_share_broken(sh));
    return sh;
}

static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* One line from a child (up to '\n'), waiting up to ms: "" on timeout or EOF. */
static void read_line(int fd, char *buf, size_t cap, int ms)
{
    size_t n = 0;
    int64_t until = dbt_now_us() + (int64_t)ms * 1000;
    while (n + 1 < cap) {
        int left = (int)((until - dbt_now_us()) / 1000);
        if (left <= 0 || !readable(fd, left))
            break;
        char c;
        if (read(fd, &c, 1) != 1 || c == '\n')
            break;
        buf[n++] = c;
    }
    buf[n] = '\0';
}

static void say_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_line(int fd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(fd, buf, (size_t)n) != n)
        _exit(99);
}

/* A child process running fn(arg, to_parent, from_parent); it _exits with fn's value. */
typedef struct {
    pid_t pid;
    int from_child; /* its lines */
    int to_child;
} child;

static child spawn(int (*fn)(void *arg, int out, int in), void *arg)
{
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(fn(arg, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    return (child){pid, up[0], down[1]};
}

static int reap(child *c)
{
    int st = 0;
    waitpid(c->pid, &st, 0);
    close(c->from_child);
    close(c->to_child);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void kill_child(child *c)
{
    kill(c->pid, SIGKILL);
    reap(c);
}

static void tell(child *c, char what)
{
    cr_assert_eq(write(c->to_child, &what, 1), 1);
}

static char wait_word(int in)
{
    char c = 0;
    if (!readable(in, 30000) || read(in, &c, 1) != 1)
        return 0;
    return c;
}

static int live_procs(const dbt_seg *g)
{
    int n = 0;
    for (uint32_t i = 0; i < g->proc_hw && i < DBT_SEG_PROCS; i++)
        n += g->procs[i].pid > 0;
    return n;
}

static int live_regs(const dbt_seg *g)
{
    int n = 0;
    for (uint32_t i = 0; i < g->reg_hw && i < DBT_SEG_REGS; i++)
        n += g->regs[i].state != REG_FREE;
    return n;
}

static int regs_of_pid(const dbt_seg *g, pid_t pid)
{
    int n = 0;
    for (uint32_t i = 0; i < g->reg_hw && i < DBT_SEG_REGS; i++)
        if (g->regs[i].state != REG_FREE && g->regs[i].proc < DBT_SEG_PROCS &&
            g->procs[g->regs[i].proc].pid == pid)
            n++;
    return n;
}

static void make_sole(dbt_share *sh, int kind)
{
    static uint64_t ticket = 1000;
    dbt_share_verdict(sh, kind, ++ticket, true, LEASE);
    cr_assert(dbt_share_sole(sh, kind));
}

/* ---- children ---- */

/* Attaches, registers one waiter of shape (kind 0, limit 4, "") since `arg` us (0: now), says
 * "R <group>", waits for an offer (its wake socket), takes it and says "T <id> <renewed_us>
 * <t_request_us>"; or, on 'q', ends its wait and says "E <1 if a permit came> <id>". */
typedef struct {
    int64_t t_request_us;
    dbt_share_shape shape;
} waiter_args;

static int waiter(void *arg, int out, int in)
{
    const waiter_args *a = arg;
    char why[512];
    dbt_share *sh = dbt_share_attach(dir, KEY, why, sizeof why);
    if (!sh) {
        say_line(out, "X %s", why);
        return 1;
    }
    uint64_t reg =
        dbt_share_wait_begin(sh, &a->shape, a->t_request_us ? a->t_request_us : dbt_now_us());
    say_line(out, "R %s", dbt_share_group(sh));
    for (int64_t until = dbt_now_us() + 30000000; dbt_now_us() < until;) {
        struct pollfd p[2] = {{.fd = dbt_share_fd(sh), .events = POLLIN},
                              {.fd = in, .events = POLLIN}};
        if (poll(p, 2, 1000) <= 0)
            continue;
        if (p[1].revents) {
            dbt_share_permit got;
            bool had = dbt_share_wait_end(sh, reg, &got);
            say_line(out, "E %d %s", had, had ? got.id : "-");
            dbt_share_detach(sh);
            return 0;
        }
        dbt_share_drain(sh);
        dbt_share_taken t[4];
        int n = dbt_share_take(sh, t, 4);
        if (n == 1 && t[0].reg == reg) {
            say_line(out, "T %s %" PRId64 " %" PRId64, t[0].permit.id, t[0].permit.renewed_us,
                     t[0].t_request_us);
            char c;
            (void)!read(in, &c, 1); /* until told to go */
            dbt_share_detach(sh);
            return 0;
        }
    }
    return 2;
}

/* Attaches and offers one permit of `shape` (id "gift"), then exits with the result + 10, or 1. */
typedef struct {
    dbt_share_shape shape;
    int64_t local_oldest_us;
} giver_args;

static int giver(void *arg, int out, int in)
{
    (void)out;
    (void)in;
    const giver_args *a = arg;
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        return 1;
    dbt_share_permit p = permit_of("gift", 42);
    int r = dbt_share_offer(sh, &a->shape, &p, a->local_oldest_us, NULL);
    dbt_share_detach(sh);
    return 10 + r;
}

static int offer_from_child(dbt_share_shape shape, int64_t local_oldest_us)
{
    giver_args a = {shape, local_oldest_us};
    child c = spawn(giver, &a);
    return reap(&c) - 10;
}

/* Attaches, takes the segment's lock and says "L", then waits to be killed or stopped; with
 * arg != NULL, marks an update under way first (as if killed in the middle of one). */
static int lock_holder(void *arg, int out, int in)
{
    (void)in;
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh || dbt_share_lock(sh) != 0)
        return 1;
    if (arg) {
        dbt_seg *g = dbt_share_segment(sh);
        for (uint32_t i = 0; i < g->proc_hw; i++)
            if (g->procs[i].pid == getpid())
                g->dirty = i + 1;
        g->sole[0].sole = 77; /* half of an update of the sole state */
    }
    say_line(out, "L");
    for (;;)
        pause();
}

/* ---- attach ---- */

Test(hostshare, attach_makes_a_private_directory_and_segment)
{
    dbt_share *sh = attach_or_die(dir);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    struct stat st;
    cr_assert_eq(lstat(sub, &st), 0);
    cr_expect(S_ISDIR(st.st_mode));
    cr_expect_eq(st.st_mode & 07777, 0700, "dir mode %o", st.st_mode & 07777);
    cr_expect_eq(st.st_uid, geteuid());
    const char *path = dbt_share_path(sh);
    cr_expect_eq(strncmp(path, sub, strlen(sub)), 0, "%s", path);
    char want[16];
    snprintf(want, sizeof want, ".%d", DBT_SEG_VERSION);
    const char *dot = strrchr(path, '.');
    cr_expect(dot && strcmp(dot, want) == 0, "the layout version in the name: %s", path);
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISREG(st.st_mode));
    cr_expect_eq(st.st_mode & 07777, 0600, "file mode %o", st.st_mode & 07777);
    cr_expect_eq(st.st_uid, geteuid());
    cr_expect_eq(st.st_size, (off_t)sizeof(dbt_seg));
    const char *g = dbt_share_group(sh);
    cr_expect_eq(strlen(g), 16);
    cr_expect_eq(strspn(g, "0123456789abcdef"), 16, "group %s", g);
    cr_expect_geq(dbt_share_fd(sh), 0);
    const dbt_seg *seg = dbt_share_segment(sh);
    cr_expect_str_eq(seg->key, KEY);
    cr_expect_eq(live_procs(seg), 1);
    cr_expect_str_eq(dbt_share_note(sh), "", "nothing surprising");
    /* no temp file left behind: the segment, and this process' wake socket (a socket file:
     * only the user can bind or reach one in its directory) */
    cr_expect_eq(access(sub, F_OK), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 2 && test -S %s/w.%d.%016" PRIx64, sub,
             sub, (int)getpid(), seg->procs[0].nonce);
    cr_expect_eq(system(cmd), 0, "only the segment and the wake socket in %s", sub);
    dbt_share_detach(sh);
    /* the last to leave: both go */
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 0", sub);
    cr_expect_eq(system(cmd), 0, "nothing left in %s", sub);
}

static int report_group(void *arg, int out, int in)
{
    (void)in;
    dbt_share *sh = dbt_share_attach(arg, KEY, NULL, 0);
    if (!sh)
        return 1;
    say_line(out, "%s %d", dbt_share_group(sh), live_procs(dbt_share_segment(sh)));
    dbt_share_detach(sh);
    return 0;
}

Test(hostshare, processes_naming_one_directory_share_one_group)
{
    dbt_share *sh = attach_or_die(dir);
    child c = spawn(report_group, dir);
    char line[128];
    read_line(c.from_child, line, sizeof line, 30000);
    cr_assert_eq(reap(&c), 0);
    char expect[64];
    snprintf(expect, sizeof expect, "%s 2", dbt_share_group(sh));
    cr_expect_str_eq(line, expect, "the child saw %s", line);
    cr_expect_eq(live_procs(dbt_share_segment(sh)), 1, "the child's record went with it");
    dbt_share_detach(sh);
}

Test(hostshare, two_directories_are_two_hosts)
{
    char other[128];
    snprintf(other, sizeof other, "%s/otherhost", dir);
    cr_assert_eq(mkdir(other, 0700), 0);
    dbt_share *a = attach_or_die(dir);
    child c = spawn(report_group, other);
    char line[128];
    read_line(c.from_child, line, sizeof line, 30000);
    cr_assert_eq(reap(&c), 0);
    cr_expect_eq(strlen(line), 18, "%s", line);
    cr_expect_neq(strncmp(line, dbt_share_group(a), 16), 0, "one group for two hosts: %s", line);
    cr_expect_str_eq(line + 17, "1", "alone on its host");
    dbt_share_detach(a);
}

static void expect_refused(const char *d, const char *names, const char *cause)
{
    char why[512] = "";
    dbt_share *sh = dbt_share_attach(d, KEY, why, sizeof why);
    cr_expect_null(sh, "attached despite %s", cause);
    if (sh)
        dbt_share_detach(sh);
    cr_expect(strstr(why, names) != NULL, "why names %s: %s", names, why);
    cr_expect(strstr(why, cause) != NULL, "why says %s: %s", cause, why);
}

/* The user's directory of the usual name is not the user's own: attached in another that is, and
 * the note (the caller's warning) names both and what was wrong. Returns the directory used. */
static void expect_elsewhere(const char *d, const char *names, const char *cause, char *used,
                             size_t cap)
{
    dbt_share *sh = attach_or_die(d);
    const char *note = dbt_share_note(sh);
    cr_expect(strstr(note, names) != NULL, "the note names %s: %s", names, note);
    cr_expect(strstr(note, cause) != NULL, "the note says %s: %s", cause, note);
    char path[PATH_MAX], in[PATH_MAX];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    snprintf(in, sizeof in, "%s/", names);
    cr_expect_neq(strncmp(path, in, strlen(in)), 0, "in %s: %s", names, path);
    *strrchr(path, '/') = '\0';
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 07777) == 0700,
              "%s: mode %o, uid %u", path, st.st_mode & 07777, (unsigned)st.st_uid);
    cr_expect(strstr(note, path) != NULL, "the note names %s: %s", path, note);
    snprintf(used, cap, "%s", path);
    dbt_share_detach(sh);
}

Test(hostshare, a_directory_others_may_use_is_not_used)
{
    char sub[128], used[PATH_MAX], first[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(chmod(sub, 0755), 0);
    expect_elsewhere(dir, sub, "mode 0755", first, sizeof first);
    if (geteuid() == 0) {
        /* another user's (made first), and its decoys of the fall-back's names, first by name */
        cr_assert_eq(chmod(sub, 0700), 0);
        cr_assert_eq(chown(sub, 65534, 65534), 0);
        char decoy[PATH_MAX];
        snprintf(decoy, sizeof decoy, "%s.000000000000000000000000", sub);
        cr_assert_eq(mkdir(decoy, 0700), 0);
        cr_assert_eq(chown(decoy, 65534, 65534), 0);
        expect_elsewhere(dir, sub, "owned by uid 65534", used, sizeof used);
        cr_expect_str_eq(used, first, "every process of the user finds the same one");
        cr_assert_eq(chown(sub, 0, 0), 0);
    }
    /* a symlink (to a directory of the user's own) */
    cr_assert_eq(rmdir(sub), 0);
    char real[128];
    snprintf(real, sizeof real, "%s/real", dir);
    cr_assert_eq(mkdir(real, 0700), 0);
    cr_assert_eq(symlink(real, sub), 0);
    expect_elsewhere(dir, sub, "symlink", used, sizeof used);
    cr_expect_str_eq(used, first, "every process of the user finds the same one");
    cr_assert_eq(unlink(sub), 0);
    cr_assert_eq(rmdir(real), 0);
}

Test(hostshare, a_segment_others_may_use_is_refused)
{
    /* the segment's file: another's mode, a symlink */
    dbt_share *sh = attach_or_die(dir);
    char path[256];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    cr_assert_eq(chmod(path, 0640), 0);
    expect_refused(dir, path, "mode 0640");
    dbt_share_detach(sh); /* the last process: the file goes with it */
    cr_assert_neq(access(path, F_OK), 0);
    char target[256];
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    cr_assert_eq(close(open(target, O_CREAT | O_RDWR, 0600)), 0);
    cr_assert_eq(symlink(target, path), 0);
    expect_refused(dir, path, "symlink");
    cr_assert_eq(unlink(path), 0);
    /* a relative directory */
    char why[256];
    cr_expect_null(dbt_share_attach("relative/dir", KEY, why, sizeof why));
    cr_expect(strstr(why, "relative/dir") != NULL, "%s", why);
}

Test(hostshare, a_segment_holding_another_pools_key_is_refused)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_seg *g = dbt_share_segment(sh);
    /* what a pool whose key's hash collides with ours would have made */
    snprintf(g->key, sizeof g->key, "%s", "redis://elsewhere:6379/0 dbthrottle: other");
    g->key_sum = dbt_share_key_sum(g->key);
    expect_refused(dir, dbt_share_path(sh), "another pool's key");
    cr_expect_not(dbt_share_broken(sh), "theirs, not damaged");
    /* a key that does not match its sum is damage: rebuilt */
    g->key[0] = 'X';
    char old_group[DBT_SHARE_GROUP_LEN];
    snprintf(old_group, sizeof old_group, "%s", dbt_share_group(sh));
    dbt_share *b = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(b), old_group);
    cr_expect_str_eq(dbt_share_segment(b)->key, KEY);
    dbt_share_detach(b);
    dbt_share_detach(sh);
}

/* ---- offers ---- */

Test(hostshare, a_permit_moves_to_the_waiter_of_another_process, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    waiter_args wa = {.shape = shape_of(0, 4, "")};
    child w = spawn(waiter, &wa);
    char line[256];
    read_line(w.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R', "%s", line);
    cr_expect_str_eq(line + 2, dbt_share_group(sh));
    cr_expect_eq(live_regs(dbt_share_segment(sh)), 1);

    dbt_share_shape shape = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("0123456789abcdef:q:4:17:cafe", 1234567);
    int64_t waited = -1;
    cr_assert_eq(dbt_share_offer(sh, &shape, &p, -1, &waited), DBT_SHARE_OFFERED);
    cr_expect_geq(waited, 0);
    /* the receiver's socket woke it; it took the permit whole */
    read_line(w.from_child, line, sizeof line, 30000);
    char id[200];
    int64_t renewed = 0, t_request = 0;
    cr_assert_eq(sscanf(line, "T %199s %" SCNd64 " %" SCNd64, id, &renewed, &t_request), 3, "%s",
                 line);
    cr_expect_str_eq(id, p.id);
    cr_expect_eq(renewed, 1234567);
    cr_expect_gt(t_request, 0);
    cr_expect_eq(live_regs(dbt_share_segment(sh)), 0, "the served registration is gone");
    tell(&w, 'q');
    cr_expect_eq(reap(&w), 0);
    dbt_share_detach(sh);
}

Test(hostshare, the_oldest_waiter_of_the_shape_is_served_first, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    dbt_share_shape a = shape_of(0, 4, ""), other_limit = shape_of(0, 5, ""),
                    other_class = shape_of(0, 4, "batch"), other_weight = a;
    other_weight.weight = 2;
    /* this process waits; the children give */
    uint64_t young = dbt_share_wait_begin(sh, &a, 1000);
    uint64_t old = dbt_share_wait_begin(sh, &a, 500);
    /* younger than those of shape a: a waiter of another shape that waited longer sends the
     * permit back to Redis (the next test) */
    uint64_t oldest_limit = dbt_share_wait_begin(sh, &other_limit, 2000);
    uint64_t oldest_class = dbt_share_wait_begin(sh, &other_class, 2000);
    uint64_t oldest_weight = dbt_share_wait_begin(sh, &other_weight, 2000);
    cr_assert(young && old && oldest_limit && oldest_class && oldest_weight);

    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    dbt_share_taken t[8];
    cr_assert_eq(dbt_share_take(sh, t, 8), 1);
    cr_expect_eq(t[0].reg, old, "the oldest of the shape, not of another shape");
    cr_expect_str_eq(t[0].permit.id, "gift");
    cr_expect_eq(t[0].permit.renewed_us, 42);
    cr_expect_eq(t[0].t_request_us, 500);

    /* the giver's own waiter since 800 waited longer than ours since 1000: it goes first */
    cr_expect_eq(offer_from_child(a, 800), DBT_SHARE_LOCAL_FIRST);
    cr_expect_eq(dbt_share_take(sh, t, 8), 0);
    cr_expect_eq(offer_from_child(a, 1500), DBT_SHARE_OFFERED);
    cr_assert_eq(dbt_share_take(sh, t, 8), 1);
    cr_expect_eq(t[0].reg, young);
    /* nobody of the shape waits any more (this process' own waiters do not count for itself) */
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOBODY);
    uint64_t mine = dbt_share_wait_begin(sh, &a, 10);
    dbt_share_permit p = permit_of("own", 1);
    cr_expect_eq(dbt_share_offer(sh, &a, &p, -1, NULL), DBT_SHARE_NOBODY);
    cr_expect_not(dbt_share_wait_end(sh, mine, &p));
    /* the other shapes are served by their own */
    cr_expect_eq(offer_from_child(other_class, -1), DBT_SHARE_OFFERED);
    cr_assert_eq(dbt_share_take(sh, t, 8), 1);
    cr_expect_eq(t[0].reg, oldest_class);
    dbt_share_detach(sh);
}

/* Redis serves the host's waiters in its own order: a permit passed past an older waiter of
 * another shape to a younger one of its own would let permits go round one shape while the other
 * waits at Redis' head (callers of limit 2 at the head held callers of limit 4 at 2 at once, in
 * clients_that_disagree with sharing on). Such a permit goes back to Redis. */
Test(hostshare, a_waiter_of_another_shape_that_waited_longer_sends_the_permit_to_redis,
     .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    dbt_share_shape a = shape_of(0, 4, ""), limit2 = shape_of(0, 2, ""), heavy = a;
    heavy.weight = 2;
    uint64_t older = dbt_share_wait_begin(sh, &limit2, 100);
    uint64_t mine = dbt_share_wait_begin(sh, &a, 500);
    cr_assert(older && mine);
    dbt_share_taken t[8];
    dbt_share_permit none;
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOT_SOLE, "past the older limit-2 waiter");
    cr_expect_eq(dbt_share_take(sh, t, 8), 0, "nothing was offered");
    /* the giver's own waiter of the shape, older than every other: it may have it */
    cr_expect_eq(offer_from_child(a, 50), DBT_SHARE_LOCAL_FIRST);
    /* the same with no waiter of the shape elsewhere: its own younger waiter may not */
    cr_expect_not(dbt_share_wait_end(sh, mine, &none));
    cr_expect_eq(offer_from_child(a, 300), DBT_SHARE_NOT_SOLE);
    cr_expect_eq(offer_from_child(a, 50), DBT_SHARE_NOBODY);
    /* a heavier waiter that waited longer: the same */
    cr_expect_not(dbt_share_wait_end(sh, older, &none));
    uint64_t heavy_reg = dbt_share_wait_begin(sh, &heavy, 100);
    mine = dbt_share_wait_begin(sh, &a, 500);
    cr_assert(heavy_reg && mine);
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOT_SOLE, "past the older weight-2 waiter");
    /* once it is served, permits of shape a pass again */
    cr_expect_not(dbt_share_wait_end(sh, heavy_reg, &none));
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    cr_assert_eq(dbt_share_take(sh, t, 8), 1);
    cr_expect_eq(t[0].reg, mine);
    dbt_share_detach(sh);
}

Test(hostshare, ties_of_t_request_go_to_the_first_registered, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t first = dbt_share_wait_begin(sh, &a, 700);
    uint64_t second = dbt_share_wait_begin(sh, &a, 700);
    cr_assert_neq(first, second);
    /* the first registration's entry freed and taken again: the second is older */
    cr_expect_not(dbt_share_wait_end(sh, first, NULL));
    uint64_t third = dbt_share_wait_begin(sh, &a, 700);
    cr_expect_neq(third, first, "a reused entry is another registration");
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    dbt_share_taken t[2];
    cr_assert_eq(dbt_share_take(sh, t, 2), 1);
    cr_expect_eq(t[0].reg, second);
    /* a stale handle names nothing */
    cr_expect_not(dbt_share_wait_end(sh, first, NULL));
    cr_expect_eq(live_regs(dbt_share_segment(sh)), 1);
    dbt_share_detach(sh);
}

Test(hostshare, not_sole_means_the_permit_goes_back_to_redis, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 4, "");
    dbt_share_wait_begin(sh, &a, 100);
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOT_SOLE);
    make_sole(sh, 0);
    cr_expect_eq(offer_from_child(shape_of(1, 4, ""), -1), DBT_SHARE_NOT_SOLE, "sole is per kind");
    cr_expect(dbt_share_foreign(sh, 0, 0));
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOT_SOLE);
    dbt_share_detach(sh);
}

/* What dbt_handover_verdict/foreign/reset decide per process, decided for the host. */
Test(hostshare, verdicts_and_foreign_tickets_in_any_order)
{
    dbt_share *sh = attach_or_die(dir);
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_verdict(sh, 0, 5, true, LEASE));
    cr_expect(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_sole(sh, 1), "kinds are apart");
    /* an older verdict, read late, changes nothing */
    cr_expect_not(dbt_share_verdict(sh, 0, 3, false, LEASE));
    cr_expect(dbt_share_sole(sh, 0));
    /* a ticket 0 verdict is no verdict */
    cr_expect_not(dbt_share_verdict(sh, 0, 0, false, LEASE));
    cr_expect(dbt_share_sole(sh, 0));
    /* another host's waiter queued before our sole verdict: it was counted already */
    cr_expect_not(dbt_share_foreign(sh, 0, 4));
    cr_expect(dbt_share_sole(sh, 0));
    /* ... after it: the end */
    cr_expect(dbt_share_foreign(sh, 0, 6));
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_foreign(sh, 0, 8), "ended already");
    /* a later verdict: sole again, unless a push about a later waiter outran it */
    cr_expect_not(dbt_share_verdict(sh, 0, 7, true, LEASE));
    cr_expect_not(dbt_share_sole(sh, 0), "the push of ticket 8 came first");
    cr_expect_not(dbt_share_verdict(sh, 0, 9, true, LEASE));
    cr_expect(dbt_share_sole(sh, 0));
    /* a renewal that found the host not the sole owner (ticket 0) ends it */
    cr_expect(dbt_share_foreign(sh, 0, 0));
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_verdict(sh, 0, 10, true, LEASE));
    /* a verdict of not sole ends it */
    cr_expect(dbt_share_verdict(sh, 0, 11, false, LEASE));
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_verdict(sh, 0, 12, true, LEASE));
    /* Redis lost its data: nothing is sole, and tickets may start again */
    dbt_share_reset(sh);
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_verdict(sh, 0, 1, true, LEASE));
    cr_expect(dbt_share_sole(sh, 0));
    /* bad kinds do nothing */
    cr_expect_not(dbt_share_sole(sh, -1));
    cr_expect_not(dbt_share_sole(sh, DBT_SHARE_KINDS));
    cr_expect_not(dbt_share_verdict(sh, 7, 99, true, LEASE));
    cr_expect_not(dbt_share_foreign(sh, -3, 99));
    dbt_share_detach(sh);
}

Test(hostshare, a_verdict_older_than_a_lease_is_history_unless_the_host_waits)
{
    dbt_share *sh = attach_or_die(dir);
    cr_expect_not(dbt_share_verdict(sh, 0, 20, true, LEASE));
    int64_t t0 = dbt_now_us();
    while (dbt_now_us() < t0 + 50)
        ; /* more than the 10 us "lease" below */
    /* a waiter of the host is registered: tickets have not restarted, 2 is old news */
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, dbt_now_us());
    cr_expect_not(dbt_share_verdict(sh, 0, 2, false, 10));
    cr_expect(dbt_share_sole(sh, 0));
    cr_expect_eq(dbt_share_segment(sh)->sole[0].verdict_ticket, 20);
    dbt_share_wait_end(sh, r, NULL);
    /* none registered: what was said a lease ago is history, ticket 2 applies */
    t0 = dbt_now_us();
    while (dbt_now_us() < t0 + 50)
        ;
    cr_expect_not(dbt_share_verdict(sh, 0, 2, true, 10));
    cr_expect(dbt_share_sole(sh, 0));
    cr_expect_eq(dbt_share_segment(sh)->sole[0].verdict_ticket, 2);
    dbt_share_detach(sh);
}

Test(hostshare, ending_a_wait_returns_the_permit_offered_to_it, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, 100);
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    cr_expect(readable(dbt_share_fd(sh), 5000), "the wake socket is readable");
    dbt_share_drain(sh);
    cr_expect_not(readable(dbt_share_fd(sh), 0), "drained");
    dbt_share_permit got;
    cr_expect(dbt_share_wait_end(sh, r, &got));
    cr_expect_str_eq(got.id, "gift");
    cr_expect_eq(got.renewed_us, 42);
    dbt_share_taken t[2];
    cr_expect_eq(dbt_share_take(sh, t, 2), 0);
    cr_expect_not(dbt_share_wait_end(sh, r, &got), "ended already");
    cr_expect_not(dbt_share_wait_end(sh, 0, &got));
    dbt_share_detach(sh);
}

/* ---- dead and stopped processes ---- */

Test(hostshare, a_receiver_killed_before_taking_is_purged_by_the_next_offer, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    const dbt_seg *g = dbt_share_segment(sh);
    waiter_args old = {.t_request_us = 100, .shape = shape_of(0, 4, "")};
    waiter_args young = {.t_request_us = 200, .shape = shape_of(0, 4, "")};
    child dead = spawn(waiter, &old), live = spawn(waiter, &young);
    char line[256];
    read_line(dead.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R');
    read_line(live.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R');
    pid_t dead_pid = dead.pid;
    kill_child(&dead);
    cr_expect_eq(regs_of_pid(g, dead_pid), 1);
    /* the oldest is the dead one: refused, purged, and the permit goes to the next */
    dbt_share_shape a = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("id-1", 5);
    cr_expect_eq(dbt_share_offer(sh, &a, &p, -1, NULL), DBT_SHARE_OFFERED);
    cr_expect_eq(regs_of_pid(g, dead_pid), 0);
    cr_expect_eq(live_procs(g), 2);
    read_line(live.from_child, line, sizeof line, 30000);
    cr_expect_eq(strncmp(line, "T id-1 5 200", 12), 0, "%s", line);
    tell(&live, 'q');
    reap(&live);
    dbt_share_detach(sh);
}

/* Another user (uid 65534) binds every name the dead process' wake socket may have had: the
 * socket file in the user's directory, and the abstract name the segment used before (any user
 * can read those in /proc/net/unix and bind one once its process died). Says what it bound
 * ("B <n>"), then waits to be killed. */
typedef struct {
    pid_t pid;
    uint64_t nonce, key_hash;
} victim;

static int other_user_binds(void *arg, int out, int in)
{
    (void)in;
    const victim *v = arg;
    if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0)
        return 1;
    int bound = 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/dbthrottle-0/" DBT_SEG_WAKE_FMT, dir, (int)v->pid,
             v->nonce);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    (void)unlink(a.sun_path);
    bound += bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    memset(a.sun_path, 0, sizeof a.sun_path);
    int n =
        snprintf(a.sun_path + 1, sizeof a.sun_path - 1,
                 "dbthrottle/0/%016" PRIx64 "/%d/%016" PRIx64, v->key_hash, (int)v->pid, v->nonce);
    int s2 = socket(AF_UNIX, SOCK_DGRAM, 0);
    bound += bind(s2, (struct sockaddr *)&a,
                  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0;
    say_line(out, "B %d", bound);
    for (;;)
        pause();
}

Test(hostshare, a_dead_receiver_stays_dead_whatever_another_user_binds, .timeout = 60)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to act as another user");
    cr_assert_eq(chmod(dir, 0755), 0); /* others may look in, as in /dev/shm */
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    const dbt_seg *g = dbt_share_segment(sh);
    waiter_args old = {.t_request_us = 100, .shape = shape_of(0, 4, "")};
    waiter_args young = {.t_request_us = 200, .shape = shape_of(0, 4, "")};
    child dead = spawn(waiter, &old), live = spawn(waiter, &young);
    char line[256];
    read_line(dead.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R');
    read_line(live.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R');
    victim v = {.pid = dead.pid, .key_hash = g->key_hash};
    for (uint32_t i = 0; i < g->proc_hw; i++)
        if (g->procs[i].pid == dead.pid)
            v.nonce = g->procs[i].nonce;
    kill_child(&dead);
    child other = spawn(other_user_binds, &v);
    read_line(other.from_child, line, sizeof line, 30000);
    cr_log_info("the other user: %s", line);
    cr_assert_eq(line[0], 'B', "the other user said %s", line);
    /* the oldest is the dead one: found dead, purged, and the permit goes to the live one */
    dbt_share_shape a = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("id-1", 5);
    cr_expect_eq(dbt_share_offer(sh, &a, &p, -1, NULL), DBT_SHARE_OFFERED);
    cr_expect_eq(regs_of_pid(g, v.pid), 0, "the dead one's registration is gone");
    read_line(live.from_child, line, sizeof line, 5000);
    cr_expect_eq(strncmp(line, "T id-1 5 200", 12), 0, "the live waiter got: %s", line);
    kill_child(&other);
    tell(&live, 'q');
    reap(&live);
    dbt_share_detach(sh);
}

/* At exit a process only leaves (its other threads may still call): its socket's file goes then,
 * even when the attachment had broken (poisoned by another), or it would stay for nobody. */
Test(hostshare, leaving_a_broken_attachment_removes_its_socket_file)
{
    dbt_share *sh = attach_or_die(dir);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test -S %s/dbthrottle-%u/w.%d.*", dir, (unsigned)geteuid(),
             (int)getpid());
    cr_assert_eq(system(cmd), 0, "its socket file is there");
    atomic_store(&dbt_share_segment(sh)->poisoned, SEG_POISONED);
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_assert(dbt_share_broken(sh));
    dbt_share_leave(sh);
    cr_expect_neq(system(cmd), 0, "its socket file went as it left");
    dbt_share_detach(sh);
}

Test(hostshare, purge_dead_removes_the_records_of_killed_processes, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    const dbt_seg *g = dbt_share_segment(sh);
    waiter_args wa = {.shape = shape_of(1, 4, "")};
    child a = spawn(waiter, &wa), b = spawn(waiter, &wa);
    char line[256];
    read_line(a.from_child, line, sizeof line, 30000);
    read_line(b.from_child, line, sizeof line, 30000);
    cr_assert_eq(live_procs(g), 3);
    pid_t apid = a.pid;
    kill_child(&a);
    dbt_share_purge_dead(sh);
    cr_expect_not(dbt_share_broken(sh));
    cr_expect_eq(live_procs(g), 2);
    cr_expect_eq(regs_of_pid(g, apid), 0);
    cr_expect_eq(regs_of_pid(g, b.pid), 1, "the live one stays, and was not woken for it");
    char sock[PATH_MAX];
    snprintf(sock, sizeof sock, "%s/dbthrottle-%u/w.%d.", dir, (unsigned)geteuid(), (int)apid);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls %s* 2>/dev/null)\"", sock);
    cr_expect_eq(system(cmd), 0, "the killed one's socket file went with its record");
    tell(&b, 'q');
    read_line(b.from_child, line, sizeof line, 30000);
    cr_expect_str_eq(line, "E 0 -");
    reap(&b);
    dbt_share_purge_dead(sh);
    cr_expect_eq(live_procs(g), 1);
    dbt_share_detach(sh);
}

Test(hostshare, a_process_killed_holding_the_lock_leaves_the_segment_usable, .timeout = 60)
{
    for (int dirty = 0; dirty < 2; dirty++) {
        dbt_share *sh = attach_or_die(dir);
        make_sole(sh, 0);
        const dbt_seg *g = dbt_share_segment(sh);
        child h = spawn(lock_holder, dirty ? "dirty" : NULL);
        char line[16];
        read_line(h.from_child, line, sizeof line, 30000);
        cr_assert_str_eq(line, "L");
        pid_t hpid = h.pid;
        /* dead, but not reaped yet (a zombie: still there to kill(pid, 0)) */
        kill(hpid, SIGKILL);
        siginfo_t info;
        cr_assert_eq(waitid(P_PID, (id_t)hpid, &info, WEXITED | WNOWAIT), 0);
        /* the next locker takes the lock over, repairs and goes on */
        dbt_share_shape a = shape_of(0, 4, "");
        uint64_t r = dbt_share_wait_begin(sh, &a, 100);
        cr_expect_not(dbt_share_broken(sh), "%s", dbt_share_why(sh));
        reap(&h);
        cr_expect_eq(live_regs(g), 1);
        if (dirty) {
            /* killed half-way through an update: its record dropped, the sole state reset */
            cr_expect_eq(live_procs(g), 1);
            cr_expect_not(dbt_share_sole(sh, 0));
        } else {
            cr_expect_eq(live_procs(g), 2);
            cr_expect(dbt_share_sole(sh, 0));
            dbt_share_purge_dead(sh);
            cr_expect_eq(live_procs(g), 1, "pid %d purged", (int)hpid);
        }
        make_sole(sh, 0);
        cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
        dbt_share_permit got;
        cr_expect(dbt_share_wait_end(sh, r, &got));
        cr_expect_not(dbt_share_broken(sh));
        dbt_share_detach(sh);
    }
}

/* The lock word names its holder by thread id, which a thread asks of the kernel once: a child
 * fork()ed by a thread that used the lock is another thread, and its lock word names it (a child
 * that kept its parent's thread's id took the lock under that id: the parent's thread, finding
 * its own id there, judged the segment damaged and poisoned it for the host). */
/* The child: locks, says its thread id, holds the lock until told, unlocks. */
static int locker_saying_its_tid(void *arg, int out, int in)
{
    dbt_share *sh = arg;
    if (dbt_share_lock(sh) != 0)
        return 1;
    say_line(out, "%ld", (long)gettid());
    (void)wait_word(in); /* held until the parent has looked */
    dbt_share_unlock(sh);
    return dbt_share_broken(sh) ? 2 : 0;
}

Test(hostshare, a_child_forked_by_a_locker_locks_under_its_own_id, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    cr_assert_eq(dbt_share_lock(sh), 0); /* this thread's id is asked now */
    dbt_share_unlock(sh);
    const dbt_seg *g = dbt_share_segment(sh);
    child c = spawn(locker_saying_its_tid, sh);
    char line[32];
    read_line(c.from_child, line, sizeof line, 30000);
    cr_assert_neq(line[0], '\0', "the child did not take the lock");
    uint32_t holder = atomic_load(&((dbt_seg *)g)->lock) & UINT32_C(0x3fffffff);
    cr_expect_eq(holder, (uint32_t)strtol(line, NULL, 10) & UINT32_C(0x3fffffff),
                 "the lock word names %u, the child's thread is %s (this one %ld)", holder, line,
                 (long)gettid());
    tell(&c, 'x');
    int status = reap(&c);
    cr_expect_eq(status, 0, "child status %d", status);
    cr_expect(dbt_share_lock(sh) == 0 && !dbt_share_broken(sh), "%s", dbt_share_why(sh));
    dbt_share_unlock(sh);
    dbt_share_detach(sh);
}

Test(hostshare, a_process_stopped_holding_the_lock_breaks_the_attachment_in_time, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    char old_group[DBT_SHARE_GROUP_LEN];
    snprintf(old_group, sizeof old_group, "%s", dbt_share_group(sh));
    child h = spawn(lock_holder, NULL);
    char line[16];
    read_line(h.from_child, line, sizeof line, 30000);
    cr_assert_str_eq(line, "L");
    kill(h.pid, SIGSTOP);
    int64_t t0 = dbt_now_us();
    cr_expect_not(dbt_share_sole(sh, 0));
    int64_t took = dbt_now_us() - t0;
    cr_expect_lt(took, 2000000, "returned after %lld us", (long long)took);
    cr_expect_geq(took, DBT_SHARE_LOCK_TIMEOUT_MS * 1000 - 1000);
    cr_expect(dbt_share_broken(sh));
    cr_expect(strstr(dbt_share_why(sh), "not free") != NULL, "%s", dbt_share_why(sh));
    cr_expect_eq(dbt_share_fd(sh), -1);
    /* every call now does nothing, at once */
    t0 = dbt_now_us();
    dbt_share_shape a = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("x", 1);
    cr_expect_eq(dbt_share_offer(sh, &a, &p, -1, NULL), DBT_SHARE_NOT_SOLE);
    uint64_t r = dbt_share_wait_begin(sh, &a, 1);
    cr_expect_neq(r, 0);
    cr_expect_not(dbt_share_wait_end(sh, r, &p));
    cr_expect_lt(dbt_now_us() - t0, 100000);
    /* a new attachment rebuilds the poisoned segment: another group */
    dbt_share *again = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(again), old_group);
    cr_expect_not(dbt_share_sole(again, 0));
    cr_expect_not(dbt_share_broken(again));
    kill_child(&h);
    dbt_share_detach(sh);
    dbt_share_detach(again);
}

/* ---- damage ---- */

/* A peer process attached and waiting: on 'c' it makes calls and says whether its attachment
 * broke ("B") or still works ("W"); on 'q' it detaches and exits. */
static int peer(void *arg, int out, int in)
{
    (void)arg;
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        return 1;
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, 50);
    say_line(out, "R");
    for (;;) {
        char c = wait_word(in);
        if (c == 'c') {
            dbt_share_taken t[4];
            dbt_share_take(sh, t, 4);
            dbt_share_sole(sh, 0);
            dbt_share_permit p;
            dbt_share_wait_end(sh, r, &p);
            r = dbt_share_wait_begin(sh, &a, 60);
            dbt_share_purge_dead(sh);
            say_line(out, "%s", dbt_share_broken(sh) ? "B" : "W");
        } else {
            dbt_share_detach(sh);
            return 0;
        }
    }
}

typedef void (*damage_fn)(dbt_seg *g, const char *path, pid_t peer_pid);

/* Writes damage into the segment while two processes are attached: no call crashes or blocks
 * past the lock's timeout, each returns its "nothing happened" value, both attachments see the
 * damage, and a fresh attach works (rebuilt, with another group). */
static void damage_case(damage_fn damage)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    char old_group[DBT_SHARE_GROUP_LEN];
    snprintf(old_group, sizeof old_group, "%s", dbt_share_group(sh));
    child pr = spawn(peer, NULL);
    char line[16];
    read_line(pr.from_child, line, sizeof line, 30000);
    cr_assert_str_eq(line, "R");

    damage(dbt_share_segment(sh), dbt_share_path(sh), pr.pid);

    int64_t t0 = dbt_now_us();
    dbt_share_shape a = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("p", 1);
    cr_expect_eq(dbt_share_offer(sh, &a, &p, -1, NULL), DBT_SHARE_NOT_SOLE);
    cr_expect_not(dbt_share_sole(sh, 0));
    uint64_t r = dbt_share_wait_begin(sh, &a, 1);
    cr_expect_not(dbt_share_wait_end(sh, r, &p));
    dbt_share_taken t[4];
    cr_expect_eq(dbt_share_take(sh, t, 4), 0);
    cr_expect_not(dbt_share_verdict(sh, 0, 999999, true, LEASE));
    cr_expect_not(dbt_share_foreign(sh, 0, 999999));
    dbt_share_reset(sh);
    dbt_share_wake_all(sh);
    dbt_share_purge_dead(sh);
    dbt_share_drain(sh);
    cr_expect(dbt_share_broken(sh), "damage not seen");
    cr_expect(strstr(dbt_share_why(sh), dbt_share_path(sh)) != NULL, "%s", dbt_share_why(sh));
    cr_expect_lt(dbt_now_us() - t0, 2000000);

    tell(&pr, 'c');
    read_line(pr.from_child, line, sizeof line, 30000);
    cr_expect_str_eq(line, "B", "the other process saw it too");
    tell(&pr, 'q');
    cr_expect_eq(reap(&pr), 0, "the peer did not crash");

    dbt_share *fresh = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(fresh), old_group, "rebuilt");
    uint64_t fr = dbt_share_wait_begin(fresh, &a, 5);
    cr_expect_not(dbt_share_wait_end(fresh, fr, &p));
    cr_expect_not(dbt_share_broken(fresh));
    dbt_share_detach(fresh);
    dbt_share_detach(sh);
}

static void random_bytes(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)g;
    (void)peer_pid;
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    static char buf[sizeof(dbt_seg)];
    for (size_t off = 0, n; off < sizeof buf; off += n) {
        n = sizeof buf - off < 256 ? sizeof buf - off : 256;
        cr_assert_eq(getrandom(buf + off, n, 0), (ssize_t)n);
    }
    cr_assert_eq(pwrite(fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    close(fd);
}

static void cut_short(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)g;
    (void)peer_pid;
    /* an access past the new end would be a SIGBUS: the calls must see the size first */
    cr_assert_eq(truncate(path, 0), 0);
}

static void zeroed_header(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    memset(g, 0, offsetof(dbt_seg, procs));
}

static void another_version(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    g->version = DBT_SEG_VERSION + 1;
}

static void huge_high_water(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    g->reg_hw = UINT32_MAX;
}

static void huge_unregistered_count(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    for (uint32_t i = 0; i < g->proc_hw; i++)
        if (g->procs[i].pid == peer_pid)
            g->procs[i].unregistered = UINT32_MAX;
}

static void registration_of_no_process(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    g->regs[0].proc = 200000;
}

static void unterminated_class(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    for (uint32_t i = 0; i < g->reg_hw; i++)
        memset(g->regs[i].klass, 'x', sizeof g->regs[i].klass);
}

static void unknown_state(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    g->regs[0].state = 0x41414141;
}

static void locked_by_a_live_thread(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    /* the peer's main thread: alive, and never to unlock it */
    atomic_store(&g->lock, (uint32_t)peer_pid);
}

static void locked_by_this_thread(dbt_seg *g, const char *path, pid_t peer_pid)
{
    (void)path;
    (void)peer_pid;
    atomic_store(&g->lock, (uint32_t)getpid() | 0x80000000u);
}

Test(hostshare, random_bytes_over_the_segment, .timeout = 60)
{
    damage_case(random_bytes);
}

Test(hostshare, a_segment_cut_short, .timeout = 60)
{
    damage_case(cut_short);
}

Test(hostshare, a_zeroed_header, .timeout = 60)
{
    damage_case(zeroed_header);
}

Test(hostshare, a_header_of_another_version, .timeout = 60)
{
    damage_case(another_version);
}

Test(hostshare, a_huge_high_water_mark, .timeout = 60)
{
    damage_case(huge_high_water);
}

Test(hostshare, a_huge_unregistered_count, .timeout = 60)
{
    damage_case(huge_unregistered_count);
}

Test(hostshare, a_registration_of_no_process, .timeout = 60)
{
    damage_case(registration_of_no_process);
}

Test(hostshare, an_unterminated_class, .timeout = 60)
{
    damage_case(unterminated_class);
}

Test(hostshare, an_unknown_registration_state, .timeout = 60)
{
    damage_case(unknown_state);
}

Test(hostshare, a_lock_word_held_by_a_live_thread, .timeout = 60)
{
    damage_case(locked_by_a_live_thread);
}

Test(hostshare, a_lock_word_naming_the_caller, .timeout = 60)
{
    damage_case(locked_by_this_thread);
}

/* A lock word naming a thread that is gone (a holder that died without its waiters seeing it, or
 * garbage): taken over, repaired, and the call works. */
Test(hostshare, a_lock_word_naming_a_dead_thread_is_taken_over, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    atomic_store(&dbt_share_segment(sh)->lock, (uint32_t)dead);
    int64_t t0 = dbt_now_us();
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, 5);
    cr_expect_not(dbt_share_broken(sh), "%s", dbt_share_why(sh));
    cr_expect_lt(dbt_now_us() - t0, DBT_SHARE_LOCK_TIMEOUT_MS * 1000, "not a timeout");
    cr_expect_eq(live_regs(dbt_share_segment(sh)), 1);
    cr_expect_eq(atomic_load(&dbt_share_segment(sh)->lock), 0, "let go");
    cr_expect_not(dbt_share_wait_end(sh, r, NULL));
    dbt_share_detach(sh);
}

Test(hostshare, a_segment_of_the_wrong_size_or_unterminated_key_is_rebuilt)
{
    dbt_share *sh = attach_or_die(dir);
    char old_group[DBT_SHARE_GROUP_LEN], path[256];
    snprintf(old_group, sizeof old_group, "%s", dbt_share_group(sh));
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    memset(dbt_share_segment(sh)->key, 'k', DBT_SEG_KEY_MAX);
    dbt_share *b = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(b), old_group);
    dbt_share_sole(sh, 0);
    cr_expect(dbt_share_broken(sh), "the old one is poisoned");
    dbt_share_detach(sh);
    snprintf(old_group, sizeof old_group, "%s", dbt_share_group(b));
    cr_assert_eq(truncate(path, 4096), 0);
    dbt_share *c = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(c), old_group);
    dbt_share_purge_dead(b);
    cr_expect(dbt_share_broken(b), "its file was replaced");
    cr_expect(strstr(dbt_share_why(b), "replaced") != NULL, "%s", dbt_share_why(b));
    dbt_share_detach(b);
    dbt_share_detach(c);
}

/* Calls everything for `arg` microseconds, attaching again whenever the attachment breaks: a
 * process of a host whose segment is being written garbage into. */
static int busy_process(void *arg, int out, int in)
{
    (void)out;
    (void)in;
    int64_t until = dbt_now_us() + (int64_t)(intptr_t)arg;
    dbt_share *sh = NULL;
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t reg = 0, ticket = 1;
    char id[32];
    snprintf(id, sizeof id, "storm-%d", (int)getpid());
    while (dbt_now_us() < until) {
        if (!sh || dbt_share_broken(sh)) {
            dbt_share_detach(sh);
            sh = dbt_share_attach(dir, KEY, NULL, 0);
            reg = 0;
            if (!sh)
                continue;
        }
        dbt_share_verdict(sh, 0, ++ticket, true, LEASE);
        if (!reg)
            reg = dbt_share_wait_begin(sh, &a, dbt_now_us());
        dbt_share_permit p = permit_of(id, 1);
        dbt_share_offer(sh, &a, &p, -1, NULL);
        dbt_share_drain(sh);
        dbt_share_taken t[4];
        if (dbt_share_take(sh, t, 4) > 0)
            reg = 0;
        dbt_share_sole(sh, 0);
        if (ticket % 8 == 0) {
            dbt_share_wait_end(sh, reg, &p);
            reg = 0;
            dbt_share_foreign(sh, 0, ticket);
            dbt_share_purge_dead(sh);
            dbt_share_wake_all(sh);
        }
    }
    dbt_share_detach(sh);
    return 0;
}

Test(hostshare, garbage_written_while_processes_work_crashes_none, .timeout = 120)
{
    enum { WORKERS = 4 };
    const int64_t storm_us = 1500000;
    dbt_share *sh = attach_or_die(dir);
    char path[256];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    dbt_share_detach(sh);
    child kids[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        kids[i] = spawn(busy_process, (void *)(intptr_t)(storm_us + 500000));
    /* a few bytes at a time, anywhere (half of them in the header and the lock), in whichever
     * segment the name holds now (the workers rebuild it) */
    unsigned seed = (unsigned)getpid();
    int writes = 0;
    for (int64_t until = dbt_now_us() + storm_us; dbt_now_us() < until; writes++) {
        int fd = open(path, O_WRONLY | O_NOFOLLOW);
        if (fd >= 0) {
            unsigned char junk[16];
            size_t n = 1 + (size_t)rand_r(&seed) % sizeof junk;
            for (size_t i = 0; i < n; i++)
                junk[i] = (unsigned char)rand_r(&seed);
            size_t span = rand_r(&seed) % 2 ? offsetof(dbt_seg, procs) : sizeof(dbt_seg);
            off_t at = (off_t)((size_t)rand_r(&seed) % (span - n));
            (void)!pwrite(fd, junk, n, at);
            close(fd);
        }
        poll(NULL, 0, rand_r(&seed) % 2); /* pace: up to a write a millisecond */
    }
    for (int i = 0; i < WORKERS; i++) {
        int st = reap(&kids[i]); /* a signal is 128 + its number */
        cr_expect_eq(st, 0, "worker %d ended with %d", i, st);
    }
    cr_expect_gt(writes, 100);
    /* the host shares again once the garbage stops */
    char why[512];
    dbt_share *fresh = NULL;
    for (int i = 0; i < 5 && !fresh; i++)
        fresh = dbt_share_attach(dir, KEY, why, sizeof why);
    cr_assert_not_null(fresh, "%s", why);
    /* what the workers (and the garbage) left: their tickets, records the garbage renamed */
    dbt_share_reset(fresh);
    dbt_share_purge_dead(fresh);
    make_sole(fresh, 0);
    cr_expect_not(dbt_share_broken(fresh), "%s", dbt_share_why(fresh));
    dbt_share_detach(fresh);
}

/* ---- the table full ---- */

Test(hostshare, waiters_the_table_cannot_hold_keep_the_host_from_being_sole, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    dbt_share_shape a = shape_of(0, 4, "");
    static uint64_t regs[DBT_SEG_REGS];
    for (int i = 0; i < DBT_SEG_REGS; i++)
        regs[i] = dbt_share_wait_begin(sh, &a, 1000 + i);
    const dbt_seg *g = dbt_share_segment(sh);
    cr_assert_eq(live_regs(g), DBT_SEG_REGS);
    cr_expect(dbt_share_sole(sh, 0));
    uint64_t extra = dbt_share_wait_begin(sh, &a, 5000);
    uint64_t extra2 = dbt_share_wait_begin(sh, &a, 5001);
    cr_expect_neq(extra, 0);
    cr_expect_not(dbt_share_sole(sh, 0), "a waiter the segment does not know");
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_NOT_SOLE);
    cr_expect_not(dbt_share_wait_end(sh, extra, NULL));
    cr_expect_not(dbt_share_sole(sh, 0), "one is left");
    cr_expect_not(dbt_share_wait_end(sh, extra2, NULL));
    cr_expect(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_wait_end(sh, extra2, NULL), "counted down once only... ");
    cr_expect(dbt_share_sole(sh, 0));
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    dbt_share_taken t[2];
    cr_assert_eq(dbt_share_take(sh, t, 2), 1);
    cr_expect_eq(t[0].reg, regs[0]);
    /* the high-water mark follows the table down */
    for (int i = 1; i < DBT_SEG_REGS; i++)
        dbt_share_wait_end(sh, regs[i], NULL);
    cr_expect_eq(g->reg_hw, 0);
    dbt_share_detach(sh);
}

/* ---- fork ---- */

static int forked_child_check(dbt_share *sh, uint64_t parents_reg, pid_t parent, bool told)
{
    const dbt_seg *g = dbt_share_segment(sh);
    if (told) {
        dbt_share_after_fork(sh);
        if (dbt_share_fd(sh) != -1)
            return 1; /* the parent's socket is not the child's */
    }
    if (dbt_share_wait_end(sh, parents_reg, NULL) || regs_of_pid(g, parent) != 1)
        return 2; /* the parent's registration is not the child's to end */
    dbt_share_taken t[2];
    if (dbt_share_take(sh, t, 2) != 0)
        return 3;
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t mine = dbt_share_wait_begin(sh, &a, 10);
    if (dbt_share_broken(sh) || regs_of_pid(g, getpid()) != 1 || live_procs(g) != 2)
        return 4; /* a record of its own */
    if (dbt_share_fd(sh) < 0)
        return 5;
    if (dbt_share_wait_end(sh, mine, NULL) || regs_of_pid(g, getpid()) != 0)
        return 6;
    if (regs_of_pid(g, parent) != 1)
        return 7;
    dbt_share_detach(sh);
    return 0;
}

Test(hostshare, a_forked_child_is_a_process_of_its_own, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, 10);
    int parent_fd = dbt_share_fd(sh);
    for (int told = 0; told < 2; told++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(forked_child_check(sh, r, getppid(), told));
        int st;
        waitpid(pid, &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %s after_fork: status %d",
                  told ? "with" : "without", st);
    }
    const dbt_seg *g = dbt_share_segment(sh);
    cr_expect_eq(live_procs(g), 1);
    cr_expect_eq(live_regs(g), 1);
    cr_expect_eq(dbt_share_fd(sh), parent_fd);
    make_sole(sh, 0);
    cr_expect_eq(offer_from_child(a, -1), DBT_SHARE_OFFERED);
    cr_expect(readable(parent_fd, 5000), "the parent's socket still wakes it");
    dbt_share_permit got;
    cr_expect(dbt_share_wait_end(sh, r, &got));
    dbt_share_detach(sh);
}

Test(hostshare, a_child_forked_while_the_parent_holds_the_lock_does_not_wait_for_it, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    int up[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(dbt_share_lock(sh), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int64_t t0 = dbt_now_us();
        dbt_share_after_fork(sh);
        char c = dbt_now_us() - t0 < 50000 ? 'A' : 'a';
        (void)!write(up[1], &c, 1);
        /* its first call waits for the parent's unlock, then makes a record of its own */
        dbt_share_shape a = shape_of(0, 4, "");
        uint64_t r = dbt_share_wait_begin(sh, &a, 10);
        c = !dbt_share_broken(sh) && regs_of_pid(dbt_share_segment(sh), getpid()) == 1 ? 'R' : 'r';
        dbt_share_wait_end(sh, r, NULL);
        dbt_share_detach(sh);
        (void)!write(up[1], &c, 1);
        _exit(0);
    }
    close(up[1]);
    cr_expect_eq(wait_word(up[0]), 'A', "after_fork returned at once");
    dbt_share_unlock(sh);
    cr_expect_eq(wait_word(up[0]), 'R', "the child registered once the lock was free");
    int st;
    waitpid(pid, &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_expect_not(dbt_share_broken(sh));
    cr_expect_eq(live_procs(dbt_share_segment(sh)), 1);
    close(up[0]);
    dbt_share_detach(sh);
}

/* ---- removal by the last process ---- */

/* The entries of this user's segment directory in d (-1: none). */
static int entries_in(const char *d)
{
    char sub[128];
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", d, (unsigned)geteuid());
    DIR *dd = opendir(sub);
    if (!dd)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dd)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(dd);
    return n;
}

Test(hostshare, the_last_process_to_detach_removes_the_segment, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    char path[PATH_MAX], line[128];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    child c = spawn(report_group, dir); /* attaches and detaches */
    read_line(c.from_child, line, sizeof line, 30000);
    cr_assert_eq(reap(&c), 0);
    cr_expect_eq(access(path, F_OK), 0, "%s went while this process still uses it", path);
    /* A process killed while attached leaves its record: it must not keep the file for nobody. */
    waiter_args wa = {.shape = shape_of(0, 4, "")};
    child w = spawn(waiter, &wa);
    read_line(w.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R', "the waiter said %s", line);
    kill_child(&w);
    cr_expect_eq(live_procs(dbt_share_segment(sh)), 2, "the killed waiter's record is there");
    dbt_share_detach(sh);
    cr_expect_neq(access(path, F_OK), 0, "the last process to detach left %s", path);
    cr_expect_eq(entries_in(dir), 0, "files left in the segment directory");
    /* The pool's next process makes it anew, and removes it in turn. */
    dbt_share *again = attach_or_die(dir);
    cr_expect_eq(access(path, F_OK), 0);
    dbt_share_detach(again);
    cr_expect_eq(entries_in(dir), 0);
}

/* A fork()ed child of a process attached to the segment at path (group G): it maps the segment
 * but has no record yet, as a process that opened the file just before its name went. Once told
 * (the parent, the only record, has detached) it says 'B' if its next call gave the retired
 * segment up, 'N' if it then attached to a new segment with another group, 'G' if it removed that
 * one as its last process. */
typedef struct {
    dbt_share *sh;
    char path[PATH_MAX];
    char group[DBT_SHARE_GROUP_LEN];
} retired_args;

static int forked_before_retire(void *arg, int out, int in)
{
    retired_args *a = arg;
    dbt_share_after_fork(a->sh);
    (void)wait_word(in);
    bool ready = dbt_share_ready(a->sh);
    char c =
        !ready && dbt_share_broken(a->sh) && strstr(dbt_share_why(a->sh), "retired") ? 'B' : 'b';
    (void)!write(out, &c, 1);
    dbt_share_detach(a->sh);
    dbt_share *fresh = dbt_share_attach(dir, KEY, NULL, 0);
    c = fresh && !dbt_share_broken(fresh) && strcmp(dbt_share_group(fresh), a->group) != 0 &&
                access(a->path, F_OK) == 0
            ? 'N'
            : 'n';
    (void)!write(out, &c, 1);
    dbt_share_detach(fresh);
    c = access(a->path, F_OK) != 0 ? 'G' : 'g';
    (void)!write(out, &c, 1);
    return 0;
}

Test(hostshare, a_child_forked_before_the_last_detach_attaches_anew, .timeout = 60)
{
    retired_args a = {.sh = attach_or_die(dir)};
    snprintf(a.path, sizeof a.path, "%s", dbt_share_path(a.sh));
    snprintf(a.group, sizeof a.group, "%s", dbt_share_group(a.sh));
    child c = spawn(forked_before_retire, &a);
    dbt_share_detach(a.sh); /* the only record: the segment is retired */
    cr_expect_neq(access(a.path, F_OK), 0, "the last record's detach left %s", a.path);
    tell(&c, 'x');
    cr_expect_eq(wait_word(c.from_child), 'B', "the child's next call gave the retired segment up");
    cr_expect_eq(wait_word(c.from_child), 'N', "the child attached to a new segment (a new group)");
    cr_expect_eq(wait_word(c.from_child), 'G', "the child, the new segment's last, removed it");
    cr_expect_eq(reap(&c), 0);
}

Test(hostshare, a_segment_whose_name_went_is_left_at_the_next_call, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    char path[PATH_MAX], group[DBT_SHARE_GROUP_LEN];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    snprintf(group, sizeof group, "%s", dbt_share_group(sh));
    cr_assert_eq(unlink(path),
                 0); /* an operator's rm, or a retire that removed a newer one's name */
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t r = dbt_share_wait_begin(sh, &a, 10);
    cr_expect(dbt_share_broken(sh), "a call on a segment nobody can find went on");
    cr_expect(strstr(dbt_share_why(sh), "removed") != NULL, "why: %s", dbt_share_why(sh));
    dbt_share_wait_end(sh, r, NULL);
    dbt_share *fresh = attach_or_die(dir);
    cr_expect_str_neq(dbt_share_group(fresh), group, "the next attach made a new segment");
    cr_expect_eq(access(path, F_OK), 0);
    dbt_share_detach(sh);
    dbt_share_detach(fresh);
    cr_expect_eq(entries_in(dir), 0);
}

Test(hostshare, temp_files_of_dead_creators_are_removed)
{
    dbt_share *sh = attach_or_die(dir);
    char path[256], sub[256], temp[320];
    snprintf(path, sizeof path, "%s", dbt_share_path(sh));
    snprintf(sub, sizeof sub, "%s", path);
    *strrchr(sub, '/') = '\0';
    dbt_share_detach(sh);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(temp, sizeof temp, "%s/.tmp.%d.0123456789abcdef", sub, (int)dead);
    cr_assert_geq(open(temp, O_CREAT | O_RDWR, 0600), 0);
    char live_temp[320];
    snprintf(live_temp, sizeof live_temp, "%s/.tmp.%d.0123456789abcdef", sub, (int)getppid());
    cr_assert_geq(open(live_temp, O_CREAT | O_RDWR, 0600), 0);
    cr_assert_neq(access(path, F_OK),
                  0); /* gone with its last process: the next attach makes one */
    sh = attach_or_die(dir);
    cr_expect_neq(access(temp, F_OK), 0, "a dead creator's temp file is gone");
    cr_expect_eq(access(live_temp, F_OK), 0, "a live one's stays");
    unlink(live_temp);
    dbt_share_detach(sh);
}

/* ---- many processes ---- */

enum { STRESS_PROCS = 64, STRESS_PERMITS = 16, STRESS_ROUNDS = 150 };

/* Holds the permit arg names (if any), and for STRESS_ROUNDS rounds waits (one registration at a
 * time), takes what is offered to it and offers what it holds at random; then ends its wait and
 * says every id it holds, then "END <offers made>". */
static int stress_worker(void *arg, int out, int in)
{
    (void)in;
    int me = (int)(intptr_t)arg;
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        return 1;
    char held[STRESS_PERMITS][DBT_SHARE_ID_MAX];
    int nheld = 0, offers = 0;
    if (me < STRESS_PERMITS)
        snprintf(held[nheld++], DBT_SHARE_ID_MAX, "permit-%d", me);
    dbt_share_shape a = shape_of(0, 4, "");
    uint64_t reg = 0;
    unsigned seed = (unsigned)getpid();
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        if (!reg)
            reg = dbt_share_wait_begin(sh, &a, dbt_now_us());
        if (nheld > 0 && rand_r(&seed) % 2) {
            dbt_share_permit p = permit_of(held[nheld - 1], round);
            dbt_share_offer_result res = dbt_share_offer(sh, &a, &p, -1, NULL);
            if (res == DBT_SHARE_OFFERED) {
                nheld--;
                offers++;
            } else if (res != DBT_SHARE_NOBODY) {
                return 3;
            }
        }
        if (readable(dbt_share_fd(sh), (int)(rand_r(&seed) % 3)))
            dbt_share_drain(sh);
        dbt_share_taken t[4];
        int n = dbt_share_take(sh, t, 4);
        for (int i = 0; i < n; i++) {
            if (t[i].reg != reg || nheld == STRESS_PERMITS)
                return 4;
            snprintf(held[nheld++], DBT_SHARE_ID_MAX, "%s", t[i].permit.id);
            reg = 0;
        }
        if (dbt_share_broken(sh))
            return 5;
    }
    dbt_share_permit last;
    if (reg && dbt_share_wait_end(sh, reg, &last))
        snprintf(held[nheld++], DBT_SHARE_ID_MAX, "%s", last.id);
    for (int i = 0; i < nheld; i++)
        say_line(out, "%s", held[i]);
    say_line(out, "END %d", offers);
    dbt_share_detach(sh);
    return 0;
}

Test(hostshare, many_processes_pass_permits_and_none_is_lost_or_doubled, .timeout = 180)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    static child kids[STRESS_PROCS];
    for (int i = 0; i < STRESS_PROCS; i++)
        kids[i] = spawn(stress_worker, (void *)(intptr_t)i);
    int seen[STRESS_PERMITS] = {0}, offers = 0, strays = 0;
    for (int i = 0; i < STRESS_PROCS; i++) {
        char line[256];
        for (;;) {
            read_line(kids[i].from_child, line, sizeof line, 120000);
            int n, k;
            if (sscanf(line, "END %d", &n) == 1) {
                offers += n;
                break;
            }
            if (sscanf(line, "permit-%d", &k) == 1 && k >= 0 && k < STRESS_PERMITS)
                seen[k]++;
            else {
                strays++;
                break;
            }
        }
        cr_expect_eq(reap(&kids[i]), 0, "worker %d", i);
    }
    cr_expect_eq(strays, 0);
    for (int k = 0; k < STRESS_PERMITS; k++)
        cr_expect_eq(seen[k], 1, "permit-%d held by %d processes at the end", k, seen[k]);
    cr_expect_gt(offers, STRESS_PERMITS, "permits moved between processes (%d offers)", offers);
    const dbt_seg *g = dbt_share_segment(sh);
    cr_expect_eq(live_regs(g), 0);
    cr_expect_eq(live_procs(g), 1);
    cr_expect_not(dbt_share_broken(sh));
    dbt_share_detach(sh);
}

/* ---- wakes that find no room ---- */

/* Attaches, registers one waiter of kind 0, limit 4 since `arg` us, says "R", and never reads its
 * wake socket (a process whose poller is busy elsewhere); on 'q' ends its wait and says "E <1 if
 * a permit came>". */
static int deaf_waiter(void *arg, int out, int in)
{
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        return 1;
    dbt_share_shape shape = shape_of(0, 4, "");
    uint64_t reg = dbt_share_wait_begin(sh, &shape, *(const int64_t *)arg);
    say_line(out, "R");
    char c;
    (void)!read(in, &c, 1);
    dbt_share_permit got;
    say_line(out, "E %d", dbt_share_wait_end(sh, reg, &got));
    dbt_share_detach(sh);
    return 0;
}

/* A wake that cannot be sent (the receiver's queue is full: EAGAIN) does not tell the receiver:
 * the offer takes its permit back and goes to the next waiter, never reports OFFERED for a
 * permit nobody will be told of (it would sit there until its lease ran out). */
Test(hostshare, an_offer_whose_wake_finds_no_room_goes_to_the_next_waiter, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    make_sole(sh, 0);
    int64_t older = dbt_now_us() - 1000;
    child deaf = spawn(deaf_waiter, &older);
    char line[256];
    read_line(deaf.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R', "%s", line);
    /* The deaf process' queue fills (net.unix.max_dgram_qlen is far below this). */
    for (int i = 0; i < 1000; i++)
        dbt_share_wake_all(sh);
    /* A process that reads its socket waits too, behind the deaf one. */
    waiter_args wa = {.t_request_us = dbt_now_us(), .shape = shape_of(0, 4, "")};
    child w = spawn(waiter, &wa);
    read_line(w.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R', "%s", line);

    dbt_share_shape shape = shape_of(0, 4, "");
    dbt_share_permit p = permit_of("0123456789abcdef:q:4:18:beef", 7);
    cr_expect_eq(dbt_share_offer(sh, &shape, &p, -1, NULL), DBT_SHARE_OFFERED);
    read_line(w.from_child, line, sizeof line, 10000);
    char id[200];
    cr_expect_eq(sscanf(line, "T %199s", id), 1, "the listening waiter got nothing: '%s'", line);
    tell(&deaf, 'q');
    read_line(deaf.from_child, line, sizeof line, 30000);
    cr_expect_str_eq(line, "E 0", "the deaf waiter was offered the permit");
    tell(&w, 'q');
    cr_expect_eq(reap(&w), 0);
    cr_expect_eq(reap(&deaf), 0);
    cr_expect_not(dbt_share_broken(sh));
    dbt_share_detach(sh);
}

/* Wakes for the end of the host's sole state go only to processes with waiting threads: one that
 * waits for nothing does not read its socket, and datagrams left unread there are charged to the
 * sender's send buffer until its offers cannot be sent any more. */
static int idle_process(void *arg, int out, int in)
{
    (void)arg;
    dbt_share *sh = dbt_share_attach(dir, KEY, NULL, 0);
    if (!sh)
        return 1;
    say_line(out, "A %d", live_procs(dbt_share_segment(sh)));
    char c;
    (void)!read(in, &c, 1);
    dbt_share_detach(sh);
    return 0;
}

Test(hostshare, wake_all_leaves_processes_without_waiters_alone, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    child idle = spawn(idle_process, NULL);
    char line[256];
    read_line(idle.from_child, line, sizeof line, 30000);
    cr_assert_str_eq(line, "A 2");
    for (int i = 0; i < 1000; i++)
        dbt_share_wake_all(sh);
    int outq = -1;
    cr_assert_eq(ioctl(dbt_share_fd(sh), SIOCOUTQ, &outq), 0);
    cr_expect_eq(outq, 0, "%d bytes of wakes wait unread in an idle process' socket", outq);
    tell(&idle, 'q');
    cr_expect_eq(reap(&idle), 0);
    dbt_share_detach(sh);
}

/* The descriptor of the share directory this process' wake names go through: the one of its fds
 * whose link is the segment's directory. -1 if none. */
static int share_dir_fd(const dbt_share *sh)
{
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s", dbt_share_path(sh));
    char *slash = strrchr(want, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    for (struct dirent *e; d && (e = readdir(d));) {
        char link[32 + sizeof e->d_name], to[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, to, sizeof to - 1);
        if (n <= 0)
            continue;
        to[n] = '\0';
        if (strcmp(to, want) == 0 && atoi(e->d_name) != dirfd(d))
            found = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

/* A host program that closes the directory's descriptor (a double close(), a closefrom()) and
 * reuses its number must not make every live peer look dead: their names, reached through it,
 * would read "not found", and the purge removed their records without a word (a reviewer's
 * finding). This process leaves sharing instead, and says why. */
Test(hostshare, a_directory_descriptor_closed_under_it_purges_no_peer, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    cr_assert(dbt_share_ready(sh));
    waiter_args wa = {.shape = shape_of(0, 4, "")};
    child w = spawn(waiter, &wa);
    char line[128];
    read_line(w.from_child, line, sizeof line, 30000);
    cr_assert_eq(line[0], 'R', "the waiter said %s", line);
    cr_assert_eq(live_procs(dbt_share_segment(sh)), 2);
    int dfd = share_dir_fd(sh);
    cr_assert_geq(dfd, 0, "no descriptor of the share directory found");
    /* The host's double close, then an open of its own that gets the number: a directory,
     * where every wake name reads "not found" (ENOENT: "gone", to the code before). */
    char elsewhere[PATH_MAX];
    snprintf(elsewhere, sizeof elsewhere, "%s.elsewhere", dir);
    cr_assert(mkdir(elsewhere, 0700) == 0 || errno == EEXIST);
    int other = open(elsewhere, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(other, 0);
    cr_assert_eq(dup2(other, dfd), dfd);
    close(other);
    dbt_share_purge_dead(sh);
    cr_expect_eq(live_procs(dbt_share_segment(sh)), 2, "a live peer was purged as dead");
    cr_expect(dbt_share_broken(sh), "this process went on sharing without its directory");
    cr_expect(strstr(dbt_share_why(sh), "closed under it"), "why: %s", dbt_share_why(sh));
    kill_child(&w);
    dbt_share_detach(sh); /* closes the number it had: the other directory's now */
    rmdir(elsewhere);
}

/* ---- the shelf ---- */

/* A permit kept on the shelf: its shelver takes it back; nobody takes it stale or of another
 * shape; a renewal moves its clock; a recall (the host's kind contended) refuses new entries and
 * takes every entry whole; a grant with nobody queued after that recall lets the host keep again;
 * a waiter of the shape is offered the permit rather than see it shelved. */
Test(hostshare, the_shelf_keeps_gives_back_and_recalls)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 2, ""), b = shape_of(0, 3, "");
    dbt_share_permit p1 = permit_of("G~x.1", 1000), got;
    uint64_t h = dbt_share_shelve(sh, &a, &p1, 5), was = 0;
    cr_assert_neq(h, 0);
    cr_expect_not(dbt_share_unshelve(sh, &a, 0, 2000, &got, &was), "a stale entry was taken");
    cr_expect(dbt_share_unshelve(sh, &a, h, INT64_MAX, &got, &was), "its shelver lost it");
    cr_expect_eq(was, h);
    cr_expect_str_eq(got.id, "G~x.1");
    cr_expect_not(dbt_share_shelf_renewed(sh, h, -1), "still on the shelf once taken");
    h = dbt_share_shelve(sh, &a, &p1, 5);
    cr_assert_neq(h, 0);
    cr_expect_not(dbt_share_unshelve(sh, &b, 0, 0, &got, NULL), "taken for another shape");
    cr_expect(dbt_share_shelf_renewed(sh, h, 9000));
    cr_expect(dbt_share_unshelve(sh, &a, 0, 8000, &got, &was), "a renewed entry was not taken");
    cr_expect_eq(got.renewed_us, 9000);
    h = dbt_share_shelve(sh, &a, &p1, 5);
    cr_assert_neq(h, 0);
    dbt_queue_event recall = {
        .type = DBT_QEV_REVOKE, .ticket = 7, .now_us = 100, .lease_us = LEASE};
    cr_expect(dbt_share_keep_event(sh, 0, &recall) & DBT_QACT_RETURN_KEPT);
    cr_expect_eq(dbt_share_shelve(sh, &a, &p1, 5), 0, "shelved while another host waits");
    dbt_share_permit out[4];
    uint64_t whose[4];
    cr_expect_eq(dbt_share_shelf_take_kind(sh, 0, out, whose, 4), 1);
    cr_expect_eq(whose[0], h);
    cr_expect_str_eq(out[0].id, "G~x.1");
    dbt_queue_event granted = {
        .type = DBT_QEV_GRANTED, .ticket = 8, .now_us = 200, .lease_us = LEASE};
    (void)dbt_share_keep_event(sh, 0, &granted);
    uint64_t again = dbt_share_shelve(sh, &a, &p1, 5);
    cr_expect_neq(again, 0, "not shelved after a grant with nobody queued");
    cr_expect(dbt_share_unshelve(sh, &a, again, INT64_MAX, &got, NULL));
    uint64_t reg = dbt_share_wait_begin(sh, &a, 5);
    cr_expect_eq(dbt_share_shelve(sh, &a, &p1, 5), 0, "shelved while a waiter of its shape waits");
    dbt_share_wait_end(sh, reg, NULL);
    cr_expect_not(dbt_share_broken(sh));
    dbt_share_detach(sh);
}

/* While the host is the whole queue (sole), a contended kind is kept on the shelf: its places in
 * Redis' queue are its own. Not for a tagged shape (a class: Redis' owner is the shape, not the
 * host), not while a waiter of another shape of the host waits, and not once a recall says the
 * queue was empty after the verdict (another host queued there); a recall of the verdict's own
 * ticket (ours, queued behind an empty queue) leaves it. docs/design.md, "Keeping while the host
 * is sole". */
Test(hostshare, a_sole_host_keeps_its_shelf_while_its_places_are_queued)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 2, ""), tagged = shape_of(0, 2, "web"),
                    other_limit = shape_of(0, 3, "");
    dbt_share_permit p1 = permit_of("G~x.1", 1000), got;
    dbt_queue_event queued = {.type = DBT_QEV_QUEUED};
    (void)dbt_share_keep_event(sh, 0, &queued);
    cr_expect_not(dbt_share_shelf_keepable(sh, &a), "kept while others may wait");
    cr_expect_eq(dbt_share_shelve(sh, &a, &p1, 5), 0);
    (void)dbt_share_verdict(sh, 0, 10, true, LEASE);
    cr_expect(dbt_share_shelf_keepable(sh, &a), "not kept though the host is the whole queue");
    cr_expect_not(dbt_share_shelf_keepable(sh, &tagged), "a class' permit kept under sole");
    uint64_t reg = dbt_share_wait_begin(sh, &other_limit, 5);
    cr_expect_not(dbt_share_shelf_keepable(sh, &a), "kept while a waiter of another limit waits");
    dbt_share_wait_end(sh, reg, NULL);
    uint64_t h = dbt_share_shelve(sh, &a, &p1, 5);
    cr_expect_neq(h, 0, "not shelved while sole");
    cr_expect(dbt_share_unshelve(sh, &a, h, INT64_MAX, &got, NULL));
    dbt_queue_event ours = {.type = DBT_QEV_REVOKE, .ticket = 10, .now_us = 100, .lease_us = LEASE};
    cr_expect_not(dbt_share_keep_event(sh, 0, &ours) & DBT_QACT_SOLE_ENDED,
                  "the recall of our own waiter's ticket ended our verdict");
    cr_expect(dbt_share_shelf_keepable(sh, &a));
    dbt_queue_event later = {
        .type = DBT_QEV_REVOKE, .ticket = 11, .now_us = 100, .lease_us = LEASE};
    cr_expect(dbt_share_keep_event(sh, 0, &later) & DBT_QACT_SOLE_ENDED,
              "a recall after our verdict left it standing");
    cr_expect_not(dbt_share_sole(sh, 0));
    cr_expect_not(dbt_share_shelf_keepable(sh, &a), "kept after the queue was empty");
    cr_expect_eq(dbt_share_shelve(sh, &a, &p1, 5), 0);
    cr_expect_not(dbt_share_broken(sh));
    dbt_share_detach(sh);
}

/* A waiter that registers while a fresh permit of its shape is on the shelf is offered it at once
 * (the window where it queued in Redis as another process shelved), and its process' wake socket
 * is told; not a stale entry, nor while the shelf may not keep. */
Test(hostshare, a_waiter_that_registers_is_offered_the_shelf, .timeout = 60)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 2, "");
    dbt_share_permit p1 = permit_of("G~x.1", 1000), got;
    uint64_t h = dbt_share_shelve(sh, &a, &p1, 5);
    cr_assert_neq(h, 0);
    uint64_t reg = dbt_share_wait_begin(sh, &a, 5);
    cr_expect_not(dbt_share_shelf_to_waiter(sh, &a, reg, 2000), "a stale entry was offered");
    cr_expect(dbt_share_shelf_to_waiter(sh, &a, reg, 500), "the shelf's permit was not offered");
    cr_expect_not(dbt_share_unshelve(sh, &a, h, INT64_MAX, &got, NULL), "still on the shelf");
    struct pollfd pfd = {.fd = dbt_share_fd(sh), .events = POLLIN};
    cr_expect_eq(poll(&pfd, 1, 1000), 1, "this process' wake socket was not told");
    dbt_share_drain(sh);
    dbt_share_taken taken[2];
    cr_expect_eq(dbt_share_take(sh, taken, 2), 1);
    cr_expect_eq(taken[0].reg, reg);
    cr_expect_str_eq(taken[0].permit.id, "G~x.1");
    /* Once the host's kind is contended and it is not sole: nothing offered from the shelf. */
    h = dbt_share_shelve(sh, &a, &p1, 5);
    cr_assert_neq(h, 0);
    dbt_queue_event queued = {.type = DBT_QEV_QUEUED};
    (void)dbt_share_keep_event(sh, 0, &queued);
    reg = dbt_share_wait_begin(sh, &a, 5);
    cr_expect_not(dbt_share_shelf_to_waiter(sh, &a, reg, 0), "offered while another may wait");
    cr_expect_not(dbt_share_wait_end(sh, reg, &got));
    cr_expect_not(dbt_share_broken(sh));
    dbt_share_detach(sh);
}

/* A shelf entry whose id does not end within its room is damage: nothing is taken from it, the
 * segment is poisoned. */
Test(hostshare, an_unterminated_shelf_entry_is_damage)
{
    dbt_share *sh = attach_or_die(dir);
    dbt_share_shape a = shape_of(0, 2, "");
    dbt_share_permit p1 = permit_of("G~x.1", 1000), got;
    cr_assert_neq(dbt_share_shelve(sh, &a, &p1, 5), 0);
    dbt_seg *g = dbt_share_segment(sh);
    for (uint32_t i = 0; i < g->reg_hw; i++)
        if (g->regs[i].state == REG_SHELVED)
            memset(g->regs[i].id, 'x', sizeof g->regs[i].id);
    cr_expect_not(dbt_share_unshelve(sh, &a, 0, 0, &got, NULL));
    cr_expect(dbt_share_broken(sh));
    dbt_share_detach(sh);
}
