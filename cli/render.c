/* render.c - the pool views as a table (status, top), JSON (status --json) and Prometheus text
 * (status --prometheus). */
#include "cli.h"
#include "settings.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_json[DBT_NKINDS] = {"queries", "connections"};

void cli_duration(int64_t ms, char *out, size_t cap)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf(out, cap, "%" PRId64 "ms", ms);
    else if (ms < 60000)
        snprintf(out, cap, "%.1fs", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, cap, "%" PRId64 "m%02" PRId64 "s", ms / 60000, ms / 1000 % 60);
    else
        snprintf(out, cap, "%" PRId64 "h%02" PRId64 "m", ms / 3600000, ms / 60000 % 60);
}

/* ---- text ----------------------------------------------------------------------------------- */

/* Why a semaphore is in quarantine (docs/design.md, "Failover and data loss"), in words. */
static const char *quarantine_why(const char *why)
{
    if (strcmp(why, DBT_WHY_LOST) == 0)
        return "data lost";
    if (strcmp(why, DBT_WHY_RESTARTED) == 0)
        return "server restarted without the pool's state";
    return "server changed";
}

void cli_render_classes_problem(FILE *out, const dbt_status_kind *k)
{
    if (k->classes_problem[0])
        fprintf(out, "  CLASSES MISCONFIGURED: %s\n", k->classes_problem);
}

void cli_render_classes(FILE *out, const dbt_status_kind *k)
{
    if (!k->nclasses)
        return;
    char aging[40] = "no aging bound", d[24];
    if (k->aging_ms > 0) {
        cli_duration(k->aging_ms, d, sizeof d);
        snprintf(aging, sizeof aging, "aging bound %s", d);
    }
    fprintf(out, "  classes (%s), %s:\n",
            k->classes_shipped ? "shipped: a worker's DBTHROTTLE_CLASSES" : "operator's", aging);
    fprintf(out, "  %-20s %5s %9s %5s %8s %7s %11s %8s %8s %9s\n", "CLASS", "SHARE", "GUARANTEE",
            "HELD", "BORROWED", "WAITING", "OLDEST WAIT", "PRIORITY", "WAIT", "QUEUE CAP");
    bool limit_known = cli_effective_limit(k) > 0;
    for (int i = 0; i < k->nclasses; i++) {
        const dbt_status_class *c = &k->classes[i];
        char name[80], share[8], g[24] = "?", oldest[24] = "-", wait[24] = "-", cap[24] = "-";
        dbt_escape(c->name, 32, false, name, sizeof name);
        snprintf(share, sizeof share, "%d%%", c->share);
        if (limit_known)
            snprintf(g, sizeof g, "%lld", c->guarantee);
        if (c->waiters && c->oldest_wait_ms > 0)
            cli_duration(c->oldest_wait_ms, oldest, sizeof oldest);
        if (c->wait_ms >= 0)
            cli_duration(c->wait_ms, wait, sizeof wait);
        if (c->cap >= 0)
            snprintf(cap, sizeof cap, "%lld", c->cap);
        fprintf(out, "  %-20s %5s %9s %5lld %8lld %7lld %11s %8d %8s %9s%s\n", name, share, g,
                c->held, c->borrowed, c->waiters, oldest, c->priority, wait, cap,
                c->is_default ? "  (default)" : "");
    }
}

/* Whether any listed entry carries a class tag or a weight (then the table shows both). */
/* Widens the permit and host columns (*pw, *hw) to the longest of the n entries'. */
static void widen(const dbt_status_entry *e, int n, int *pw, int *hw)
{
    for (int i = 0; i < n; i++) {
        int p = (int)strlen(e[i].permit), h = (int)strlen(e[i].host);
        if (p > *pw)
            *pw = p;
        if (h > *hw)
            *hw = h;
    }
}

static bool any_tagged(const dbt_status_entry *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i].klass[0] || e[i].weight > 1)
            return true;
    return false;
}

/* Whether any listed holder says what session it serves (then the table shows it). */
static bool any_session(const dbt_status_entry *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i].backend_pid > 0 || e[i].app[0] || e[i].user[0] || e[i].db[0])
            return true;
    return false;
}

/* "  APP USER@DB", each escaped (they come from the client and the server: any bytes). */
static void text_session(FILE *out, const dbt_status_entry *e)
{
    char app[200], user[200], db[200];
    cli_escape_name(e->app[0] ? e->app : "-", 63, false, app, sizeof app);
    cli_escape_name(e->user[0] ? e->user : "?", 63, false, user, sizeof user);
    cli_escape_name(e->db[0] ? e->db : "?", 63, false, db, sizeof db);
    fprintf(out, "  %s %s@%s", app, user, db);
}

/* The class and weight of a tagged entry, after its row; nothing for a table without tags. */
static void text_tag(FILE *out, const dbt_status_entry *e, bool tagged)
{
    if (tagged)
        fprintf(out, " %-12s %6d", e->klass[0] ? e->klass : "-", e->weight > 0 ? e->weight : 1);
    fputc('\n', out);
}

/* The pool's host groups (processes of a host that pass permits among themselves without Redis)
 * and who is sole now (its waiters are the whole queue: it passes permits without Redis). */
static void text_host_groups(FILE *out, const cli_pool_view *v)
{
    cli_host_group g[16];
    int n = cli_host_groups(v, g, 16);
    for (int i = 0; i < n; i++) {
        char host[64];
        dbt_escape(g[i].host, 20, false, host, sizeof host);
        fprintf(out, "  shared on host group %s (host %s): %d process%s\n", g[i].group, host,
                g[i].processes, g[i].processes == 1 ? "" : "es");
    }
}

static void text_sharing(FILE *out, const cli_pool_view *v, const dbt_status_kind *k)
{
    text_host_groups(out, v);
    cli_sole s;
    cli_sole_of(v, k, &s);
    if (s.kind == CLI_SOLE_NONE)
        return;
    char owner[200], shape[240] = "", host[64] = "?";
    dbt_escape(s.owner, 40, false, owner, sizeof owner);
    if (s.shape[0]) {
        char esc[180];
        dbt_escape(s.shape, 40, false, esc, sizeof esc);
        snprintf(shape, sizeof shape, " (its waiters of shape %s)", esc);
    }
    if (s.rec)
        dbt_escape(s.rec->host, 20, false, host, sizeof host);
    if (s.kind == CLI_SOLE_HOST)
        fprintf(out,
                "  sole host: %s (host %s)%s: its waiters are the whole queue, permits pass "
                "between its processes without Redis\n",
                owner, host, shape);
    else if (s.kind == CLI_SOLE_PROCESS)
        fprintf(out,
                "  sole process: pid %ld (host %s)%s: its waiters are the whole queue, permits "
                "pass between its threads without Redis\n",
                s.rec->pid, host, shape);
    else
        fprintf(out, "  sole: %s%s: its waiters are the whole queue, permits pass without Redis\n",
                owner, shape);
}

