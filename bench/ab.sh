#!/usr/bin/env bash
# Paired A/B timing of two qkv binaries on a shared, noisy machine: runs `qkv bench ARGS` with A,
# then B, ROUNDS times, and prints each round's medians and the ratio B/A, then the median of
# those ratios. Adjacent runs see the same host load, so the per-round ratio cancels most of the
# drift that makes absolute times swing 15-30% from one minute to the next here.
#
#   bench/ab.sh OLD/qkv NEW/qkv ROUNDS [qkv bench arguments]
#   bench/ab.sh /tmp/base/build/qkv build/qkv 8      # default: attention-core, B=8, T=1024, 2 threads
#
# A ratio below 1 means B is faster.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
a=$1 b=$2 rounds=$3
shift 3
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "ab.sh: $bin is not an executable" >&2; exit 2; }
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
if [ $# -eq 0 ]; then
  set -- --module attention-core --batch 8 --seq-len 1024 --num-heads 12 --head-dim 64 --threads 2 --iters 10
fi

median_ms() {  # BIN ARGS: the median of `BIN bench ARGS` ("  median 82.45 ms  (min ...)")
  local bin=$1
  shift
  "$bin" bench "$@" | awk '$1 == "median" {print $2}'
}

ratios=()
printf '%10s %10s %8s\n' "A ms" "B ms" "B/A"
for _ in $(seq "$rounds"); do
  ta=$(median_ms "$a" "$@")
  tb=$(median_ms "$b" "$@")
  r=$(awk -v x="$ta" -v y="$tb" 'BEGIN {printf "%.3f", y / x}')
  ratios+=("$r")
  printf '%10s %10s %8s\n' "$ta" "$tb" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {
  m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "median B/A over %d rounds: %.3f\n", NR, m}'
