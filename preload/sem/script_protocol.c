/* script_protocol.c - the scripts' arguments and replies by name (see script_protocol.h). */
#include "script_protocol.h"

#include "sem_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the protocol's tables (lua/protocol/NAME.def) ---- */

/* What a field of a reply is, and what its reader stores (at offset, in the script's
 * <script>_fields struct of protocol_fields.inc). */
typedef enum {
    DBT_FT_INT,       /* an integer: long long */
    DBT_FT_STR,       /* a string: const char * (or, naming a constant, its index: long long) */
    DBT_FT_STR_NIL,   /* a string, or false (nil): const char *, NULL for nil */
    DBT_FT_INT_NIL,   /* an integer, or false (nil): long long, 0 for nil */
    DBT_FT_NUM,       /* an integer, a number's text, or nil: long long (0 for nil) */
    DBT_FT_IDS,       /* an array of strings: dbt_reply_ids */
    DBT_FT_INT_K,     /* an array of one integer per kind: long long[DBT_NKINDS] */
    DBT_FT_STR_NIL_K, /* an array of one string or nil per kind: const char *[DBT_NKINDS] */
    DBT_FT_ARRAY,     /* an array, read by hand: const redisReply * */
    DBT_FT_ANY        /* anything, read by hand: const redisReply * */
} dbt_field_type;

typedef struct {
    const char *name; /* as messages name it */
    dbt_field_type type;
    size_t offset;
    bool older;               /* a reply of an older script may end before this field */
    const long long *values;  /* an integer naming a constant: the values it may have */
    const char *const *names; /* a string naming a constant: the names it may have */
    int nvalues;
} dbt_field_spec;

/* Each reply's field table, the constants' names (protocol_fields.inc is made from the .def files,
 * for this file alone). */
#include "protocol_fields.inc"

/* ---- arguments ------------------------------------------------------------------------------ */

static int64_t key_ttl_for_ms(int64_t lease_ms)
{
    return 3 * lease_ms;
}

int64_t dbt_key_ttl_ms(const dbt_config *cfg)
{
    return key_ttl_for_ms(cfg->lease_ms);
}

int64_t dbt_quarantine_ms(const dbt_config *cfg)
{
    return dbt_quarantine_for_ms(cfg->lease_ms, cfg);
}

int64_t dbt_quarantine_for_ms(int64_t lease_ms, const dbt_config *cfg)
{
    return lease_ms / 3 + cfg->redis_timeout_ms + 1000;
}

/* The era's arguments before a connection is known: no era check. */
static void no_era(const char **args)
{
    args[DBT_ARG_ERA_TOKEN] = "";
    args[DBT_ARG_ERA_STARTED] = "0";
    args[DBT_ARG_QUARANTINE] = "0";
    args[DBT_ARG_ADOPT] = "";
    args[DBT_ARG_ERA_PREV] = "";
}

/* The lease and the keys' TTL, as text in caller buffers of 24 bytes. */
static void format_lease(int64_t lease_ms, char *lease, char *ttl)
{
    snprintf(lease, 24, "%" PRId64, lease_ms);
    snprintf(ttl, 24, "%" PRId64, key_ttl_for_ms(lease_ms));
}

void dbt_script_args(const dbt_keys *k, dbt_kind kind, const dbt_config *cfg, char *lease,
                     char *ttl, const char **args)
{
    format_lease(cfg->lease_ms, lease, ttl);
    args[DBT_ARG_WAKE_PREFIX] = k->wake_prefix;
    args[DBT_ARG_KIND] = dbt_kind_letter(kind);
    args[DBT_ARG_LEASE] = lease;
    args[DBT_ARG_TTL] = ttl;
    no_era(args);
}

/* The script's Q, in c's own buffer. */
static void set_quarantine(dbt_script_call *c, const dbt_config *cfg)
{
    snprintf(c->quarantine, sizeof c->quarantine, "%" PRId64, dbt_quarantine_ms(cfg));
    c->args[DBT_ARG_QUARANTINE] = c->quarantine;
}

void dbt_script_set_lease(dbt_script_call *c, int64_t lease_ms, int64_t longest_ms,
                          const dbt_config *cfg)
{
    /* args[DBT_ARG_LEASE], [DBT_ARG_TTL] and [DBT_ARG_QUARANTINE] point at these buffers */
    c->lease_ms = lease_ms;
    format_lease(lease_ms, c->lease, c->ttl);
    snprintf(c->quarantine, sizeof c->quarantine, "%" PRId64,
             dbt_quarantine_for_ms(longest_ms > lease_ms ? longest_ms : lease_ms, cfg));
}

void dbt_script_bind_era(dbt_script_call *c, const char *run_id, int64_t started_ms)
{
    if (c->nargs < DBT_BASE_ARGS)
        return;
    snprintf(c->era_started, sizeof c->era_started, "%" PRId64, started_ms);
    snprintf(c->era_token, sizeof c->era_token, "%s", run_id);
    c->args[DBT_ARG_ERA_TOKEN] = c->era_token;
    c->args[DBT_ARG_ERA_STARTED] = c->era_started;
    c->args[DBT_ARG_ERA_PREV] = c->era_prev;
}

/* How far a reading of Redis' clock may have drifted from this process' clock since it was made
 * (ms): 1000 ppm of its age, twice the fastest NTP slews a clock, and the ms the readings'
 * rounding may lose. */
static int64_t clock_drift_ms(int64_t age_us)
{
    return (age_us > 0 ? age_us / 1000000 : 0) + 2;
}

void dbt_script_bind_clock(dbt_script_call *c, const char *run_id, int64_t conn_ahead_ms,
                           int64_t conn_at_us, int64_t now_us)
{
    if (!c->until_arg)
        return;
    c->until[0] = '\0';
    if (!c->until_us || !run_id || !run_id[0])
        return;
    int64_t ahead = 0, at = 0;
    if (c->clock.at_us && strcmp(c->clock.run_id, run_id) == 0) {
        ahead = c->clock.ahead_ms;
        at = c->clock.at_us;
    }
    if (conn_at_us > at) { /* the connection's own reading, of this server, and fresher */
        ahead = conn_ahead_ms;
        at = conn_at_us;
    }
    if (!at)
        return;
    snprintf(c->until, sizeof c->until, "%" PRId64,
             (c->until_us + 999) / 1000 + ahead + clock_drift_ms(now_us - at));
}

/* The keys of one semaphore a call sends (not the operator's: keys.def, sent=no), in the order
 * the scripts take them, after those already set. */
static void add_keys(dbt_script_call *c, const dbt_keys *k, dbt_kind kind)
{
    for (int i = 0; i < DBT_NKEYS_SENT; i++)
        c->keys[c->nkeys++] = k->keys[kind][i];
}

/* A call on one semaphore: its keys and the four base arguments. */
static void begin_call(dbt_script_call *c, const dbt_script *s, const dbt_keys *k, dbt_kind kind,
                       const dbt_config *cfg)
{
    memset(c, 0, sizeof *c);
    c->script = s;
    add_keys(c, k, kind);
    c->args = c->fixed_args;
    dbt_script_args(k, kind, cfg, c->lease, c->ttl, c->args);
    c->lease_ms = cfg->lease_ms;
    c->nargs = DBT_BASE_ARGS;
    set_quarantine(c, cfg);
}

void dbt_build_acquire(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                       const dbt_acquire_call *a)
{
    begin_call(c, &dbt_script_acquire, k, kind, cfg);
    snprintf(c->number[0], sizeof c->number[0], "%d", a->limit);
    c->args[DBT_ACQUIRE_ARG_ID] = a->id;
    c->args[DBT_ACQUIRE_ARG_LIMIT] = c->number[0];
    c->args[DBT_ACQUIRE_ARG_TRY_ONLY] = a->try_only ? "1" : "0";
    c->args[DBT_ACQUIRE_ARG_WHO] = a->who;
    c->args[DBT_ACQUIRE_ARG_SHIPPED] = a->shipped_classes ? a->shipped_classes : "";
    c->args[DBT_ACQUIRE_ARG_SESSION] = a->session ? a->session : "";
    c->args[DBT_ACQUIRE_ARG_SHADOW] = a->shadow ? "1" : "0";
    c->nargs = DBT_ACQUIRE_NARGS;
}

/* A name of the session, cut to 63 bytes, control bytes (the separator among them) made '_'. */
static void put_name(char *out, size_t cap, size_t *len, const char *v)
{
    size_t start = *len;
    for (const unsigned char *q = (const unsigned char *)(v ? v : "");
         *q && *len - start < 63 && *len + 1 < cap; q++)
        out[(*len)++] = *q < 0x20 || *q == 0x7f ? '_' : (char)*q;
}

bool dbt_format_session(long backend_pid, const char *app, const char *user, const char *db,
                        char *out, size_t cap)
{
    int n = snprintf(out, cap, "%ld", backend_pid);
    if (n < 0 || (size_t)n + 4 * 64 + 1 > cap)
        return false;
    size_t len = (size_t)n;
    const char *names[] = {app, user, db};
    for (int i = 0; i < 3; i++) {
        out[len++] = '\x1f';
        put_name(out, cap, &len, names[i]);
    }
    out[len] = '\0';
    return true;
}

