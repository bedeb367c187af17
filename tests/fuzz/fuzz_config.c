/* fuzz_config.c - libFuzzer target: the configuration file parser, and each setting through
 * dbt_config_set. Whatever the bytes, the parser must not crash, leak or read out of bounds, and a
 * refusal must be one line that fits DBT_ERRLEN. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(const char *err)
{
    if (memchr(err, '\0', DBT_ERRLEN) == NULL || strchr(err, '\n') != NULL)
        abort(); /* an error message must be one NUL-terminated line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    char err[DBT_ERRLEN];
    dbt_config cfg;
    dbt_config_defaults(&cfg);
    memset(err, 0, sizeof err);
    if (!dbt_config_parse_text(&cfg, "fuzz.conf", text, err))
        check_err(err);
    dbt_config_free(&cfg);

    /* The same bytes as the value of one setting, chosen by the first byte. */
    static const char *const keys[] = {"DBTHROTTLE_REDIS_URL",
                                       "DBTHROTTLE_MAX_QUERIES",
                                       "DBTHROTTLE_MAX_CONNECTIONS",
                                       "DBTHROTTLE_POOL",
                                       "DBTHROTTLE_WAIT_TIMEOUT",
                                       "DBTHROTTLE_LEASE",
                                       "DBTHROTTLE_REDIS_TIMEOUT",
                                       "DBTHROTTLE_ON_REDIS_ERROR",
                                       "DBTHROTTLE_LOG_LEVEL",
                                       "DBTHROTTLE_LOG_FORMAT",
                                       "DBTHROTTLE_KEY_PREFIX",
                                       "DBTHROTTLE_EXEMPT",
                                       "DBTHROTTLE_IDLE_IN_TX_WARN",
                                       "max_queries",
                                       "redis_url",
                                       "exempt"};
    if (size > 0) {
        dbt_config_defaults(&cfg);
        memset(err, 0, sizeof err);
        const char *key = keys[data[0] % (sizeof keys / sizeof *keys)];
        if (!dbt_config_set(&cfg, key, text + 1, DBT_SRC_ENV, err))
            check_err(err);
        dbt_config_free(&cfg);
    }
    free(text);
    return 0;
}
