/* fork_client.c - a libpq program that forks while its connection holds a query permit (inside a
 * transaction), as pre-fork servers do; the child opens a connection of its own and queries.
 * Prints the child's result; the test reads the throttle's trace for who got which grant. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return ok;
}

int main(void)
{
    PGconn *parent = PQconnectdb("");
    if (PQstatus(parent) != CONNECTION_OK || !run(parent, "BEGIN") || !run(parent, "SELECT 1"))
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        PGconn *own = PQconnectdb("");
        int ok = PQstatus(own) == CONNECTION_OK && run(own, "SELECT 2");
        PQfinish(own);
        printf("child %s\n", ok ? "ok" : "failed");
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    int ok = run(parent, "COMMIT");
    PQfinish(parent);
    return ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
