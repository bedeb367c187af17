/* Hostile pool names stay in their own keys and slot; callers that disagree on the limit are
 * each admitted only below their own, and the disagreement is logged once. */
#include "log.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* Redis Cluster's key slot: CRC16/XMODEM of the hash tag (or of the whole key) mod 16384. */
static unsigned crc16(const char *s, size_t n)
{
    unsigned crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

static unsigned key_slot(const char *key)
{
    size_t n = strlen(key);
    const char *open = strchr(key, '{');
    if (open) {
        const char *close = strchr(open + 1, '}');
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
    }
    return crc16(key, n) & 16383;
}

static char *hash_tag(const char *key)
{
    const char *open = strchr(key, '{');
    const char *close = open ? strchr(open + 1, '}') : NULL;
    return close ? strndup(open + 1, (size_t)(close - open - 1)) : NULL;
}

Test(names, every_key_of_a_pool_shares_its_hash_tag)
{
    char *big_braces = malloc(10241), *big_x = malloc(10241);
    memset(big_braces, '{', 10240);
    memset(big_x, 'x', 10240);
    big_braces[10240] = big_x[10240] = '\0';
    const char *names[] = {"db:5432/app", "a{b}c",      "}{",        "{",
                           "}",           "with space", "new\nline", "tab\tand\x01\x7f\xff",
                           "%7B",         "a%7Bb%7D",   big_braces,  big_x};
    const char *prefixes[] = {"dbthrottle:", "we{ird}:", "}"};
    for (size_t pi = 0; pi < sizeof prefixes / sizeof *prefixes; pi++) {
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            dbt_keys k;
            cr_assert(dbt_keys_init(&k, prefixes[pi], names[i]));
            char *esc = dbt_key_escape(names[i]);
            cr_assert_eq(strpbrk(esc, "{}% \n\t"), strchr(esc, '%'),
                         "escaped name keeps a brace or a blank");
            unsigned slot = key_slot(k.keys[0][0]);
            for (int kind = 0; kind < DBT_NKINDS; kind++)
                for (int j = 0; j < DBT_NKEYS; j++) {
                    char *tag = hash_tag(k.keys[kind][j]);
                    cr_assert_not_null(tag);
                    cr_expect_str_eq(tag, esc, "key %d/%d of pool %zu has tag %.40s", kind, j, i,
                                     tag);
                    cr_expect_eq(key_slot(k.keys[kind][j]), slot);
                    free(tag);
                }
            char *wtag = hash_tag(k.wake_prefix);
            cr_expect_str_eq(wtag, esc);
            free(wtag);
            free(esc);
            dbt_keys_free(&k);
        }
    }
    /* Escaping is injective: names that look alike after escaping stay apart. */
    char *e1 = dbt_key_escape("a{b}"), *e2 = dbt_key_escape("a%7Bb%7D");
    cr_expect_str_neq(e1, e2);
    free(e1);
    free(e2);
    free(big_braces);
    free(big_x);
}

Test(names, hostile_pools_never_touch_each_other, .timeout = 60, .init = fx_redis_start,
     .fini = fx_stop)
{
    char *big = malloc(10241);
    memset(big, '}', 10240);
    big[10240] = '\0';
    const char *names[] = {"a", "a{b}", "a%7Bb%7D", "a}", "{a", "a b", "a\nb", big};
    enum { N = sizeof names / sizeof *names };
    dbt_client *c = fx_client(NULL);
    dbt_permit *held[N];
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    for (int i = 0; i < N; i++) {
        dbt_pool *p = dbt_client_pool(c, names[i]);
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held[i]), DBT_ACQ_GRANTED,
                     "pool %d was blocked by another pool", i);
    }
    /* Each pool is now full, and only its own permit fills it. */
    for (int i = 0; i < N; i++) {
        dbt_permit *extra = NULL;
        cr_expect_eq(dbt_acquire(dbt_client_pool(c, names[i]), DBT_KIND_QUERY, &now, &extra),
                     DBT_ACQ_TIMEOUT);
        const dbt_keys *k = dbt_pool_keys(dbt_client_pool(c, names[i]));
        cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", k->keys[DBT_KIND_QUERY][DBT_K_HOLDERS]),
                     1);
        /* The connection semaphore of the same pool is separate. */
        cr_expect_eq(dbt_acquire(dbt_client_pool(c, names[i]), DBT_KIND_CONN, &now, &extra),
                     DBT_ACQ_GRANTED);
        dbt_release(extra);
    }
    for (int i = 0; i < N; i++)
        dbt_release(held[i]);
    fx_client_free(c);
    free(big);
}

static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

Test(names, disagreeing_limits_admit_each_caller_below_its_own, .timeout = 60,
     .init = fx_redis_start, .fini = fx_stop)
{
    char logpath[] = "/tmp/dbt-log-XXXXXX";
    int fd = mkstemp(logpath);
    close(fd);
    char logkv[64];
    snprintf(logkv, sizeof logkv, "DBTHROTTLE_LOG=%s", logpath);
    dbt_config cfg;
    test_config(&cfg, &fx_redis, logkv, NULL);
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(&cfg, err), "%s", err);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "agree");
    dbt_acquire_opts four = {.limit = 4, .wait_ms = 0}, two = {.limit = 2, .wait_ms = 0};
    dbt_permit *b[3], *a1 = NULL, *a2 = NULL, *x = NULL;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &four, &b[i]), DBT_ACQ_GRANTED);
    /* 3 holders: a caller configured for 2 is not admitted, one configured for 4 would be. */
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &a1), DBT_ACQ_TIMEOUT);
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &a1), DBT_ACQ_TIMEOUT);
    dbt_release(b[0]);
    dbt_release(b[1]);
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &a1), DBT_ACQ_GRANTED); /* 2 of 2 */
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &a2), DBT_ACQ_TIMEOUT);
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &four, &x), DBT_ACQ_GRANTED); /* 3 of 4 */
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{agree}:q:holders"), 3);
    dbt_release(x);
    dbt_release(a1);
    dbt_release(b[2]);
    dbt_client_free(c);
    dbt_log_close();
    cr_expect_eq(count_lines(logpath, "event=limit_disagreement"), 1,
                 "the disagreement was not logged exactly once");
    unlink(logpath);
    dbt_config_free(&cfg);
}
