#!/bin/sh
# etc-conf.sh PATH < config/dbthrottle.conf.example > dbthrottle.conf - the configuration file
# `make install` and the Debian package put at PATH (/etc/dbthrottle.conf): the example's text
# under a header of its own, every setting commented out, so that installing it changes nothing
# (the commented lines still show each default) until an operator edits it.
set -eu
cat <<HEAD
# $1 - the settings of libdbthrottle.so and of the dbthrottle command.
#
# Read by every process that preloads the library, and by the command, when DBTHROTTLE_CONFIG is
# unset (DBTHROTTLE_CONFIG=/other/file names another file; set empty, none is read). Every
# setting below is commented out and shows its default: as installed, this file changes nothing.
# Each line is "key = value"; the environment wins over this file. A bad line makes the throttle
# refuse to run rather than run unthrottled: "dbthrottle check" says which line, and where each
# setting came from. A process that cannot read this file refuses too: keep it readable by every
# user that runs a throttled program, and put the Redis password in redis_password_file (a file
# readable only by those who need it), not in redis_url.

HEAD
# The example's own header (up to its first blank line) names it as the example: left out.
sed -e '1,/^$/d' -e 's/^\([a-z_][a-z_]* *=\)/#\1/'