void dbt_format_who(const char *host, long pid, const char *conn, char *out, size_t cap)
{
    snprintf(out, cap, "%s %ld %s", host ? host : "", pid, conn && conn[0] ? conn : "-");
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '_';
}

void dbt_build_release(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                       const char *id, int64_t held_ms)
{
    begin_call(c, &dbt_script_release, k, kind, cfg);
    c->args[DBT_RELEASE_ARG_ID] = id;
    c->number[0][0] = '\0';
    if (held_ms >= 0)
        snprintf(c->number[0], sizeof c->number[0], "%" PRId64, held_ms);
    c->args[DBT_RELEASE_ARG_HELD_MS] = c->number[0];
    c->nargs = DBT_RELEASE_NARGS;
}

void dbt_build_cancel(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                      const char *id, bool gave_up)
{
    begin_call(c, &dbt_script_cancel, k, kind, cfg);
    c->args[DBT_CANCEL_ARG_ID] = id;
    c->args[DBT_CANCEL_ARG_GAVE_UP] = gave_up ? "1" : "0";
    c->nargs = DBT_CANCEL_NARGS;
}

void dbt_build_sample(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                      const char *cid, uint64_t first, int nholds, const char *holds,
                      uint64_t dropped, int64_t built_us, const char *clock)
{
    begin_call(c, &dbt_script_sample, k, kind, cfg);
    snprintf(c->number[0], sizeof c->number[0], "%" PRIu64, first);
    snprintf(c->number[1], sizeof c->number[1], "%" PRIu64, dropped);
    snprintf(c->number[2], sizeof c->number[2], "%d", nholds);
    snprintf(c->number[3], sizeof c->number[3], "%" PRId64, built_us);
    c->args[DBT_SAMPLE_ARG_BUILT] = c->number[3];
    c->args[DBT_SAMPLE_ARG_CLOCK] = clock;
    c->args[DBT_SAMPLE_ARG_CID] = cid;
    c->args[DBT_SAMPLE_ARG_FIRST] = c->number[0];
    c->args[DBT_SAMPLE_ARG_NHOLDS] = c->number[2];
    c->args[DBT_SAMPLE_ARG_HOLDS] = holds;
    c->args[DBT_SAMPLE_ARG_DROPPED] = c->number[1];
    c->nargs = DBT_SAMPLE_NARGS;
}

/* Group g of a renewal starts at its place (dbt_renew_layout); a group the caller did not add
 * before it is sent as "" (never with current callers: the order is build, record, doing, local
 * waits, until). */
static int renew_group(dbt_script_call *c, int g)
{
    while (c->nargs < c->group_at[g])
        c->args[c->nargs++] = "";
    return c->group_at[g];
}

void dbt_build_renew(dbt_script_call *c, const dbt_keys *k, const dbt_config *cfg,
                     dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS],
                     const dbt_local_counts local[DBT_NKINDS], const char **args)
{
    memset(c, 0, sizeof *c);
    c->script = &dbt_script_renew;
    add_keys(c, k, DBT_KIND_QUERY);
    add_keys(c, k, DBT_KIND_CONN);
    c->args = args;
    /* The base arguments of the query semaphore: renew.lua sets the kind per semaphore itself. */
    dbt_script_args(k, DBT_KIND_QUERY, cfg, c->lease, c->ttl, args);
    c->lease_ms = cfg->lease_ms;
    c->nargs = DBT_BASE_ARGS;
    set_quarantine(c, cfg);
    /* How many ids of each list (DBT_RENEW_ARG_HELD_Q .. QUEUED_C), then the groups. */
    _Static_assert(DBT_RENEW_ARG_QUEUED_Q == DBT_RENEW_ARG_HELD_Q + DBT_RENEW_QUEUED &&
                       DBT_RENEW_ARG_HELD_C == DBT_RENEW_ARG_HELD_Q + DBT_RENEW_LISTS &&
                       DBT_RENEW_ARG_REST == DBT_RENEW_ARG_HELD_Q + DBT_NKINDS * DBT_RENEW_LISTS,
                   "renew.def's counts: per kind, held then queued");
    long long counts[DBT_RENEW_ARG_REST] = {0};
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int l = 0; l < DBT_RENEW_LISTS; l++) {
            int at = DBT_RENEW_ARG_HELD_Q + kind * DBT_RENEW_LISTS + l;
            char *count = c->id_count[kind * DBT_RENEW_LISTS + l];
            counts[at] = lists ? lists[kind][l].n : 0;
            snprintf(count, sizeof c->id_count[0], "%lld", counts[at]);
            args[at] = count;
        }
    dbt_renew_layout(counts, c->group_at);
    c->nargs = DBT_RENEW_ARG_REST;
    int at = renew_group(c, DBT_RENEW_G_IDS);
    for (int kind = 0; kind < DBT_NKINDS && lists; kind++)
        for (int l = 0; l < DBT_RENEW_LISTS; l++)
            for (int i = 0; i < lists[kind][l].n; i++, at += DBT_RENEW_IDS_SIZE)
                args[at + DBT_RENEW_IDS_ID] = lists[kind][l].ids[i];
    c->nargs = c->group_at[DBT_RENEW_G_IDS + 1];
    /* Per kind: the grants, queued waits and wait (ms) of local handover since the last report. */
    at = renew_group(c, DBT_RENEW_G_COUNTS);
    for (int kind = 0; kind < DBT_NKINDS; kind++, at += DBT_RENEW_COUNTS_SIZE) {
        char(*n)[24] = &c->number[DBT_RENEW_COUNTS_SIZE * kind];
        _Static_assert(DBT_RENEW_COUNTS_SIZE * DBT_NKINDS <= 8, "the counts fit c->number");
        snprintf(n[DBT_RENEW_COUNTS_GRANTS], 24, "%" PRIu64, local[kind].grants);
        snprintf(n[DBT_RENEW_COUNTS_QUEUED], 24, "%" PRIu64, local[kind].queued);
        snprintf(n[DBT_RENEW_COUNTS_WAIT_MS], 24, "%" PRId64, local[kind].wait_us / 1000);
        for (int m = 0; m < DBT_RENEW_COUNTS_SIZE; m++)
            args[at + m] = n[m];
    }
    c->nargs = c->group_at[DBT_RENEW_G_COUNTS + 1];
}

int dbt_renew_nargs(dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS])
{
    long long counts[DBT_RENEW_ARG_REST] = {0};
    int at[DBT_RENEW_NGROUPS + 1];
    for (int kind = 0; kind < DBT_NKINDS && lists; kind++)
        for (int l = 0; l < DBT_RENEW_LISTS; l++)
            counts[DBT_RENEW_ARG_HELD_Q + kind * DBT_RENEW_LISTS + l] = lists[kind][l].n;
    return dbt_renew_layout(counts, at);
}

void dbt_renew_add_record(dbt_script_call *c, const dbt_keys *k, const char *cid,
                          const char *record, int64_t ttl_ms, bool goodbye)
{
    c->keys[c->nkeys++] = k->procs;
    c->keys[c->nkeys++] = k->procinfo;
    snprintf(c->record_ttl, sizeof c->record_ttl, "%" PRId64, ttl_ms);
    int at = renew_group(c, DBT_RENEW_G_RECORD);
    c->args[at + DBT_RENEW_RECORD_CID] = cid;
    c->args[at + DBT_RENEW_RECORD_RECORD] = record;
    c->args[at + DBT_RENEW_RECORD_TTL] = c->record_ttl;
    c->args[at + DBT_RENEW_RECORD_GOODBYE] = goodbye ? "1" : "0";
    c->args[at + DBT_RENEW_RECORD_CLIENTS] = "";
    c->nargs = c->group_at[DBT_RENEW_G_RECORD + 1];
}

void dbt_renew_add_clients(dbt_script_call *c, const char *clients)
{
    c->args[c->group_at[DBT_RENEW_G_RECORD] + DBT_RENEW_RECORD_CLIENTS] = clients;
}

void dbt_format_doing(char state, const char *session, const char *who, int64_t held_ms, char *out,
                      size_t cap)
{
    int n = snprintf(out, cap, "%c\x1f%s%s%s", state, session ? session : "",
                     who && who[0] ? "\x1f" : "", who ? who : "");
    if (who && who[0] && held_ms >= 0 && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "\x1f%" PRId64, held_ms);
}

void dbt_renew_add_doing(dbt_script_call *c, char *const *doing, int n)
{
    /* after the doings added before (the query kind's, then the connection kind's) */
    int at =
        c->nargs > c->group_at[DBT_RENEW_G_DOING] ? c->nargs : renew_group(c, DBT_RENEW_G_DOING);
    for (int i = 0; i < n && at < c->group_at[DBT_RENEW_G_DOING + 1];
         i++, at += DBT_RENEW_DOING_SIZE)
        c->args[at + DBT_RENEW_DOING_DOING] = doing[i];
    c->nargs = at;
}

