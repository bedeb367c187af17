/* send_op.h - one asynchronous command call of the program (a PQsend* call, PQpipelineSync,
 * PQsendFlushRequest) as data: so that one function makes the real call, and so that a command
 * held while it waits for its permit (held.c) can be copied, kept, and made later. */
#ifndef DBT_SEND_OP_H
#define DBT_SEND_OP_H

#include <libpq-fe.h>
#include <stdbool.h>

typedef enum {
    DBT_OP_QUERY,             /* PQsendQuery(text) */
    DBT_OP_QUERY_PARAMS,      /* PQsendQueryParams(text, params..., result_format) */
    DBT_OP_PREPARE,           /* PQsendPrepare(name, text, nparams, types) */
    DBT_OP_QUERY_PREPARED,    /* PQsendQueryPrepared(name, params..., result_format) */
    DBT_OP_DESCRIBE_PREPARED, /* PQsendDescribePrepared(name) */
    DBT_OP_DESCRIBE_PORTAL,   /* PQsendDescribePortal(name) */
    DBT_OP_PIPELINE_SYNC,     /* PQpipelineSync */
    DBT_OP_FLUSH_REQUEST      /* PQsendFlushRequest */
} dbt_op_type;

typedef struct dbt_send_op {
    dbt_op_type type;
    const char *text; /* the SQL, when the call carries some */
    const char *name; /* the statement's or portal's name */
    int nparams;
    const Oid *types;
    const char *const *values;
    const int *lengths;
    const int *formats;
    int result_format;
    struct dbt_send_op *next; /* in a held queue */
    int rc;                   /* held: what the real call returned when it was made */
    bool single_row;          /* held: PQsetSingleRowMode was asked for it */
} dbt_send_op;

/* Whether the op sends a command (one result set, then NULL), rather than a sync or a flush. */
bool dbt_op_is_command(const dbt_op_type type);

/* Makes the real libpq call; 0 when libpq (or the lookup of its function) fails. */
int dbt_send_op_real(PGconn *conn, const dbt_send_op *op);

/* A deep copy that owns every string and array (parameter values by their length when binary);
 * NULL when out of memory. Freed by dbt_send_op_free. */
dbt_send_op *dbt_send_op_copy(const dbt_send_op *op);
void dbt_send_op_free(dbt_send_op *op);

#endif