/* The limit as the pool's line states it: who set the override (by hand, or the adaptive
 * controller: its PTTL says which) and what the workers ask when that differs. */
static void text_limit(const dbt_status_kind *k, cli_adapt_state st, char *out, size_t cap)
{
    char ask[48] = "", d[24];
    if (k->override && k->limit_seen && k->override != k->limit_seen)
        snprintf(ask, sizeof ask, "; workers ask %lld", k->limit_seen);
    const dbt_status_adapt *a = k->adapt;
    if (!k->override) {
        if (k->limit_seen)
            snprintf(out, cap, "%lld", k->limit_seen);
        else
            snprintf(out, cap, "unknown");
    } else if (k->override_pttl_ms <= 0) {
        snprintf(out, cap, "%lld (operator override, set by hand%s)", k->override, ask);
    } else if (st == CLI_ADAPT_LEADING && a->min && a->max) {
        snprintf(out, cap, "%lld (adaptive, %lld..%lld%s)", k->override, a->min, a->max, ask);
    } else if (st == CLI_ADAPT_LEADING) {
        snprintf(out, cap, "%lld (adaptive%s)", k->override, ask);
    } else {
        cli_duration(k->override_pttl_ms, d, sizeof d);
        if (st == CLI_ADAPT_UNKNOWN)
            snprintf(out, cap, "%lld (adaptive; lapses in %s unless its controller renews it%s)",
                     k->override, d, ask);
        else
            snprintf(out, cap, "%lld (adaptive controller gone; its limit %lld lapses in %s%s)",
                     k->override, k->override, d, ask);
    }
}

/* "; last change 3.1s ago, to 12: REASON" of the controller's record, or that it made none. */
static void text_last_change(FILE *out, const cli_pool_view *v, const dbt_status_adapt *a)
{
    if (!a->changed_at_ms || !a->limit) {
        fputs("; no change yet", out);
        return;
    }
    char d[24], why[300];
    cli_duration(v->now_ms - a->changed_at_ms, d, sizeof d);
    dbt_escape(a->reason[0] ? a->reason : "no reason given", 199, false, why, sizeof why);
    fprintf(out, "; last change %s ago, to %lld: %s", d, a->limit, why);
}

/* The line under the limit on the adaptive controller (nothing when none leads and the override
 * is not its own), and one naming what of its record is unreadable. */
static void text_adapt(FILE *out, const cli_pool_view *v, dbt_kind kind, const char *prefix,
                       cli_adapt_state st)
{
    const dbt_status_kind *k = &v->kind[kind];
    const dbt_status_adapt *a = k->adapt;
    if (!a)
        return;
    /* "web1 pid 4242", "?" for what the record lacks */
    char who[120], host[80], pid[24] = "?", d[24], range[48] = "unknown";
    dbt_escape(a->host[0] ? a->host : "?", 63, false, host, sizeof host);
    if (a->pid)
        snprintf(pid, sizeof pid, "%lld", a->pid);
    snprintf(who, sizeof who, "%s pid %s", host, pid);
    if (a->min && a->max)
        snprintf(range, sizeof range, "%lld..%lld", a->min, a->max);
    cli_duration(a->lease_until_ms - v->now_ms, d, sizeof d);
    switch (st) {
    case CLI_ADAPT_LEADING:
    case CLI_ADAPT_WAITING:
        fprintf(out, "  adaptive controller %s leads (lease %s left, limits %s)", who, d, range);
        if (st == CLI_ADAPT_WAITING)
            fputs(", no limit of its own in force", out);
        text_last_change(out, v, a);
        fputc('\n', out);
        break;
    case CLI_ADAPT_OPERATOR:
        fprintf(out,
                "  adaptive controller %s stands by while the limit is set by hand (lease %s "
                "left; dbthrottle limit --clear hands it back)\n",
                who, d);
        break;
    case CLI_ADAPT_GONE:
        if (a->owner[0])
            cli_duration(v->now_ms - a->lease_until_ms, d, sizeof d);
        fprintf(out, "  adaptive controller %s leads no more (%s%s%s)", who,
                a->owner[0] ? "its lease ran out " : "it resigned", a->owner[0] ? d : "",
                a->owner[0] ? " ago" : "");
        text_last_change(out, v, a);
        fputc('\n', out);
        break;
    case CLI_ADAPT_UNKNOWN:
        if (a->host[0] || a->pid)
            fprintf(out, "  adaptive controller %s: whether it leads is unknown\n", who);
        break;
    case CLI_ADAPT_NONE:
    case CLI_ADAPT_STOPPED:
        break;
    }
    if (!a->unreadable[0])
        return;
    dbt_keys keys;
    char key[300] = "", bad[1700];
    if (dbt_keys_init(&keys, prefix, v->name)) {
        char *full = keys.keys[kind][DBT_K_LIMIT];
        snprintf(key, sizeof key, "%.280s:adapt", full);
    }
    dbt_keys_free(&keys);
    char shown[400];
    dbt_escape(key, 290, false, shown, sizeof shown);
    dbt_escape(a->unreadable, sizeof a->unreadable, false, bad, sizeof bad);
    fprintf(out, "  adaptive controller's record %s is unreadable: %s\n", shown, bad);
}

