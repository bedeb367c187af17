/* preflight.c - what must hold before a worker starts (dbthrottle run and check): the library
 * loads, Redis answers with the worker's credentials, Redis will not evict the pool's keys, and
 * every command the worker sends, the scripts' own included, is allowed by its Redis user (a dry
 * run that changes nothing: see lua/_common.lua). Each failure is one line naming what to fix. */
#include "cli.h"

#include "dry_scripts.h"
#include "log.h"
#include "redis_errors.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool cli_is_our_library(const char *entry)
{
    const char *base = strrchr(entry, '/');
    return strncmp(base ? base + 1 : entry, "libdbthrottle", 13) == 0;
}

bool cli_check_log(const dbt_config *cfg, char *err)
{
    if (!cfg->log_path)
        return true;
    bool ok = dbt_log_open(cfg, err); /* its message names DBTHROTTLE_LOG */
    dbt_log_close();
    return ok;
}

bool cli_load_library(const char *path, char *resolved, size_t cap, char *err)
{
    /* In a child, so that nothing the library does when loaded (constructors, threads, the
     * symbols it interposes) can reach this process; with DBTHROTTLE_DISABLE on, so that it does
     * nothing there but load. Its answer comes back through a pipe: '+' and the path it was
     * found at, or '-' and dlerror() (nothing: the child died loading it). Its exit status is not
     * needed, so a parent that ignores SIGCHLD (the child reaped by the kernel) reads it too. */
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return snprintf(err, DBT_ERRLEN, "pipe: %s", strerror(errno)), false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return snprintf(err, DBT_ERRLEN, "fork: %s", strerror(errno)), false;
    }
    if (pid == 0) {
        close(fds[0]);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        setenv("DBTHROTTLE_DISABLE", "on", 1);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        struct link_map *lm = NULL;
        const char *say =
            h ? (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm ? lm->l_name : "") : dlerror();
        char buf[PATH_MAX + DBT_ERRLEN];
        int n = snprintf(buf, sizeof buf, "%c%s", h ? '+' : '-', say ? say : "dlopen failed");
        ssize_t w = write(fds[1], buf, n < (int)sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    char msg[PATH_MAX + DBT_ERRLEN];
    ssize_t n = 0, got;
    while (n < (ssize_t)sizeof msg - 1 &&
           (got = read(fds[0], msg + n, sizeof msg - 1 - (size_t)n)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        n += got;
    }
    msg[n] = '\0';
    close(fds[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (n > 0 && msg[0] == '+') {
        if (resolved)
            snprintf(resolved, cap, "%s", msg[1] ? msg + 1 : path);
        return true;
    }
    snprintf(err, DBT_ERRLEN, "%.*s", DBT_ERRLEN - 1, n > 1 ? msg + 1 : "the loader died");
    return false;
}

bool cli_check_library(const char *path, char *err)
{
    char why[DBT_ERRLEN];
    if (cli_load_library(path, NULL, 0, why))
        return true;
    snprintf(err, DBT_ERRLEN, "the library does not load (%.*s): give --library PATH",
             DBT_ERRLEN - 64, why);
    return false;
}

/* Names the setting to fix for a Redis error, after Redis' own words. */
static void redis_advice(const char *what, const char *detail, char *err)
{
    const char *fix;
    if (strstr(detail, "NOPERM"))
        fix = "the Redis user of DBTHROTTLE_REDIS_URL lacks a permission: give it the worker ACL "
              "of docs/operations.md";
    else if (strstr(detail, "WRONGPASS") || strstr(detail, "NOAUTH") || strstr(detail, "AUTH"))
        fix = "fix the user or password in DBTHROTTLE_REDIS_URL";
    else if (strstr(detail, "SELECT"))
        fix = "fix the database index in DBTHROTTLE_REDIS_URL";
    else
        fix = "check DBTHROTTLE_REDIS_URL";
    snprintf(err, DBT_ERRLEN, "%.40s%s%.300s: %s", what, *what ? ": " : "", detail, fix);
}

/* One field of an INFO section, or "" (out: cap bytes). */
static bool info_field(dbt_redis *r, const char *section, const char *field, char *out, size_t cap,
                       char *err)
{
    const char *argv[] = {"INFO", section};
    redisReply *rep = dbt_redis_command(r, 2, argv, NULL, err);
    if (!rep)
        return false;
    out[0] = '\0';
    if (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS)
        (void)dbt_redis_info_field(rep->str, field, out, cap);
    freeReplyObject(rep);
    return true;
}

/* The dry-run form of a script (made at build time beside it: tools/embed-lua.sh), loaded by
 * SCRIPT LOAD as a worker loads the real ones. */
static bool dry_load(dbt_redis *r, const dbt_script *real, const dbt_script **dry, char *err)
{
    *dry = dbt_dry_script_of(real);
    if (!*dry)
        return snprintf(err, DBT_ERRLEN, "script %s has no dry run", real->name), false;
    const char *argv[] = {"SCRIPT", "LOAD", (*dry)->body};
    size_t lens[] = {6, 4, (*dry)->len};
    redisReply *rep = dbt_redis_command(r, 3, argv, lens, err);
    if (!rep)
        return false;
    bool ok = rep->type == REDIS_REPLY_STRING && strcmp(rep->str, (*dry)->sha) == 0;
    if (!ok)
        snprintf(err, DBT_ERRLEN, "SCRIPT LOAD: unexpected reply");
    freeReplyObject(rep);
    return ok;
}

static bool any_reply(const redisReply *r, void *out, char *err)
{
    (void)r, (void)out, (void)err;
    return true;
}

/* Runs c's script in its dry-run form. */
static bool dry_call(dbt_redis *r, dbt_script_call *c, char *err)
{
    const char *name = c->script->name;
    const dbt_script *dry;
    char e[DBT_ERRLEN];
    bool ok = dry_load(r, c->script, &dry, e);
    if (ok) {
        c->script = dry;
        redisReply *rep = dbt_script_run(r, c, any_reply, NULL, e);
        ok = rep != NULL;
        freeReplyObject(rep);
    }
    if (!ok)
        redis_advice(name, e, err);
    return ok;
}

/* Every script a worker runs, along the paths it takes (granted at once; queued; refused; a
 * release; a cancel; shadow mode's sample; a renewal of a holder and a waiter of each kind), on
 * pool's keys. */
static bool dry_run_scripts(dbt_redis *r, const dbt_config *cfg, const char *pool, char *err)
{
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, pool)) {
        dbt_keys_free(&k);
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    }
    static const char id[] = "0000000000000000.1.1";
    /* a tagged, weighted id shipping class definitions: the per-tag keys and classes_seen */
    static const char tagged[] = "0000000000000000.2.-.2.1";
    static const char shipped[] = "aging=0;default=;dbthrottle-check:50:0:-:-";
    static const char session[] = "0\x1f"
                                  "dbthrottle-check\x1f\x1f";
    bool ok = true;
    dbt_script_call c;
    for (int kind = 0; ok && kind < DBT_NKINDS; kind++) {
        const dbt_acquire_call paths[] = {
            {id, 1000000, false, "dbthrottle-check 0 c0", NULL, session, false},
            {id, 0, false, "dbthrottle-check 0 c0", NULL, NULL, false},
            {id, 0, true, "dbthrottle-check 0 c0", NULL, NULL, false},
            {tagged, 0, false, "dbthrottle-check 0 c0", shipped, session, false}};
        for (size_t i = 0; ok && i < sizeof paths / sizeof *paths; i++) {
            dbt_build_acquire(&c, &k, (dbt_kind)kind, cfg, &paths[i]);
            ok = dry_call(r, &c, err);
        }
        for (int i = 0; ok && i < 2; i++) {
            dbt_build_release(&c, &k, (dbt_kind)kind, cfg, i ? tagged : id, -1);
            ok = dry_call(r, &c, err);
        }
        if (ok) {
            dbt_build_cancel(&c, &k, (dbt_kind)kind, cfg, id, true);
            ok = dry_call(r, &c, err);
        }
        if (ok) {
            /* shadow mode's sample: a hold, and holds not kept */
            dbt_build_sample(&c, &k, (dbt_kind)kind, cfg, "0000000000000000", 0, 1,
                             "1000 00000000 0 1000 1 0 \n", 1, 0, "");
            ok = dry_call(r, &c, err);
        }
    }
    if (ok) {
        char *one[] = {(char *)id};
        dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS];
        for (int kind = 0; kind < DBT_NKINDS; kind++)
            for (int l = 0; l < DBT_RENEW_LISTS; l++)
                lists[kind][l] = (dbt_id_list){one, 1, 1};
        dbt_local_counts local[DBT_NKINDS] = {{1, 1, 1000}, {1, 1, 1000}};
        const char *args[DBT_RENEW_NARGS(DBT_NKINDS * DBT_RENEW_LISTS)];
        dbt_build_renew(&c, &k, cfg, lists, local, args);
        ok = dry_call(r, &c, err);
    }
    if (ok) {
        /* The listener's wait for its grants: a BLPOP on a wake list nobody pushes to. */
        size_t n = strlen(k.wake_prefix) + 17;
        char *wake = malloc(n);
        if (!wake) {
            ok = false;
            snprintf(err, DBT_ERRLEN, "out of memory");
        } else {
            snprintf(wake, n, "%s0000000000000000", k.wake_prefix);
            const char *argv[] = {"BLPOP", wake, "0.01"};
            char e[DBT_ERRLEN];
            redisReply *rep = dbt_redis_command(r, 3, argv, NULL, e);
            ok = rep != NULL;
            freeReplyObject(rep);
            if (!ok)
                redis_advice("BLPOP", e, err);
            free(wake);
        }
    }
    dbt_keys_free(&k);
    return ok;
}

bool cli_check_redis(const dbt_config *cfg, const char *pool, char *version, size_t vcap, char *err,
                     bool *permanent)
{
    char e[DBT_ERRLEN];
    /* What cli_check_redis itself finds wrong (a Redis too old, an evicting policy, a dry run
     * that cannot be built) is permanent; what Redis said is classified as the library does. */
    bool found_here = false;
    /* The connect sends what a worker's does: AUTH, SELECT, SCRIPT LOAD of every script; to the
     * node that serves the pool's slot with Redis Cluster. */
    dbt_keys route;
    dbt_redis *r = NULL;
    if (!dbt_keys_init(&route, cfg->key_prefix, pool))
        snprintf(e, sizeof e, "out of memory");
    else
        r = dbt_redis_connect_for(cfg, route.base, e);
    dbt_keys_free(&route);
    if (!r) {
        redis_advice("", e, err);
        char why[DBT_MISCONFIG_LEN];
        *permanent = dbt_redis_error_permanent(e, false, why, sizeof why);
        /* A TLS refusal's line names its own fix (DBTHROTTLE_REDIS_CA, _CERT, ...). */
        const char *reply = dbt_redis_error_reply(e);
        if (*permanent && reply && strncmp(reply, "TLS: ", 5) == 0) {
            /* "redis HOST:PORT: " without the step's own "redis: " */
            int at = (int)(reply - e);
            if (at >= 9 && strncmp(reply - 7, "redis: ", 7) == 0 && reply - 7 > e)
                at -= 7;
            snprintf(err, DBT_ERRLEN, "%.*s%s", at, e, why);
        }
        return false;
    }
    /* The connect read INFO as a worker's does, and judged the version and the policy by the
     * library's own rule (redis_conn.c): the same verdict, no second look. */
    snprintf(version, vcap, "%s", r->version);
    bool ok = true;
    if (r->server_problem[0]) {
        snprintf(err, DBT_ERRLEN, "%s", r->server_problem);
        ok = false;
        found_here = true;
    } else if (r->info_refused) {
        /* The library would go on unverified (and warn); a pre-flight check refuses: nobody
         * can tell whether this Redis may evict the pool's keys. */
        redis_advice("INFO", "redis: NOPERM this user may not run INFO", err);
        ok = false;
        found_here = true;
    }
    if (ok)
        ok = dry_run_scripts(r, cfg, pool, err);
    dbt_redis_free(r);
    if (!ok) {
        /* redis_advice put the step in front ("acquire: redis: NOPERM ..."): the library's
         * rule reads the message as dbt_redis_* wrote it. */
        const char *raw = strstr(err, ": redis");
        raw = raw && raw - err <= 40 ? raw + 2 : err;
        char why[DBT_MISCONFIG_LEN];
        *permanent = found_here || strstr(err, "has no dry run") ||
                     dbt_redis_error_permanent(raw, false, why, sizeof why);
    }
    return ok;
}

/* CONFIG GET name's value into out ("" when unset); NULL with err when unreadable. */
static const char *config_value(dbt_redis *r, const char *name, char *out, size_t cap, char *err)
{
    const char *argv[] = {"CONFIG", "GET", name};
    redisReply *rep = dbt_redis_command(r, 3, argv, NULL, err);
    if (!rep)
        return NULL;
    out[0] = '\0';
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, cap, "%s", rep->element[1]->str);
    freeReplyObject(rep);
    return out;
}

