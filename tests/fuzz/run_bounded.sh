#!/usr/bin/env bash
# Every fuzz target for a bounded time, as `make test-fuzz` (and so CI) runs them: first each
# saved regression of the target is replayed under the fuzz build's sanitizers (clang's UBSan
# sees more than gcc's, e.g. an offset applied to a null pointer), then the target fuzzes from
# the checked-in corpus (tests/fuzz/corpus/<target>) for SECONDS. New inputs go to the build
# folder, never into the corpus; a crash, hang, leak or sanitizer report stops the target, is
# saved as BUILD/crash-<target>-*, and fails the run.
#
# usage: run_bounded.sh BUILD_DIR SECONDS JOBS
set -u
build=$1 seconds=$2 jobs=$3
here=$(cd "$(dirname "$0")" && pwd)
targets="onnx plan npy tensor_proto"

run_target() {
    local t=$1 bin=$build/bin/fuzz_$1 work=$build/fuzz-work/$1 log=$build/fuzz-$1.log
    local regressions=()
    for f in "$here"/regressions/"$t"-*; do
        [ -f "$f" ] && regressions+=("$f")
    done
    rm -rf "$work" && mkdir -p "$work"
    # A fixed seed and a fixed number of runs (about SECONDS on the development machine),
    # not a time limit: the same binary and corpus then explore the same inputs on every
    # machine, whatever its speed, so a finding fails every run and is reproducible.
    local flags=(-rss_limit_mb=2048 -timeout=25 -max_len=65536 -seed=1
                 -artifact_prefix="$build/crash-$t-")
    if [ ${#regressions[@]} -gt 0 ] && ! "$bin" "${flags[@]}" "${regressions[@]}" >"$log" 2>&1; then
        echo "fuzz_$t: a regression input fails again (log: $log)"
        tail -n 20 "$log"
        return 1
    fi
    local runs
    case $t in # executions a second, measured under ASan+UBSan on the 2-core machine
    onnx) runs=$((seconds * 5000)) ;;
    plan) runs=$((seconds * 1000)) ;;
    *) runs=$((seconds * 50000)) ;;
    esac
    if ! "$bin" "${flags[@]}" -runs="$runs" -max_total_time=$((seconds * 4)) \
        -print_final_stats=1 "$work" "$here/corpus/$t" >>"$log" 2>&1; then
        echo "fuzz_$t: finding after fuzzing (log: $log; input saved as $build/crash-$t-*)"
        grep -m 5 -E "ERROR|runtime error|SUMMARY|broken promise" "$log"
        return 1
    fi
    local execs
    execs=$(grep -m 1 -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
    echo "fuzz_$t: ${#regressions[@]} regressions replayed, ${execs:-?} executions, no finding"
}

pids=() names=() failed=0
for t in $targets; do
    run_target "$t" &
    pids+=($!) names+=("$t")
    if [ ${#pids[@]} -ge "$jobs" ]; then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}") names=("${names[@]:1}")
    fi
done
for p in "${pids[@]}"; do
    wait "$p" || failed=1
done
exit $failed
