/* fuzz_config.c - libFuzzer target: the configuration file parser, and each setting through
 * dbt_config_set. Whatever the bytes, the parser must not crash, leak or read out of bounds, and a
 * refusal must be one line that fits DBT_ERRLEN. */
#include "config.h"
#include "settings.h"

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

    /* The same bytes as the value of one setting of the table, chosen by the first byte, by its
     * environment name or its file key. */
    int nsettings = 0;
    while (dbt_settings[nsettings].key)
        nsettings++;
    if (size > 0) {
        const dbt_setting *s = &dbt_settings[data[0] % nsettings];
        const char *key = (data[0] / nsettings) % 2 ? s->key : s->env;
        dbt_config_defaults(&cfg);
        memset(err, 0, sizeof err);
        if (!dbt_config_set(&cfg, key, text + 1, DBT_SRC_ENV, err))
            check_err(err);
        dbt_config_free(&cfg);
    }
    free(text);
    return 0;
}
