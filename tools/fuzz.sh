#!/usr/bin/env bash
# Run kbdb's cargo-fuzz targets (docs/fuzzing.md).
#
#   tools/fuzz.sh [TARGET|all] [SECONDS]      default: all, 600 seconds per target
#
# Installs cargo-fuzz when missing, copies the committed seeds (fuzz/seeds/<target>/) into the
# working corpus (fuzz/corpus/<target>/, not in git), runs `cargo +nightly fuzz run` for the
# time given (with the target's dictionary, fuzz/dicts/<target>.dict), and prints one line per target: date, target, seconds, execs, corpus size and
# the result. Crash inputs land in fuzz/artifacts/<target>/ (not in git either).
#
# Environment:
#   CARGO_TARGET_DIR   build folder (default /tmp/target-fuzz: never the repository's target/)
#   FUZZ_JOBS          parallel fuzzing processes per target (default 1)
#   FUZZ_ARGS          extra libFuzzer flags, e.g. "-max_len=8192"
#   KBDB_FUZZ_TMP      where the targets keep their scratch knowledge bases (default /dev/shm)
#   FUZZ_NO_BUILD=1    run the binaries already built in $CARGO_TARGET_DIR instead of
#                      `cargo fuzz run` (which rebuilds first): for a tree others are editing
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/target-fuzz}
targets_all=(jsonrpc_line mcp_message markdown_split import_layout vectors_idx query_parser)
target=${1:-all}
seconds=${2:-600}
jobs=${FUZZ_JOBS:-1}

if [[ "$target" == all ]]; then
    targets=("${targets_all[@]}")
else
    found=0
    for t in "${targets_all[@]}"; do [[ "$t" == "$target" ]] && found=1; done
    if [[ $found == 0 ]]; then
        echo "unknown target $target (one of: ${targets_all[*]}, all)" >&2
        exit 2
    fi
    targets=("$target")
fi
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -lt 1 ]]; then
    echo "SECONDS must be a whole number ≥ 1, got $seconds" >&2
    exit 2
fi

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz…" >&2
    cargo install cargo-fuzz
fi

mkdir -p fuzz/logs
status=0
summary=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    mkdir -p "$corpus" "fuzz/artifacts/$t"
    cp -n fuzz/seeds/"$t"/* "$corpus"/ 2>/dev/null || true
    log=fuzz/logs/$t.log
    marker=$(mktemp)
    parallel=()
    if [[ $jobs -gt 1 ]]; then
        parallel=(-jobs="$jobs" -workers="$jobs")
    fi
    started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    echo "== $started $t: ${seconds}s (log: $log)" >&2
    # -timeout: one input running longer than 10 s is a hang; -rss_limit_mb/-malloc_limit_mb:
    # memory beyond 2 GiB (or one allocation beyond 1 GiB) is a failure.
    set +e
    flags=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
        "${parallel[@]}" -print_final_stats=1)
    if [[ -f fuzz/dicts/$t.dict ]]; then
        flags+=(-dict="dicts/$t.dict")
    fi
    if [[ -n "${FUZZ_NO_BUILD:-}" ]]; then
        bin=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$t
        # shellcheck disable=SC2086
        (cd fuzz && "$bin" -artifact_prefix="artifacts/$t/" "${flags[@]}" ${FUZZ_ARGS:-} \
            "corpus/$t") >"$log" 2>&1
    else
        # shellcheck disable=SC2086
        (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- "${flags[@]}" ${FUZZ_ARGS:-}) \
            >"$log" 2>&1
    fi
    rc=$?
    set -e
    if [[ $jobs -gt 1 ]]; then
        cat fuzz/fuzz-*.log >>"$log" 2>/dev/null || true
        rm -f fuzz/fuzz-*.log
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
    size=$(find "$corpus" -type f | wc -l)
    crashes=$(find "fuzz/artifacts/$t" -type f -newer "$marker" 2>/dev/null | wc -l)
    rm -f "$marker"
    if [[ $rc == 0 ]]; then
        result=clean
    else
        result="FAILED (exit $rc; see $log and fuzz/artifacts/$t/)"
        status=1
    fi
    line="$started  $t  ${seconds}s  execs=$execs  corpus=$size  $result"
    echo "$line"
    summary+=("$line")
    [[ $crashes -gt 0 ]] && echo "   new artifacts: $crashes" || true
done
if [[ ${#summary[@]} -gt 1 ]]; then
    echo
    echo "summary:"
    printf '  %s\n' "${summary[@]}"
fi
exit $status
