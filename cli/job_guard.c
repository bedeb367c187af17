/* job_guard.c - dbthrottle acquire's CMD under a guard process that ends it with the permit.
 *
 * CMD runs on acquire's permit, and that permit lives only as long as acquire renews it: were
 * acquire SIGKILLed, its permit would come back after the lease and be granted again while CMD,
 * or what CMD started, still ran (`make chaos` seed 12: a psql left mid-statement, two at once at
 * a limit of 1). A parent-death signal reaches only the direct child: `sh -c 'psql ...'` loses
 * sh, and psql runs on. So CMD runs under a guard: acquire -> guard -> CMD.
 *
 * The guard is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever of CMD's processes is
 * orphaned (psql once its sh is gone, a daemon that forks twice, one that left for its own
 * session or process group) becomes its child, never init's, so it can end every one of them. It
 * holds the read end of a pipe whose only write end is acquire's: at end of file (acquire died, or
 * closed it to end CMD) it sends SIGTERM to CMD and all its descendants, then SIGKILL after the
 * grace, until none is left. When CMD exits by itself, what it left running is ended the same way
 * before CMD's status is reported: the permit goes back only once nothing of the job runs.
 *
 * Process groups are left alone: CMD stays in acquire's, so the terminal's ^C, ^Z and hangup still
 * reach it directly (a group of its own would take it out of the terminal's foreground). The guard
 * ignores those (SI_KERNEL), as acquire does, and passes on to CMD the signals acquire passes on.
 *
 * The guard is forked from a threaded process and does not exec: it makes only system calls
 * (async-signal-safe), and keeps every signal blocked except inside ppoll, so that its handlers
 * never run while it reaps (a signal is never passed on to a pid already reaped). */
#include "job_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the guard's side ----------------------------------------------------------------------- */

static volatile sig_atomic_t cmd_pid; /* CMD until it is reaped; 0 after */

static void pass_on(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si->si_code != SI_KERNEL && cmd_pid > 0)
        kill((pid_t)cmd_pid, sig);
}

static void on_child(int sig)
{
    (void)sig; /* only to end ppoll */
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends the decimal v at p; returns the end (snprintf is not async-signal-safe). */
static char *put_num(char *p, long v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n)
        *p++ = tmp[--n];
    *p = '\0';
    return p;
}

static char *put_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    *p = '\0';
    return p;
}

static void signal_tree(long pid, int sig, int self, int depth);

/* Signals each pid listed in a /proc/PID/task/TID/children file, and its descendants. */
static void signal_listed(const char *file, int sig, int depth)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[256];
    long v = -1;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                v = (v < 0 ? 0 : v * 10) + (buf[i] - '0');
            } else if (v >= 0) {
                signal_tree(v, sig, 0, depth + 1);
                v = -1;
            }
        }
    if (v > 0)
        signal_tree(v, sig, 0, depth + 1);
    close(fd);
}

struct dent64 {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

/* Sends sig to pid's descendants, children of every thread of it, each before its parent (a
 * parent that dies first hands its children to us, which the next round finds anyway), then to
 * pid itself unless self. A tree deeper than the bound is reached as its upper part dies. */
static void signal_tree(long pid, int sig, int self, int depth)
{
    if (depth < 32) {
        char dir[64];
        char *end = put_num(put_str(dir, "/proc/"), pid);
        put_str(end, "/task");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            _Alignas(8) char buf[1024];
            long n;
            while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0)
                for (long off = 0; off < n;) {
                    struct dent64 *d = (struct dent64 *)(void *)(buf + off);
                    off += d->reclen;
                    if (d->name[0] < '0' || d->name[0] > '9')
                        continue;
                    char file[96];
                    put_str(put_str(put_str(put_str(file, dir), "/"), d->name), "/children");
                    signal_listed(file, sig, depth);
                }
            close(dfd);
        }
    }
    if (!self)
        kill((pid_t)pid, sig);
}

/* Sends sig to what is left of the job: every descendant /proc lists, and CMD by its pid as well
 * (the guard's own child, which stays a zombie until the guard reaps it, so that pid cannot be
 * another process'): where /proc lists no children (a kernel without them, a restricted /proc),
 * CMD still ends with acquire. */
static void signal_job(long me, int sig)
{
    signal_tree(me, sig, 1, 0);
    if (cmd_pid > 0)
        kill((pid_t)cmd_pid, sig);
}

/* The guard: starts CMD, passes signals on, ends CMD's tree when asked (alive's end of file) or
 * what CMD left when it exited, reports CMD's wait status on status_fd and exits. */
