/* The segment a pool shares is named by its key (sharing.c): processes of other pid or network
 * namespaces (containers on one /dev/shm) must never share one, since the segment judges a
 * process dead by kill(tid, 0) and wakes it through an abstract unix socket, both of which mean
 * something only within one namespace. */
#include "pool.h"
#include "sem_fixture.h"
#include "sharing.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(share_key, .init = fx_redis_start, .fini = fx_stop);

static void link_of(const char *path, char *out, size_t cap)
{
    ssize_t n = readlink(path, out, cap - 1);
    cr_assert_gt(n, 0, "readlink %s: %s", path, strerror(errno));
    out[n] = '\0';
}

Test(share_key, the_key_names_the_pid_and_network_namespaces)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "sk");
    cr_assert_not_null(p);
    char why[256] = "", pid_ns[64], net_ns[64];
    char *key = dbt_sharing_key(p, why, sizeof why);
    cr_assert_not_null(key, "%s", why);
    link_of("/proc/self/ns/pid", pid_ns, sizeof pid_ns);
    link_of("/proc/self/ns/net", net_ns, sizeof net_ns);
    cr_expect(strstr(key, p->keys.base) != NULL, "the pool's keys in %s", key);
    cr_expect(strstr(key, pid_ns) != NULL, "%s in %s", pid_ns, key);
    cr_expect(strstr(key, net_ns) != NULL, "%s in %s", net_ns, key);

    /* A process of another pid namespace (root only: skipped without the right) makes another key.
     */
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        close(fd[0]);
        if (unshare(CLONE_NEWPID) != 0)
            _exit(3);
        pid_t inner = fork();
        if (inner == 0) {
            char w[256];
            char *k = dbt_sharing_key(p, w, sizeof w);
            const char *out = k ? k : "";
            ssize_t ignored = write(fd[1], out, strlen(out));
            (void)ignored;
            _exit(k ? 0 : 4);
        }
        int st = 0;
        _exit(inner > 0 && waitpid(inner, &st, 0) == inner && WIFEXITED(st) ? WEXITSTATUS(st) : 5);
    }
    close(fd[1]);
    char other[1024];
    ssize_t n = 0, got;
    while ((got = read(fd[0], other + n, sizeof other - 1 - (size_t)n)) > 0)
        n += got;
    other[n] = '\0';
    close(fd[0]);
    int st = 0;
    cr_assert_eq(waitpid(child, &st, 0), child);
    cr_assert(WIFEXITED(st));
    if (WEXITSTATUS(st) == 3) {
        free(key);
        cr_skip_test("cannot make a pid namespace here (not root?)");
    }
    cr_assert_eq(WEXITSTATUS(st), 0, "the child in a new pid namespace made no key (%d)",
                 WEXITSTATUS(st));
    cr_expect_str_neq(other, key, "the same key from another pid namespace");
    cr_expect(strstr(other, net_ns) != NULL, "same network namespace: %s", other);
    free(key);
}