int dbt_hist_bounds(double *out, int cap)
{
    /* every script's text begins with lua/_common.lua: its one list */
    const char *at = strstr(dbt_script_status.body, "local function HIST_BOUNDS()");
    at = at ? strchr(at, '{') : NULL;
    int n = 0;
    while (at && *at != '}' && n < cap) {
        char *end;
        double v = strtod(at + 1, &end);
        if (end == at + 1)
            break;
        out[n++] = v;
        at = end;
        while (*at == ' ')
            at++;
        if (*at != ',' && *at != '}')
            break;
    }
    return n;
}

bool dbt_local_hist_add(dbt_local_hist *h, const double *bounds, int nbounds, const char *tag,
                        int64_t ms)
{
    int t = 0;
    while (t < h->ntags && strcmp(h->tag[t].tag, tag) != 0)
        t++;
    if (t == h->ntags) {
        if (t == DBT_LOCAL_HIST_TAGS)
            return false;
        memset(&h->tag[t], 0, sizeof h->tag[t]);
        snprintf(h->tag[t].tag, sizeof h->tag[t].tag, "%s", tag);
        h->ntags++;
    }
    int i = 0;
    while (i < nbounds && i + 1 < DBT_HIST_MAX && (double)ms > bounds[i])
        i++;
    h->tag[t].bucket[i]++;
    h->tag[t].sum_ms += ms > 0 ? ms : 0;
    return true;
}

void dbt_local_hist_merge(dbt_local_hist *a, const dbt_local_hist *b)
{
    for (int t = 0; t < b->ntags; t++) {
        int u = 0;
        while (u < a->ntags && strcmp(a->tag[u].tag, b->tag[t].tag) != 0)
            u++;
        if (u == a->ntags) {
            if (u == DBT_LOCAL_HIST_TAGS)
                continue;
            a->tag[u] = b->tag[t];
            a->ntags++;
            continue;
        }
        for (int i = 0; i < DBT_HIST_MAX; i++)
            a->tag[u].bucket[i] += b->tag[t].bucket[i];
        a->tag[u].sum_ms += b->tag[t].sum_ms;
    }
}

bool dbt_format_local_hist(const dbt_local_hist *h, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int t = 0; t < h->ntags; t++) {
        int n = snprintf(out + len, cap - len, "%s%s %" PRId64, t ? ";" : "",
                         h->tag[t].tag[0] ? h->tag[t].tag : ".", h->tag[t].sum_ms);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
        for (int i = 0; i < DBT_HIST_MAX; i++) {
            if (!h->tag[t].bucket[i])
                continue;
            n = snprintf(out + len, cap - len, " %d:%" PRIu32, i, h->tag[t].bucket[i]);
            if (n < 0 || (size_t)n >= cap - len)
                return false;
            len += (size_t)n;
        }
    }
    return true;
}

void dbt_renew_add_local_hist(dbt_script_call *c, const char *const text[DBT_NKINDS])
{
    int at = renew_group(c, DBT_RENEW_G_WAITS);
    for (int k = 0; k < DBT_NKINDS; k++)
        c->args[at + k * DBT_RENEW_WAITS_SIZE + DBT_RENEW_WAITS_WAITS] = text[k];
    c->nargs = c->group_at[DBT_RENEW_G_WAITS + 1];
}

void dbt_renew_add_local_holds(dbt_script_call *c, const char *const text[DBT_NKINDS])
{
    int at = renew_group(c, DBT_RENEW_G_HOLDS);
    for (int k = 0; k < DBT_NKINDS; k++)
        c->args[at + k * DBT_RENEW_HOLDS_SIZE + DBT_RENEW_HOLDS_HOLDS] = text[k];
    c->nargs = c->group_at[DBT_RENEW_G_HOLDS + 1];
}

void dbt_renew_add_live(dbt_script_call *c, long long version)
{
    int at = renew_group(c, DBT_RENEW_G_LIVE);
    snprintf(c->live_version, sizeof c->live_version, "%lld", version);
    c->args[at + DBT_RENEW_LIVE_VERSION] = c->live_version;
    c->nargs = c->group_at[DBT_RENEW_G_LIVE + 1];
}

void dbt_renew_add_until(dbt_script_call *c, int64_t until_us, const dbt_redis_clock *clock)
{
    c->until_us = until_us;
    if (clock)
        c->clock = *clock;
    c->until[0] = '\0'; /* "" until it is bound to a server's clock */
    c->until_arg = renew_group(c, DBT_RENEW_G_BELIEVED) + DBT_RENEW_BELIEVED_UNTIL;
    c->args[c->until_arg] = c->until;
    c->nargs = c->group_at[DBT_RENEW_G_BELIEVED + 1];
}

/* ---- the process record ------------------------------------------------------------------ */

/* A field of the record: what would break the line (a tab, a newline) becomes '_'. */
static void put_text(char *out, size_t cap, size_t *len, const char *v)
{
    for (const unsigned char *q = (const unsigned char *)v; *q && *len + 1 < cap; q++)
        out[(*len)++] = *q < 0x20 || *q == 0x7f ? '_' : (char)*q;
}

bool dbt_format_record(const dbt_proc_record *r, char *out, size_t cap)
{
    char nums[512];
    int n =
        snprintf(nums, sizeof nums,
                 "%ld\t%ld\t%ld\t%llu\t%llu\t%llu\t%lld\t%lld\t%llu\t%llu\t%lld\t%lld\t%ld\t%"
                 "ld\t%ld",
                 r->pid, r->ppid, r->pgid, r->unthrottled, r->refused, r->timeouts,
                 r->outage_since_ms, r->outage_until_ms, r->outage_unthrottled, r->outage_refused,
                 r->every_ms, r->silent_after_ms, r->held, r->waiting, r->idle_in_tx);
    if (n < 0 || (size_t)n >= sizeof nums)
        return false;
    const char *text[] = {DBT_RECORD_VERSION, r->host, r->program, r->version,
                          r->state,           r->mode, r->reason};
    size_t len = 0;
    for (size_t i = 0; i < sizeof text / sizeof *text; i++) {
        put_text(out, cap, &len, text[i]);
        if (len + 1 >= cap)
            return false;
        out[len++] = '\t';
    }
    if (len + (size_t)n + 1 > cap)
        return false;
    memcpy(out + len, nums, (size_t)n + 1);
    len += (size_t)n;
    char live[24];
    snprintf(live, sizeof live, "%lld", r->live_version);
    const char *tail[] = {r->group, live, r->live_refused, r->own};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) {
        if (len + 1 + strlen(tail[i]) + 1 > cap)
            return false;
        out[len++] = '\t';
        put_text(out, cap, &len, tail[i]);
    }
    out[len] = '\0';
    return true;
}

static bool next_field(const char **p, char *out, size_t cap);

bool dbt_format_clients(const dbt_client_row *rows, int n, long known, char *out, size_t cap)
{
    int w = snprintf(out, cap, "%s\t%ld", DBT_RECORD_CLIENTS_VERSION, known);
    if (w < 0 || (size_t)w >= cap)
        return false;
    size_t len = (size_t)w;
    for (int i = 0; i < n; i++) {
        const dbt_client_row *r = &rows[i];
        char nums[64];
        snprintf(nums, sizeof nums, "%lld\t%lld", r->for_ms, r->age_ms);
        const char *field[] = {r->conn, r->state, nums, r->app, r->server};
        for (size_t f = 0; f < sizeof field / sizeof *field; f++) {
            if (len + 2 >= cap)
                return false;
            out[len++] = f == 0 ? '\n' : '\t';
            if (f == 2) { /* the numbers' own tab stays */
                size_t m = strlen(nums);
                if (len + m + 1 >= cap)
                    return false;
                memcpy(out + len, nums, m);
                len += m;
            } else {
                put_text(out, cap, &len, field[f]);
            }
        }
    }
    if (len + 1 >= cap)
        return false;
    out[len] = '\0';
    return true;
}

int dbt_parse_clients(const char *text, dbt_client_row *rows, int cap, long *known)
{
    char ver[8], count[24];
    const char *nl = strchr(text, '\n');
    char head[48];
    snprintf(head, sizeof head, "%.*s", (int)(nl ? (size_t)(nl - text) : strlen(text)), text);
    const char *h = head;
    if (!next_field(&h, ver, sizeof ver) || strcmp(ver, DBT_RECORD_CLIENTS_VERSION) != 0 ||
        !next_field(&h, count, sizeof count))
        return -1;
    *known = atol(count);
    int n = 0;
    while (nl && n < cap) {
        const char *line = nl + 1;
        nl = strchr(line, '\n');
        char buf[512], f_for[24], f_age[24];
        snprintf(buf, sizeof buf, "%.*s", (int)(nl ? (size_t)(nl - line) : strlen(line)), line);
        const char *q = buf;
        dbt_client_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        if (!next_field(&q, r->conn, sizeof r->conn) ||
            !next_field(&q, r->state, sizeof r->state) || !next_field(&q, f_for, sizeof f_for) ||
            !next_field(&q, f_age, sizeof f_age) || !next_field(&q, r->app, sizeof r->app) ||
            !next_field(&q, r->server, sizeof r->server))
            return -1;
        r->for_ms = atoll(f_for);
        r->age_ms = atoll(f_age);
        n++;
    }
    return n;
}

