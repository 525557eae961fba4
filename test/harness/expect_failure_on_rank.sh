#!/usr/bin/env bash
# Runs an MPI test binary that fails on rank R alone and checks that the whole job fails and
# that rank 0's report names rank R. Usage: expect_failure_on_rank.sh R mpirun -np N binary
set -u
want_rank=$1
shift
output=$("$@" 2>&1)
status=$?
echo "$output"
if [ "$status" -eq 0 ]; then
  echo "FAIL: the job exited 0 although rank $want_rank failed a check"
  exit 1
fi
if ! grep -q "failed on ranks: $want_rank\$" <<<"$output"; then
  echo "FAIL: rank 0's report does not name rank $want_rank as the failing rank"
  exit 1
fi
echo "ok: the job failed (status $status) and the report names rank $want_rank"
