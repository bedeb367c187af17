/* clock.h - the one clock every timeout, lease and trace duration is measured on. */
#ifndef DBT_CLOCK_H
#define DBT_CLOCK_H

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC: never jumps with the wall clock, so a lease or a wait
 * deadline means the same whatever an operator or NTP does to the time of day. */
int64_t dbt_now_us(void);

/* Milliseconds since the epoch (CLOCK_REALTIME): only for times shown to people (when an outage
 * began, in dbthrottle status), never for a duration or a deadline. */
int64_t dbt_wall_ms(void);

#endif
