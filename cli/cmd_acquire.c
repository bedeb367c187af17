/* cmd_acquire.c - dbthrottle acquire POOL -- CMD: any command under a pool's limit.
 *
 * The permit comes from the library's own semaphore client (the core archive), so that CMD queues
 * in the same fair order as the workers of the pool, its lease is renewed by the client's renewer
 * thread while CMD runs, and it is given back the moment CMD exits. What a libpq preload cannot
 * reach (JDBC, pgx, node-postgres, backups, migrations, cron jobs) is throttled this way.
 *
 * Signals. SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked in every thread (the client's threads
 * inherit the mask of the thread that starts them) and taken by one thread of ours with
 * sigwaitinfo, which sees who sent each: while we wait for the permit, one ends the wait (the
 * waiter is woken through its dbt_waker and withdraws from the queue); while CMD runs, one is
 * passed on to CMD, unless the terminal sent it (si_code SI_KERNEL), since the terminal signals
 * the whole process group and CMD has it already. The mutex `mu` orders the forwarding with the
 * start and the reaping of CMD's guard, so a signal never reaches a pid that is no longer its.
 *
 * CMD must not outlive the permit: it runs under a guard process (job_guard.c) that ends it, and
 * all it started, when we die; its libpq connections ask the server to end a statement whose
 * client is gone (PGOPTIONS), so nothing of it runs at the server when the permit comes back. */
#include "cli.h"
#include "job_guard.h"

#include "log.h"
#include "sem_client.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* sysexits.h's EX_TEMPFAIL: no permit now (a wait that ran out, Redis unreachable with
 * DBTHROTTLE_ON_REDIS_ERROR=closed, a class's queue full); CMD did not run. */
#define EXIT_NO_PERMIT 75

static const char usage[] =
    "usage: dbthrottle acquire POOL [--kind query|connection] [--limit N] [--weight N]\n"
    "                          [--class C] [--wait T] [--redis URL] [--key-prefix P]\n"
    "                          -- CMD [ARG...]\n"
    "\n"
    "Takes a permit of POOL from the same distributed semaphore as the throttled workers, runs\n"
    "CMD (no shell) while holding it, renews its lease while CMD runs, and gives it back as soon\n"
    "as CMD exits. The exit status is CMD's (128+N when a signal N killed it). Exit code 75: no\n"
    "permit, CMD did not run (the wait ran out; Redis unreachable with\n"
    "DBTHROTTLE_ON_REDIS_ERROR=closed; the class's queue is full). With =open (the default) an\n"
    "unreachable Redis runs CMD unthrottled, with a warning. Exit code 2: bad usage or settings;\n"
    "126 and 127: CMD cannot be run or is not found. SIGINT, SIGTERM, SIGHUP and SIGQUIT are\n"
    "passed on to CMD (not those the terminal sent its whole process group); while waiting, one\n"
    "ends the wait (exit 128+N). CMD runs under a guard process: if acquire itself is killed,\n"
    "CMD and everything it started get SIGTERM, then SIGKILL, before the permit can go back by\n"
    "its lease; what CMD leaves running when it exits is ended so too. CMD's libpq connections\n"
    "ask the server to end a dead client's statement (PGOPTIONS, "
    "DBTHROTTLE_SERVER_CHECK_INTERVAL).\n"
    "A permit lost while CMD runs (Redis unreachable for a lease) is said at once; with\n"
    "DBTHROTTLE_ON_REDIS_ERROR=closed it ends CMD. A separate limit is a separate POOL name.\n"
    "\n"
    "  --kind K       query (default) or connection: which of the pool's two semaphores\n"
    "  --limit N      the semaphore's limit (default DBTHROTTLE_MAX_QUERIES, or\n"
    "                 DBTHROTTLE_MAX_CONNECTIONS with --kind connection)\n"
    "  --weight N     take N units of the limit (default 1)\n"
    "  --class C      the class the permit is for (default DBTHROTTLE_CLASS; dbthrottle class)\n"
    "  --wait T       how long to wait for a permit: 30s, 5m, 0 (only if one is free now),\n"
    "                 infinite (default DBTHROTTLE_WAIT_TIMEOUT)\n"
    "  --redis URL    the coordinating Redis (as DBTHROTTLE_REDIS_URL)\n"
    "  --key-prefix P the prefix of dbthrottle's keys (as DBTHROTTLE_KEY_PREFIX)\n";

