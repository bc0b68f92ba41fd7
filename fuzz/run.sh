#!/usr/bin/env bash
# Runs every fuzz target of the sanitizer build for FUZZ_SECONDS each, JOBS at a time, from the
# checked-in seeds (fuzz/corpus/NAME, read-only) into a working corpus in the build dir, with the
# target's dictionary. A finding (a crash, a sanitizer report, an input running past 10 s or
# 2 GB) stops the run with libFuzzer's report and the input under BUILD/fuzz-findings/; it
# becomes a regression test (tests/tools/test_bad_input.cpp) once fixed.
# Usage: fuzz/run.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: fuzz/run.sh BUILD_DIR}
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-2}
here=$(cd "$(dirname "$0")" && pwd)
targets=(model hf cluster plan profile)

run_one() {
    local name=$1 work="$build/fuzz-corpus/$1" log="$build/fuzz-$1.log"
    mkdir -p "$work" "$build/fuzz-findings"
    local dict=()
    [ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
    if "$build/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/fuzz-findings/$name-" "${dict[@]}" "$work" "$here/corpus/$name" >"$log" 2>&1; then
        local runs
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        echo "fuzz_$name: ${runs:-?} executions in ${seconds} s, no finding (corpus $(ls "$work" | wc -l) inputs)"
    else
        echo "fuzz_$name: FINDING — libFuzzer's report ($log):"
        tail -n 60 "$log"
        return 1
    fi
}

status=0
pids=()
for name in "${targets[@]}"; do
    run_one "$name" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$jobs" ]; then
        wait "${pids[0]}" || status=1
        pids=("${pids[@]:1}")
    fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
