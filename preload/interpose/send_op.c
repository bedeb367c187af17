/* send_op.c - an asynchronous command call as data: the real call, and a copy to make it later. */
#include "send_op.h"

#include "real.h"

#include <stdlib.h>
#include <string.h>

bool dbt_op_is_command(const dbt_op_type type)
{
    return type != DBT_OP_PIPELINE_SYNC && type != DBT_OP_FLUSH_REQUEST;
}

int dbt_send_op_real(PGconn *conn, const dbt_send_op *op)
{
    switch (op->type) {
    case DBT_OP_QUERY: {
        __typeof__(&PQsendQuery) f = DBT_REAL(PQsendQuery);
        return f ? f(conn, op->text) : 0;
    }
    case DBT_OP_QUERY_PARAMS: {
        __typeof__(&PQsendQueryParams) f = DBT_REAL(PQsendQueryParams);
        return f ? f(conn, op->text, op->nparams, op->types, op->values, op->lengths, op->formats,
                     op->result_format)
                 : 0;
    }
    case DBT_OP_PREPARE: {
        __typeof__(&PQsendPrepare) f = DBT_REAL(PQsendPrepare);
        return f ? f(conn, op->name, op->text, op->nparams, op->types) : 0;
    }
    case DBT_OP_QUERY_PREPARED: {
        __typeof__(&PQsendQueryPrepared) f = DBT_REAL(PQsendQueryPrepared);
        return f ? f(conn, op->name, op->nparams, op->values, op->lengths, op->formats,
                     op->result_format)
                 : 0;
    }
    case DBT_OP_DESCRIBE_PREPARED: {
        __typeof__(&PQsendDescribePrepared) f = DBT_REAL(PQsendDescribePrepared);
        return f ? f(conn, op->name) : 0;
    }
    case DBT_OP_DESCRIBE_PORTAL: {
        __typeof__(&PQsendDescribePortal) f = DBT_REAL(PQsendDescribePortal);
        return f ? f(conn, op->name) : 0;
    }
    case DBT_OP_PIPELINE_SYNC: {
        __typeof__(&PQpipelineSync) f = DBT_REAL(PQpipelineSync);
        return f ? f(conn) : 0;
    }
    case DBT_OP_FLUSH_REQUEST: {
        __typeof__(&PQsendFlushRequest) f = DBT_REAL(PQsendFlushRequest);
        return f ? f(conn) : 0;
    }
    }
    return 0;
}

static bool dup_str(const char *from, const char **to)
{
    *to = NULL;
    if (!from)
        return true;
    return (*to = strdup(from)) != NULL;
}

static bool dup_mem(const void *from, size_t n, const void **to)
{
    *to = NULL;
    if (!from || n == 0)
        return true;
    void *p = malloc(n);
    if (p)
        memcpy(p, from, n);
    *to = p;
    return p != NULL;
}

/* The parameter values: each as long as libpq reads it (binary: its length; text: to its NUL). */
static bool dup_values(const dbt_send_op *op, dbt_send_op *c)
{
    c->values = NULL;
    if (!op->values || op->nparams <= 0)
        return true;
    char **v = calloc((size_t)op->nparams, sizeof *v);
    if (!v)
        return false;
    c->values = (const char *const *)v;
    for (int i = 0; i < op->nparams; i++) {
        const char *x = op->values[i];
        if (!x)
            continue; /* SQL NULL */
        bool binary = op->formats && op->formats[i] != 0;
        size_t n = binary ? (size_t)(op->lengths ? op->lengths[i] : 0) : strlen(x) + 1;
        if (!(v[i] = malloc(n ? n : 1)))
            return false;
        memcpy(v[i], x, n);
    }
    return true;
}

dbt_send_op *dbt_send_op_copy(const dbt_send_op *op)
{
    dbt_send_op *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->type = op->type;
    c->nparams = op->nparams;
    c->result_format = op->result_format;
    size_t n = op->nparams > 0 ? (size_t)op->nparams : 0;
    const void *types = NULL, *lengths = NULL, *formats = NULL;
    bool ok = dup_str(op->text, &c->text) && dup_str(op->name, &c->name) &&
              dup_mem(op->types, n * sizeof *op->types, &types) &&
              dup_mem(op->lengths, n * sizeof *op->lengths, &lengths) &&
              dup_mem(op->formats, n * sizeof *op->formats, &formats);
    c->types = types;
    c->lengths = lengths;
    c->formats = formats;
    ok = ok && dup_values(op, c);
    if (!ok) {
        dbt_send_op_free(c);
        return NULL;
    }
    return c;
}

void dbt_send_op_free(dbt_send_op *op)
{
    if (!op)
        return;
    if (op->values)
        for (int i = 0; i < op->nparams; i++)
            free((void *)op->values[i]);
    free((void *)op->values);
    free((void *)op->text);
    free((void *)op->name);
    free((void *)op->types);
    free((void *)op->lengths);
    free((void *)op->formats);
    free(op);
}