/* ---- the signal thread --------------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    sigset_t set;        /* the signals we take: INT, TERM, HUP, QUIT */
    pid_t child;         /* CMD while it runs and is not reaped; 0 before and after */
    atomic_int stop_sig; /* the first signal that came before CMD started (0: none) */
    dbt_waker waker;     /* wakes the wait for the permit */
} sg = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *take_signals(void *arg)
{
    (void)arg;
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&sg.set, &si);
        if (sig < 0)
            continue;
        /* logrotate's SIGHUP: our own log file is opened again (here, not in a handler: it takes
         * the log's lock), and the signal goes on to CMD or ends the wait as any other. */
        char err[DBT_ERRLEN];
        if (sig == SIGHUP && !dbt_log_reopen(err))
            dbt_log(DBT_LOG_WARN, "log_error", (dbt_field[]){DBT_S("error", err)}, 1);
        pthread_mutex_lock(&sg.mu);
        if (sg.child > 0) {
            if (si.si_code != SI_KERNEL)
                kill(sg.child, sig);
        } else {
            int none = 0;
            atomic_compare_exchange_strong(&sg.stop_sig, &none, sig);
            dbt_waker_fire(&sg.waker);
        }
        pthread_mutex_unlock(&sg.mu);
    }
    return NULL;
}

static bool stop_requested(void *arg)
{
    (void)arg;
    return atomic_load(&sg.stop_sig) != 0;
}

typedef struct {
    const char *pool;
    dbt_kind kind;
    int weight;
    char **cmd;
} acquire_args;

/* ---- CMD ------------------------------------------------------------------------------------ */

/* Finds name as execvp would (PATH, or the name itself when it holds a '/'), before anything is
 * taken: a command that cannot run never costs a permit. 0, or the errno (ENOENT, EACCES). */