/* The next tab-separated field of *p into out (cut to cap); false when there is none. */
static bool next_field(const char **p, char *out, size_t cap)
{
    if (!*p)
        return false;
    const char *tab = strchr(*p, '\t');
    size_t n = tab ? (size_t)(tab - *p) : strlen(*p);
    snprintf(out, cap, "%.*s", (int)n, *p);
    *p = tab ? tab + 1 : NULL;
    return true;
}

bool dbt_parse_record(const char *text, dbt_proc_record *r)
{
    memset(r, 0, sizeof *r);
    const char *p = text;
    char seen[32], ver[8], nums[15][32];
    if (!next_field(&p, seen, sizeof seen) || !next_field(&p, ver, sizeof ver) ||
        strcmp(ver, DBT_RECORD_VERSION) != 0 || !next_field(&p, r->host, sizeof r->host) ||
        !next_field(&p, r->program, sizeof r->program) ||
        !next_field(&p, r->version, sizeof r->version) ||
        !next_field(&p, r->state, sizeof r->state) || !next_field(&p, r->mode, sizeof r->mode) ||
        !next_field(&p, r->reason, sizeof r->reason))
        return false;
    for (int i = 0; i < 15; i++)
        if (!next_field(&p, nums[i], sizeof nums[i]))
            return false;
    r->seen_ms = strtoll(seen, NULL, 10);
    r->pid = strtol(nums[0], NULL, 10);
    r->ppid = strtol(nums[1], NULL, 10);
    r->pgid = strtol(nums[2], NULL, 10);
    r->unthrottled = strtoull(nums[3], NULL, 10);
    r->refused = strtoull(nums[4], NULL, 10);
    r->timeouts = strtoull(nums[5], NULL, 10);
    r->outage_since_ms = strtoll(nums[6], NULL, 10);
    r->outage_until_ms = strtoll(nums[7], NULL, 10);
    r->outage_unthrottled = strtoull(nums[8], NULL, 10);
    r->outage_refused = strtoull(nums[9], NULL, 10);
    r->every_ms = strtoll(nums[10], NULL, 10);
    r->silent_after_ms = strtoll(nums[11], NULL, 10);
    r->held = strtol(nums[12], NULL, 10);
    r->waiting = strtol(nums[13], NULL, 10);
    r->idle_in_tx = strtol(nums[14], NULL, 10);
    /* The host group, if the process shares: 16 hex digits, anything else is no group. */
    char group[32];
    if (next_field(&p, group, sizeof group) && strlen(group) == 16 &&
        strspn(group, "0123456789abcdef") == 16)
        memcpy(r->group, group, sizeof r->group);
    /* The live settings it applied: not said by an older version's record. */
    char live[24];
    r->live_version = -1;
    if (p && next_field(&p, live, sizeof live) && live[0] &&
        strspn(live, "0123456789") == strlen(live))
        r->live_version = strtoll(live, NULL, 10);
    if (p)
        next_field(&p, r->live_refused, sizeof r->live_refused);
    if (p)
        next_field(&p, r->own, sizeof r->own);
    return true;
}

void dbt_build_status(dbt_script_call *c, const dbt_keys *k, int max_rows)
{
    memset(c, 0, sizeof *c);
    c->script = &dbt_script_status;
    add_keys(c, k, DBT_KIND_QUERY);
    add_keys(c, k, DBT_KIND_CONN);
    c->keys[c->nkeys++] = k->procs;
    c->keys[c->nkeys++] = k->procinfo;
    c->args = c->fixed_args;
    /* status.lua reads, never writes: no lease, no TTL. */
    snprintf(c->number[0], sizeof c->number[0], "%d", max_rows);
    c->args[c->nargs++] = k->wake_prefix;
    c->args[c->nargs++] = dbt_kind_letter(DBT_KIND_QUERY);
    c->args[c->nargs++] = "0";
    c->args[c->nargs++] = "0";
    no_era(c->args); /* it reads the era, never starts one */
    c->nargs = DBT_BASE_ARGS;
    c->args[DBT_STATUS_ARG_MAX_ROWS] = c->number[0];
    c->nargs = DBT_STATUS_NARGS;
}

void dbt_build_admin(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                     dbt_admin_op op, const char *arg)
{
    begin_call(c, &dbt_script_admin, k, kind, cfg);
    c->args[DBT_ADMIN_ARG_OP] = dbt_admin_op_names[op];
    c->args[DBT_ADMIN_ARG_ARG] = arg ? arg : "";
    c->nargs = DBT_ADMIN_NARGS;
}

void dbt_build_adapt(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                     const dbt_adapt_args *a)
{
    _Static_assert(DBT_ADAPT_NARGS <= DBT_CALL_MAX_FIXED_ARGS, "adapt.lua's arguments fit");
    begin_call(c, &dbt_script_adapt, k, kind, cfg);
    c->args[DBT_ADAPT_ARG_OP] = dbt_adapt_op_names[a->op];
    c->args[DBT_ADAPT_ARG_TOKEN] = a->token;
    c->nargs = DBT_ADAPT_ARG_TOKEN + 1;
    if (a->op == DBT_ADAPT_LEASE) {
        static const int at[] = {DBT_ADAPT_ARG_LEASE_MS, DBT_ADAPT_ARG_PID,
                                 DBT_ADAPT_ARG_MIN,      DBT_ADAPT_ARG_MAX,
                                 DBT_ADAPT_ARG_TTL_MS,   DBT_ADAPT_ARG_INTERVAL_MS,
                                 DBT_ADAPT_ARG_WINDOW_MS};
        const int64_t nums[] = {a->lease_ms, a->pid,         a->min,      a->max,
                                a->ttl_ms,   a->interval_ms, a->window_ms};
        for (int i = 0; i < 7; i++) {
            snprintf(c->number[i], sizeof c->number[i], "%" PRId64, nums[i]);
            c->args[at[i]] = c->number[i];
        }
        c->args[DBT_ADAPT_ARG_HOST] = a->host ? a->host : "";
        c->nargs = DBT_ADAPT_NARGS;
    } else if (a->op == DBT_ADAPT_SET) {
        snprintf(c->number[0], sizeof c->number[0], "%d", a->limit);
        c->args[DBT_ADAPT_ARG_LIMIT] = c->number[0];
        c->args[DBT_ADAPT_ARG_REASON] = a->reason ? a->reason : "";
        c->nargs = DBT_ADAPT_ARG_REASON + 1;
    }
}

/* ---- replies -------------------------------------------------------------------------------- */

const char *const dbt_counter_names[DBT_NCOUNTERS] = {
    "grants",  "queued",  "refused",     "cancelled",  "expired",
    "evicted", "wait_ms", "quarantines", "reasserted", "requeued",
    "clamped", "capped",  "aged",        "would_wait", "would_refuse"};

static const char *type_name(int type)
{
    switch (type) {
    case REDIS_REPLY_STRING:
        return "a string";
    case REDIS_REPLY_ARRAY:
        return "an array";
    case REDIS_REPLY_INTEGER:
        return "an integer";
    case REDIS_REPLY_NIL:
        return "nil";
    case REDIS_REPLY_STATUS:
        return "a status";
    case REDIS_REPLY_ERROR:
        return "an error";
    default:
        return "an unknown type";
    }
}

