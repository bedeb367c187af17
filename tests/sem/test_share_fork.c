/* A fork()ed child names its host's group in its ids only once it has a record of its own in the
 * segment: one that cannot make it (here the segment's process table is full) uses its plain cid.
 * Otherwise Redis counted its waiters under the group while the segment knew nothing of them: the
 * host looked sole, and its processes passed permits around a waiter that could starve. */
#include "hostshare_internal.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{sf}:q:holders"

/* Holders in Redis whose id begins with prefix. */
static long long holders_named(const char *prefix)
{
    return test_redis_int(
        &fx_redis, "EVAL %s 1 %s %s",
        "local n = 0 for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do "
        "if string.sub(m, 1, #ARGV[1]) == ARGV[1] then n = n + 1 end end return n",
        HOLDERS, prefix);
}

/* The segment of dir (the one file in its per-user directory), mapped read-write. */
static dbt_seg *map_segment(const char *dir)
{
    char sub[400], path[700] = "";
    snprintf(sub, sizeof sub, "%s/dbthrottle-%u", dir, (unsigned)geteuid());
    DIR *d = opendir(sub);
    if (!d)
        return NULL;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && strncmp(e->d_name, "w.", 2) != 0) /* not a wake socket */
            snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    closedir(d);
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return NULL;
    void *m = mmap(NULL, sizeof(dbt_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

Test(share_fork, a_child_without_a_record_does_not_name_the_group, .init = fx_redis_start,
     .fini = fx_stop, .timeout = 60)
{
    char dir[] = "/tmp/dbt-sf-XXXXXX";
    cr_assert(mkdtemp(dir));
    char dir_kv[300];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dir);
    dbt_client *c = fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, NULL);
    dbt_pool *p = dbt_client_pool(c, "sf");
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000, .conn = "sf"};
    dbt_permit *pm;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &pm), DBT_ACQ_GRANTED);
    dbt_release(pm);
    /* Its release may still be on its way to Redis: the child must find no holder but its own. */
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_assert(test_wait_until(test_zcard_is, &none, 10000), "the parent's permit stays held");
    dbt_seg *g = map_segment(dir);
    cr_assert_not_null(g);
    char group[DBT_SHARE_GROUP_LEN + 1];
    snprintf(group, sizeof group, "%.16s~", g->group);

    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* Every record taken by a live process (the parent, with a wake socket bound for each,
         * so that the parent's purge of the dead leaves them): no room for the child's. */
        for (uint32_t i = 0; i < DBT_SEG_PROCS; i++)
            if (g->procs[i].pid == 0) {
                uint64_t nonce = 1000 + i;
                struct sockaddr_un a = {.sun_family = AF_UNIX};
                snprintf(a.sun_path, sizeof a.sun_path, "%s/dbthrottle-%u/" DBT_SEG_WAKE_FMT, dir,
                         (unsigned)geteuid(), (int)getppid(), nonce);
                int s = socket(AF_UNIX, SOCK_DGRAM, 0);
                if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0)
                    _exit(3);
                g->procs[i].nonce = nonce;
                g->procs[i].unregistered = 0;
                g->procs[i].pid = getppid();
            }
        g->proc_hw = DBT_SEG_PROCS;
        int rc = 1;
        if (dbt_acquire(p, DBT_KIND_QUERY, &o, &pm) == DBT_ACQ_GRANTED) {
            rc = holders_named(group) == 0 ? 0 : 2;
            dbt_release(pm);
        }
        _exit(rc);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 1, "the child was not granted");
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 3, "the child could not bind a wake socket");
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 2,
              "the child's permit names the group %s, with no record in the segment", group);
    munmap(g, sizeof(dbt_seg));
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert(system(rm) == 0);
}
