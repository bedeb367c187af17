/* config_load.h - the configuration loaded from an environment as the library loads it, but
 * never from the machine's installed file: dbt_config_load reads /etc/dbthrottle.conf when
 * DBTHROTTLE_CONFIG is unset, so a test calling it would pass or fail by what is installed where
 * it runs (a machine with the .deb failed make check). The installed file's own rule is tested
 * on a file of the test's own (test_default_config.c). */
#ifndef DBT_TEST_CONFIG_LOAD_H
#define DBT_TEST_CONFIG_LOAD_H

#include "config.h"

static inline bool test_config_load(dbt_config *cfg, char *const *envp, char *err)
{
    return dbt_config_load_with_default(cfg, envp, NULL, err);
}

#endif