/* "<script> returned an unexpected reply: <why>"; returns false. */
__attribute__((format(printf, 3, 4))) static bool unexpected(char *err, const char *script,
                                                             const char *fmt, ...)
{
    char why[DBT_ERRLEN / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(err, DBT_ERRLEN, "%s returned an unexpected reply: %s", script, why);
    return false;
}

/* r is an array of exactly n elements (n < 0: any count). */
static bool is_array(const redisReply *r, long n, const char *script, const char *what, char *err)
{
    if (!r)
        return unexpected(err, script, "%s missing", what);
    if (r->type == REDIS_REPLY_ERROR)
        return unexpected(err, script, "%s is an error (%s)", what, r->str ? r->str : "");
    if (r->type != REDIS_REPLY_ARRAY)
        return unexpected(err, script, "%s is %s, not an array", what, type_name(r->type));
    if (n >= 0 && r->elements != (size_t)n)
        return unexpected(err, script, "%s has %zu elements, not %ld", what, r->elements, n);
    return true;
}

static bool is_type(const redisReply *r, int type, const char *script, const char *what, char *err)
{
    if (r->type == type)
        return true;
    return unexpected(err, script, "%s is %s, not %s", what, type_name(r->type), type_name(type));
}

/* A bare integer reply (release.lua, cancel.lua). */
static bool is_integer(const redisReply *r, const char *script, char *err)
{
    if (!r)
        return unexpected(err, script, "no reply");
    if (r->type == REDIS_REPLY_ERROR)
        return unexpected(err, script, "an error (%s)", r->str ? r->str : "");
    return is_type(r, REDIS_REPLY_INTEGER, script, "the reply", err);
}

/* Every element of list r is a string (an id). */
static bool ids_of(const redisReply *r, const char *script, const char *what, dbt_reply_ids *out,
                   char *err)
{
    if (!is_array(r, -1, script, what, err))
        return false;
    for (size_t i = 0; i < r->elements; i++)
        if (!is_type(r->element[i], REDIS_REPLY_STRING, script, what, err))
            return false;
    out->items = r->element;
    out->n = r->elements;
    return true;
}

/* ---- the one reader of the replies' field tables (lua/protocol/NAME.def) ---- */

static bool number_of(const redisReply *r, const char *what, long long *out, char *err);

/* One field of a reply, e, into at. */
static bool read_field(const redisReply *e, const char *script, const dbt_field_spec *f, void *at,
                       char *err)
{
    long long *num = at;
    const char **str = at;
    const redisReply **raw = at;
    switch (f->type) {
    case DBT_FT_INT:
        if (!is_type(e, REDIS_REPLY_INTEGER, script, f->name, err))
            return false;
        for (int i = 0; i < f->nvalues && f->values[i] != e->integer; i++)
            if (i + 1 == f->nvalues)
                return unexpected(err, script, "%s %lld", f->name, e->integer);
        *num = e->integer;
        return true;
    case DBT_FT_STR:
        if (!is_type(e, REDIS_REPLY_STRING, script, f->name, err))
            return false;
        if (!f->nvalues) {
            *str = e->str;
            return true;
        }
        for (int i = 0; i < f->nvalues; i++)
            if (strcmp(e->str, f->names[i]) == 0)
                return *num = i, true;
        return unexpected(err, script, "%s \"%.32s\"", f->name, e->str);
    case DBT_FT_STR_NIL:
        *str = e->type == REDIS_REPLY_STRING ? e->str : NULL;
        if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_NIL)
            return unexpected(err, script, "%s is %s, not a string or nil", f->name,
                              type_name(e->type));
        return true;
    case DBT_FT_INT_NIL:
        *num = e->type == REDIS_REPLY_INTEGER ? e->integer : 0;
        if (e->type != REDIS_REPLY_INTEGER && e->type != REDIS_REPLY_NIL)
            return unexpected(err, script, "%s is %s", f->name, type_name(e->type));
        return true;
    case DBT_FT_NUM:
        return number_of(e, f->name, num, err);
    case DBT_FT_IDS:
        return ids_of(e, script, f->name, at, err);
    case DBT_FT_INT_K:
    case DBT_FT_STR_NIL_K:
        if (!is_array(e, DBT_NKINDS, script, f->name, err))
            return false;
        for (int k = 0; k < DBT_NKINDS; k++) {
            dbt_field_spec one = *f;
            one.type = f->type == DBT_FT_INT_K ? DBT_FT_INT : DBT_FT_STR_NIL;
            if (!read_field(e->element[k], script, &one,
                            f->type == DBT_FT_INT_K ? (void *)&num[k] : (void *)&str[k], err))
                return false;
        }
        return true;
    case DBT_FT_ARRAY:
        if (!is_array(e, -1, script, f->name, err))
            return false;
        *raw = e;
        return true;
    case DBT_FT_ANY:
        *raw = e;
        return true;
    }
    return unexpected(err, script, "%s: no reader", f->name);
}

/* An array reply r (what: "the reply", or the part of one it is) into out, a <script>_fields
 * struct, by its field table: as many elements as fields, or as an older script's reply had
 * (ending before a field marked older); each of the type its table says. */
static bool read_fields(const redisReply *r, const char *script, const char *what,
                        const dbt_field_spec *spec, size_t n, void *out, char *err)
{
    if (!is_array(r, -1, script, what, err))
        return false;
    bool count_ok = r->elements == n;
    for (size_t i = 0; i < n && !count_ok; i++)
        count_ok = spec[i].older && r->elements == i;
    if (!count_ok)
        return unexpected(err, script, "%s has %zu elements, not %zu", what, r->elements, n);
    *(size_t *)out = r->elements;
    for (size_t i = 0; i < r->elements; i++)
        if (!read_field(r->element[i], script, &spec[i], (char *)out + spec[i].offset, err))
            return false;
    return true;
}

/* A reply that is one integer (release.lua, cancel.lua), by its table's one field. */
static bool read_integer(const redisReply *r, const char *script, const dbt_field_spec *spec,
                         void *out, char *err)
{
    if (!is_integer(r, script, err))
        return false;
    *(size_t *)out = 1;
    return read_field(r, script, spec, (char *)out + spec->offset, err);
}

