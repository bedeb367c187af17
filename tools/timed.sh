#!/bin/sh
# timed.sh NAME COMMAND... - runs COMMAND and prints how long it took ("stage NAME: 123 s, rc 0"),
# so that make test's output says where CI's time goes (its budget is 25 minutes on 2 cores).
# The exit status is COMMAND's.
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
echo "stage $name: $(($(date +%s) - start)) s, rc $rc"
exit $rc
