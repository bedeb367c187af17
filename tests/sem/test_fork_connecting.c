/* fork() while another thread connects to Redis: the child keeps no copy of that socket.
 *
 * A connection is known to its pool (which a fork()ed child closes) only once it is made: its
 * handshake (HELLO, INFO) runs without the pool's lock. A fork meanwhile gave the child a copy of
 * the socket that nothing in the child knew of: kept open for the child's whole life, beside the
 * parent's (fork_and_threads' "no Redis socket shared by two processes" saw it under load, up to
 * 5 sockets of the parent in its child for as long as the child ran). */
#include "sem_fixture.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(fork_connecting, .init = fx_redis_start, .fini = fx_stop);

/* How many of this process' descriptors are TCP sockets connected to fx_redis. */
static int sockets_to_redis(void)
{
    int n = 0;
    for (int fd = 3; fd < 1024; fd++) {
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
            ntohs(a.sin_port) == fx_redis.port)
            n++;
    }
    return n;
}

static bool some_socket_to_redis(void *arg)
{
    (void)arg;
    return sockets_to_redis() > 0;
}

typedef struct {
    dbt_pool *pool;
    int res;
} acquirer_arg;

static void *acquirer(void *arg)
{
    acquirer_arg *a = arg;
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 20000};
    dbt_permit *x = NULL;
    a->res = dbt_acquire(a->pool, DBT_KIND_QUERY, &o, &x);
    dbt_release(x);
    return NULL;
}

Test(fork_connecting, a_child_forked_during_a_connect_keeps_no_copy_of_its_socket, .timeout = 60)
{
    dbt_client *c =
        fx_client("DBTHROTTLE_REDIS_TIMEOUT=10s", "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_pool *p = dbt_client_pool(c, "forkconn");
    /* Stopped, Redis still accepts connections (the kernel completes them) but answers nothing:
     * the thread's connect stays in its handshake. */
    cr_assert_eq(kill(fx_redis.pid, SIGSTOP), 0);
    acquirer_arg a = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, acquirer, &a);
    bool connecting = test_wait_until(some_socket_to_redis, NULL, 10000);
    pid_t pid = connecting ? fork() : -1;
    if (pid == 0)
        _exit(sockets_to_redis() > 100 ? 100 : sockets_to_redis());
    int st = 0;
    if (pid > 0)
        waitpid(pid, &st, 0);
    kill(fx_redis.pid, SIGCONT);
    pthread_join(t, NULL);
    cr_assert(connecting, "the thread never connected to Redis");
    cr_assert(WIFEXITED(st));
    cr_expect_eq(WEXITSTATUS(st), 0, "the child kept %d socket(s) its parent was connecting",
                 WEXITSTATUS(st));
    cr_expect_eq(a.res, DBT_ACQ_GRANTED, "the parent's connect went on after the fork");
}