static void text_kind(FILE *out, const cli_pool_view *v, dbt_kind kind, const char *name,
                      const char *prefix)
{
    const dbt_status_kind *k = &v->kind[kind];
    char lim[200], d1[24], d2[24];
    cli_adapt_state st = cli_adapt_of(k, v->now_ms);
    text_limit(k, st, lim, sizeof lim);
    char oldest[48] = "";
    if (k->oldest_wait_ms > 0) {
        cli_duration(k->oldest_wait_ms, d1, sizeof d1);
        snprintf(oldest, sizeof oldest, ", oldest wait %s", d1);
    }
    fprintf(out, "pool %s %s: limit %s, %lld holding, %lld waiting%s%s\n", name,
            dbt_kind_name(kind), lim, k->nholders, k->nwaiters, oldest,
            k->drained ? ", DRAINING (no new grants)" : "");
    text_adapt(out, v, kind, prefix, st);
    cli_render_limits_in_use(out, k);
    cli_duration(k->counters[DBT_CTR_WAIT_MS], d1, sizeof d1);
    fprintf(out,
            "  grants %lld  queued %lld  refused %lld  cancelled %lld  expired %lld  "
            "evicted %lld  waited %s in all\n",
            k->counters[DBT_CTR_GRANTS], k->counters[DBT_CTR_QUEUED], k->counters[DBT_CTR_REFUSED],
            k->counters[DBT_CTR_CANCELLED], k->counters[DBT_CTR_EXPIRED],
            k->counters[DBT_CTR_EVICTED], d1);
    if (k->quarantine_ms > 0)
        fprintf(out,
                "  QUARANTINE: %lld ms left (%s): no new grants until the holders re-assert their "
                "permits\n",
                k->quarantine_ms, quarantine_why(k->why));
    if (k->counters[DBT_CTR_QUARANTINES] || k->counters[DBT_CTR_REASSERTED] ||
        k->counters[DBT_CTR_REQUEUED])
        fprintf(out, "  quarantines %lld  reasserted %lld  requeued %lld\n",
                k->counters[DBT_CTR_QUARANTINES], k->counters[DBT_CTR_REASSERTED],
                k->counters[DBT_CTR_REQUEUED]);
    if (k->counters[DBT_CTR_CLAMPED] || k->counters[DBT_CTR_CAPPED] || k->counters[DBT_CTR_AGED])
        fprintf(out, "  clamped %lld  capped %lld  aged %lld\n", k->counters[DBT_CTR_CLAMPED],
                k->counters[DBT_CTR_CAPPED], k->counters[DBT_CTR_AGED]);
    if (k->counters[DBT_CTR_WOULD_WAIT] || k->counters[DBT_CTR_WOULD_REFUSE])
        fprintf(out, "  shadow: would have waited %lld  would have been refused %lld\n",
                k->counters[DBT_CTR_WOULD_WAIT], k->counters[DBT_CTR_WOULD_REFUSE]);
    text_sharing(out, v, k);
    cli_render_classes_problem(out, k);
    cli_render_classes(out, k);
    bool tagged = any_tagged(k->holders, k->nh) || any_tagged(k->waiters, k->nw);
    /* The permit and host columns as wide as their longest value (a permit passed between the
     * processes of a host is 38 characters): a long one must not push its row's columns out. */
    int pw = 28, hw = 20;
    widen(k->holders, k->nh, &pw, &hw);
    widen(k->waiters, k->nw, &pw, &hw);
    if (k->nh) {
        bool sessions = any_session(k->holders, k->nh);
        fprintf(out, "  %-6s %-4s %-*s %-*s %8s %-8s %9s %10s %-7s %8s", "HOLDER", "", pw, "PERMIT",
                hw, "HOST", "PID", "CONN", "HELD", "LEASE LEFT", "STATE", "BACKEND");
        if (tagged)
            fprintf(out, " %-12s %6s", "CLASS", "WEIGHT");
        fputs(sessions ? "  APPLICATION USER@DATABASE\n" : "\n", out);
        for (int i = 0; i < k->nh; i++) {
            const dbt_status_entry *e = &k->holders[i];
            char backend[24] = "-";
            if (e->backend_pid > 0)
                snprintf(backend, sizeof backend, "%ld", e->backend_pid);
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            cli_duration(e->expiry_ms - v->now_ms, d2, sizeof d2);
            fprintf(out, "  %-6s %-4s %-*s %-*s %8ld %-8s %9s %10s %-7s %8s", "", "", pw, e->permit,
                    hw, e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?", d2, e->state[0] ? e->state : "-", backend);
            if (tagged)
                fprintf(out, " %-12s %6d", e->klass[0] ? e->klass : "-",
                        e->weight > 0 ? e->weight : 1);
            if (sessions)
                text_session(out, e);
            fputc('\n', out);
        }
        /* nholders counts units: a weight-w permit is w of them. */
        long long listed = 0;
        for (int i = 0; i < k->nh; i++)
            listed += k->holders[i].weight > 1 ? k->holders[i].weight : 1;
        if (listed < k->nholders)
            fprintf(out, "  ... and %lld more %s\n", k->nholders - listed,
                    tagged ? "units held" : "holders");
    }
    if (k->nw) {
        fprintf(out, "  %-6s %-4s %-*s %-*s %8s %-8s %9s", "WAITER", "POS", pw, "PERMIT", hw,
                "HOST", "PID", "CONN", "WAITED");
        if (tagged)
            fprintf(out, " %10s %-12s %6s", "", "CLASS", "WEIGHT");
        fputc('\n', out);
        for (int i = 0; i < k->nw; i++) {
            const dbt_status_entry *e = &k->waiters[i];
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            fprintf(out, "  %-6s %-4d %-*s %-*s %8ld %-8s %9s", "", i + 1, pw, e->permit, hw,
                    e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?");
            if (tagged)
                fprintf(out, " %10s", "");
            text_tag(out, e, tagged);
        }
        if (k->nw < k->nwaiters)
            fprintf(out, "  ... and %lld more waiters\n", k->nwaiters - k->nw);
    }
}

/* ---- live settings (dbthrottle set) ------------------------------------------------------------
 */

/* Where a process stands with the pool's live settings of `version` (0: Redis has none), by its
 * record: the live settings an operator sets must be seen taken, not assumed. */
typedef enum { LIVE_APPLIED, LIVE_BEHIND, LIVE_REFUSING, LIVE_OLDER } live_stand;
static live_stand live_stand_of(const dbt_proc_record *r, long long version)
{
    if (r->live_version < 0)
        return LIVE_OLDER; /* a version that does not apply them */
    if (r->live_version != version)
        return LIVE_BEHIND; /* a renewal late, or cut off from Redis */
    return r->live_refused[0] ? LIVE_REFUSING : LIVE_APPLIED;
}

static const char *const live_stand_words[] = {
    [LIVE_BEHIND] = "not applied yet (a renewal late, or cut off) by",
    [LIVE_REFUSING] = "partly refused by",
    [LIVE_OLDER] = "not applied (a version of the library without live settings) by",
};

/* One line per kind of process that does not apply the live settings as Redis holds them: "  live
 * settings v5 not applied yet ... by 2 processes: vm:1234 (psql, applied v4), ..." (at most 5
 * named). Nothing when every process applies them. */
static void text_live_procs(FILE *out, const cli_pool_view *v, long long version)
{
    for (live_stand st = LIVE_BEHIND; st <= LIVE_OLDER; st++) {
        int n = 0;
        for (int i = 0; i < v->nprocs; i++)
            n += live_stand_of(&v->procs[i], version) == st;
        if (!n)
            continue;
        if (version)
            fprintf(out, "  live settings v%lld %s %d process%s:", version, live_stand_words[st], n,
                    n == 1 ? "" : "es");
        else
            fprintf(out, "  live settings cleared, %s %d process%s:", live_stand_words[st], n,
                    n == 1 ? "" : "es");
        int shown = 0;
        for (int i = 0; i < v->nprocs && shown < 5; i++) {
            const dbt_proc_record *r = &v->procs[i];
            if (live_stand_of(r, version) != st)
                continue;
            char host[80], prog[80];
            cli_escape_name(r->host, 40, false, host, sizeof host);
            cli_escape_name(r->program, 40, false, prog, sizeof prog);
            fprintf(out, "%s %s:%ld (%s", shown++ ? "," : "", host, r->pid, prog);
            if (st == LIVE_BEHIND && r->live_version)
                fprintf(out, ", applied v%lld)", r->live_version);
            else if (st == LIVE_BEHIND)
                fputs(", applied none)", out);
            else if (st == LIVE_REFUSING || st == LIVE_OLDER) {
                char text[300]; /* a record's text, as a process wrote it */
                cli_escape_name(st == LIVE_REFUSING ? r->live_refused : r->version, 120, false,
                                text, sizeof text);
                fprintf(out, st == LIVE_REFUSING ? ", refused %s)" : " %s)", text);
            }
        }
        fprintf(out, "%s\n", n > shown ? ", ..." : "");
    }
}

/* The live-able settings whose values in force differ between the pool's processes (as mixed
 * limits do, a fleet that disagrees on its wait timeout or outage mode is one an operator must
 * see): "  settings that differ between its processes (value: where from, processes):
 * on_redis_error open: environment, 3; closed: file, 1". dbthrottle settings shows them all. */
static void text_differ(FILE *out, const cli_pool_view *v, const dbt_live *live)
{
    bool head = false;
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        if (!s->live)
            continue;
        cli_in_force g[8];
        int n = cli_in_force_of(v, live, s, g, 8);
        bool differ = false;
        for (int i = 1; i < n; i++)
            differ = differ || strcmp(g[i].value, g[0].value) != 0;
        if (!differ)
            continue;
        fprintf(out, "%s %s",
                head ? ";"
                     : "  settings that differ between its processes (value: "
                       "where from, processes):",
                s->key);
        head = true;
        for (int i = 0; i < n; i++) {
            char shown[300];
            cli_escape_name(g[i].value, 120, false, shown, sizeof shown);
            fprintf(out, "%s %s: %s, %d", i ? "," : "", shown, g[i].from, g[i].processes);
        }
    }
    if (head)
        fputc('\n', out);
}

/* The pool's live settings: each value the workers use in place of their own, those their
 * parser refuses (written by hand), the processes that do not apply them (yet), and the
 * settings its processes disagree on. Nothing when none is set and every process agrees. */
static void text_live(FILE *out, const cli_pool_view *v)
{
    dbt_live l;
    char refused[512];
    if (!v->settings || !dbt_live_parse(v->settings, &l, refused, sizeof refused)) {
        text_live_procs(out, v, 0);
        text_differ(out, v, NULL);
        return;
    }
    int n = 0;
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (l.set[s - dbt_settings]) {
            char shown[256];
            s->kind->show(s, &l.cfg, shown, sizeof shown);
            fprintf(out, "%s%s=%s",
                    n++ ? ", "
                        : "  live settings (dbthrottle set, in place of the "
                          "workers' own): ",
                    s->key, shown);
        }
    if (n)
        fputc('\n', out);
    if (refused[0]) {
        char text[600];
        cli_escape_name(refused, 500, false, text, sizeof text);
        fprintf(out, "  live settings the workers refuse (they keep their own): %s\n", text);
    }
    text_live_procs(out, v, l.version);
    text_differ(out, v, &l);
    dbt_live_free(&l);
}

/* ,"settings_in_force": {key: [{"value", "from", "processes"}, ...], ...}: each live-able
 * setting's values in force in the pool's processes (in_force.c). */
static void json_in_force(FILE *out, const cli_pool_view *v)
{
    dbt_live l;
    char refused[512];
    bool any = v->settings && dbt_live_parse(v->settings, &l, refused, sizeof refused);
    fputs(",\"settings_in_force\":{", out);
    int k = 0;
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        if (!s->live)
            continue;
        cli_in_force g[8];
        int n = cli_in_force_of(v, any ? &l : NULL, s, g, 8);
        fputs(k++ ? "," : "", out);
        cli_json_str(out, s->key);
        fputs(":[", out);
        for (int i = 0; i < n; i++) {
            fputs(i ? ",{\"value\":" : "{\"value\":", out);
            cli_json_str(out, g[i].value);
            fputs(",\"from\":", out);
            cli_json_str(out, g[i].from);
            fprintf(out, ",\"processes\":%d}", g[i].processes);
        }
        fputc(']', out);
    }
    fputc('}', out);
    if (any)
        dbt_live_free(&l);
}

