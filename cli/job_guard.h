/* job_guard.h - dbthrottle acquire's CMD under a guard process that ends it with the permit. */
#ifndef DBT_JOB_GUARD_H
#define DBT_JOB_GUARD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t guard;   /* CMD's parent, our child: the signals passed on to CMD go to it */
    int alive_fd;  /* its read end is the guard's: closed (by job_end or our death), CMD ends */
    int status_fd; /* the guard writes CMD's wait status here once CMD and all it left are gone */
    int exec_fd;   /* reads as empty once CMD runs, else the exec's (or the fork's) errno */
} job_guard;

/* What the guard needs, made before the fork (the child of a threaded process may only make
 * async-signal-safe calls). */
typedef struct {
    const char *path;       /* CMD, resolved */
    char **argv;            /* CMD's */
    char **sh_argv;         /* sh PATH ARG...: for a script without #! (ENOEXEC) */
    char **envp;            /* CMD's environment */
    const sigset_t *mask;   /* the signal mask CMD gets (the caller's) */
    const sigset_t *passed; /* the signals the guard passes on to CMD (not the terminal's) */
    int64_t grace_ms;       /* between SIGTERM and SIGKILL when CMD is ended */
} job_spec;

/* Forks the guard, which forks CMD. False with errno when it cannot. */
bool job_start(job_guard *job, const job_spec *spec);

/* Tells the guard to end CMD and whatever it started: SIGTERM to all, SIGKILL after the grace.
 * Our own death (SIGKILL, the OOM killer) does the same. */
void job_end(job_guard *job);

/* Waits up to timeout_ms (-1: no bound) for CMD's end. 1: *status is CMD's wait status (CMD and
 * what it left are gone); 0: not yet; -1: the guard died first (*status is the guard's). The
 * guard is not reaped: the caller reaps it (job->guard). */
int job_wait(job_guard *job, int timeout_ms, int *status);

/* After the guard died first (a SIGKILL): ends and reaps what of CMD came to us, a subreaper. Only
 * once the guard is reaped. */
void job_end_orphans(void);

#endif
