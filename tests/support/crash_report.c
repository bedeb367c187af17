/* crash_report.c - a test program that dies of a fault (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL,
 * or SIGPIPE: a write to a socket its peer closed, without MSG_NOSIGNAL) says so on stderr before
 * it dies, with where: one line "<prog> <pid>: fatal signal N at ADDR" and one per frame, "  #K
 * OBJECT+0xOFFSET", an offset into the file that addr2line -e OBJECT resolves. Every suite looks
 * for these lines (summary, tests/support/lib.sh): a worker that crashed only under a loaded CI
 * left an exit status and nothing else to go on.
 *
 * The handler writes with write(2) alone: the objects' ranges are read at install time
 * (dl_iterate_phdr is not async-signal-safe) and backtrace(3) is called once then, so that loading
 * libgcc_s (which allocates) never happens in the handler. It then dies of the same signal
 * (SA_RESETHAND), so the exit status (and a core, where enabled) is what it would have been. A
 * handler already in place (a sanitizer's runtime) is left alone: it reports better. */
#include "crash_report.h"

#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { MAX_OBJECTS = 64, MAX_FRAMES = 48, NAME_MAX_LEN = 160 };

static struct object {
    uintptr_t base, lo, hi; /* load address; the lowest and highest address of its PT_LOADs */
    char name[NAME_MAX_LEN];
} objects[MAX_OBJECTS];
static int n_objects;
static const char *program = "program";

static int note_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (n_objects == MAX_OBJECTS)
        return 1;
    struct object *o = &objects[n_objects];
    o->base = (uintptr_t)info->dlpi_addr;
    o->lo = UINTPTR_MAX;
    o->hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t start = o->base + (uintptr_t)ph->p_vaddr;
        if (start < o->lo)
            o->lo = start;
        if (start + (uintptr_t)ph->p_memsz > o->hi)
            o->hi = start + (uintptr_t)ph->p_memsz;
    }
    /* The main program's name is empty here: /proc/self/exe's target is the file to resolve. */
    const char *name = info->dlpi_name;
    char exe[NAME_MAX_LEN];
    if (!name || !name[0]) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        name = exe;
    }
    snprintf(o->name, sizeof o->name, "%s", name);
    if (o->lo < o->hi)
        n_objects++;
    return 0;
}

static void put(const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, s, len);
        if (w <= 0)
            return;
        s += w;
        len -= (size_t)w;
    }
}

static void put_number(uintptr_t v, unsigned radix)
{
    char buf[2 + 2 * sizeof v + 1];
    char *p = buf + sizeof buf - 1;
    *p = '\0';
    do
        *--p = "0123456789abcdef"[v % radix];
    while (v /= radix);
    if (radix == 16) {
        *--p = 'x';
        *--p = '0';
    }
    put(p);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    void *frames[MAX_FRAMES];
    int n = backtrace(frames, MAX_FRAMES);
    put(program);
    put(" ");
    put_number((uintptr_t)getpid(), 10);
    put(": fatal signal ");
    put_number((uintptr_t)sig, 10);
    put(" at ");
    put_number((uintptr_t)si->si_addr, 16);
    put(" (code ");
    put_number((uintptr_t)(unsigned)si->si_code, 10);
    put(")\n");
    for (int i = 0; i < n; i++) {
        uintptr_t pc = (uintptr_t)frames[i];
        put("  #");
        put_number((uintptr_t)i, 10);
        put(" ");
        int k = 0;
        while (k < n_objects && !(pc >= objects[k].lo && pc < objects[k].hi))
            k++;
        if (k < n_objects) {
            put(objects[k].name);
            put("+");
            /* A return address: the call is the instruction before it (frame 0 is the fault's). */
            put_number(pc - objects[k].base - (i > 0), 16);
        } else {
            put_number(pc, 16);
        }
        put("\n");
    }
    raise(sig); /* SA_RESETHAND: the default action now, as if no handler had been here */
}

void crash_report_install(const char *name)
{
    program = name;
    void *warm[1];
    (void)backtrace(warm, 1);
    dl_iterate_phdr(note_object, NULL);
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGPIPE};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        struct sigaction before;
        if (sigaction(fatal[i], NULL, &before) != 0 || (before.sa_flags & SA_SIGINFO) ||
            before.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa = {.sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_RESETHAND};
        sigemptyset(&sa.sa_mask);
        sigaction(fatal[i], &sa, NULL);
    }
}
