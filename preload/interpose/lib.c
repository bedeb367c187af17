/* lib.c - the process-wide throttle: settings read once, the logger, the semaphore client.
 *
 * Nothing happens when the library is merely loaded: the first libpq call that needs the throttle
 * reads the settings. A bad setting is reported once, on one line, and from then on every command
 * is refused: never run unthrottled by accident. Two ways out stay open whatever else is wrong:
 * DBTHROTTLE_DISABLE=on (the escape hatch must not be locked by what it escapes), and the
 * connections DBTHROTTLE_EXEMPT names, when that setting itself parsed. */
#include "lib.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern char **environ;

static dbt_lib lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void)
{
    char err[DBT_ERRLEN];
    (void)dbt_config_load(&lib.cfg, environ, err);
    /* The one rule of `dbthrottle check` and `run`: the configuration in effect counts. A refused
     * value that a later source replaced with a good one is no error; an unknown name, a file
     * that cannot be read, or a value still refused in effect is. */
    const char *bad = dbt_config_error_for(&lib.cfg, DBT_READER_WORKER);
    bool ok = bad == NULL;
    if (bad)
        snprintf(err, sizeof err, "%s", bad);
    /* The log first, so that every line below (a configuration error too) is in the format and
     * at the place its settings say: each log setting that parsed counts, a refused one stays at
     * its default. */
    char log_err[DBT_ERRLEN];
    bool log_ok = dbt_log_open(&lib.cfg, log_err);
    if (lib.cfg.disable && dbt_config_value_ok(&lib.cfg, "disable")) {
        /* Said at warn when it is what keeps a broken configuration from refusing. */
        dbt_field f[] = {DBT_S("ignored", err)};
        dbt_log(ok ? DBT_LOG_INFO : DBT_LOG_WARN, "disabled", f, ok ? 0 : 1);
        /* Disabled where a limit is set (and the settings are sound enough to reach Redis):
         * listed by dbthrottle status as "disabled" (one background report a lease per pool),
         * so that nobody takes it for throttled. */
        if (ok && (lib.cfg.max_queries != 0 || lib.cfg.max_connections != 0)) {
            lib.client = dbt_client_new(&lib.cfg);
            lib.announce_only = lib.client != NULL;
        }
        return;
    }
    if (!log_ok) {
        dbt_field f[] = {DBT_S("error", log_err)};
        dbt_log(DBT_LOG_ERROR, "log_error", f, 1);
    }
    if (!ok) {
        lib.broken = true;
        lib.exempt_known = lib.cfg.nexempt > 0 && dbt_config_value_ok(&lib.cfg, "exempt");
        snprintf(lib.error, sizeof lib.error, "%s", err);
        dbt_field f[] = {DBT_S("error", err),
                         DBT_S("effect", lib.exempt_known
                                             ? "refusing every command but exempt connections'"
                                             : "refusing every command")};
        dbt_log(DBT_LOG_ERROR, "config_error", f, 2);
        return;
    }
    if (lib.cfg.password_file_warning) {
        dbt_field f[] = {DBT_S("warning", lib.cfg.password_file_warning)};
        dbt_log(DBT_LOG_WARN, "password_file_open", f, 1);
    }
    if (lib.cfg.config_password_warning) {
        dbt_field f[] = {DBT_S("warning", lib.cfg.config_password_warning)};
        dbt_log(DBT_LOG_WARN, "password_in_config_file", f, 1);
    }
    if (lib.cfg.max_queries == 0 && lib.cfg.max_connections == 0) {
        /* A warning, once per process: loaded into a libpq program to throttle it, and doing
         * nothing, is a mistake the operator must see at the default level. */
        dbt_field f[] = {DBT_S("reason", "neither DBTHROTTLE_MAX_QUERIES nor "
                                         "DBTHROTTLE_MAX_CONNECTIONS is set"),
                         DBT_S("effect", "this process runs unthrottled")};
        dbt_log(DBT_LOG_WARN, "not_throttled", f, 2);
        return;
    }
    lib.client = dbt_client_new(&lib.cfg);
    if (!lib.client) {
        lib.broken = true;
        snprintf(lib.error, sizeof lib.error, "out of memory");
        return;
    }
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