/* What INFO persistence (which every dbthrottle user may run) tells: 1 when the append-only file
 * is on; else -1, since RDB save points are not in INFO (rdb_saves only counts the saves since
 * start, which a manual SAVE also makes), so "persists nothing" cannot be concluded from it. */
static int persists_by_info(dbt_redis *r, const char *config_err, char *err)
{
    char aof[8], saves[24], bgsave[16], e[DBT_ERRLEN];
    if (!info_field(r, "persistence", "aof_enabled", aof, sizeof aof, e) ||
        !info_field(r, "persistence", "rdb_saves", saves, sizeof saves, e) ||
        !info_field(r, "persistence", "rdb_last_bgsave_status", bgsave, sizeof bgsave, e)) {
        snprintf(err, DBT_ERRLEN, "CONFIG GET: %.150s; INFO persistence: %.150s", config_err, e);
        return -1;
    }
    if (strcmp(aof, "1") == 0)
        return 1;
    snprintf(err, DBT_ERRLEN,
             "this user may not read Redis' save and appendonly settings (CONFIG GET: %.120s); "
             "INFO shows no append-only file, %s RDB save%s since start, last one %s, but not "
             "whether save points are set: verify as an admin user with CONFIG GET save and "
             "CONFIG GET appendonly",
             config_err, saves[0] ? saves : "no count of", strcmp(saves, "1") == 0 ? "" : "s",
             bgsave[0] ? bgsave : "unknown");
    return -1;
}

int cli_redis_persists(const dbt_config *cfg, char *err)
{
    char e[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(cfg, e);
    if (!r) {
        snprintf(err, DBT_ERRLEN, "%s", e);
        return -1;
    }
    /* INFO first: the append-only file on answers it for every user. Else CONFIG GET, which
     * answers for sure but may also read requirepass and masterauth, so the documented users
     * lack it (docs/operations.md: one ACL LOG entry per check): for them INFO says what it can. */
    char aof_info[8], save[256], aof[16];
    int rc;
    if (info_field(r, "persistence", "aof_enabled", aof_info, sizeof aof_info, e) &&
        strcmp(aof_info, "1") == 0)
        rc = 1;
    else if (!config_value(r, "save", save, sizeof save, e) ||
             !config_value(r, "appendonly", aof, sizeof aof, e))
        rc = persists_by_info(r, e, err);
    else
        rc = save[0] != '\0' || strcmp(aof, "yes") == 0;
    dbt_redis_free(r);
    return rc;
}
