/* prepared.c - the texts of a connection's prepared statements, by name (see prepared.h). */
#include "prepared.h"

#include <stdlib.h>
#include <string.h>

struct dbt_prepared {
    char *name, *text;
    int count; /* statements in the list, kept in its head */
    struct dbt_prepared *next;
};

void dbt_prepared_note(struct dbt_prepared **list, const char *name, const char *text)
{
    if (!name || !text)
        return;
    for (struct dbt_prepared *p = *list; p; p = p->next)
        if (strcmp(p->name, name) == 0) {
            char *copy = strdup(text);
            if (copy) {
                free(p->text);
                p->text = copy;
            }
            return;
        }
    int count = *list ? (*list)->count : 0;
    if (count >= DBT_MAX_PREPARED)
        return;
    struct dbt_prepared *p = calloc(1, sizeof *p);
    if (!p || !(p->name = strdup(name)) || !(p->text = strdup(text))) {
        if (p)
            free(p->name);
        free(p);
        return;
    }
    p->count = count + 1;
    p->next = *list;
    *list = p;
}

const char *dbt_prepared_text(const struct dbt_prepared *list, const char *name)
{
    for (const struct dbt_prepared *p = list; p && name; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p->text;
    return NULL;
}

void dbt_prepared_free(struct dbt_prepared *list)
{
    while (list) {
        struct dbt_prepared *next = list->next;
        free(list->name);
        free(list->text);
        free(list);
        list = next;
    }
}