#define READ_FIELDS(r, script, what, name, out, err)                                               \
    read_fields(r, script, what, name##_spec, sizeof name##_spec / sizeof name##_spec[0], out, err)

bool dbt_parse_acquire(const redisReply *r, void *out, char *err)
{
    acquire_fields f;
    dbt_acquire_reply *a = out;
    /* Eight elements are taken too: a reply of the scripts before classes (no class). */
    if (!READ_FIELDS(r, "acquire.lua", "the reply", acquire, &f, err))
        return false;
    a->status = (dbt_acquire_status)f.status;
    a->holders = f.holders;
    a->queue = f.queue;
    a->limit_seen = f.limit_seen ? strtoll(f.limit_seen, NULL, 10) : 0;
    a->ticket = f.ticket;
    a->sole = f.sole == 1;
    a->quarantine_ms = f.quarantine;
    snprintf(a->why, sizeof a->why, "%s", f.why ? f.why : "");
    a->class_name[0] = '\0';
    a->class_wait_ms = a->class_cap = -1;
    if (f.n > DBT_ACQUIRE_R_CLASS_NAME) {
        snprintf(a->class_name, sizeof a->class_name, "%s", f.class_name ? f.class_name : "");
        a->class_wait_ms = f.class_wait;
        a->class_cap = f.class_cap;
    }
    a->would = f.n > DBT_ACQUIRE_R_WOULD ? (dbt_acquire_would)f.would : DBT_WOULD_RUN;
    return true;
}

bool dbt_parse_release(const redisReply *r, void *out, char *err)
{
    release_fields f;
    if (!read_integer(r, "release.lua", release_spec, &f, err))
        return false;
    *(bool *)out = f.value == 1;
    return true;
}

bool dbt_parse_sample(const redisReply *r, void *out, char *err)
{
    sample_fields f;
    if (!read_integer(r, "sample.lua", sample_spec, &f, err))
        return false;
    *(long long *)out = f.value;
    return true;
}

bool dbt_parse_cancel(const redisReply *r, void *out, char *err)
{
    cancel_fields f;
    if (!read_integer(r, "cancel.lua", cancel_spec, &f, err))
        return false;
    *(dbt_cancel_outcome *)out = (dbt_cancel_outcome)f.value;
    return true;
}

const char *dbt_renew_lost_holder(const dbt_reply_ids *lost, size_t i, char *mark)
{
    const char *id = dbt_reply_id(lost, i);
    *mark = 0;
    if ((id[0] == DBT_EVICTED_PLAIN || id[0] == DBT_EVICTED_CANCEL) && id[1] == ':') {
        *mark = id[0];
        id += 2;
    }
    return id;
}

bool dbt_parse_renew(const redisReply *r, void *out, char *err)
{
    renew_fields f;
    dbt_renew_reply *rr = out;
    /* Without now: a reply of the scripts before it. */
    if (!READ_FIELDS(r, "renew.lua", "the reply", renew, &f, err))
        return false;
    rr->lost_holders = f.lost_holders;
    rr->lost_waiters = f.lost_waiters;
    rr->granted_waiters = f.granted_waiters;
    rr->now_ms = f.n > DBT_RENEW_R_NOW ? f.now : 0;
    for (int k = 0; k < DBT_NKINDS; k++) {
        rr->queue[k] = f.queue[k];
        rr->handover_allowed[k] = f.handover_allowed[k] != 0;
        rr->quarantine_ms[k] = f.quarantine[k];
        rr->reasserted[k] = f.reasserted[k];
        snprintf(rr->why[k], sizeof rr->why[k], "%s", f.why[k] ? f.why[k] : "");
        snprintf(rr->sole_owner[k], sizeof rr->sole_owner[k], "%s",
                 f.sole_owner[k] ? f.sole_owner[k] : "");
        bool shares = f.n > DBT_RENEW_R_SHARE;
        rr->share[k] = shares ? f.share[k] : -1;
        rr->held[k] = shares ? f.held[k] : 0;
    }
    rr->live = f.n > DBT_RENEW_R_LIVE ? f.live : NULL;
    return true;
}

/* A number status.lua reads from a key: an integer, its text, or nil (0). */
static bool number_of(const redisReply *r, const char *what, long long *out, char *err)
{
    if (r->type == REDIS_REPLY_INTEGER)
        *out = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        *out = strtoll(r->str, NULL, 10);
    else if (r->type == REDIS_REPLY_NIL)
        *out = 0;
    else
        return unexpected(err, "status.lua", "%s is %s", what, type_name(r->type));
    return true;
}

/* The next "\x1f"-separated field of *p into out (cut to cap); "" when there is none. */
static void next_unit(const char **p, char *out, size_t cap)
{
    out[0] = '\0';
    if (!*p)
        return;
    const char *sep = strchr(*p, '\x1f');
    size_t n = sep ? (size_t)(sep - *p) : strlen(*p);
    snprintf(out, cap, "%.*s", (int)n, *p);
    *p = sep ? sep + 1 : NULL;
}

/* An info value (lua/_common.lua, KEYS[6]): "<since> <host> <pid> <conn>", then state, class
 * and the session, each after a \x1f; an older script's value has the first part alone. */
static void parse_info(const char *info, dbt_status_entry *e)
{
    char base[256], klass[33], bpid[24];
    const char *p = info;
    next_unit(&p, base, sizeof base);
    long long since = 0;
    if (sscanf(base, "%lld %63s %ld %63s", &since, e->host, &e->pid, e->conn) >= 1)
        e->since_ms = since;
    next_unit(&p, e->state, sizeof e->state);
    next_unit(&p, klass, sizeof klass); /* the id says the class too */
    next_unit(&p, bpid, sizeof bpid);
    e->backend_pid = strtol(bpid, NULL, 10);
    next_unit(&p, e->app, sizeof e->app);
    next_unit(&p, e->user, sizeof e->user);
    next_unit(&p, e->db, sizeof e->db);
}

/* A holder's or waiter's id and its info (see dbt_status_entry). */
static bool parse_entry(const redisReply *id, const redisReply *info, dbt_status_entry *e,
                        char *err)
{
    memset(e, 0, sizeof *e);
    if (!is_type(id, REDIS_REPLY_STRING, "status.lua", "an id", err))
        return false;
    if (!(e->permit = strdup(id->str))) {
        snprintf(err, DBT_ERRLEN, "out of memory");
        return false;
    }
    if (!dbt_parse_id_shape(e->permit, e->klass, &e->weight, NULL)) {
        e->klass[0] = '\0';
        e->weight = 1;
    }
    if (info->type == REDIS_REPLY_STRING)
        parse_info(info->str, e);
    return true;
}

static int by_since(const void *a, const void *b)
{
    const dbt_status_entry *x = a, *y = b;
    return (x->since_ms > y->since_ms) - (x->since_ms < y->since_ms);
}

/* The class table of a semaphore: {aging, shipped, {name, share, priority, wait, cap, guarantee,
 * held, waiters, oldest wait, is default}...}. */
static bool parse_classes(const redisReply *r, dbt_status_kind *k, char *err)
{
    static const char script[] = "status.lua";
    enum { AGING, SHIPPED, FIRST };
    enum { NAME, SHARE, PRIORITY, WAIT, CAP, GUARANTEE, HELD, WAITERS, OLDEST, IS_DEFAULT, N };
    if (!is_array(r, -1, script, "classes", err))
        return false;
    if (r->elements < FIRST)
        return unexpected(err, script, "classes has %zu elements", r->elements);
    long long shipped = 0;
    if (!number_of(r->element[AGING], "the aging bound", &k->aging_ms, err) ||
        !number_of(r->element[SHIPPED], "shipped", &shipped, err))
        return false;
    k->classes_shipped = shipped != 0;
    size_t n = r->elements - FIRST;
    if (!n)
        return true;
    k->classes = calloc(n, sizeof *k->classes);
    if (!k->classes)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    for (size_t i = 0; i < n; i++) {
        const redisReply *c = r->element[FIRST + i];
        if (!is_array(c, N, script, "a class", err) ||
            !is_type(c->element[NAME], REDIS_REPLY_STRING, script, "a class name", err))
            return false;
        dbt_status_class *o = &k->classes[k->nclasses++];
        long long v[N];
        static const char *const what[N] = {
            "",     "a share", "a priority",  "a wait",    "a cap", "a guarantee",
            "held", "waiters", "oldest wait", "is default"};
        for (int f = SHARE; f < N; f++)
            if (!number_of(c->element[f], what[f], &v[f], err))
                return false;
        snprintf(o->name, sizeof o->name, "%s", c->element[NAME]->str);
        o->share = (int)v[SHARE];
        o->priority = (int)v[PRIORITY];
        o->wait_ms = v[WAIT];
        o->cap = v[CAP];
        o->guarantee = v[GUARANTEE];
        o->held = v[HELD];
        o->waiters = v[WAITERS];
        o->borrowed = v[HELD] > v[GUARANTEE] ? v[HELD] - v[GUARANTEE] : 0;
        o->oldest_wait_ms = v[OLDEST];
        o->is_default = v[IS_DEFAULT] != 0;
        o->implicit = v[IS_DEFAULT] == 2;
    }
    return true;
}

/* The histograms' bucket bounds (ms, as text). */
static bool parse_bounds(const redisReply *r, dbt_status_kind *k, char *err)
{
    static const char script[] = "status.lua";
    if (!is_array(r, -1, script, "the bucket bounds", err))
        return false;
    if (r->elements + 1 > DBT_HIST_MAX)
        return unexpected(err, script, "%zu bucket bounds, more than %d", r->elements,
                          DBT_HIST_MAX - 1);
    for (size_t i = 0; i < r->elements; i++) {
        if (!is_type(r->element[i], REDIS_REPLY_STRING, script, "a bucket bound", err))
            return false;
        k->hist_bound_ms[i] = strtod(r->element[i]->str, NULL);
    }
    k->nbounds = (int)r->elements;
    return true;
}

/* The histogram of series and class in k, added when new (NULL when out of memory). */
static dbt_status_hist *hist_of(dbt_status_kind *k, char series, const char *klass, size_t cap)
{
    for (int i = 0; i < k->nhists; i++)
        if (k->hists[i].series == series && strcmp(k->hists[i].klass, klass) == 0)
            return &k->hists[i];
    if ((size_t)k->nhists >= cap)
        return NULL;
    dbt_status_hist *h = &k->hists[k->nhists++];
    memset(h, 0, sizeof *h);
    h->series = series;
    snprintf(h->klass, sizeof h->klass, "%s", klass);
    return h;
}

/* The histograms: the hist hash's {"<series>:<i>:<class>" or "<series>:s:<class>", value, ...}
 * (lua/_common.lua, KEYS[16]). A field this version does not know (another series, a bucket past
 * the bounds) is left out. */
static bool parse_hists(const redisReply *r, dbt_status_kind *k, char *err)
{
    static const char script[] = "status.lua";
    if (!is_array(r, -1, script, "the histograms", err))
        return false;
    if (r->elements % 2)
        return unexpected(err, script, "%zu elements in the histograms", r->elements);
    if (!r->elements)
        return true;
    size_t cap = r->elements / 2; /* at most one histogram per field */
    k->hists = calloc(cap, sizeof *k->hists);
    if (!k->hists)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *f = r->element[i];
        long long v;
        if (!is_type(f, REDIS_REPLY_STRING, script, "a histogram field", err) ||
            !number_of(r->element[i + 1], "a histogram value", &v, err))
            return false;
        const char *s = f->str, *colon = s[0] && s[1] == ':' ? strchr(s + 2, ':') : NULL;
        if (!colon || (s[0] != 'w' && s[0] != 'h') || strlen(colon + 1) > 32)
            continue;
        bool is_sum = colon == s + 3 && s[2] == 's';
        char *end;
        long idx = is_sum ? 0 : strtol(s + 2, &end, 10);
        if (!is_sum && (end != colon || colon == s + 2 || idx < 0 || idx > k->nbounds))
            continue;
        dbt_status_hist *h = hist_of(k, s[0], colon + 1, cap);
        if (!h)
            continue;
        if (is_sum) {
            h->sum_ms = v;
        } else {
            h->bucket[idx] = v;
            h->count += v;
        }
    }
    return true;
}

/* {id, lease expiry, info, ...}: the holders listed, oldest grant first. */
static bool parse_holders(const redisReply *h, dbt_status_entry **out, int *n, char *err)
{
    static const char script[] = "status.lua";
    enum { HOLDER_ID, HOLDER_EXPIRY, HOLDER_INFO, PER_HOLDER };
    if (!is_array(h, -1, script, "holders", err))
        return false;
    if (h->elements % PER_HOLDER)
        return unexpected(err, script, "%zu elements in a list of holders", h->elements);
    if (!h->elements)
        return true;
    *out = calloc(h->elements / PER_HOLDER, sizeof **out);
    if (!*out)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    for (size_t i = 0; i < h->elements; i += PER_HOLDER) {
        long long expiry;
        if (!parse_entry(h->element[i + HOLDER_ID], h->element[i + HOLDER_INFO], &(*out)[*n], err))
            return false;
        (*n)++;
        if (!number_of(h->element[i + HOLDER_EXPIRY], "a lease expiry", &expiry, err))
            return false;
        (*out)[*n - 1].expiry_ms = expiry;
    }
    qsort(*out, (size_t)*n, sizeof **out, by_since);
    return true;
}

/* Notes one unreadable field of the controller's record ("pid missing", "min not a number
 * (\"x\")"), comma-separated, as far as there is room. */
