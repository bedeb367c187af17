/* fuzz_keys.c - libFuzzer target: pool name and key prefix -> Redis keys. Every key of a pool
 * must carry exactly one hash tag, the same for all of them (one Cluster slot), and the escape
 * must be injective: two different pool names never share keys, so one pool can never address
 * another's. The input is "prefix\0pool\0other pool". */
#include "keys.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tag(const char *key, const char *tag)
{
    const char *open = strchr(key, '{'), *close = strchr(key, '}');
    if (!open || !close || close < open || strchr(open + 1, '{') || strchr(close + 1, '}'))
        abort();
    if ((size_t)(close - open + 1) != strlen(tag) || strncmp(open, tag, strlen(tag)) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = calloc(1, size + 3);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    const char *prefix = buf;
    const char *pool = prefix + strlen(prefix) + 1;
    const char *other = pool + strlen(pool) + 1;
    if (pool > buf + size)
        pool = "";
    if (other > buf + size)
        other = "";

    dbt_keys a, b;
    if (!dbt_keys_init(&a, prefix, pool)) {
        free(buf);
        return 0;
    }
    const char *tag = strchr(a.base, '{');
    if (!tag)
        abort();
    for (int k = 0; k < DBT_NKINDS; k++)
        for (int i = 0; i < DBT_NKEYS; i++)
            check_tag(a.keys[k][i], tag);
    check_tag(a.wake_prefix, tag);
    if (dbt_keys_init(&b, prefix, other)) {
        bool same_pool = strcmp(pool, other) == 0;
        bool same_keys = strcmp(a.keys[0][0], b.keys[0][0]) == 0;
        if (same_pool != same_keys)
            abort(); /* different pools share keys, or one pool got two sets */
        dbt_keys_free(&b);
    }
    char *e1 = dbt_key_escape(pool), *e2 = dbt_key_escape(other);
    if (e1 && e2 && (strcmp(e1, e2) == 0) != (strcmp(pool, other) == 0))
        abort();
    free(e1);
    free(e2);
    dbt_keys_free(&a);
    free(buf);
    return 0;
}
