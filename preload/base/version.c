/* version.c - the library's version, in its text as "dbthrottle-version=X.Y.Z", so that dbthrottle
 * check can tell which version a library file is by reading it: no symbol is exported for it (the
 * library exports exactly the libpq hooks), and none of its code runs. */
#include "version.h"

__attribute__((used)) static const char version_marker[] = DBT_VERSION_MARKER DBT_VERSION;