static int resolve(const char *name, char *out, size_t cap)
{
    if (strchr(name, '/')) {
        if (access(name, X_OK) != 0)
            return errno;
        snprintf(out, cap, "%s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    int found = ENOENT;
    for (const char *p = path;; p++) {
        const char *end = strchrnul(p, ':');
        int n = (int)(end - p);
        char cand[PATH_MAX];
        struct stat st;
        if (snprintf(cand, sizeof cand, "%.*s%s%s", n, p, n ? "/" : "", name) < (int)sizeof cand &&
            stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0) {
                snprintf(out, cap, "%s", cand);
                return 0;
            }
            found = EACCES;
        }
        if (!*end)
            return found;
        p = end;
    }
}

/* 0 once CMD runs (the pipe's write end closed at the exec), else the exec's errno. */
static int exec_result(int fd)
{
    int e = 0;
    ssize_t n;
    do
        n = read(fd, &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(fd);
    return n == (ssize_t)sizeof e ? e : 0;
}

/* CMD's environment: ours, with PGOPTIONS asking the server for client_connection_check_interval
 * (DBTHROTTLE_SERVER_CHECK_INTERVAL) unless it is off or PGOPTIONS names the setting already. CMD
 * is not preloaded (its permit is ours), so its libpq connections do not ask for it themselves,
 * and a statement it left running at the server when it was ended would run on past our permit
 * (docs/design.md, "A dead client's statement"). *extra is what was allocated (to free). */
static char **job_env(const dbt_config *cfg, char **extra)
{
    *extra = NULL;
    int64_t ms = cfg->disable ? 0 : dbt_server_check_ms(cfg);
    const char *user = getenv("PGOPTIONS");
    if (ms <= 0 || (user && strcasestr(user, "client_connection_check_interval")))
        return environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    size_t len = (user ? strlen(user) : 0) + 96;
    char *opt = malloc(len);
    if (!env || !opt) {
        free(env);
        free(opt);
        return NULL;
    }
    snprintf(opt, len, "PGOPTIONS=%s%s-c client_connection_check_interval=%lld", user ? user : "",
             user && user[0] ? " " : "", (long long)ms);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PGOPTIONS=", 10) != 0)
            env[k++] = environ[i];
    env[k++] = opt;
    env[k] = NULL;
    *extra = opt;
    return env;
}

/* How often the permit is looked at while CMD runs: a lost one is said (and, closed, ends CMD)
 * within this of the loss being known. */
static int lost_tick_ms(const dbt_config *cfg)
{
    int64_t t = cfg->lease_ms / 4;
    return (int)(t < 10 ? 10 : t > 1000 ? 1000 : t);
}

/* Waits for CMD (under its guard) to end, looking at the permit meanwhile: one lost (Redis did not
 * accept a renewal for a whole lease: unreachable, or we were stopped that long) is said at once,
 * and with DBTHROTTLE_ON_REDIS_ERROR=closed CMD is ended, as a worker's command would be refused.
 * Returns CMD's exit status as a shell gives it (128+N for a signal N). */
static int wait_cmd(job_guard *job, dbt_permit *permit, const dbt_config *cfg,
                    const acquire_args *a)
{
    int status = 0, got;
    bool lost = false;
    while ((got = job_wait(job, permit ? lost_tick_ms(cfg) : -1, &status)) == 0) {
        if (lost || !dbt_permit_lost(permit))
            continue;
        lost = true;
        if (cfg->on_redis_error == DBT_ON_ERROR_CLOSED) {
            fprintf(stderr,
                    "dbthrottle acquire: error: the permit of %s was lost while %s ran (Redis "
                    "accepted no renewal for a whole lease): DBTHROTTLE_ON_REDIS_ERROR=closed, so "
                    "%s is ended\n",
                    a->pool, a->cmd[0], a->cmd[0]);
            job_end(job);
        } else {
            fprintf(stderr,
                    "dbthrottle acquire: warning: the permit of %s was lost while %s ran (Redis "
                    "accepted no renewal for a whole lease): %s runs on without it, perhaps "
                    "beside more than the limit (DBTHROTTLE_ON_REDIS_ERROR=open)\n",
                    a->pool, a->cmd[0], a->cmd[0]);
        }
    }
    /* Not reaped yet (WNOWAIT): its pid cannot be reused while the signal thread may still use
     * it. */
    siginfo_t si;
    while (waitid(P_PID, (id_t)job->guard, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&sg.mu);
    sg.child = 0;
    pthread_mutex_unlock(&sg.mu);
    int gst = 0;
    while (waitpid(job->guard, &gst, 0) < 0 && errno == EINTR)
        ;
    job_end(job);
    close(job->status_fd);
    if (got < 0) {
        /* Killed (only SIGKILL can): CMD got SIGKILL as it died; what CMD had started came to
         * us. */
        fprintf(stderr, "dbthrottle acquire: error: the guard of %s was killed: %s ended\n",
                a->cmd[0], a->cmd[0]);
        job_end_orphans();
        status = gst;
    }
    if (!lost && permit && dbt_permit_lost(permit))
        fprintf(stderr,
                "dbthrottle acquire: warning: Redis lost the permit while %s ran (its lease "
                "could not be renewed): it may have run beside more than the limit\n",
                a->cmd[0]);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* ---- the command ---------------------------------------------------------------------------- */

/* Sets a setting from an option through the library's own parser (its message on a bad value). */
static bool set_option(dbt_config *cfg, const char *var, const char *value)
{
    char err[DBT_ERRLEN];
    if (dbt_config_set(cfg, var, value, DBT_SRC_ENV, err))
        return true;
    cli_usage_error("acquire", "%s", err);
    return false;
}

/* Options, the settings they set, POOL and CMD. With `--`, options may come before and after POOL
 * (CMD is what follows it); without, CMD is what follows POOL. EXIT_USAGE after a message, -1 for
 * --help, else 0. */
static int parse(int argc, char **argv, dbt_config *cfg, acquire_args *a)
{
    static const struct option longopts[] = {
        {"kind", required_argument, NULL, 'k'},
        {"limit", required_argument, NULL, 'n'},
        {"weight", required_argument, NULL, 'w'},
        {"class", required_argument, NULL, 'c'},
        {"wait", required_argument, NULL, 't'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int dashes = argc;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            dashes = i;
            break;
        }
    char err[DBT_ERRLEN];
    /* Read before the options, which override them. */
    (void)dbt_config_load(cfg, environ, err);
    const char *limit = NULL, *wait = NULL, *klass = NULL;
    cli_redis_opts ro = {0};
    a->kind = DBT_KIND_QUERY;
    a->weight = 1;
    opterr = 0;
    int opt;
    /* "+": without `--`, the first operand (POOL) ends the options. */
    while ((opt = getopt_long(dashes, argv, dashes < argc ? "h" : "+h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            fputs(usage, stdout);
            return -1;
        case 'k':
            if (strcmp(optarg, "query") == 0)
                a->kind = DBT_KIND_QUERY;
            else if (strcmp(optarg, "connection") == 0)
                a->kind = DBT_KIND_CONN;
            else
                return cli_usage_error("acquire", "--kind: bad value \"%s\": query or connection",
                                       optarg);
            break;
        case 'n':
            limit = optarg;
            break;
        case 'w':
            if (!dbt_parse_limit("--weight", optarg, &a->weight, err))
                return cli_usage_error("acquire", "%s", err);
            break;
        case 'c':
            klass = optarg;
            break;
        case 't':
            wait = optarg;
            break;
        default:
            if (opt != '?' && opt != ':' && cli_redis_opt(&ro, opt, optarg))
                break;
            return cli_usage_error("acquire", "bad option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= dashes)
        return cli_usage_error("acquire", "no pool named");
    a->pool = argv[optind];
    if (dashes < argc) {
        if (optind + 1 < dashes)
            return cli_usage_error("acquire", "unexpected argument '%s' (CMD comes after --)",
                                   argv[optind + 1]);
        a->cmd = argv + dashes + 1;
    } else {
        a->cmd = argv + optind + 1;
    }
    if (!a->cmd[0])
        return cli_usage_error("acquire", "no command to run");
    if (!a->pool[0])
        return cli_usage_error("acquire", "the pool's name is empty");
    if ((ro.redis_url && !set_option(cfg, "DBTHROTTLE_REDIS_URL", ro.redis_url)) ||
        (ro.key_prefix && !set_option(cfg, "DBTHROTTLE_KEY_PREFIX", ro.key_prefix)) ||
        (limit && !set_option(cfg,
                              a->kind == DBT_KIND_CONN ? "DBTHROTTLE_MAX_CONNECTIONS"
                                                       : "DBTHROTTLE_MAX_QUERIES",
                              limit)) ||
        (wait && !set_option(cfg, "DBTHROTTLE_WAIT_TIMEOUT", wait)) ||
        (klass && !set_option(cfg, "DBTHROTTLE_CLASS", klass)))
        return EXIT_USAGE;
    return 0;
}

static const char *kind_name(dbt_kind kind)
{
    return kind == DBT_KIND_CONN ? "connection" : "query";
}

/* What an acquire that gave no permit means for CMD: EXIT_NO_PERMIT or EXIT_USAGE after a
 * message, or 128+N for a signal N; -1 when CMD runs without a permit (Redis unreachable, open). */
static int no_permit(dbt_acq_result r, dbt_pool *pool, const acquire_args *a, const dbt_config *cfg,
                     int limit)
{
    char what[64];
    switch (r) {
    case DBT_ACQ_UNTHROTTLED:
        fprintf(stderr,
                "dbthrottle acquire: warning: Redis is unreachable and "
                "DBTHROTTLE_ON_REDIS_ERROR=open: %s runs unthrottled, without a permit of %s\n",
                a->cmd[0], a->pool);
        return -1;
    case DBT_ACQ_TIMEOUT: {
        long long class_wait = -1;
        bool by_class = dbt_last_class_wait(&class_wait);
        int64_t waited = by_class ? class_wait : cfg->wait_timeout_ms;
        cli_duration(waited, what, sizeof what);
        cli_fail("acquire", "no %s permit of pool %s (limit %d) within %s%s: %s not run",
                 kind_name(a->kind), a->pool, limit, waited == 0 ? "0 (none free now)" : what,
                 by_class ? " (its class's wait)" : "", a->cmd[0]);
        return EXIT_NO_PERMIT;
    }
    case DBT_ACQ_INTERRUPTED:
        return 128 + atomic_load(&sg.stop_sig);
    case DBT_ACQ_REFUSED:
        cli_fail("acquire",
                 "Redis is unreachable and DBTHROTTLE_ON_REDIS_ERROR=closed: %s not run (the "
                 "library's log says why)",
                 a->cmd[0]);
        return EXIT_NO_PERMIT;
    case DBT_ACQ_QUEUE_FULL: {
        char klass[40] = "-";
        long long cap = -1;
        dbt_last_queue_full(klass, sizeof klass, &cap);
        cli_fail("acquire", "class \"%s\" of pool %s has its queue cap of %lld waiters: %s not run",
                 klass, a->pool, cap, a->cmd[0]);
        return EXIT_NO_PERMIT;
    }
    case DBT_ACQ_MISCONFIGURED: {
        char why[256];
        dbt_pool_misconfig(pool, why, sizeof why);
        cli_fail("acquire", "Redis refuses this configuration: %s", why[0] ? why : "see the log");
        return EXIT_USAGE;
    }
    default:
        cli_fail("acquire", "no permit (result %d): %s not run", (int)r, a->cmd[0]);
        return EXIT_NO_PERMIT;
    }
}

/* Runs CMD under its guard, holding `permit` (NULL: unthrottled); gives the permit back as soon
 * as CMD and whatever it started have ended. */
static int run_cmd(const acquire_args *a, const dbt_config *cfg, const char *path,
                   const sigset_t *mask, dbt_permit *permit)
{
    int n = 0;
    while (a->cmd[n])
        n++;
    /* For a script without #! (ENOEXEC): sh PATH ARG..., made before the fork. */
    char **sh_argv = calloc((size_t)n + 2, sizeof *sh_argv);
    char *extra = NULL;
    char **envp = sh_argv ? job_env(cfg, &extra) : NULL;
    if (!envp) {
        free(sh_argv);
        dbt_release(permit);
        return cli_fail("acquire", "out of memory"), EXIT_NO_PERMIT;
    }
    sh_argv[0] = "sh";
    sh_argv[1] = (char *)path;
    for (int i = 1; i < n; i++)
        sh_argv[i + 1] = a->cmd[i];
    /* CMD's grace between SIGTERM and SIGKILL when it is ended: min(1 s, lease/4), as the auto
     * server check, so that the two together stay within half a lease, less than the 2/3 lease
     * before a dead acquire's permit can come back. */
    int64_t grace = cfg->lease_ms / 4 < 1000 ? cfg->lease_ms / 4 : 1000;
    job_spec spec = {.path = path,
                     .argv = a->cmd,
                     .sh_argv = sh_argv,
                     .envp = envp,
                     .mask = mask,
                     .passed = &sg.set,
                     .grace_ms = grace};
    job_guard job = {.alive_fd = -1, .status_fd = -1, .exec_fd = -1};
    pthread_mutex_lock(&sg.mu);
    int sig = atomic_load(&sg.stop_sig);
    bool started = !sig && job_start(&job, &spec);
    int err = started || sig ? 0 : errno;
    if (started)
        sg.child = job.guard; /* from now on the signal thread passes signals on, through it */
    pthread_mutex_unlock(&sg.mu);
    if (started)
        err = exec_result(job.exec_fd);
    if (envp != environ)
        free(envp);
    free(extra);
    free(sh_argv);
    if (sig) { /* it came as the permit was granted: CMD does not start */
        dbt_release(permit);
        return 128 + sig;
    }
    if (!started || err) {
        if (started)
            wait_cmd(&job, NULL, cfg, a); /* the guard reports CMD's 127 and exits */
        dbt_release(permit);
        cli_fail("acquire", "cannot run %s: %s", a->cmd[0], strerror(err));
        return err == ENOENT ? 127 : 126;
    }
    int rc = wait_cmd(&job, permit, cfg, a);
    dbt_release(permit);
    return rc;
}

int cmd_acquire(int argc, char **argv)
{
    dbt_config cfg;
    acquire_args a = {0};
    int rc = parse(argc, argv, &cfg, &a);
    if (rc != 0) {
        dbt_config_free(&cfg);
        return rc < 0 ? 0 : rc;
    }
    /* As the library: DBTHROTTLE_DISABLE=on, itself well formed, is the way out whatever else is
     * wrong; else every setting must be good. */
    bool disabled = cfg.disable && dbt_config_value_ok(&cfg, "disable");
    const char *bad = disabled ? NULL : dbt_config_error_for(&cfg, DBT_READER_WORKER);
    if (bad) {
        cli_fail("acquire", "%s", bad);
        dbt_config_free(&cfg);
        return EXIT_USAGE;
    }
    int limit = a.kind == DBT_KIND_CONN ? cfg.max_connections : cfg.max_queries;
    if (!disabled && !limit) {
        dbt_config_free(&cfg);
        return cli_usage_error("acquire", "no limit: give --limit N (or set %s)",
                               a.kind == DBT_KIND_CONN ? "DBTHROTTLE_MAX_CONNECTIONS"
                                                       : "DBTHROTTLE_MAX_QUERIES");
    }
    if (!disabled && a.weight > limit) {
        dbt_config_free(&cfg);
        return cli_usage_error("acquire", "--weight %d is more than the limit %d: never granted",
                               a.weight, limit);
    }
    char path[PATH_MAX];
    int e = resolve(a.cmd[0], path, sizeof path);
    if (e) {
        dbt_config_free(&cfg);
        cli_fail("acquire", "cannot run %s: %s", a.cmd[0], strerror(e));
        return e == ENOENT ? 127 : 126;
    }
    char err[DBT_ERRLEN];
    if (!dbt_log_open(&cfg, err))
        fprintf(stderr, "dbthrottle acquire: warning: DBTHROTTLE_LOG: %s\n", err);

    /* Before any thread exists, so that every thread inherits the mask (see the top). A SIGCHLD
     * ignored by whoever started us would reap CMD before we see its status. */
    /* A signal whoever started us ignores (nohup's SIGHUP, SIGINT of a job an sh script puts in
     * the background) is not taken: it stays ignored here and in CMD, as exec keeps it, since a
     * blocked signal is queued for sigwaitinfo even when it is ignored. */
    sigset_t mask;
    sigemptyset(&sg.set);
    const int taken[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        struct sigaction was;
        if (sigaction(taken[i], NULL, &was) != 0 || was.sa_handler != SIG_IGN)
            sigaddset(&sg.set, taken[i]);
    }
    signal(SIGCHLD, SIG_DFL);
    pthread_sigmask(SIG_BLOCK, &sg.set, &mask);
    pthread_t t;
    if (pthread_create(&t, NULL, take_signals, NULL) != 0) {
        dbt_config_free(&cfg);
        return cli_fail("acquire", "cannot start a thread"), EXIT_NO_PERMIT;
    }
    pthread_detach(t);

    if (disabled) {
        fprintf(stderr, "dbthrottle acquire: note: DBTHROTTLE_DISABLE is on: %s runs unthrottled\n",
                a.cmd[0]);
        rc = run_cmd(&a, &cfg, path, &mask, NULL);
        dbt_config_free(&cfg);
        return rc;
    }
    dbt_client *client = dbt_client_new(&cfg);
    dbt_pool *pool = client ? dbt_client_pool(client, a.pool) : NULL;
    if (!pool) {
        if (client)
            dbt_client_free(client);
        dbt_config_free(&cfg);
        return cli_fail("acquire", "out of memory"), EXIT_NO_PERMIT;
    }
    dbt_acquire_opts o = {.limit = limit,
                          .wait_ms = cfg.wait_timeout_ms,
                          .interrupted = stop_requested,
                          .waker = &sg.waker,
                          .klass = cfg.klass,
                          .weight = a.weight};
    dbt_permit *permit = NULL;
    dbt_acq_result r = dbt_acquire(pool, a.kind, &o, &permit);
    rc = r == DBT_ACQ_GRANTED ? -1 : no_permit(r, pool, &a, &cfg, limit);
    if (rc < 0)
        rc = run_cmd(&a, &cfg, path, &mask, r == DBT_ACQ_GRANTED ? permit : NULL);
    dbt_client_free(client);
    dbt_log_close();
    dbt_config_free(&cfg);
    return rc;
}
