/* limits_in_use.c - the limits a semaphore's workers configured, as status shows them: each id
 * carries its caller's limit, and a caller is admitted only below its own (docs/design.md, "Limit
 * agreement"). Workers that disagree make a pool look stuck ("limit 3, 1 holding, 5 waiting": the
 * waiters were configured for 1), so status and top name the limits and their processes. Read from
 * what Redis holds: status.lua's by_process. */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

int cli_limits_in_use(const dbt_status_kind *k, cli_limit_use *out, int cap)
{
    int n = 0;
    for (int i = 0; i < k->nby_proc; i++) {
        const dbt_status_proc_count *c = &k->by_proc[i];
        for (int l = 0; l < c->nlimits; l++) {
            int j = 0;
            while (j < n && out[j].limit != c->limits[l])
                j++;
            if (j == n) {
                if (n == cap)
                    continue;
                out[n++] = (cli_limit_use){.limit = c->limits[l]};
            }
            if (out[j].nprocs < (int)(sizeof out[j].procs / sizeof *out[j].procs))
                out[j].procs[out[j].nprocs] = c;
            out[j].nprocs++;
        }
    }
    /* ascending, as status.lua lists each process' */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1].limit > out[j].limit; j--) {
            cli_limit_use t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

void cli_render_limits_in_use(FILE *out, const dbt_status_kind *k)
{
    cli_limit_use u[8];
    int n = cli_limits_in_use(k, u, 8);
    /* Under an override (by hand, or an adaptive controller's) every caller is admitted by it,
     * whatever its own: nothing looks stuck for that. */
    if (n < 2 || k->override)
        return;
    fputs("  LIMITS DISAGREE: the workers here were configured for", out);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s %ld (", i == 0 ? "" : i == n - 1 ? " and" : ",", u[i].limit);
        int shown = u[i].nprocs < (int)(sizeof u[i].procs / sizeof *u[i].procs)
                        ? u[i].nprocs
                        : (int)(sizeof u[i].procs / sizeof *u[i].procs);
        for (int j = 0; j < shown; j++) {
            char host[80];
            dbt_escape(u[i].procs[j]->host, 64, false, host, sizeof host);
            fprintf(out, "%s%s pid %ld", j ? ", " : "", host, u[i].procs[j]->pid);
        }
        if (u[i].nprocs > shown)
            fprintf(out, " and %d more", u[i].nprocs - shown);
        fputc(')', out);
    }
    fprintf(
        out,
        ": each is admitted only below its own limit, so a waiter configured for %ld waits "
        "while %ld or more are held (set one DBTHROTTLE_MAX_QUERIES for the pool, or `dbthrottle "
        "limit` for all)\n",
        u[0].limit, u[0].limit);
}

void cli_json_limits_in_use(FILE *out, const dbt_status_kind *k)
{
    cli_limit_use u[8];
    int n = cli_limits_in_use(k, u, 8);
    fputs(",\"limits_in_use\":[", out);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s{\"limit\":%ld,\"processes\":[", i ? "," : "", u[i].limit);
        int shown = u[i].nprocs < (int)(sizeof u[i].procs / sizeof *u[i].procs)
                        ? u[i].nprocs
                        : (int)(sizeof u[i].procs / sizeof *u[i].procs);
        for (int j = 0; j < shown; j++) {
            fputs(j ? ",{\"host\":" : "{\"host\":", out);
            cli_json_str(out, u[i].procs[j]->host);
            fprintf(out, ",\"pid\":%ld}", u[i].procs[j]->pid);
        }
        fprintf(out, "],\"process_count\":%d}", u[i].nprocs);
    }
    fputc(']', out);
}
