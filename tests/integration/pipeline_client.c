/* pipeline_client.c - stays in pipeline mode for three batches (two queries and a sync each),
 * reading every result, and checks the answers. The test reads the trace: each batch should be
 * one grant, given back once its sync is answered, while the connection stays in pipeline mode. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    PGconn *c = PQconnectdb("");
    if (PQstatus(c) != CONNECTION_OK || !PQenterPipelineMode(c))
        return 1;
    int sum = 0;
    for (int batch = 0; batch < 3; batch++) {
        for (int q = 1; q <= 2; q++) {
            char sql[32];
            snprintf(sql, sizeof sql, "SELECT %d", batch * 10 + q);
            if (!PQsendQueryParams(c, sql, 0, NULL, NULL, NULL, NULL, 0))
                return 2;
        }
        if (!PQpipelineSync(c))
            return 3;
        for (;;) {
            PGresult *r = PQgetResult(c);
            if (!r)
                continue; /* the end of one query's results */
            ExecStatusType st = PQresultStatus(r);
            if (st == PGRES_TUPLES_OK)
                sum += atoi(PQgetvalue(r, 0, 0));
            PQclear(r);
            if (st == PGRES_PIPELINE_SYNC)
                break;
            if (st != PGRES_TUPLES_OK)
                return 4;
        }
    }
    printf("pipeline %s sum %d\n", PQpipelineStatus(c) == PQ_PIPELINE_ON ? "on" : "off", sum);
    PQexitPipelineMode(c);
    PQfinish(c);
    return 0;
}