/* ,"processes": {"applied": N, "behind": [...], "refusing": [...], "older": [...]}, each a list
 * of {"host", "pid", "applied" (the version), "refused" (keys)}. */
static void json_live_procs(FILE *out, const cli_pool_view *v, long long version)
{
    int applied = 0;
    for (int i = 0; i < v->nprocs; i++)
        applied += live_stand_of(&v->procs[i], version) == LIVE_APPLIED;
    fprintf(out, ",\"processes\":{\"applied\":%d", applied);
    static const char *const names[] = {
        [LIVE_BEHIND] = "behind", [LIVE_REFUSING] = "refusing", [LIVE_OLDER] = "older"};
    for (live_stand st = LIVE_BEHIND; st <= LIVE_OLDER; st++) {
        fprintf(out, ",\"%s\":[", names[st]);
        int n = 0;
        for (int i = 0; i < v->nprocs; i++) {
            const dbt_proc_record *r = &v->procs[i];
            if (live_stand_of(r, version) != st)
                continue;
            fputs(n++ ? ",{\"host\":" : "{\"host\":", out);
            cli_json_str(out, r->host);
            fprintf(out, ",\"pid\":%ld,\"applied\":", r->pid);
            if (r->live_version >= 0)
                fprintf(out, "%lld", r->live_version);
            else
                fputs("null", out);
            fputs(",\"refused\":", out);
            cli_json_str(out, r->live_refused);
            fputc('}', out);
        }
        fputc(']', out);
    }
    fputc('}', out);
}

