#!/bin/sh
# run_fuzz: one bounded libFuzzer run. Usage: run_fuzz.sh TARGET SEED_DIR WORK_DIR SECONDS [MAX_LEN]
# New inputs go to WORK_DIR/corpus (the seed corpus in the repository is only read); a crash leaves
# its input in WORK_DIR/crashes/ and fails the test.
set -eu
target=$1 seeds=$2 work=$3 seconds=$4 max_len=${5:-4096}
mkdir -p "$work/corpus" "$work/crashes"
# libFuzzer's own exit status on a crash is 77, which meson reads as a skip: 1 makes it a failure.
exec "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" -print_final_stats=1 \
  -error_exitcode=1 \
  -artifact_prefix="$work/crashes/" "$work/corpus" "$seeds"