static void adapt_unreadable(dbt_status_adapt *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void adapt_unreadable(dbt_status_adapt *a, const char *fmt, ...)
{
    size_t len = strlen(a->unreadable), cap = sizeof a->unreadable;
    if (len + 3 >= cap)
        return;
    if (len) {
        memcpy(a->unreadable + len, ", ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->unreadable + len, cap - len, fmt, ap);
    va_end(ap);
}

/* A number field of the record: the whole text a decimal integer of at least lo. Missing: 0, and
 * named when required; malformed: 0, named with (the start of) what it holds. */
static void adapt_number(dbt_status_adapt *a, const char *name, const char *text, bool required,
                         long long lo, long long *out)
{
    *out = 0;
    if (!text) {
        if (required)
            adapt_unreadable(a, "%s missing", name);
        return;
    }
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || errno || v < lo) {
        char shown[40];
        dbt_escape(text, 16, true, shown, sizeof shown);
        adapt_unreadable(a, "%s not %s (%s)", name, lo > 0 ? "a positive integer" : "a number",
                         shown);
        return;
    }
    *out = v;
}

/* The controller's record: HGETALL's {field, value, ...} (none: NULL), or the text of why
 * status.lua could not read it. */
static bool parse_adapt(const redisReply *r, dbt_status_adapt **out, char *err)
{
    static const char script[] = "status.lua";
    enum {
        OWNER,
        HOST,
        PID,
        LEASE_UNTIL,
        SINCE,
        MIN,
        MAX,
        LIMIT,
        CHANGED_AT,
        REASON,
        TTL_MS,
        INTERVAL_MS,
        WINDOW_MS,
        NFIELDS
    };
    static const char *const names[NFIELDS] = {
        "owner", "host",       "pid",    "lease_until", "since",       "min",      "max",
        "limit", "changed_at", "reason", "ttl_ms",      "interval_ms", "window_ms"};
    *out = NULL;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 0)
        return true;
    if (r->type != REDIS_REPLY_ARRAY && r->type != REDIS_REPLY_STRING)
        return unexpected(err, script, "the adaptive record is %s", type_name(r->type));
    if (r->type == REDIS_REPLY_ARRAY && r->elements % 2)
        return unexpected(err, script, "%zu elements in the adaptive record", r->elements);
    dbt_status_adapt *a = calloc(1, sizeof *a);
    if (!a)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    *out = a;
    if (r->type == REDIS_REPLY_STRING) { /* Redis' refusal: a key of another type, say */
        char why[120];
        dbt_escape(r->str, 100, false, why, sizeof why);
        snprintf(a->unreadable, sizeof a->unreadable, "not readable: %s", why);
        a->lease_unknown = true;
        return true;
    }
    const char *text[NFIELDS] = {NULL};
    for (size_t i = 0; i < r->elements; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (!is_type(f, REDIS_REPLY_STRING, script, "an adaptive record's field", err) ||
            !is_type(v, REDIS_REPLY_STRING, script, "an adaptive record's value", err))
            return false;
        for (int n = 0; n < NFIELDS; n++)
            if (strcmp(f->str, names[n]) == 0)
                text[n] = v->str;
    }
    if (text[OWNER])
        snprintf(a->owner, sizeof a->owner, "%s", text[OWNER]);
    else
        adapt_unreadable(a, "owner missing");
    if (text[HOST] && text[HOST][0])
        snprintf(a->host, sizeof a->host, "%s", text[HOST]);
    else
        adapt_unreadable(a, "host missing");
    adapt_number(a, "pid", text[PID], true, 1, &a->pid);
    adapt_number(a, "lease_until", text[LEASE_UNTIL], true, 0, &a->lease_until_ms);
    /* A resign writes owner "" and lease_until 0, nothing else does: an owner with no readable
     * lease, or no owner field at all, cannot say whether it leads. */
    a->lease_unknown = !text[OWNER] || (a->owner[0] && a->lease_until_ms <= 0);
    adapt_number(a, "since", text[SINCE], false, 0, &a->since_ms);
    adapt_number(a, "min", text[MIN], true, 1, &a->min);
    adapt_number(a, "max", text[MAX], true, 1, &a->max);
    if (a->min && a->max && a->min > a->max)
        adapt_unreadable(a, "min %lld above max %lld", a->min, a->max);
    adapt_number(a, "limit", text[LIMIT], false, 1, &a->limit);
    adapt_number(a, "changed_at", text[CHANGED_AT], false, 0, &a->changed_at_ms);
    if (text[REASON])
        snprintf(a->reason, sizeof a->reason, "%s", text[REASON]);
    adapt_number(a, "ttl_ms", text[TTL_MS], false, 1, &a->ttl_ms);
    adapt_number(a, "interval_ms", text[INTERVAL_MS], false, 1, &a->interval_ms);
    adapt_number(a, "window_ms", text[WINDOW_MS], false, 1, &a->window_ms);
    return true;
}

bool dbt_status_adapt_leads(const dbt_status_adapt *a, int64_t now_ms)
{
    return a && a->owner[0] && a->lease_until_ms > now_ms;
}

/* status.lua's by_process: {host, pid, held, queued, idle_tx, ...}. */
static bool parse_by_proc(const redisReply *r, dbt_status_kind *k, char *err)
{
    static const char script[] = "status.lua";
    enum { HOST, PID, HELD, WAITING, IDLE_TX, LIMITS, PER_PROC };
    if (!is_array(r, -1, script, "by_process", err))
        return false;
    if (r->elements % PER_PROC)
        return unexpected(err, script, "%zu elements in by_process", r->elements);
    k->has_by_proc = true;
    if (!r->elements)
        return true;
    k->by_proc = calloc(r->elements / PER_PROC, sizeof *k->by_proc);
    if (!k->by_proc)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    for (size_t i = 0; i < r->elements; i += PER_PROC) {
        dbt_status_proc_count *c = &k->by_proc[k->nby_proc++];
        long long pid, held, waiting, idle;
        if (!is_type(r->element[i + HOST], REDIS_REPLY_STRING, script, "a process' host", err) ||
            !is_type(r->element[i + LIMITS], REDIS_REPLY_STRING, script, "a process' limits",
                     err) ||
            !number_of(r->element[i + PID], "a process' pid", &pid, err) ||
            !number_of(r->element[i + HELD], "a process' permits", &held, err) ||
            !number_of(r->element[i + WAITING], "a process' places", &waiting, err) ||
            !number_of(r->element[i + IDLE_TX], "a process' idle permits", &idle, err))
            return false;
        snprintf(c->host, sizeof c->host, "%s", r->element[i + HOST]->str);
        c->pid = (long)pid;
        c->held = (long)held;
        c->waiting = (long)waiting;
        c->idle_in_tx = (long)idle;
        /* An id any worker could make says what it likes ("x.0", a limit too large for a
         * long): such a value is left out, not the pool's whole status. */
        for (const char *at = r->element[i + LIMITS]->str; *at;) {
            char *end;
            errno = 0;
            long limit = strtol(at, &end, 10);
            const char *next = strchr(at, ',');
            bool good = end != at && errno == 0 && limit > 0 && (*end == ',' || !*end);
            if (good && c->nlimits < (int)(sizeof c->limits / sizeof *c->limits))
                c->limits[c->nlimits++] = limit;
            at = next ? next + 1 : at + strlen(at);
        }
    }
    return true;
}

static bool parse_status_kind(const redisReply *r, dbt_status_kind *k, char *err)
{
    static const char script[] = "status.lua";
    enum { WAITER_ID, WAITER_INFO, PER_WAITER };
    status_semaphore_fields f;
    /* Without the override's PTTL and the adaptive record, the sole owner, the lapsed holders,
     * the histograms, or the classes too: a reply of the scripts before them. */
    if (!READ_FIELDS(r, script, "a semaphore", status_semaphore, &f, err))
        return false;
    if (f.n > DBT_STATUS_SEMAPHORE_R_CLASSES && !parse_classes(f.classes, k, err))
        return false;
    if (f.n > DBT_STATUS_SEMAPHORE_R_OLDEST) {
        k->oldest_wait_ms = f.oldest;
        if (!parse_bounds(f.bounds, k, err) || !parse_hists(f.hist, k, err))
            return false;
    }
    if (f.n > DBT_STATUS_SEMAPHORE_R_NLAPSED) {
        k->nlapsed = f.nlapsed;
        if (!parse_holders(f.lapsed, &k->lapsed, &k->nl, err))
            return false;
    }
    /* false (nil) when no owner is sole */
    if (f.n > DBT_STATUS_SEMAPHORE_R_SOLE && f.sole->type == REDIS_REPLY_STRING)
        snprintf(k->sole, sizeof k->sole, "%s", f.sole->str);
    if (f.n > DBT_STATUS_SEMAPHORE_R_OVERRIDE_PTTL && !parse_adapt(f.adapt, &k->adapt, err))
        return false;
    /* {line, over}; false (nil) when the definitions are sound */
    if (f.n > DBT_STATUS_SEMAPHORE_R_CLASSES_PROBLEM &&
        f.classes_problem->type != REDIS_REPLY_NIL) {
        const redisReply *p = f.classes_problem;
        long long over = 0;
        if (!is_array(p, 2, script, "the class definitions' problem", err) ||
            !is_type(p->element[0], REDIS_REPLY_STRING, script, "its line", err) ||
            !number_of(p->element[1], "whether they are over the cap", &over, err))
            return false;
        dbt_escape(p->element[0]->str, 300, false, k->classes_problem, sizeof k->classes_problem);
        k->classes_over = over != 0;
    }
    if (f.n > DBT_STATUS_SEMAPHORE_R_BY_PROCESS && !parse_by_proc(f.by_process, k, err))
        return false;
    k->idle_ms = f.n > DBT_STATUS_SEMAPHORE_R_IDLE_MS ? f.idle_ms : -1;
    k->by_proc_whole = f.n > DBT_STATUS_SEMAPHORE_R_BY_PROCESS_WHOLE && f.by_process_whole == 1;
    k->limit_seen = f.seen;
    k->override = f.override;
    k->drained = f.drained != 0;
    k->nholders = f.nholders;
    k->nwaiters = f.nwaiters;
    k->quarantine_ms = f.quarantine;
    snprintf(k->why, sizeof k->why, "%s", f.why ? f.why : "");
    /* An older script does not say: every override was an operator's then. */
    k->override_pttl_ms = f.n > DBT_STATUS_SEMAPHORE_R_OVERRIDE_PTTL ? f.override_pttl
                          : k->override                              ? -1
                                                                     : -2;
    if (!parse_holders(f.holders, &k->holders, &k->nh, err))
        return false;
    const redisReply *w = f.waiters, *st = f.stats;
    if (w->elements % PER_WAITER || st->elements % 2)
        return unexpected(err, script, "%zu, %zu elements in waiters, counters", w->elements,
                          st->elements);
    if (w->elements) {
        k->waiters = calloc(w->elements / PER_WAITER, sizeof *k->waiters);
        if (!k->waiters)
            return snprintf(err, DBT_ERRLEN, "out of memory"), false;
        for (size_t i = 0; i < w->elements; i += PER_WAITER) {
            if (!parse_entry(w->element[i + WAITER_ID], w->element[i + WAITER_INFO],
                             &k->waiters[k->nw], err))
                return false;
            k->nw++;
        }
    }
    bool any_counter = false;
    for (size_t i = 0; i < st->elements; i += 2)
        for (int c = 0; c < DBT_NCOUNTERS; c++)
            if (st->element[i]->type == REDIS_REPLY_STRING &&
                strcmp(st->element[i]->str, dbt_counter_names[c]) == 0) {
                if (!number_of(st->element[i + 1], "a counter", &k->counters[c], err))
                    return false;
                any_counter = true;
            }
    k->used = k->limit_seen || k->override || k->drained || k->nholders || k->nwaiters ||
              any_counter || k->quarantine_ms || k->nhists;
    return true;
}

/* The processes' records: {cid, expiry, record, ...}; a record this version cannot read is left
 * out (a newer or older client's). */
static bool parse_procs(const redisReply *r, dbt_status_reply *s, char *err)
{
    static const char script[] = "status.lua";
    if (!is_array(r, -1, script, "processes", err))
        return false;
    if (r->elements % 3)
        return unexpected(err, script, "%zu elements in processes", r->elements);
    if (!r->elements)
        return true;
    s->procs = calloc(r->elements / 3, sizeof *s->procs);
    if (!s->procs)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    for (size_t i = 0; i < r->elements; i += 3) {
        const redisReply *cid = r->element[i], *info = r->element[i + 2];
        long long expiry;
        if (!is_type(cid, REDIS_REPLY_STRING, script, "a client id", err) ||
            !number_of(r->element[i + 1], "a record's expiry", &expiry, err))
            return false;
        dbt_proc_record *rec = &s->procs[s->nprocs];
        if (info->type != REDIS_REPLY_STRING || !dbt_parse_record(info->str, rec))
            continue;
        snprintf(rec->cid, sizeof rec->cid, "%s", cid->str);
        rec->expiry_ms = expiry;
        s->nprocs++;
    }
    return true;
}

bool dbt_parse_status(const redisReply *r, void *out, char *err)
{
    status_fields f;
    dbt_status_reply *s = out;
    memset(s, 0, sizeof *s);
    /* Without the processes: a reply of the scripts before the registry. */
    bool ok = READ_FIELDS(r, "status.lua", "the reply", status, &f, err) &&
              parse_status_kind(f.query, &s->kind[DBT_KIND_QUERY], err) &&
              parse_status_kind(f.connection, &s->kind[DBT_KIND_CONN], err) &&
              (f.n <= DBT_STATUS_R_PROCESSES || parse_procs(f.processes, s, err));
    if (ok && f.n > DBT_STATUS_R_SETTINGS && f.settings && !(s->settings = strdup(f.settings)))
        ok = unexpected(err, "status.lua", "out of memory");
    if (!ok)
        dbt_status_free(s);
    else
        s->now_ms = f.now;
    return ok;
}

static void free_entries(dbt_status_entry *e, int n)
{
    for (int i = 0; i < n; i++)
        free(e[i].permit);
    free(e);
}

void dbt_status_free(dbt_status_reply *s)
{
    for (int k = 0; k < DBT_NKINDS; k++) {
        free_entries(s->kind[k].holders, s->kind[k].nh);
        free_entries(s->kind[k].waiters, s->kind[k].nw);
        free_entries(s->kind[k].lapsed, s->kind[k].nl);
        free(s->kind[k].classes);
        free(s->kind[k].hists);
        free(s->kind[k].adapt);
        free(s->kind[k].by_proc);
    }
    free(s->procs);
    free(s->settings);
    memset(s, 0, sizeof *s);
}

bool dbt_parse_admin(const redisReply *r, void *out, char *err)
{
    admin_fields f;
    dbt_admin_reply *a = out;
    memset(a, 0, sizeof *a);
    /* Three elements are taken too, as they always were: the info and the clock stay unknown. */
    if (!READ_FIELDS(r, "admin.lua", "the reply", admin, &f, err))
        return false;
    a->granted = f.granted;
    a->holders = f.holders;
    a->evicted = f.evicted != 0;
    if (f.n > DBT_ADMIN_R_INFO) {
        snprintf(a->info, sizeof a->info, "%s", f.info ? f.info : "");
        a->now_ms = f.now;
    }
    return true;
}

bool dbt_parse_adapt(const redisReply *r, void *out, char *err)
{
    adapt_fields f;
    dbt_adapt_reply *a = out;
    memset(a, 0, sizeof *a);
    if (!READ_FIELDS(r, "adapt.lua", "the reply", adapt, &f, err))
        return false;
    a->status = (dbt_adapt_status)f.status;
    snprintf(a->owner, sizeof a->owner, "%s", f.owner);
    snprintf(a->owner_host, sizeof a->owner_host, "%s", f.owner_host);
    a->owner_pid = (long)f.owner_pid;
    a->lease_left_ms = f.lease_left;
    a->override = f.override;
    a->override_pttl = f.override_pttl;
    a->granted = f.granted;
    a->now_ms = f.now;
    return true;
}

/* ---- classes and ids --------------------------------------------------------------------------
 */

bool dbt_class_name_ok(const char *s)
{
    return dbt_class_name_valid(s); /* the settings' rule (base/class_rules.c): one rule */
}

/* A run of decimal digits at *p, up to '.' or the end: its value (capped), p moved past it. */
static bool digits(const char **p, long long *out)
{
    const char *q = *p;
    long long v = 0;
    if (*q < '0' || *q > '9')
        return false;
    for (; *q >= '0' && *q <= '9'; q++)
        v = v < 1000000000LL ? v * 10 + (*q - '0') : v;
    *p = q;
    *out = v;
    return true;
}

bool dbt_parse_id_shape(const char *id, char *klass, int *weight, int *limit)
{
    /* the dot-separated parts: 3 (untagged) or 5 (tagged) */
    const char *part[6];
    size_t len[6];
    int n = 0;
    for (const char *p = id;; p++) {
        const char *dot = strchr(p, '.');
        if (n == 6)
            return false;
        part[n] = p;
        len[n] = dot ? (size_t)(dot - p) : strlen(p);
        if (!len[n])
            return false;
        n++;
        if (!dot)
            break;
        p = dot;
    }
    if (n != 3 && n != 5)
        return false;
    long long lim, w = 1;
    const char *q = part[n - 1];
    if (!digits(&q, &lim) || *q)
        return false;
    char name[33] = "";
    if (n == 5) {
        if (len[2] >= sizeof name)
            return false;
        memcpy(name, part[2], len[2]);
        name[len[2]] = '\0';
        q = part[3];
        if ((strcmp(name, "-") != 0 && !dbt_class_name_ok(name)) || !digits(&q, &w) || *q != '.' ||
            w < 1)
            return false;
    }
    if (klass)
        snprintf(klass, 33, "%s", name);
    if (weight)
        *weight = (int)(w > 1000000 ? 1000000 : w);
    if (limit)
        *limit = (int)(lim > 1000000000 ? 1000000000 : lim);
    return true;
}
