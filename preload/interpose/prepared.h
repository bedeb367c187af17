/* prepared.h - the text of each statement a connection prepared (PQprepare, PQsendPrepare), so
 * that a command that runs one by name (PQexecPrepared, PQsendQueryPrepared) is weighed by its
 * SQL (sql= weight rules, the process' own or its pool's live ones). Kept whenever the library
 * throttles, as a live rule may come after the PQprepare; one thread uses a connection at a time
 * (libpq's rule), so a list needs no lock. */
#ifndef DBT_PREPARED_H
#define DBT_PREPARED_H

struct dbt_prepared;

/* Records (or replaces) the text of statement `name` ("" the unnamed one). Beyond
 * DBT_MAX_PREPARED statements a connection's newer ones are not recorded (weighed by the other
 * fields only). Out of memory: not recorded. */
#define DBT_MAX_PREPARED 256
void dbt_prepared_note(struct dbt_prepared **list, const char *name, const char *text);

/* The text prepared under `name`, or NULL; valid until the next note or free. */
const char *dbt_prepared_text(const struct dbt_prepared *list, const char *name);

void dbt_prepared_free(struct dbt_prepared *list);

#endif
