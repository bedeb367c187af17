/* live.c - a pool's live settings (docs/design.md, "Live settings per pool"): the text a renewal
 * brings when their version in Redis is not the one the process applied, parsed by the settings'
 * own parsers and applied to the pool; what the pool's commands read in place of the process' own
 * values. A value the parser refuses is not applied and is logged once per version. */
#include "live.h"
#include "clock.h"
#include "fork.h"
#include "handover.h"
#include "lease.h"
#include "log.h"
#include "pool.h"
#include "settings.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row of the settings table whose field is at `field` of dbt_config. */
static ptrdiff_t row_of(size_t field)
{
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (s->field == field)
            return s - dbt_settings;
    return -1;
}

void dbt_live_apply(dbt_pool *p, const char *text)
{
    dbt_live *l = calloc(1, sizeof *l);
    if (!l)
        return; /* asked again at the next renewal: the version is still the old one */
    char refused[512] = "";
    bool ok = !text[0] || dbt_live_parse(text, l, refused, sizeof refused);
    if (!ok) {
        dbt_live_free(l);
        memset(l, 0, sizeof *l); /* none applied, version 0: asked again only once it changes */
        snprintf(refused, sizeof refused,
                 "the text is not \"v<version>\" then key=value lines: none applied");
    }
    /* A weight above this process' limit could never be granted whole (the scripts would clamp
     * it): refused, as the process' own DBTHROTTLE_WEIGHTS would be (config_load.c). */
    ptrdiff_t weights_row = row_of(offsetof(dbt_config, weights));
    int limit = p->client->cfg->max_queries;
    for (int i = 0; weights_row >= 0 && l->set[weights_row] && limit && i < l->cfg.weights.n; i++)
        if (l->cfg.weights.rules[i].weight > limit) {
            size_t n = strlen(refused);
            snprintf(refused + n, sizeof refused - n,
                     "%sweights: weight %d is above this process' DBTHROTTLE_MAX_QUERIES=%d (a "
                     "command of that weight could never run)",
                     n ? "; " : "", l->cfg.weights.rules[i].weight, limit);
            n = strlen(l->refused_keys);
            snprintf(l->refused_keys + n, sizeof l->refused_keys - n, "%sweights", n ? "," : "");
            l->set[weights_row] = false;
            break;
        }
    /* A lease the server's check of this process' connections cannot keep up with: a dead
     * client's statement would run on past its permit's return (the check interval was asked
     * at connect, from the process' own settings: docs/configuration.md). Refused when it is
     * also shorter than the process' own lease (which it was started with, whatever its check),
     * as a weight above its limit is, and said in status. */
    ptrdiff_t lease_row = row_of(offsetof(dbt_config, lease_ms));
    const dbt_config *own = p->client->cfg;
    int64_t check_ms = dbt_server_check_ms(own);
    if (lease_row >= 0 && l->set[lease_row] && check_ms > 0 && l->cfg.lease_ms < 4 * check_ms &&
        l->cfg.lease_ms < own->lease_ms) {
        size_t n = strlen(refused);
        snprintf(refused + n, sizeof refused - n,
                 "%slease: %lld ms is under 4 x this process' server check interval (%lld ms, "
                 "DBTHROTTLE_SERVER_CHECK_INTERVAL%s): a dead client's statement could outlive its "
                 "permit",
                 n ? "; " : "", (long long)l->cfg.lease_ms, (long long)check_ms,
                 own->server_check_ms == DBT_CHECK_AUTO ? "=auto: min(1s, its own lease/4)" : "");
        n = strlen(l->refused_keys);
        snprintf(l->refused_keys + n, sizeof l->refused_keys - n, "%slease", n ? "," : "");
        l->set[lease_row] = false;
    }
    ptrdiff_t mode_row = row_of(offsetof(dbt_config, on_redis_error));
    pthread_mutex_lock(&p->mu);
    dbt_live *old = p->live;
    p->live = l;
    /* read without the lock on an outage's paths: the mode in force, the process' own when the
     * live settings have none */
    bool mode_live = mode_row >= 0 && l->set[mode_row];
    atomic_store(&p->on_redis_error,
                 (int)(mode_live ? l->cfg.on_redis_error : p->client->cfg->on_redis_error));
    ptrdiff_t sample_row = row_of(offsetof(dbt_config, sample));
    atomic_store(
        &p->sample_when,
        (int)(sample_row >= 0 && l->set[sample_row] ? l->cfg.sample : p->client->cfg->sample));
    /* Per kind: the live mode where it names the kind, else the process' own. */
    ptrdiff_t shadow_row = row_of(offsetof(dbt_config, mode));
    int mode_now[DBT_NKINDS], mode_before[DBT_NKINDS];
    bool turned_shadow[DBT_NKINDS], changed = false;
    for (int k = 0; k < DBT_NKINDS; k++) {
        bool live_k = shadow_row >= 0 && l->set[shadow_row] && (l->cfg.mode_named >> k & 1);
        mode_now[k] = (int)(live_k ? l->cfg.mode[k] : p->client->cfg->mode[k]);
        mode_before[k] = atomic_exchange(&p->mode[k], mode_now[k]);
        turned_shadow[k] = mode_now[k] == DBT_MODE_SHADOW && mode_before[k] != DBT_MODE_SHADOW;
        changed = changed || mode_now[k] != mode_before[k];
    }
    /* Turned to shadow: the threads that wait in the queue are sent again (as a place Redis
     * forgot is), now in shadow mode, to run at once; their places are withdrawn. A parked
     * wait's place is left to its waker (held.c sends it as granted or waits on). */
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->kind < DBT_NKINDS && turned_shadow[s->kind])
            if (s->state == SLOT_QUEUED && !s->orphan && s->thread_waits) {
                dbt_defer_op_held(p, DBT_OWED_WITHDRAW, s->kind, s->id, -1);
                dbt_lw_remove(p, s);
                s->state = SLOT_REQUEUE;
                s->to_shadow = true;
                p->nqueued--;
                dbt_slot_wake(s);
            }
    dbt_lease_set(p,
                  lease_row >= 0 && l->set[lease_row] ? l->cfg.lease_ms : p->client->cfg->lease_ms);
    ptrdiff_t level_row = row_of(offsetof(dbt_config, log_level));
    atomic_store(&p->log_level, level_row >= 0 && l->set[level_row] ? (int)l->cfg.log_level : -1);
    atomic_store(&p->live_applied, l->version);
    unsigned long long mask = 0;
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (l->set[s - dbt_settings] && s - dbt_settings < 64)
            mask |= 1ULL << (s - dbt_settings);
    atomic_store(&p->live_set_mask, mask);
    p->record_changed_us = dbt_now_us(); /* the record says what it applied: status at once */
    pthread_mutex_unlock(&p->mu);
    if (old) {
        dbt_live_free(old);
        free(old);
    }
    if (changed) {
        /* Loud both ways: a pool that stops enforcing its limit is never a quiet change. */
        char now_text[64], before_text[64];
        dbt_mode mn[DBT_NKINDS], mb[DBT_NKINDS];
        for (int k = 0; k < DBT_NKINDS; k++) {
            mn[k] = (dbt_mode)mode_now[k];
            mb[k] = (dbt_mode)mode_before[k];
        }
        unsigned all = (1u << DBT_NKINDS) - 1;
        dbt_mode_show(mn, all, now_text, sizeof now_text);
        dbt_mode_show(mb, all, before_text, sizeof before_text);
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("mode", now_text), DBT_S("was", before_text),
                         DBT_S("by", shadow_row >= 0 && l->set[shadow_row] ? "live" : "own")};
        dbt_log(DBT_LOG_WARN, "mode", f, 4);
    }
    if (refused[0]) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("version", l->version),
                         DBT_S("refused", refused),
                         DBT_S("effect", "the process keeps its own value of each one refused")};
        dbt_log(DBT_LOG_WARN, "live_setting_refused", f, 4);
    } else {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("version", l->version)};
        dbt_log(DBT_LOG_INFO, "live_settings", f, 2);
    }
}

