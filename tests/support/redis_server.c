/* redis_server.c - tests start their own redis-server on a free loopback port in a temp dir. */
#include "redis_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static bool pings(const test_redis *r)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    bool ok = false;
    if (c && !c->err) {
        redisReply *rep = redisCommand(c, "PING");
        ok = rep != NULL; /* PONG, or NOAUTH from a server that wants a password */
        if (rep)
            freeReplyObject(rep);
    }
    if (c)
        redisFree(c);
    return ok;
}

static bool spawn(test_redis *r, const char *extra)
{
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    char *args[64];
    int n = 0;
    args[n++] = "redis-server";
    args[n++] = "--port";
    args[n++] = port;
    args[n++] = "--bind";
    args[n++] = "127.0.0.1";
    args[n++] = "--dir";
    args[n++] = r->dir;
    args[n++] = "--save";
    args[n++] = "";
    args[n++] = "--appendonly";
    args[n++] = "no";
    args[n++] = "--loglevel";
    args[n++] = "warning";
    args[n++] = "--logfile";
    args[n++] = "redis.log";
    char *copy = extra ? strdup(extra) : NULL;
    for (char *tok = copy ? strtok(copy, " ") : NULL; tok && n < 62; tok = strtok(NULL, " "))
        args[n++] = tok;
    args[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* Never outlive the test, even when it crashes. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            close(devnull);
        }
        execvp("redis-server", args);
        _exit(127);
    }
    free(copy);
    if (pid < 0)
        return false;
    r->pid = pid;
    int64_t deadline = test_now_ms() + 10000;
    while (test_now_ms() < deadline) {
        if (pings(r))
            return true;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            return false; /* port taken, most likely: the caller picks another */
        }
        usleep(5000);
    }
    return false;
}

/* Directories of servers not stopped yet: a test that fails an assertion never reaches its
 * test_redis_stop, so they are removed when the test process exits. */
enum { MAX_LEFT = 16 };
static char left_dirs[MAX_LEFT][256];
static pid_t left_owner; /* a forked child that exits must not remove its parent's servers */

static void remove_left_dirs(void)
{
    if (getpid() != left_owner)
        return;
    for (int i = 0; i < MAX_LEFT; i++)
        if (left_dirs[i][0]) {
            char cmd[300];
            snprintf(cmd, sizeof cmd, "rm -rf '%.250s'", left_dirs[i]);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", left_dirs[i]);
            left_dirs[i][0] = '\0';
        }
}

static void remember_dir(const char *dir, bool keep)
{
    static bool registered;
    if (!registered) {
        left_owner = getpid();
        atexit(remove_left_dirs);
        registered = true;
    }
    for (int i = 0; i < MAX_LEFT; i++) {
        if (keep && !left_dirs[i][0]) {
            snprintf(left_dirs[i], sizeof left_dirs[i], "%s", dir);
            return;
        }
        if (!keep && strcmp(left_dirs[i], dir) == 0) {
            left_dirs[i][0] = '\0';
            return;
        }
    }
}

bool test_redis_start(test_redis *r, const char *extra)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/dbt-redis-XXXXXX");
    if (!mkdtemp(r->dir))
        return false;
    remember_dir(r->dir, true);
    for (int attempt = 0; attempt < 20; attempt++) {
        r->port = free_port();
        if (r->port > 0 && spawn(r, extra))
            return true;
    }
    return false;
}

bool test_redis_restart(test_redis *r, const char *extra)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        if (spawn(r, extra))
            return true;
        usleep(20000); /* the old socket may linger a moment */
    }
    return false;
}