/* ,"live_settings": null, or {"version", "values": {key: value}, "refused": text or null}. */
static void json_live(FILE *out, const cli_pool_view *v)
{
    dbt_live l;
    char refused[512];
    if (!v->settings || !dbt_live_parse(v->settings, &l, refused, sizeof refused)) {
        /* none in Redis: null, unless a process still applies some (a renewal late) */
        bool behind = false;
        for (int i = 0; i < v->nprocs; i++)
            behind = behind || live_stand_of(&v->procs[i], 0) == LIVE_BEHIND;
        if (!behind) {
            fputs(",\"live_settings\":null", out);
            return;
        }
        fputs(",\"live_settings\":{\"version\":0,\"values\":{},\"refused\":null", out);
        json_live_procs(out, v, 0);
        fputc('}', out);
        return;
    }
    fprintf(out, ",\"live_settings\":{\"version\":%lld,\"values\":{", l.version);
    int n = 0;
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (l.set[s - dbt_settings]) {
            char shown[256];
            s->kind->show(s, &l.cfg, shown, sizeof shown);
            fprintf(out, "%s", n++ ? "," : "");
            cli_json_str(out, s->key);
            fputc(':', out);
            cli_json_str(out, shown);
        }
    fputs("},\"refused\":", out);
    if (refused[0])
        cli_json_str(out, refused);
    else
        fputs("null", out);
    json_live_procs(out, v, l.version);
    fputc('}', out);
    dbt_live_free(&l);
}

void cli_json_settings(FILE *out, const cli_pool_view *v)
{
    json_live(out, v);
    json_in_force(out, v);
}

/* ---- the processes -------------------------------------------------------------------------- */

/* How bad a state is: a process listed in several pools shows its worst. */
static int severity(const char *state)
{
    return strcmp(state, "refusing") == 0      ? 3
           : strcmp(state, "unthrottled") == 0 ? 2
           : strcmp(state, "shadow") == 0      ? 2
           : strcmp(state, "disabled") == 0    ? 1
                                               : 0;
}

/* One record's state, as it says, or, when the process has not reported for longer than it
 * promised, what its mode makes it do if it runs on cut off from Redis. */
const char *cli_record_state(const dbt_proc_record *r, int64_t now_ms, char *reason, size_t cap)
{
    int64_t silent = now_ms - r->seen_ms;
    if (r->silent_after_ms > 0 && silent > r->silent_after_ms && strcmp(r->state, "disabled")) {
        char d[24];
        cli_duration(silent, d, sizeof d);
        bool open = strcmp(r->mode, "closed") != 0;
        snprintf(reason, cap,
                 "not heard from for %s: cut off from Redis (or stopped, or gone); "
                 "on_redis_error=%s: %s",
                 d, open ? "open" : "closed",
                 open ? "its commands run unthrottled" : "its commands are refused");
        return open ? "unthrottled" : "refusing";
    }
    snprintf(reason, cap, "%s", r->reason);
    return strcmp(r->state, "refusing") == 0   ? "refusing"
           : strcmp(r->state, "disabled") == 0 ? "disabled"
           : strcmp(r->state, "shadow") == 0   ? "shadow"
                                               : "throttling";
}

static int by_host_pid(const void *a, const void *b)
{
    const cli_process *x = a, *y = b;
    int c = strcmp(x->rec->host, y->rec->host);
    return c ? c : (x->rec->pid > y->rec->pid) - (x->rec->pid < y->rec->pid);
}

/* What process p holds and waits for in pool v, added to it: what Redis holds for it now
 * (status.lua's by_process), not what its record said at its last renewal (a process that just
 * began to hold showed 0 held for a renewal period); the record's figures from an older script. */
static void proc_counts(const cli_pool_view *v, const dbt_proc_record *r, cli_process *p)
{
    /* Both kinds counted whole, or the records' figures for both (a count of a sample of a long
     * queue would say less than there is). */
    bool told = true;
    for (int k = 0; k < DBT_NKINDS; k++)
        told = told && v->kind[k].has_by_proc && v->kind[k].by_proc_whole;
    for (int k = 0; told && k < DBT_NKINDS; k++) {
        const dbt_status_kind *kd = &v->kind[k];
        for (int j = 0; j < kd->nby_proc; j++) {
            const dbt_status_proc_count *c = &kd->by_proc[j];
            if (c->pid == r->pid && strcmp(c->host, r->host) == 0) {
                p->held += c->held;
                p->waiting += c->waiting;
                p->idle_in_tx += c->idle_in_tx;
            }
        }
    }
    if (!told) {
        p->held += r->held;
        p->waiting += r->waiting;
        p->idle_in_tx += r->idle_in_tx;
    }
}

int cli_processes(const cli_pool_view *v, int n, cli_process **out)
{
    int total = 0, np = 0;
    for (int i = 0; i < n; i++)
        total += v[i].nprocs;
    cli_process *ps = calloc((size_t)(total ? total : 1), sizeof *ps);
    if (!ps)
        return -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < v[i].nprocs; j++) {
            const dbt_proc_record *r = &v[i].procs[j];
            cli_process *p = NULL;
            for (int k = 0; k < np && !p; k++)
                if (strcmp(ps[k].rec->cid, r->cid) == 0)
                    p = &ps[k];
            if (!p) {
                p = &ps[np++];
                p->rec = r;
                p->state = "throttling";
            } else if (r->seen_ms > p->rec->seen_ms) {
                p->rec = r;
            }
            if (p->npools < (int)(sizeof p->pools / sizeof *p->pools)) {
                p->groups[p->npools] = r->group[0] ? r->group : NULL;
                p->live[p->npools] = r->live_version;
                p->pools[p->npools++] = v[i].name;
            }
            char reason[320];
            const char *st = cli_record_state(r, v[i].now_ms, reason, sizeof reason);
            if (severity(st) > severity(p->state) || (p->npools == 1)) {
                p->state = st;
                snprintf(p->reason, sizeof p->reason, "%s", reason);
            }
            int64_t silent = v[i].now_ms - r->seen_ms;
            if (p->npools == 1 || silent < p->silent_ms)
                p->silent_ms = silent;
            p->unthrottled += r->unthrottled;
            p->refused += r->refused;
            p->timeouts += r->timeouts;
            proc_counts(&v[i], r, p);
            if (r->outage_since_ms > p->outage_since_ms) {
                p->outage_since_ms = r->outage_since_ms;
                p->outage_until_ms = r->outage_until_ms;
                p->outage_unthrottled = r->outage_unthrottled;
                p->outage_refused = r->outage_refused;
            }
        }
    if (np > 1)
        qsort(ps, (size_t)np, sizeof *ps, by_host_pid);
    *out = ps;
    return np;
}