static _Noreturn void guard(const job_spec *s, int alive, int status_fd, int exec_fd)
{
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* Its own name (ps, top): not taken for acquire itself, the permit's holder. */
    prctl(PR_SET_NAME, "acquire-guard");
    pid_t me = getpid();
    struct pollfd pf = {.fd = alive, .events = POLLIN};
    if (poll(&pf, 1, 0) == 1) /* acquire died before we started: do not start CMD */
        _exit(0);
    pid_t pid = fork();
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, s->mask, NULL);
        /* Only a SIGKILL of the guard ends it first: then nothing would end CMD. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(128 + SIGKILL);
        execve(s->path, s->argv, s->envp);
        int e = errno;
        if (e == ENOEXEC) /* a script without #!: sh runs it, as execvp does */
            execve("/bin/sh", s->sh_argv, s->envp);
        ssize_t w = write(exec_fd, &e, sizeof e);
        (void)w;
        _exit(127);
    }
    int status = 126 << 8;
    if (pid < 0) {
        int e = errno;
        ssize_t w = write(exec_fd, &e, sizeof e);
        w = write(status_fd, &status, sizeof status);
        (void)w;
        _exit(0);
    }
    close(exec_fd);
    cmd_pid = pid;
    struct sigaction sa = {.sa_sigaction = pass_on, .sa_flags = SA_SIGINFO | SA_RESTART};
    sa.sa_mask = all;
    sigset_t during = all;
    for (int sig = 1; sig < NSIG; sig++)
        if (sigismember(s->passed, sig) == 1) {
            sigaction(sig, &sa, NULL);
            sigdelset(&during, sig);
        }
    struct sigaction sc = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    sc.sa_mask = all;
    sigaction(SIGCHLD, &sc, NULL);
    sigdelset(&during, SIGCHLD);

    int ending = 0; /* ending the tree: SIGTERM sent, SIGKILL at kill_at */
    int64_t kill_at = 0;
    for (;;) {
        int any_left = 0, st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) != 0) {
            if (p < 0) {
                if (errno == EINTR)
                    continue;
                break; /* ECHILD: nothing of the job is left */
            }
            if (p == pid) {
                status = st;
                cmd_pid = 0;
            }
        }
        any_left = p == 0;
        if (!any_left)
            break;
        if (!ending && (pf.fd < 0 || cmd_pid == 0)) {
            /* Asked to end, or CMD is gone and left these: SIGCONT so that a stopped one sees the
             * SIGTERM; SIGKILL after the grace. */
            ending = 1;
            signal_job(me, SIGTERM);
            signal_job(me, SIGCONT);
            kill_at = mono_ms() + s->grace_ms;
        }
        int timeout = -1;
        if (ending) {
            int64_t now = mono_ms();
            if (now >= kill_at) {
                signal_job(me, SIGKILL);
                kill_at = now + 100; /* again for what a dying process forked meanwhile */
            }
            timeout = (int)(kill_at - now > 0 ? kill_at - now : 0);
        }
        struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
        pf.revents = 0;
        if (ppoll(&pf, 1, timeout < 0 ? NULL : &ts, &during) > 0 && pf.revents) {
            char c;
            if (read(alive, &c, 1) <= 0) { /* acquire closed it or died: end the job */
                close(alive);
                pf.fd = -1;
            }
        }
    }
    ssize_t w = write(status_fd, &status, sizeof status);
    (void)w;
    _exit(0);
}

/* ---- acquire's side ------------------------------------------------------------------------- */

bool job_start(job_guard *job, const job_spec *spec)
{
    int alive[2], status[2], exec[2];
    if (pipe2(alive, O_CLOEXEC) != 0)
        return false;
    if (pipe2(status, O_CLOEXEC) != 0) {
        close(alive[0]);
        close(alive[1]);
        return false;
    }
    if (pipe2(exec, O_CLOEXEC) != 0) {
        close(alive[0]);
        close(alive[1]);
        close(status[0]);
        close(status[1]);
        return false;
    }
    /* Should the guard be SIGKILLed, what of CMD is orphaned comes to us (job_end_orphans). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t pid = fork();
    if (pid == 0) {
        close(alive[1]); /* the only write end left is acquire's */
        close(status[0]);
        close(exec[0]);
        guard(spec, alive[0], status[1], exec[1]);
    }
    int e = errno;
    close(alive[0]);
    close(status[1]);
    close(exec[1]);
    if (pid < 0) {
        close(alive[1]);
        close(status[0]);
        close(exec[0]);
        errno = e;
        return false;
    }
    *job =
        (job_guard){.guard = pid, .alive_fd = alive[1], .status_fd = status[0], .exec_fd = exec[0]};
    return true;
}

void job_end(job_guard *job)
{
    if (job->alive_fd >= 0) {
        close(job->alive_fd);
        job->alive_fd = -1;
    }
}

void job_end_orphans(void)
{
    for (;;) {
        signal_tree(getpid(), SIGKILL, 1, 0);
        pid_t p;
        while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
            ;
        if (p < 0 && errno == ECHILD)
            return;
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    }
}

int job_wait(job_guard *job, int timeout_ms, int *status)
{
    struct pollfd pf = {.fd = job->status_fd, .events = POLLIN};
    int n;
    while ((n = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    if (n == 0)
        return 0;
    int st = 0;
    ssize_t got;
    while ((got = read(job->status_fd, &st, sizeof st)) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof st)
        return -1;
    *status = st;
    return 1;
}
