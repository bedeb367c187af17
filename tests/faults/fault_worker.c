/* fault_worker.c - a libpq worker for the fault suite, run with libdbthrottle.so preloaded.
 *
 * Runs `SELECT dbt_probe(ms)` (see lib.sh: it logs how many probes of its application_name run
 * at the server at that moment, the independent counter of the suite) until it has run -n of
 * them or SIGTERM/SIGINT asks it to stop, and prints one summary line:
 *   pid=P ok=N err=E max_call_ms=M codes=SQLSTATE:count,...
 * max_call_ms is the longest single libpq call: how long the throttle ever kept the program.
 *
 *   -n N     probes per connection (0: until SIGTERM)      -s MS   server-side sleep per probe
 *   -x MS    run each probe inside BEGIN ... COMMIT, with MS of client-side pause after it and a
 *            second probe before COMMIT (a permit kept idle in a transaction)
 *   -T N     N threads, one connection each                -F N    pre-fork: connect, run one
 *            probe, then fork N children that each open their own connection (gunicorn-style);
 *            SIGTERM/SIGINT to the parent goes on to them, and it exits once they all have
 *   -K       with -T: once the threads run, fork a child that runs -n probes on a connection of
 *            its own while they wait for permits, and wait for it
 *   -W FILE  touch FILE once the first probe has its result (tests wait for it)
 *   -C       SIGTERM/SIGINT also cancel what the connection is doing (PQcancel from the handler, as
 *            psql's Ctrl-C): a fleet queued for permits stops at once (one connection: no -T/-F)
 * The connection comes from the PG* variables. Exit status 0 unless a connection failed. */
#include "crash_report.h"

#include <libpq-fe.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int n_probes, sleep_ms, tx_pause_ms = -1;
static const char *ready_file;
/* -E: once done (reported), wait until this file exists before exiting: the library stays
 * loaded and its pools attached, so that a case can look at them before the exit lets go. */
static const char *end_file;
static volatile sig_atomic_t stop;
static bool cancel_on_stop;
/* The connection's cancel object for the signal handler (-C), swapped whole, never changed. */
static _Atomic(PGcancel *) stop_cancel;

#define MAX_CODES 8
typedef struct {
    long ok, err;
    double max_call_ms;
    char codes[MAX_CODES][6];
    long code_n[MAX_CODES];
    int bad_connect;
} tally;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void count_code(tally *t, const char *code)
{
    if (!code)
        code = "?????";
    for (int i = 0; i < MAX_CODES; i++) {
        if (!t->codes[i][0])
            snprintf(t->codes[i], sizeof t->codes[i], "%.5s", code);
        if (strncmp(t->codes[i], code, 5) == 0) {
            t->code_n[i]++;
            return;
        }
    }
}

/* One libpq call, timed. True when it succeeded. */
static bool run(PGconn *c, const char *sql, tally *t)
{
    double t0 = now_ms();
    PGresult *r = PQexec(c, sql);
    double took = now_ms() - t0;
    if (took > t->max_call_ms)
        t->max_call_ms = took;
    if (getenv("FAULT_SLOW_MS") && took > atof(getenv("FAULT_SLOW_MS")))
        fprintf(stderr, "fault_worker %d: slow call %.0f ms ending at %.0f\n", (int)getpid(), took,
                now_ms());
    ExecStatusType st = PQresultStatus(r);
    bool ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK;
    if (!ok) {
        t->err++;
        count_code(t, PQresultErrorField(r, PG_DIAG_SQLSTATE));
    }
    PQclear(r);
    return ok;
}

static void mark_ready(void)
{
    static atomic_int done;
    if (ready_file && atomic_exchange(&done, 1) == 0) {
        FILE *f = fopen(ready_file, "w");
        if (f)
            fclose(f);
    }
}

/* Points the handler at C's current backend (-C); frees the object it replaces. */
static void arm_cancel(PGconn *c)
{
    if (cancel_on_stop)
        PQfreeCancel(atomic_exchange(&stop_cancel, c ? PQgetCancel(c) : NULL));
}

static void work(tally *t)
{
    PGconn *c = PQconnectdb("");
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "fault_worker %d: connect: %s", (int)getpid(), PQerrorMessage(c));
        t->bad_connect = 1;
        PQfinish(c);
        return;
    }
    arm_cancel(c);
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT dbt_probe(%d)", sleep_ms);
    for (int i = 0; (n_probes == 0 || i < n_probes) && !stop; i++) {
        bool ok;
        if (tx_pause_ms >= 0) {
            ok = run(c, "BEGIN", t) && run(c, sql, t);
            mark_ready();
            if (ok && tx_pause_ms > 0)
                usleep((useconds_t)tx_pause_ms * 1000);
            ok = ok && run(c, sql, t) && run(c, "COMMIT", t);
            if (!ok && PQtransactionStatus(c) != PQTRANS_IDLE)
                PQclear(PQexec(c, "ROLLBACK"));
        } else {
            ok = run(c, sql, t);
            mark_ready();
        }
        if (ok)
            t->ok++;
        else
            usleep(10 * 1000); /* as a real program would, rather than spin on a refusal */
        if (PQstatus(c) == CONNECTION_BAD) {
            PQreset(c);
            arm_cancel(c);
        }
    }
    arm_cancel(NULL);
    PQfinish(c);
}

static void *thread_main(void *arg)
{
    work(arg);
    return NULL;
}

static void report(const tally *t)
{
    char codes[256] = "";
    size_t len = 0;
    for (int i = 0; i < MAX_CODES && t->codes[i][0]; i++)
        len += (size_t)snprintf(codes + len, sizeof codes - len, "%s%s:%ld", i ? "," : "",
                                t->codes[i], t->code_n[i]);
    printf("pid=%d ok=%ld err=%ld max_call_ms=%.0f codes=%s\n", (int)getpid(), t->ok, t->err,
           t->max_call_ms, codes[0] ? codes : "-");
    fflush(stdout);
}