/* "2026-11-24T01:02:03Z" of a wall-clock time in ms. */
static void utc(long long ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "host group G" of a process that shares permits with its host: per pool when it uses several. */
static void text_process_groups(FILE *out, const cli_process *p)
{
    bool any = false;
    for (int k = 0; k < p->npools; k++) {
        if (!p->groups[k])
            continue;
        if (!any)
            fprintf(out, "  %-20s %8s host group", "", "");
        fprintf(out, "%s %s", any ? "," : "", p->groups[k]);
        if (p->npools > 1) {
            char name[300];
            cli_escape_name(p->pools[k], 100, true, name, sizeof name);
            fprintf(out, " (pool %s)", name);
        }
        any = true;
    }
    if (any)
        fputc('\n', out);
}

static void text_processes(FILE *out, const cli_pool_view *v, int n)
{
    cli_process *ps;
    int np = cli_processes(v, n, &ps);
    if (np <= 0) {
        if (np == 0)
            free(ps);
        return;
    }
    fprintf(out, "\nprocesses: %d\n  %-20s %8s %-16s %-8s %-11s %5s %5s %s\n", np, "HOST", "PID",
            "PROGRAM", "VERSION", "STATE", "HELD", "WAIT", "POOLS / DETAIL");
    for (int i = 0; i < np; i++) {
        const cli_process *p = &ps[i];
        char pools[300] = "";
        size_t len = 0;
        for (int k = 0; k < p->npools && len < sizeof pools; k++) {
            char name[300];
            cli_escape_name(p->pools[k], 100, true, name, sizeof name);
            len += (size_t)snprintf(pools + len, sizeof pools - len, "%s%s", k ? "," : "", name);
        }
        char prog[64], host[64];
        dbt_escape(p->rec->program, 16, false, prog, sizeof prog);
        dbt_escape(p->rec->host, 20, false, host, sizeof host);
        fprintf(out, "  %-20s %8ld %-16s %-8s %-11s %5ld %5ld %s\n", host, p->rec->pid, prog,
                p->rec->version, p->state, p->held, p->waiting, pools);
        if (p->reason[0])
            fprintf(out, "  %-20s %8s %s\n", "", "", p->reason);
        text_process_groups(out, p);
        if (p->idle_in_tx)
            fprintf(out, "  %-20s %8s holds %ld permit%s idle in a transaction\n", "", "",
                    p->idle_in_tx, p->idle_in_tx == 1 ? "" : "s");
        if (p->outage_since_ms) {
            char since[32], until[32] = "now";
            utc(p->outage_since_ms, since, sizeof since);
            if (p->outage_until_ms)
                utc(p->outage_until_ms, until, sizeof until);
            fprintf(out,
                    "  %-20s %8s last Redis outage %s to %s: %llu commands unthrottled, %llu "
                    "refused\n",
                    "", "", since, until, p->outage_unthrottled, p->outage_refused);
        }
    }
    free(ps);
}

/* The line that says what the idle filter left out. */
static void text_hidden(FILE *out, const cli_hidden_idle *hidden)
{
    char after[24];
    cli_duration(hidden->after_ms, after, sizeof after);
    fprintf(out,
            "%d pool%s idle for more than %s, used by no live process, not shown (--idle-after "
            "off lists them; `dbthrottle forget POOL` removes one)\n",
            hidden->pools, hidden->pools == 1 ? "" : "s", after);
}

void cli_render_text(FILE *out, const cli_pool_view *v, int n, const char *prefix,
                     const cli_hidden_idle *hidden)
{
    char ep[300];
    dbt_escape(prefix, 256, true, ep, sizeof ep);
    if (n == 0) {
        fprintf(out, "no pools %sunder the key prefix %s\n",
                hidden && hidden->pools ? "in use " : "", ep);
        if (hidden && hidden->pools)
            text_hidden(out, hidden);
        return;
    }
    for (int i = 0; i < n; i++) {
        char name[300];
        cli_escape_name(v[i].name, 256, true, name, sizeof name);
        bool any = false;
        for (int kind = 0; kind < DBT_NKINDS; kind++)
            /* A kind with class definitions only is shown too: the operator set them. */
            if (v[i].kind[kind].used || v[i].kind[kind].nclasses ||
                v[i].kind[kind].classes_problem[0]) {
                if (any || i)
                    fputc('\n', out);
                text_kind(out, &v[i], (dbt_kind)kind, name, prefix);
                any = true;
            }
        if (!any && v[i].nprocs) {
            fprintf(out, "%spool %s: idle (%d processes use it)\n", i ? "\n" : "", name,
                    v[i].nprocs);
            text_host_groups(out, &v[i]);
        } else if (!any)
            fprintf(out, "%spool %s: no holders, waiters or counters (its keys are expiring)\n",
                    i ? "\n" : "", name);
        text_live(out, &v[i]);
    }
    text_processes(out, v, n);
    if (hidden && hidden->pools) {
        fputc('\n', out);
        text_hidden(out, hidden);
    }
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* A JSON string: always valid (control bytes as \u00XX, bytes that are not UTF-8 as U+FFFD). */
/* A pool's name as a JSON string: shown as text shows it when it is not UTF-8 or holds a
 * backslash (doubled there), so that two names never show alike. */
static void json_pool(FILE *out, const char *name)
{
    if (cli_utf8_valid(name) && !strchr(name, '\\')) {
        cli_json_str(out, name);
        return;
    }
    size_t cap = 4 * strlen(name) + 16;
    char *shown = malloc(cap);
    if (shown)
        cli_escape_name(name, cap, false, shown, cap);
    cli_json_str(out, shown ? shown : "");
    free(shown);
}

/* A pool name: "name" as text shows it (valid UTF-8 as is; other bytes as the text \xNN), and
 * "name_raw", its bytes in hex, to tell apart names that show alike and to use the raw name. */
static void json_name(FILE *out, const char *name)
{
    fputs("\"name\":", out);
    json_pool(out, name);
    size_t cap = 2 * strlen(name) + 1;
    char *hex = malloc(cap);
    if (hex)
        cli_hex(name, hex, cap);
    fputs(",\"name_raw\":", out);
    cli_json_str(out, hex ? hex : "");
    free(hex);
}

static void json_int_or_null(FILE *out, long long v)
{
    if (v)
        fprintf(out, "%lld", v);
    else
        fputs("null", out);
}

static void json_entry(FILE *out, const dbt_status_entry *e)
{
    fputs("\"permit\":", out);
    cli_json_str(out, e->permit);
    fputs(",\"host\":", out);
    cli_json_str(out, e->host);
    fprintf(out, ",\"pid\":%ld,\"conn\":", e->pid);
    cli_json_str(out, e->conn);
    fprintf(out, ",\"since_ms\":%" PRId64 ",\"class\":", e->since_ms);
    if (e->klass[0])
        cli_json_str(out, e->klass);
    else
        fputs("null", out);
    fprintf(out, ",\"weight\":%d", e->weight > 0 ? e->weight : 1);
}

/* What joins a holder with pg_stat_activity; "" and null when its worker does not say. */
static void json_session(FILE *out, const dbt_status_entry *e)
{
    fputs(",\"state\":", out);
    if (e->state[0])
        cli_json_str(out, e->state);
    else
        fputs("null", out);
    fputs(",\"backend_pid\":", out);
    json_int_or_null(out, e->backend_pid);
    fputs(",\"application_name\":", out);
    cli_json_str(out, e->app);
    fputs(",\"user\":", out);
    cli_json_str(out, e->user);
    fputs(",\"database\":", out);
    cli_json_str(out, e->db);
}

/* The histograms as the scripts keep them: buckets NOT cumulative, bounds in ms, the last bucket
 * above every bound. */
static void json_histograms(FILE *out, const dbt_status_kind *k)
{
    int nb = k->nbounds < DBT_HIST_MAX ? k->nbounds : DBT_HIST_MAX - 1;
    fputs(",\"histogram_bounds_ms\":[", out);
    for (int b = 0; b < nb; b++) {
        char num[40];
        cli_prom_number(k->hist_bound_ms[b], num, sizeof num);
        fprintf(out, "%s%s", b ? "," : "", num);
    }
    fputs("],\"histograms\":[", out);
    for (int j = 0; j < k->nhists; j++) {
        const dbt_status_hist *h = &k->hists[j];
        long long count = 0;
        fprintf(out, "%s{\"series\":\"%s\",\"class\":", j ? "," : "",
                h->series == 'w' ? "wait" : "hold");
        cli_json_str(out, h->klass);
        fputs(",\"buckets\":[", out);
        for (int b = 0; b <= nb; b++) {
            count += h->bucket[b];
            fprintf(out, "%s%lld", b ? "," : "", h->bucket[b]);
        }
        fprintf(out, "],\"sum_ms\":%lld,\"count\":%lld}", h->sum_ms, count);
    }
    fputc(']', out);
}

/* A number of the controller's record: null when it is unknown (0: missing or unreadable). */
static void json_known(FILE *out, const char *name, long long v)
{
    fprintf(out, ",\"%s\":", name);
    json_int_or_null(out, v);
}

/* A text of the controller's record: null when it is empty. */
static void json_text(FILE *out, const char *name, const char *v)
{
    fprintf(out, ",\"%s\":", name);
    if (v[0])
        cli_json_str(out, v);
    else
        fputs("null", out);
}

/* The adaptive controller (docs/dbthrottle.1, JSON OUTPUT): null when there is no record of one
 * and no override with a TTL; the record's fields null when it lacks them (or there is none). */
static void json_adapt(FILE *out, const cli_pool_view *v, const dbt_status_kind *k)
{
    cli_adapt_state st = cli_adapt_of(k, v->now_ms);
    fputs(",\"adaptive\":", out);
    if (st == CLI_ADAPT_NONE) {
        fputs("null", out);
        return;
    }
    static const dbt_status_adapt none;
    const dbt_status_adapt *a = k->adapt ? k->adapt : &none;
    fprintf(out, "{\"state\":\"%s\",\"leads\":%s,\"lapses_in_ms\":", cli_adapt_name(st),
            dbt_status_adapt_leads(k->adapt, v->now_ms) ? "true" : "false");
    if (k->override && k->override_pttl_ms > 0)
        fprintf(out, "%lld", k->override_pttl_ms);
    else
        fputs("null", out);
    fprintf(out, ",\"record_found\":%s", k->adapt ? "true" : "false");
    json_text(out, "owner", a->owner);
    json_text(out, "host", a->host);
    json_known(out, "pid", a->pid);
    json_known(out, "lease_until_ms", a->lease_until_ms);
    fputs(",\"lease_left_ms\":", out);
    if (a->lease_until_ms > 0)
        fprintf(out, "%lld", a->lease_until_ms > v->now_ms ? a->lease_until_ms - v->now_ms : 0);
    else
        fputs("null", out);
    json_known(out, "since_ms", a->since_ms);
    json_known(out, "min", a->min);
    json_known(out, "max", a->max);
    json_known(out, "limit", a->limit);
    json_known(out, "changed_at_ms", a->changed_at_ms);
    json_text(out, "reason", a->reason);
    json_known(out, "ttl_ms", a->ttl_ms);
    json_known(out, "interval_ms", a->interval_ms);
    json_known(out, "window_ms", a->window_ms);
    json_text(out, "unreadable", a->unreadable);
    fputc('}', out);
}

static void json_kind(FILE *out, const cli_pool_view *v, const dbt_status_kind *k)
{
    fputs("{\"limit\":", out);
    json_int_or_null(out, cli_effective_limit(k));
    fputs(",\"limit_seen\":", out);
    json_int_or_null(out, k->limit_seen);
    fputs(",\"override\":", out);
    json_int_or_null(out, k->override);
    fputs(",\"override_set_by\":", out);
    if (k->override)
        fputs(k->override_pttl_ms > 0 ? "\"adaptive\"" : "\"hand\"", out);
    else
        fputs("null", out);
    json_adapt(out, v, k);
    fprintf(out, ",\"draining\":%s,\"quarantine_ms\":%lld,\"quarantine_why\":",
            k->drained ? "true" : "false", k->quarantine_ms);
    if (k->quarantine_ms > 0)
        cli_json_str(out, k->why);
    else
        fputs("null", out);
    fprintf(out,
            ",\"holders_count\":%lld,\"waiters_count\":%lld,\"oldest_wait_ms\":%lld,"
            "\"holders\":[",
            k->nholders, k->nwaiters, k->oldest_wait_ms);
    for (int i = 0; i < k->nh; i++) {
        fputs(i ? ",{" : "{", out);
        json_entry(out, &k->holders[i]);
        fprintf(out, ",\"held_ms\":%" PRId64 ",\"lease_left_ms\":%" PRId64,
                v->now_ms - k->holders[i].since_ms, k->holders[i].expiry_ms - v->now_ms);
        json_session(out, &k->holders[i]);
        fputc('}', out);
    }
    fputs("],\"waiters\":[", out);
    for (int i = 0; i < k->nw; i++) {
        fprintf(out, "%s{\"position\":%d,", i ? "," : "", i + 1);
        json_entry(out, &k->waiters[i]);
        fprintf(out, ",\"waited_ms\":%" PRId64 "}", v->now_ms - k->waiters[i].since_ms);
    }
    fputs("],\"counters\":{", out);
    for (int c = 0; c < DBT_NCOUNTERS; c++)
        fprintf(out, "%s\"%s\":%lld", c ? "," : "", dbt_counter_names[c], k->counters[c]);
    fprintf(out, "},\"aging_ms\":%lld,\"classes_shipped\":%s,\"classes_problem\":", k->aging_ms,
            k->classes_shipped ? "true" : "false");
    if (k->classes_problem[0])
        cli_json_str(out, k->classes_problem);
    else
        fputs("null", out);
    fputs(",\"classes\":[", out);
    for (int i = 0; i < k->nclasses; i++) {
        const dbt_status_class *c = &k->classes[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        cli_json_str(out, c->name);
        fprintf(out, ",\"share\":%d,\"priority\":%d,\"wait_ms\":", c->share, c->priority);
        if (c->wait_ms >= 0)
            fprintf(out, "%lld", c->wait_ms);
        else
            fputs("null", out);
        fputs(",\"queue_cap\":", out);
        if (c->cap >= 0)
            fprintf(out, "%lld", c->cap);
        else
            fputs("null", out);
        fprintf(out,
                ",\"guarantee\":%lld,\"held\":%lld,\"borrowed\":%lld,\"waiters\":%lld,"
                "\"oldest_wait_ms\":%lld,\"default\":%s}",
                c->guarantee, c->held, c->borrowed, c->waiters, c->oldest_wait_ms,
                c->is_default ? "true" : "false");
    }
    fputc(']', out);
    json_histograms(out, k);
    cli_json_limits_in_use(out, k);
    cli_sole s;
    cli_sole_of(v, k, &s);
    fputs(",\"sole_owner\":", out);
    if (k->sole[0])
        cli_json_str(out, k->sole);
    else
        fputs("null", out);
    fputs(",\"sole_host_group\":", out);
    if (s.kind == CLI_SOLE_HOST)
        cli_json_str(out, s.owner);
    else
        fputs("null", out);
    fputc('}', out);
}

/* The pool's host groups: [{"group": G, "host": H, "processes": N}, ...]. */
static void json_host_groups(FILE *out, const cli_pool_view *v)
{
    cli_host_group g[64];
    int n = cli_host_groups(v, g, 64);
    fputs(",\"host_groups\":[", out);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",{\"group\":" : "{\"group\":", out);
        cli_json_str(out, g[i].group);
        fputs(",\"host\":", out);
        cli_json_str(out, g[i].host);
        fprintf(out, ",\"processes\":%d}", g[i].processes);
    }
    fputc(']', out);
}

static void json_processes(FILE *out, const cli_pool_view *v, int n)
{
    cli_process *ps;
    int np = cli_processes(v, n, &ps);
    fputs(",\"processes\":[", out);
    for (int i = 0; i < np; i++) {
        const cli_process *p = &ps[i];
        const dbt_proc_record *r = p->rec;
        fputs(i ? ",{\"id\":" : "{\"id\":", out);
        cli_json_str(out, r->cid);
        fputs(",\"host\":", out);
        cli_json_str(out, r->host);
        fprintf(out, ",\"pid\":%ld,\"ppid\":%ld,\"program\":", r->pid, r->ppid);
        cli_json_str(out, r->program);
        fputs(",\"version\":", out);
        cli_json_str(out, r->version);
        fputs(",\"state\":", out);
        cli_json_str(out, p->state);
        fputs(",\"reason\":", out);
        cli_json_str(out, p->reason);
        fputs(",\"on_redis_error\":", out);
        cli_json_str(out, r->mode);
        fputs(",\"pools\":[", out);
        for (int k = 0; k < p->npools; k++) {
            if (k)
                fputc(',', out);
            json_pool(out, p->pools[k]);
        }
        fputs("],\"host_groups\":[", out);
        for (int k = 0; k < p->npools; k++) {
            if (k)
                fputc(',', out);
            if (p->groups[k])
                cli_json_str(out, p->groups[k]);
            else
                fputs("null", out);
        }
        fputs("],\"live_settings_applied\":[", out);
        for (int k = 0; k < p->npools; k++) {
            if (k)
                fputc(',', out);
            if (p->live[k] >= 0)
                fprintf(out, "%lld", p->live[k]);
            else
                fputs("null", out);
        }
        fprintf(out,
                "],\"last_seen_ms\":%lld,\"silent_ms\":%" PRId64 ",\"report_every_ms\":%lld,"
                "\"held\":%ld,\"waiting\":%ld,\"idle_in_transaction\":%ld,"
                "\"unthrottled_commands\":%llu,\"refused_commands\":%llu,\"timeouts\":%llu,"
                "\"last_outage\":",
                r->seen_ms, p->silent_ms, r->every_ms, p->held, p->waiting, p->idle_in_tx,
                p->unthrottled, p->refused, p->timeouts);
        if (p->outage_since_ms) {
            fprintf(out, "{\"since_ms\":%lld,\"until_ms\":", p->outage_since_ms);
            json_int_or_null(out, p->outage_until_ms);
            fprintf(out, ",\"unthrottled_commands\":%llu,\"refused_commands\":%llu}}",
                    p->outage_unthrottled, p->outage_refused);
        } else {
            fputs("null}", out);
        }
    }
    fputc(']', out);
    if (np >= 0)
        free(ps);
}

void cli_render_json(FILE *out, const cli_pool_view *v, int n, const char *prefix,
                     const cli_hidden_idle *hidden)
{
    int64_t now = n ? v[0].now_ms : 0;
    fputs("{\"version\":1,\"prefix\":", out);
    cli_json_str(out, prefix);
    fprintf(out, ",\"time_ms\":%" PRId64 ",\"pools\":[", now);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",{" : "{", out);
        json_name(out, v[i].name);
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            fprintf(out, ",\"%s\":", kind_json[kind]);
            json_kind(out, &v[i], &v[i].kind[kind]);
        }
        json_host_groups(out, &v[i]);
        cli_json_settings(out, &v[i]);
        int64_t idle = cli_pool_idle_ms(&v[i]);
        if (idle >= 0)
            fprintf(out, ",\"idle_ms\":%" PRId64, idle);
        else
            fputs(",\"idle_ms\":null", out);
        fputc('}', out);
    }
    fputc(']', out);
    json_processes(out, v, n);
    fprintf(out, ",\"idle_pools_hidden\":%d}\n", hidden ? hidden->pools : 0);
}
