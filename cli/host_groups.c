/* host_groups.c - host-level sharing as status shows it: which processes of a pool pass permits
 * among themselves without Redis (the host group G their records name), and who is sole (whose
 * waiters are the whole queue, owners['*']: a host group or a process). Read from what Redis
 * holds: the process records and the owners hash. */
#include "cli.h"

#include <string.h>

int cli_host_groups(const cli_pool_view *v, cli_host_group *out, int cap)
{
    int n = 0;
    for (int i = 0; i < v->nprocs; i++) {
        const dbt_proc_record *r = &v->procs[i];
        if (!r->group[0])
            continue;
        int j = 0;
        while (j < n && strcmp(out[j].group, r->group) != 0)
            j++;
        if (j < n) {
            out[j].processes++;
        } else if (n < cap) {
            out[n++] = (cli_host_group){.group = r->group, .host = r->host, .processes = 1};
        }
    }
    return n;
}

/* Whether a listed holder or waiter of k has an id made under the group G ("<G>~<cid>...."). */
static bool ids_name_group(const dbt_status_kind *k, const char *g)
{
    size_t len = strlen(g);
    const dbt_status_entry *lists[] = {k->holders, k->waiters};
    const int counts[] = {k->nh, k->nw};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++) {
            const char *id = lists[l][i].permit;
            if (id && strncmp(id, g, len) == 0 && id[len] == '~')
                return true;
        }
    return false;
}

void cli_sole_of(const cli_pool_view *v, const dbt_status_kind *k, cli_sole *out)
{
    memset(out, 0, sizeof *out);
    if (!k->sole[0])
        return;
    /* "<owner>" or "<owner>/<class>.<weight>" (acquire.lua's owner_of) */
    const char *slash = strchr(k->sole, '/');
    size_t len = slash ? (size_t)(slash - k->sole) : strlen(k->sole);
    snprintf(out->owner, sizeof out->owner, "%.*s", (int)len, k->sole);
    if (slash)
        snprintf(out->shape, sizeof out->shape, "%s", slash + 1);
    out->kind = CLI_SOLE_UNKNOWN;
    if (!out->owner[0])
        return;
    for (int i = 0; i < v->nprocs; i++) {
        const dbt_proc_record *r = &v->procs[i];
        if (strcmp(r->group, out->owner) == 0) {
            out->kind = CLI_SOLE_HOST;
            out->rec = r;
            return;
        }
        if (strcmp(r->cid, out->owner) == 0) {
            out->kind = CLI_SOLE_PROCESS;
            out->rec = r;
            return;
        }
    }
    if (ids_name_group(k, out->owner))
        out->kind = CLI_SOLE_HOST;
}