/* FAULT_EXIT_NOW: end with _exit. Under the ASan runtime, libp11-kit's destructor (pulled in by
 * libpq) deadlocks in exit() whatever else is loaded; the checks need the workers to end. */
static int finish(int status)
{
    for (int i = 0; end_file && i < 6000 && access(end_file, F_OK) != 0; i++)
        usleep(20000); /* up to 2 minutes */
    if (getenv("FAULT_EXIT_NOW")) {
        fflush(NULL);
        _exit(status);
    }
    return status;
}

/* A pre-fork parent's children (-F): a stop request to the parent goes on to them, as a pre-fork
 * server's master passes SIGTERM to its workers. Written with the stop signals blocked. */
#define MAX_CHILDREN 64
static pid_t child_pids[MAX_CHILDREN];
static volatile sig_atomic_t n_child_pids;

static void on_stop(int sig)
{
    stop = 1;
    for (int i = 0; i < n_child_pids; i++)
        kill(child_pids[i], sig);
    PGcancel *pc = atomic_load(&stop_cancel);
    if (pc) {
        char err[256];
        PQcancel(pc, err, sizeof err);
    }
}

int main(int argc, char **argv)
{
    crash_report_install("fault_worker");
    int threads = 1, children = 0, opt;
    bool fork_while_waiting = false;
    while ((opt = getopt(argc, argv, "n:s:x:T:F:KW:E:C")) != -1) {
        switch (opt) {
        case 'n':
            n_probes = atoi(optarg);
            break;
        case 's':
            sleep_ms = atoi(optarg);
            break;
        case 'x':
            tx_pause_ms = atoi(optarg);
            break;
        case 'T':
            threads = atoi(optarg);
            break;
        case 'F':
            children = atoi(optarg);
            break;
        case 'K':
            fork_while_waiting = true;
            break;
        case 'W':
            ready_file = optarg;
            break;
        case 'E':
            end_file = optarg;
            break;
        case 'C':
            cancel_on_stop = true;
            break;
        default:
            fprintf(stderr, "usage: fault_worker [-n N] [-s MS] [-x MS] [-T N] [-F N] [-K] [-W "
                            "FILE] [-E FILE] [-C]\n");
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    tally total = {0};
    if (children > 0) {
        /* The parent's connection and permit exist before the fork, as in a pre-fork server. */
        PGconn *c = PQconnectdb("");
        if (PQstatus(c) != CONNECTION_OK) {
            fprintf(stderr, "fault_worker: connect: %s", PQerrorMessage(c));
            return 1;
        }
        char sql[64];
        snprintf(sql, sizeof sql, "SELECT dbt_probe(%d)", sleep_ms);
        if (run(c, sql, &total))
            total.ok++;
        /* A stop that comes while the children are forked waits until each one is recorded. */
        sigset_t stops, before;
        sigemptyset(&stops);
        sigaddset(&stops, SIGTERM);
        sigaddset(&stops, SIGINT);
        sigprocmask(SIG_BLOCK, &stops, &before);
        for (int i = 0; i < children && i < MAX_CHILDREN; i++) {
            pid_t pid = fork();
            if (pid > 0)
                child_pids[n_child_pids++] = pid;
            if (pid == 0) {
                n_child_pids = 0;
                sigprocmask(SIG_SETMASK, &before, NULL);
                tally t = {0};
                work(&t);
                report(&t);
                _exit(t.bad_connect);
            }
        }
        sigprocmask(SIG_SETMASK, &before, NULL);
        /* SIGTERM interrupts wait() (on_stop has no SA_RESTART): keep waiting until no child is
         * left, so that the parent's exit status covers every child (on_stop told them to stop). */
        int st, bad = 0;
        pid_t done;
        while ((done = wait(&st)) > 0 || (done < 0 && errno == EINTR))
            if (done > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
                bad = 1;
                /* Which child, and how: the test's check only sees the parent's status. */
                if (WIFSIGNALED(st))
                    fprintf(stderr, "fault_worker %d: child %d killed by signal %d%s\n",
                            (int)getpid(), (int)done, WTERMSIG(st),
                            WCOREDUMP(st) ? " (core dumped)" : "");
                else
                    fprintf(stderr, "fault_worker %d: child %d exited %d\n", (int)getpid(),
                            (int)done, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            }
        if (run(c, sql, &total)) /* the parent's connection still works after its children */
            total.ok++;
        PQfinish(c);
        report(&total);
        return finish(bad);
    }
    if (threads <= 1) {
        work(&total);
        report(&total);
        return finish(total.bad_connect);
    }
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    tally *ts = calloc((size_t)threads, sizeof *ts);
    if (!tid || !ts)
        return 1;
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, thread_main, &ts[i]);
    int bad = 0;
    if (fork_while_waiting) {
        usleep(100 * 1000); /* the threads are queued by now: the pool is saturated */
        pid_t pid = fork();
        if (pid == 0) {
            tally t = {0};
            work(&t);
            report(&t);
            _exit(t.bad_connect || t.ok == 0);
        }
        int st;
        bad |= pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        total.ok += ts[i].ok;
        total.err += ts[i].err;
        bad |= ts[i].bad_connect;
        if (ts[i].max_call_ms > total.max_call_ms)
            total.max_call_ms = ts[i].max_call_ms;
        for (int k = 0; k < MAX_CODES && ts[i].codes[k][0]; k++)
            for (long j = 0; j < ts[i].code_n[k]; j++)
                count_code(&total, ts[i].codes[k]);
    }
    free(tid);
    free(ts);
    report(&total);
    return finish(bad);
}
