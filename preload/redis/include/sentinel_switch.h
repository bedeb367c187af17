/* sentinel_switch.h - told when Redis Sentinel announces that our master switched (sentinel.c's
 * subscriber): all the semaphore needs of Sentinel, whose master is otherwise route.c's business.
 */
#ifndef DBT_SENTINEL_SWITCH_H
#define DBT_SENTINEL_SWITCH_H

/* fn(arg) is called (from the subscriber's thread, under no lock but the callbacks' own) each time
 * Sentinel announces that our master switched. At most 16 callbacks at once. */
void dbt_sentinel_on_switch(void (*fn)(void *), void *arg);
/* Removes it: once this returns, fn(arg) is not running and never runs again. */
void dbt_sentinel_off_switch(void (*fn)(void *), void *arg);

#endif
