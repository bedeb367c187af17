/* lib.c - the process-wide throttle: settings read once, the logger, the semaphore client.
 *
 * Nothing happens when the library is merely loaded: the first libpq call that needs the throttle
 * reads the settings. A bad setting is reported once, on one line, and from then on every command
 * is refused: never run unthrottled by accident. */
#include "lib.h"

#include "log.h"
#include "throttle.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern char **environ;

static dbt_lib lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    char err[DBT_ERRLEN];
    if (!dbt_config_load(&lib.cfg, environ, err)) {
        lib.broken = true;
        snprintf(lib.error, sizeof lib.error, "%s", err);
        dbt_field f[] = {DBT_S("error", err), DBT_S("effect", "refusing every command")};
        dbt_log(DBT_LOG_ERROR, "config_error", f, 2);
        return;
    }
    if (!dbt_log_open(&lib.cfg, err)) {
        dbt_field f[] = {DBT_S("error", err)};
        dbt_log(DBT_LOG_ERROR, "log_error", f, 1);
    }
    if (lib.cfg.disable) {
        dbt_log(DBT_LOG_INFO, "disabled", NULL, 0);
        return;
    }
    if (lib.cfg.max_queries == 0 && lib.cfg.max_connections == 0) {
        dbt_field f[] = {DBT_S("reason", "neither DBTHROTTLE_MAX_QUERIES nor "
                                         "DBTHROTTLE_MAX_CONNECTIONS is set")};
        dbt_log(DBT_LOG_INFO, "not_throttled", f, 1);
        return;
    }
    lib.client = dbt_client_new(&lib.cfg);
    if (!lib.client) {
        lib.broken = true;
        snprintf(lib.error, sizeof lib.error, "out of memory");
        return;
    }
    dbt_on_evict_cancel(dbt_throttle_evict_cancel);
    lib.active = true;
}

const dbt_lib *dbt_lib_get(void)
{
    pthread_once(&once, setup);
    return &lib;
}

/* At exit, one summary line per pool; permits still held are given back so others need not
 * wait out their leases. The memory is left to the exiting process: other threads may still be
 * inside libpq. */
__attribute__((destructor)) static void at_exit(void)
{
    if (lib.client)
        dbt_client_exit(lib.client);
}
