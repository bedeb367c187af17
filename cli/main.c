/* main.c - the dbthrottle command: runs, inspects, explains and steers the throttle. */
#include "cli.h"
#include "version.h"

#include <string.h>

static const struct {
    const char *name;
    dbt_cmd_fn fn;
    const char *what;
} commands[] = {
    {"run", cmd_run, "start a program with the throttle (LD_PRELOAD and settings)"},
    {"status", cmd_status,
     "show each pool: limit, holders, waiters, counters (--json, --prometheus)"},
    {"top", cmd_top, "the status, refreshed live in the terminal"},
    {"clients", cmd_clients, "every connection of the workers, idle too (as SHOW CLIENTS)"},
    {"check", cmd_check, "validate the settings as the library would, and reach Redis"},
    {"limit", cmd_limit, "change a pool's limit live for every worker (or --clear)"},
    {"drain", cmd_drain, "stop new grants in a pool (maintenance)"},
    {"resume", cmd_resume, "grant again after a drain"},
    {"evict", cmd_evict, "free one stuck permit by hand"},
    {"set", cmd_set, "set a pool's live setting for every worker (wait_timeout, ...)"},
    {"settings", cmd_settings, "list a pool's live settings"},
    {"mode", cmd_mode, "show or switch a pool's mode (enforce or shadow) for every worker"},
    {"forget", cmd_forget, "remove a pool nobody uses from Redis (status lists it no more)"},
    {"class", cmd_class, "define a pool's classes: guaranteed shares, priority, waits"},
    {"acquire", cmd_acquire, "run any command while it holds a permit of a pool"},
    {"exporter", cmd_exporter, "serve /metrics for Prometheus (each scrape reads Redis)"},
    {"adapt", cmd_adapt, "run a pool's adaptive limit controller (one leads, others stand by)"},
    {"report", cmd_report, "what candidate limits would cost, replayed from shadow mode's sample"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: dbthrottle COMMAND [OPTIONS] (dbthrottle COMMAND --help for each)\n"
                 "       dbthrottle --version\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].what);
    fprintf(out, "\nSettings come from the environment as for the library (see libdbthrottle(7));\n"
                 "commands that read Redis also take --redis URL and --key-prefix P.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr), EXIT_USAGE;
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dbthrottle %s\n", DBT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dbthrottle: unknown command '%s' (see dbthrottle --help)\n", argv[1]);
    return EXIT_USAGE;
}
