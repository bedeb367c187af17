/* The routing policy's decision after a failed try (route_step.h, dbt_route_next), row by row:
 * which redirection is followed, how, and when the error stands. Pure: no Redis, no clock. */
#include "route_step.h"

#include <criterion/criterion.h>

#define LEFT 1000000 /* a whole second of the call's timeout still to spend */

Test(route_next, each_redirection_its_step)
{
    int moves = 0;
    cr_expect_eq(dbt_route_next(DBT_REDIR_ASK, &moves, LEFT), DBT_ROUTE_ASK);
    cr_expect_eq(dbt_route_next(DBT_REDIR_TRYAGAIN, &moves, LEFT), DBT_ROUTE_PAUSE);
    cr_expect_eq(dbt_route_next(DBT_REDIR_DOWN, &moves, LEFT), DBT_ROUTE_PAUSE);
    cr_expect_eq(moves, 0, "none of them is a MOVED");
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, LEFT), DBT_ROUTE_MOVED);
    cr_expect_eq(moves, 1);
}

Test(route_next, an_error_that_is_no_redirection_stands)
{
    int moves = 0;
    cr_expect_eq(dbt_route_next(DBT_REDIR_NONE, &moves, LEFT), DBT_ROUTE_STOP);
    cr_expect_eq(moves, 0);
}

Test(route_next, a_second_moved_in_one_call_stands)
{
    /* The map was patched by the first: a second MOVED means it moves again (or the map is
     * wrong), and the call's error is the outage's to handle, not another round trip's. */
    int moves = 0;
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, LEFT), DBT_ROUTE_MOVED);
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, LEFT), DBT_ROUTE_STOP);
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, LEFT), DBT_ROUTE_STOP);
}

Test(route_next, asks_and_pauses_are_not_counted)
{
    /* A slow migration answers TRYAGAIN and ASK for as long as it lasts: only the timeout ends
     * them, and a MOVED at its end is still followed. */
    int moves = 0;
    for (int i = 0; i < 100; i++) {
        cr_expect_eq(dbt_route_next(DBT_REDIR_TRYAGAIN, &moves, LEFT), DBT_ROUTE_PAUSE);
        cr_expect_eq(dbt_route_next(DBT_REDIR_ASK, &moves, LEFT), DBT_ROUTE_ASK);
    }
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, LEFT), DBT_ROUTE_MOVED);
}

Test(route_next, nothing_is_followed_once_the_timeout_is_spent)
{
    dbt_redirect all[] = {DBT_REDIR_MOVED, DBT_REDIR_ASK, DBT_REDIR_TRYAGAIN, DBT_REDIR_DOWN};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        int moves = 0;
        cr_expect_eq(dbt_route_next(all[i], &moves, 0), DBT_ROUTE_STOP, "kind %d", (int)all[i]);
        cr_expect_eq(dbt_route_next(all[i], &moves, -1), DBT_ROUTE_STOP, "kind %d", (int)all[i]);
        cr_expect_eq(moves, 0, "a MOVED not followed is not counted");
    }
    int moves = 0;
    cr_expect_eq(dbt_route_next(DBT_REDIR_MOVED, &moves, 1), DBT_ROUTE_MOVED,
                 "one microsecond left is still time");
}