long long dbt_live_version(const dbt_pool *p)
{
    return p->live ? p->live->version : 0;
}

void dbt_live_drop(dbt_pool *p)
{
    if (p->live) {
        dbt_live_free(p->live);
        free(p->live);
        p->live = NULL;
    }
}

int64_t dbt_pool_wait_timeout_ms(dbt_pool *p, int64_t own, bool *live)
{
    ptrdiff_t row = row_of(offsetof(dbt_config, wait_timeout_ms)); /* a few compares */
    pthread_mutex_lock(&p->mu);
    *live = p->live && row >= 0 && p->live->set[row];
    int64_t v = *live ? p->live->cfg.wait_timeout_ms : own;
    pthread_mutex_unlock(&p->mu);
    return v;
}

long long dbt_pool_live_applied(dbt_pool *p)
{
    return atomic_load(&p->live_applied);
}

int dbt_pool_live_exempt(dbt_pool *p, const char *const values[3], char *rule, size_t cap)
{
    ptrdiff_t row = row_of(offsetof(dbt_config, exempt));
    pthread_mutex_lock(&p->mu);
    int r = -1;
    if (p->live && row >= 0 && p->live->set[row]) { /* matched under the lock: a swap frees them */
        const char *m = dbt_exempt_match(p->live->cfg.exempt, p->live->cfg.nexempt, values);
        r = m != NULL;
        snprintf(rule, cap, "%s", m ? m : "");
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

int dbt_pool_live_rule(dbt_pool *p, bool weights, const dbt_rule_values *v, char *klass,
                       int *weight)
{
    ptrdiff_t row =
        weights ? row_of(offsetof(dbt_config, weights)) : row_of(offsetof(dbt_config, class_rules));
    pthread_mutex_lock(&p->mu);
    int r = -1;
    if (p->live && row >= 0 && p->live->set[row]) { /* matched under the lock: a swap frees them */
        const dbt_rule_list *l = weights ? &p->live->cfg.weights : &p->live->cfg.class_rules;
        const dbt_rule *m =
            dbt_rules_match(l, v); /* an expression reads at most DBT_RULE_SQL_MAX */
        r = m != NULL;
        if (m && weights)
            *weight = m->weight;
        else if (m)
            snprintf(klass, DBT_CLASS_NAME_MAX + 1, "%s", m->klass);
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool dbt_pool_live_sets(dbt_pool *p, size_t field)
{
    ptrdiff_t row = row_of(field);
    return row >= 0 && row < 64 && (atomic_load(&p->live_set_mask) >> row & 1);
}

void dbt_live_heard(dbt_pool *p)
{
    if (!p->live_heard) {
        p->live_heard = true;
        pthread_cond_broadcast(&p->live_cv);
    }
}

void dbt_pool_await_live(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (!p->live_heard) {
        /* The renewer's first round reports the process and brings the pool's live settings:
         * at most a Redis timeout (an outage, which the command meets then without waiting
         * again: the renewer's failure started the backoff). Waited once per pool. */
        dbt_pool_start_bg(p);
        int64_t until = dbt_now_us() + (p->client->cfg->redis_timeout_ms + 100) * 1000;
        while (!p->live_heard && p->thread_started && dbt_now_us() < until)
            dbt_cond_wait_until(&p->live_cv, &p->mu, until);
        p->live_heard = true; /* heard or not, the next connection does not wait */
    }
    pthread_mutex_unlock(&p->mu);
}

/* In a fork()ed child: the condition variable anew (a waiter of the parent is not here). */
static void after_fork(dbt_pool *p)
{
    dbt_cond_init_mono(&p->live_cv);
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
