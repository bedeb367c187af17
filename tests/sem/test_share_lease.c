/* Host sharing keeps processes of different leases apart: a passed permit's expiry in Redis
 * follows its renewer's lease, a giver offers one only with half of its own lease left, and the
 * receiver judges it stale by its own; across two leases a permit could outlive its expiry in
 * Redis and run beside its next grant. Two clients (as two processes would) of one pool and one
 * DBTHROTTLE_SHARE_DIR attach to one segment with the same lease, to two with different ones. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Segments in dir's per-user directory (files whose name is not a temp). */
static int segments_in(const char *dir)
{
    char sub[400];
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    DIR *d = opendir(sub);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "w.", 2) != 0) /* not a wake socket */
            n++;
    closedir(d);
    return n;
}

/* One acquire and release through a client of lease lease_ms: the pool attaches on first use. */
static void use_pool(const char *dir, const char *lease_ms)
{
    char dir_kv[300], lease_kv[64];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    snprintf(lease_kv, sizeof lease_kv, "DBTHROTTLE_LEASE=%s", lease_ms);
    dbt_client *c = fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, lease_kv, NULL);
    cr_assert(c);
    dbt_pool *p = dbt_client_pool(c, "lease");
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000, .conn = "lease"};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    dbt_release(pm);
}

static int segments_for_leases(const char *a, const char *b)
{
    char dir[] = "/tmp/dbt-lease-XXXXXX";
    cr_assert(mkdtemp(dir));
    use_pool(dir, a);
    use_pool(dir, b);
    int n = segments_in(dir);
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert(system(rm) == 0);
    return n;
}

Test(share_lease, same_lease_shares_one_segment, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 60)
{
    int n = segments_for_leases("3s", "3s");
    cr_expect_eq(n, 1, "%d segments for one lease", n);
}

Test(share_lease, different_leases_never_share_a_segment, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 60)
{
    int n = segments_for_leases("3s", "9s");
    cr_expect_eq(n, 2, "%d segments for two leases", n);
}
