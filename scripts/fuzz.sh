#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan) and runs
# each for a bounded time, seeded from fuzz/corpus/<name>/ (read-only; new
# inputs go to build/fuzz/corpus/<name>/). Fails when any fuzzer finds a
# crash, a sanitizer report, a leak or a timeout; the input is kept under
# build/fuzz/artifacts/<name>/ and the reproduction command printed.
#
#   scripts/fuzz.sh [seconds-per-fuzzer] [name...]     default 30 s, all fuzzers
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"
shift || true

# name:max_len[:rss_limit_mb:seed_max_len]. max_len covers the largest seed
# with room to grow: config files and profiles are a few KiB, images are
# tiny ones (bigger ones only make each run slower), ID lists and mig-minors
# files are short; request heads reach past the fuzzer's 2 KiB head limit. A
# fuzzer with a memory bound of its own (the config parser's, issue 31) runs
# under that RSS limit, with no single allocation over 64 MiB, instead of
# 2 GiB, and first runs each seed once at up to seed_max_len bytes: the
# hostile seeds are 1 MiB, the parser's size limit. Measured under ASan
# (32 MiB quarantine): ~115 MB peak RSS for the worst input the parser
# accepts, 310-480 MB for those seeds without the bound.
all=(config:8192:256:1048576 profile:12288 image:16384 allocate:1024 mig_minors:2048 http_head:4096)
selected=("${all[@]}")
if (($#)); then
  selected=()
  for want in "$@"; do
    for entry in "${all[@]}"; do [[ "${entry%%:*}" == "$want" ]] && selected+=("$entry"); done
  done
fi

targets=()
for entry in "${selected[@]}"; do targets+=("${entry%%:*}_fuzzer"); done
cmake --preset fuzz >/dev/null
cmake --build build/fuzz --target "${targets[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
summary=()
for entry in "${selected[@]}"; do
  IFS=: read -r name max_len rss_mb seed_max_len <<<"$entry"
  limits=(-rss_limit_mb="${rss_mb:-2048}")
  asan="$ASAN_OPTIONS"
  if [[ -n "$rss_mb" ]]; then
    limits+=(-malloc_limit_mb=64)
    # Freed memory kept for use-after-free checks counts towards the limit.
    asan="$asan:quarantine_size_mb=32"
  fi
  bin="build/fuzz/fuzz/${name}_fuzzer"
  work="build/fuzz/corpus/${name}"
  artifacts="build/fuzz/artifacts/${name}/"
  log="build/fuzz/${name}.log"
  mkdir -p "$work" "$artifacts"
  echo "== fuzz ${name}: ${secs} s, max_len ${max_len}"
  start=$(date +%s)
  rc=0
  if [[ -n "$seed_max_len" ]]; then
    echo "   each seed once at full size (up to ${seed_max_len} bytes) under ${rss_mb} MB"
    ASAN_OPTIONS="$asan" "$bin" -runs=0 -max_len="$seed_max_len" -timeout=10 "${limits[@]}" \
      -artifact_prefix="$artifacts" "fuzz/corpus/${name}" >"$log" 2>&1 || rc=$?
  fi
  if ((rc == 0)); then
    ASAN_OPTIONS="$asan" "$bin" -max_total_time="$secs" -max_len="$max_len" -timeout=10 "${limits[@]}" \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "fuzz/corpus/${name}" \
      >>"$log" 2>&1 || rc=$?
  fi
  took=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  line=$(printf '%-11s %4ss  %10s runs  %7s exec/s  %s' "$name" "$took" "${execs:-?}" "${rate:-?}" "${cov:-}")
  summary+=("$line")
  if ((rc != 0)); then
    failed+=("$name")
    echo "!! fuzz ${name} failed (exit ${rc}); last lines of ${log}:"
    tail -40 "$log"
    echo "!! reproduce: ${bin} ${artifacts}<crash-file>"
  fi
done

echo "== fuzz summary (${secs} s per fuzzer)"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "== fuzz FAILED: ${failed[*]}"
  exit 1
fi
