/* adapt_pg.h - what dbthrottle adapt reads of PostgreSQL, through a connection of its own (libpq):
 * the statements running and what they wait on, the transactions done, the replicas' lag. Kept
 * apart so that only this file of the command sees libpq. */
#ifndef DBT_ADAPT_PG_H
#define DBT_ADAPT_PG_H

#include <stdbool.h>
#include <stddef.h>

/* One reading. Unknown values are negative. */
typedef struct {
    int active;        /* client backends of the database running a statement (not ours) */
    int cpu_active;    /* of those, waiting on nothing: on a CPU, or ready to run */
    int lock_waiting;  /* waiting on Lock or LWLock */
    int io_waiting;    /* waiting on IO */
    double xacts;      /* the database's xact_commit + xact_rollback so far */
    double repl_lag_s; /* the greatest replay lag of a replica; -1 none */
} cli_pg_sample;

typedef struct cli_pg cli_pg;

/* A sampler of the database conninfo names ("" or NULL: libpq's environment, as psql); it
 * connects at its first reading. NULL when out of memory. */
cli_pg *cli_pg_new(const char *conninfo);
/* Reads one sample, connecting (again) first when needed. False with a one-line message in err
 * (err_cap bytes), the password never in it; the next call connects again. */
bool cli_pg_sample_now(cli_pg *p, cli_pg_sample *s, char *err, size_t err_cap);
void cli_pg_free(cli_pg *p);

/* Whether conninfo (with libpq's environment for what it leaves out) names a server on this
 * machine: a unix socket, localhost or a loopback address, for every host it lists. 1 yes, 0 no
 * (the first remote host in host, host_cap bytes), -1 when conninfo does not parse (why in err). */
int cli_pg_is_local(const char *conninfo, char *host, size_t host_cap, char *err, size_t err_cap);

#endif
