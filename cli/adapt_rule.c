/* adapt_rule.c - the adaptive limit's decision (see adapt_rule.h). A stub that keeps the limit,
 * until the rule lands. */
#include "adapt_rule.h"

#include <stdio.h>
#include <string.h>

void dbt_adapt_params_default(dbt_adapt_params *p)
{
    *p = (dbt_adapt_params){.min = 1,
                            .max = 64,
                            .cores = 1,
                            .window_s = 5,
                            .hold_rise = 0.2,
                            .lock_share = 0.5,
                            .lag_max_s = -1};
}

void dbt_adapt_init(dbt_adapt_state *s, const dbt_adapt_params *p, int start_limit)
{
    memset(s, 0, sizeof *s);
    s->limit = start_limit < p->min ? p->min : start_limit > p->max ? p->max : start_limit;
    s->last_change_s = -1;
}

dbt_adapt_decision dbt_adapt_step(dbt_adapt_state *s, const dbt_adapt_params *p,
                                  const dbt_adapt_sample *x)
{
    (void)p;
    (void)x;
    dbt_adapt_decision d = {.limit = s->limit, .change = 0};
    snprintf(d.reason, sizeof d.reason, "no rule yet");
    return d;
}
