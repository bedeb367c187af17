/* lib.h - the process-wide throttle: settings read once, the logger, the semaphore client. */
#ifndef DBT_LIB_H
#define DBT_LIB_H

#include "config.h"
#include "sem_client.h"

#include <stdbool.h>

typedef struct {
    dbt_config cfg;
    bool broken;            /* a bad setting: every command is refused with `error`... */
    bool exempt_known;      /* ... but an exempt connection's, when DBTHROTTLE_EXEMPT parsed */
    char error[DBT_ERRLEN]; /* the one-line message of a bad setting */
    bool active;            /* a limit is set, the throttle is not disabled */
    bool announce_only;     /* disabled with a limit set: takes no permit, but reports itself */
    dbt_client *client;     /* NULL unless active or announce_only */
} dbt_lib;

/* The process' throttle, set up on first use (never before libpq is used). */
const dbt_lib *dbt_lib_get(void);

#endif
