/* cancel_in_handler.c - a libpq client for tests/faults/cancels_reach_waits.sh that finds libpq as
 * ctypes does (dlopen RTLD_LOCAL, every function through dlsym of the handle, libpq not linked)
 * and cancels from a SIGALRM handler, counting the allocations made inside the handler (malloc
 * and friends are this program's own, forwarding to glibc's). libpq's own allocations are not
 * counted: libpq 15's PQrequestCancel makes and frees a PGcancel itself.
 *
 * First a PQrequestCancel from the handler on the idle connection (the first cancel call the
 * library sees), then `rounds` commands at a full pool, each waiting for a permit while a timer
 * fires PQcancel from the handler 20 ms after the handler last returned. The handler re-arms the
 * one-shot timer itself (timer_settime is async-signal-safe) rather than a periodic timer firing
 * every 20 ms: each PQcancel makes the server fork a backend, which on a loaded machine takes
 * longer than 20 ms, and a periodic timer would then keep the handler running back to back and
 * starve the program it interrupts. Only allocations by the handler's own thread count: the
 * library's other threads may allocate meanwhile. Prints one line:
 *   rounds=N canceled=C fired=F allocs_in_handler=A max_ms=M
 * The connection comes from the PG* variables; exit status 2 when libpq or the server fails. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

static _Thread_local volatile sig_atomic_t in_handler;
static volatile sig_atomic_t allocs_in_handler, fired;

/* An allocation inside the handler (on the thread it interrupted) made by anything but libpq. */
static void count(const void *caller)
{
    Dl_info info;
    if (in_handler && !(dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libpq")))
        allocs_in_handler++;
}

void *malloc(size_t n)
{
    count(__builtin_return_address(0));
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    count(__builtin_return_address(0));
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    count(__builtin_return_address(0));
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (p)
        count(__builtin_return_address(0));
    __libc_free(p);
}

static void *(*pq_connectdb)(const char *);
static int (*pq_status)(const void *);
static void *(*pq_exec)(void *, const char *);
static char *(*pq_error_field)(const void *, int);
static void (*pq_clear)(void *);
static void *(*pq_get_cancel)(void *);
static int (*pq_cancel)(void *, char *, int);
static int (*pq_request_cancel)(void *);
static void (*pq_finish)(void *);

static void *conn, *cancel;
static volatile sig_atomic_t use_request_cancel, rearm;
static timer_t timer;
static const struct itimerspec after_20ms = {{0, 0}, {0, 20000000}}, disarmed = {{0, 0}, {0, 0}};

static void on_alarm(int sig)
{
    (void)sig;
    in_handler = 1;
    char buf[256];
    if (use_request_cancel)
        pq_request_cancel(conn);
    else
        pq_cancel(cancel, buf, (int)sizeof buf);
    fired++;
    in_handler = 0;
    if (rearm)
        timer_settime(timer, 0, &after_20ms, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define RESOLVE(var, name)                                                                         \
    do {                                                                                           \
        *(void **)&var = dlsym(h, name);                                                           \
        if (!var) {                                                                                \
            fprintf(stderr, "no %s\n", name);                                                      \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    void *h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    RESOLVE(pq_connectdb, "PQconnectdb");
    RESOLVE(pq_status, "PQstatus");
    RESOLVE(pq_exec, "PQexec");
    RESOLVE(pq_error_field, "PQresultErrorField");
    RESOLVE(pq_clear, "PQclear");
    RESOLVE(pq_get_cancel, "PQgetCancel");
    RESOLVE(pq_cancel, "PQcancel");
    RESOLVE(pq_request_cancel, "PQrequestCancel");
    RESOLVE(pq_finish, "PQfinish");
    conn = pq_connectdb("");
    if (pq_status(conn) != 0) { /* CONNECTION_OK */
        fprintf(stderr, "connection failed\n");
        return 2;
    }
    cancel = pq_get_cancel(conn);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    use_request_cancel = 1; /* the first cancel call the library sees, from a handler */
    raise(SIGALRM);
    use_request_cancel = 0;

    struct sigevent on_expiry;
    memset(&on_expiry, 0, sizeof on_expiry);
    on_expiry.sigev_notify = SIGEV_SIGNAL;
    on_expiry.sigev_signo = SIGALRM;
    if (timer_create(CLOCK_MONOTONIC, &on_expiry, &timer) != 0) {
        perror("timer_create");
        return 2;
    }
    int canceled = 0;
    double max_ms = 0;
    for (int i = 0; i < rounds; i++) {
        rearm = 1;
        timer_settime(timer, 0, &after_20ms, NULL);
        double t0 = now_ms();
        void *res = pq_exec(conn, "SELECT 1");
        double took = now_ms() - t0;
        rearm = 0;
        timer_settime(timer, 0, &disarmed, NULL);
        const char *code = res ? pq_error_field(res, 'C') : NULL;
        if (code && strcmp(code, "57014") == 0)
            canceled++;
        if (took > max_ms)
            max_ms = took;
        if (res)
            pq_clear(res);
    }
    printf("rounds=%d canceled=%d fired=%d allocs_in_handler=%d max_ms=%.0f\n", rounds, canceled,
           (int)fired, (int)allocs_in_handler, max_ms);
    pq_finish(conn);
    return 0;
}
