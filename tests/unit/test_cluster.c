/* Redis Cluster: the hash slot of a key (the values a Redis 7.0 cluster node's CLUSTER KEYSLOT
 * answers), the redis-cluster:// URL, and what a redirection says (cluster.h). */
#include "cluster.h"
#include "config.h"
#include "keys.h"

#include <criterion/criterion.h>
#include <string.h>

static int slot_of(const char *key)
{
    return dbt_cluster_slot(key, strlen(key));
}

Test(cluster_slot, crc16_xmodem_check_value)
{
    /* The CRC-16/XMODEM check value, and Redis Cluster's specification's example. */
    cr_expect_eq(dbt_crc16("123456789", 9), 0x31C3);
    cr_expect_eq(slot_of("123456789"), 12739);
}

Test(cluster_slot, as_cluster_keyslot_answers)
{
    struct {
        const char *key;
        int slot;
    } known[] = {
        /* redis-cli -p P cluster keyslot KEY, Redis 7.0.15 */
        {"foo", 12182},
        {"bar", 5061},
        {"dbthrottle:{db1}", 3217},
        {"dbthrottle:{db1}:q:holders", 3217},
        {"foo{}{bar}", 8363},    /* an empty tag: the whole key */
        {"foo{{bar}}zap", 4015}, /* the tag is "{bar" */
        {"foo{bar}{zap}", 5061}, /* the first tag only: "bar" */
        {"{user1000}.following", 3443},
        {"a{", 14311},
        {"{}", 15257},
        {"dbthrottle:{h%3A5432%2Fapp}", 11643},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        cr_expect_eq(slot_of(known[i].key), known[i].slot, "%s: %d, CLUSTER KEYSLOT says %d",
                     known[i].key, slot_of(known[i].key), known[i].slot);
}

Test(cluster_slot, every_key_of_a_pool_shares_the_route_slot)
{
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, "dbthrottle:", "h:5432/app {x}"));
    int s = slot_of(k.base);
    cr_expect_eq(slot_of(k.wake_prefix), s);
    cr_expect_eq(slot_of(k.procs), s);
    cr_expect_eq(slot_of(k.procinfo), s);
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            cr_expect_eq(slot_of(k.keys[kind][i]), s, "%s", k.keys[kind][i]);
    dbt_keys_free(&k);
}

Test(cluster_url, forms)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_assert(dbt_parse_redis_url("U", "redis-cluster://a:7000,b,[::1]:7002", &u, err), "%s", err);
    cr_expect(u.cluster);
    cr_expect_eq(u.nseeds, 3);
    cr_expect_str_eq(u.seeds[0].host, "a");
    cr_expect_eq(u.seeds[0].port, 7000);
    cr_expect_str_eq(u.seeds[1].host, "b");
    cr_expect_eq(u.seeds[1].port, 6379);
    cr_expect_str_eq(u.seeds[2].host, "::1");
    cr_expect_eq(u.seeds[2].port, 7002);
    cr_expect_str_eq(u.host, "a", "the first seed stands for the URL in messages");
    cr_expect_eq(u.port, 7000);
    cr_expect_eq(u.db, 0);
    cr_assert(dbt_parse_redis_url("U", "REDIS-CLUSTER://app:p%40ss@n1:1,n2:2/0", &u, err), "%s",
              err);
    cr_expect_str_eq(u.user, "app");
    cr_expect_str_eq(u.password, "p@ss");
    cr_expect_eq(u.nseeds, 2);
    cr_expect_str_eq(u.seeds[1].host, "n2");
    cr_assert(dbt_parse_redis_url("U", "redis-cluster://:p@w@solo/", &u, err), "%s", err);
    cr_expect_str_eq(u.password, "p@w", "the last '@' ends the userinfo");
    cr_expect_eq(u.nseeds, 1);
    cr_assert(dbt_parse_redis_url("U", "rediss-cluster://:pw@a:1,b:2", &u, err), "%s", err);
    cr_expect(u.cluster && u.tls, "rediss-cluster:// is TLS to every node");
    cr_expect_eq(u.nseeds, 2);
    cr_assert(dbt_parse_redis_url("U", "redis://h:1", &u, err), "%s", err);
    cr_expect(!u.cluster, "a plain URL replaces the cluster one whole");
    cr_expect_eq(u.nseeds, 0);
    dbt_redis_url_free(&u);
}

Test(cluster_url, refused)
{
    const char *bad[] = {
        "redis-cluster://a,b/2",  /* a cluster has db 0 only */
        "redis-cluster://",       /* no host */
        "redis-cluster://a,,b",   /* an empty host */
        "redis-cluster://a:0",    /* bad port */
        "redis-cluster://a:1x,b", /* bad port */
        "redis-cluster://a b",    /* bad character */
        "redis-cluster://user@a", /* a user without a password */
        "redis-cluster://[::1,b", /* unclosed bracket */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_redis_url u = {0};
        cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", bad[i], &u, err), "accepted %s",
                  bad[i]);
        cr_expect(strstr(err, "DBTHROTTLE_REDIS_URL") != NULL, "%s", err);
        cr_expect(strstr(err, "pw") == NULL, "showed the password: %s", err);
        dbt_redis_url_free(&u);
    }
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_expect(!dbt_parse_redis_url("U",
                                   "redis-cluster://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,"
                                   "h13,h14,h15,h16,h17",
                                   &u, err));
    cr_expect(strstr(err, "more than 16") != NULL, "%s", err);
}

Test(cluster_redirect, what_each_reply_says)
{
    int slot = -1;
    dbt_cluster_node to;
    cr_expect_eq(dbt_cluster_redirect_of("redis: MOVED 3999 127.0.0.1:6381", &slot, &to),
                 DBT_REDIR_MOVED);
    cr_expect_eq(slot, 3999);
    cr_expect_str_eq(to.host, "127.0.0.1");
    cr_expect_eq(to.port, 6381);
    cr_expect_eq(dbt_cluster_redirect_of("redis h:1: ASK 12 ::1:7000", &slot, &to), DBT_REDIR_ASK);
    cr_expect_eq(slot, 12);
    cr_expect_str_eq(to.host, "::1", "an IPv6 address: the port follows the last ':'");
    cr_expect_eq(to.port, 7000);
    cr_expect_eq(dbt_cluster_redirect_of(
                     "redis: TRYAGAIN Multiple keys request during rehashing of slot", NULL, NULL),
                 DBT_REDIR_TRYAGAIN);
    cr_expect_eq(dbt_cluster_redirect_of("redis: CLUSTERDOWN The cluster is down", NULL, NULL),
                 DBT_REDIR_DOWN);
    const char *none[] = {"redis: MOVED",
                          "redis: MOVED x 1.2.3.4:5",
                          "redis: MOVED 16384 h:1",
                          "redis: MOVED 1 h",
                          "redis: ERR MOVED 1 h:1",
                          "redis: TRYAGAINX",
                          "redis 127.0.0.1:6379: Connection refused",
                          ""};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++)
        cr_expect_eq(dbt_cluster_redirect_of(none[i], NULL, NULL), DBT_REDIR_NONE, "%s", none[i]);
    cr_expect_eq(dbt_cluster_redirect_of(NULL, NULL, NULL), DBT_REDIR_NONE);
}