void test_redis_kill(test_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

void test_redis_stop(test_redis *r)
{
    test_redis_kill(r);
    if (r->dir[0]) {
        remember_dir(r->dir, false);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", r->dir);
        r->dir[0] = '\0';
    }
}

redisContext *test_redis_connect(const test_redis *r)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

long long test_redis_int(const test_redis *r, const char *fmt, ...)
{
    redisContext *c = test_redis_connect(r);
    if (!c)
        return -1000;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = -1000;
    if (rep && rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep && rep->type == REDIS_REPLY_STRING) /* HGET of a counter, GET */
        v = strtoll(rep->str, NULL, 10);
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return v;
}

/* Sums one field ("calls" or "usec") of the named commands in INFO commandstats; -1 when Redis
 * cannot be reached. */
static long long commandstats_sum(const test_redis *r, const char *const *cmds, size_t n,
                                  const char *field)
{
    redisContext *c = test_redis_connect(r);
    if (!c)
        return -1;
    redisReply *rep = redisCommand(c, "INFO commandstats");
    long long total = 0;
    if (rep && rep->type == REDIS_REPLY_STRING) {
        for (size_t i = 0; i < n; i++) {
            char line[64], key[16];
            snprintf(line, sizeof line, "cmdstat_%s:", cmds[i]);
            snprintf(key, sizeof key, "%s=", field);
            char *at = strstr(rep->str, line);
            char *eol = at ? strstr(at, "\r\n") : NULL;
            char *val = at ? strstr(at, key) : NULL;
            if (val && (!eol || val < eol))
                total += strtoll(val + strlen(key), NULL, 10);
        }
    }
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return total;
}

long long test_redis_commands(const test_redis *r)
{
    /* INFO counts the commands scripts run too; the client sends only these at top level. */
    static const char *const top[] = {"evalsha", "eval",   "blpop", "script",
                                      "auth",    "select", "ping"};
    return commandstats_sum(r, top, sizeof top / sizeof *top, "calls");
}

long long test_redis_calls(const test_redis *r, const char *cmd)
{
    return commandstats_sum(r, &cmd, 1, "calls");
}

long long test_redis_script_usec(const test_redis *r)
{
    static const char *const scripts[] = {"evalsha", "eval"};
    return commandstats_sum(r, scripts, 2, "usec");
}

long long test_redis_dbsize(const test_redis *r)
{
    return test_redis_int(r, "DBSIZE");
}

/* The local ports of pid's TCP sockets to r's port, up to cap (from /proc: its descriptors'
 * socket inodes, found in the kernel's table of IPv4 TCP sockets). */
static int ports_of(pid_t pid, int server_port, int *ports, int cap)
{
    char path[64];
    unsigned long inodes[256];
    int ninodes = 0, n = 0;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d)) && ninodes < 256;) {
        char target[64];
        ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (sscanf(target, "socket:[%lu]", &inodes[ninodes]) == 1)
            ninodes++;
    }
    closedir(d);
    snprintf(path, sizeof path, "/proc/%d/net/tcp", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[512];
    while (n < cap && fgets(line, sizeof line, f)) {
        unsigned local, remote;
        unsigned long inode;
        /* "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode" */
        if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &local, &remote,
                   &inode) != 3 ||
            (int)remote != server_port)
            continue;
        for (int i = 0; i < ninodes; i++)
            if (inodes[i] == inode)
                ports[n++] = (int)local;
    }
    fclose(f);
    return n;
}

long long test_redis_blocked_of(const test_redis *r, pid_t pid)
{
    int ports[64];
    int nports = ports_of(pid, r->port, ports, 64);
    redisContext *c = test_redis_connect(r);
    redisReply *rep = c ? redisCommand(c, "CLIENT LIST") : NULL;
    long long n = rep && rep->type == REDIS_REPLY_STRING ? 0 : -1000;
    for (const char *line = n == 0 ? rep->str : NULL; line && *line;) {
        const char *end = strchr(line, '\n');
        const char *addr = strstr(line, " addr=");
        const char *flags = strstr(line, " flags=");
        int port;
        if (addr && flags && (!end || (addr < end && flags < end)) &&
            sscanf(addr, " addr=%*[^:]:%d", &port) == 1) {
            bool blocked = false;
            for (const char *fl = flags + strlen(" flags="); *fl && *fl != ' '; fl++)
                blocked = blocked || *fl == 'b';
            for (int i = 0; blocked && i < nports; i++)
                if (ports[i] == port) {
                    n++;
                    break;
                }
        }
        line = end ? end + 1 : NULL;
    }
    if (rep)
        freeReplyObject(rep);
    if (c)
        redisFree(c);
    return n;
}

void test_config(dbt_config *cfg, const test_redis *r, ...)
{
    va_list ap;
    va_start(ap, r);
    const char *first = va_arg(ap, const char *);
    test_configv(cfg, r, first, ap);
    va_end(ap);
}

void test_configv(dbt_config *cfg, const test_redis *r, const char *first, va_list more)
{
    char err[DBT_ERRLEN], url[64];
    dbt_config_defaults(cfg);
    /* The semaphore tests play several processes, and several hosts, inside one test process and
     * its forks, and match ids by the plain cid: to the host's segment they would all be one
     * host. Host-level sharing is on only in the tests that ask for it (test_hostshare_pool.c). */
    if (!dbt_config_set(cfg, "DBTHROTTLE_HOST_SHARE", "off", DBT_SRC_ENV, err))
        fprintf(stderr, "test_config: %s\n", err);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r->port);
    if (!dbt_config_set(cfg, "DBTHROTTLE_REDIS_URL", url, DBT_SRC_ENV, err))
        fprintf(stderr, "test_config: %s\n", err);
    for (const char *kv = first; kv; kv = va_arg(more, const char *)) {
        char key[128];
        const char *eq = strchr(kv, '=');
        if (!eq || (size_t)(eq - kv) >= sizeof key)
            continue;
        memcpy(key, kv, (size_t)(eq - kv));
        key[eq - kv] = '\0';
        if (!dbt_config_set(cfg, key, eq + 1, DBT_SRC_ENV, err))
            fprintf(stderr, "test_config: %s\n", err);
    }
}

bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms)
{
    int64_t deadline = test_now_ms() + timeout_ms;
    for (;;) {
        if (cond(arg))
            return true;
        if (test_now_ms() >= deadline)
            return cond(arg);
        usleep(2000);
    }
}
