#!/usr/bin/env bash
# MPI faults and bad input end the job with a clear error, never a hang (run by ctest).
#   fault_test.sh die|stall|mismatch|bench MPIEXEC FAULT_PROGRAM QKV_BINARY
# die:      one rank is killed mid-ring; mpirun must end the others and fail, within 60 s.
# stall:    one rank stops answering; the others' bounded waits (QKV_MPI_TIMEOUT=2) must end the
#           job with "a rank died or stalled", within 60 s.
# mismatch: qkv bench started with --seq-len 64 on rank 0 and 65 on rank 1: it must fail with the
#           configuration message printed exactly once.
# bench:    mpirun -np 2 qkv bench --module ring-attention --json: rank 0's last line is one JSON
#           object with median_ms, comm_hidden and max_rank_rss_mib; with --window 20 --alibi
#           --softcap 5 it carries them and says the ring took 2 steps.
set -u
scenario=$1 mpiexec=$2 program=$3 qkv=$4
run=(timeout 60 "$mpiexec" --oversubscribe --bind-to none)
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail() { echo "FAIL ($scenario): $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
start=$SECONDS
case "$scenario" in
  die)
    "${run[@]}" -np 3 "$program" die >"$out" 2>"$err"; status=$?
    [ "$status" = 124 ] && fail "the job hung (killed by timeout after 60 s)"
    [ "$status" = 0 ] && fail "the job succeeded although rank 1 was killed"
    grep -q "all 20 runs done" "$out" && fail "a rank finished every run past the dead one"
    ;;
  stall)
    QKV_MPI_TIMEOUT=2 "${run[@]}" -np 3 "$program" stall >"$out" 2>"$err"; status=$?
    [ "$status" = 124 ] && fail "the job hung (killed by timeout after 60 s)"
    [ "$status" = 0 ] && fail "the job succeeded although rank 1 stalled"
    grep -q "no answer after 2 s (QKV_MPI_TIMEOUT): a rank died or stalled" "$err" ||
      fail "no rank said it timed out waiting"
    ;;
  mismatch)
    common=(bench --module ring-attention --num-heads 2 --head-dim 8 --iters 1 --warmup 0 --threads 1)
    "${run[@]}" -np 1 "$qkv" "${common[@]}" --seq-len 64 : -np 1 "$qkv" "${common[@]}" --seq-len 65 >"$out" 2>"$err"
    status=$?
    [ "$status" = 124 ] && fail "the job hung"
    [ "$status" = 0 ] && fail "ranks with different --seq-len ran"
    n=$(grep -c "was started with a configuration different from rank 0's" "$err")
    [ "$n" = 1 ] || fail "the configuration message appeared $n times, not once"
    grep -q "qkv: error: qkv bench --module ring-attention: rank 1 of 2 was started with a configuration different from rank 0's: rank 0 has {--batch 1 --seq-len 64 " "$err" ||
      fail "the message does not name rank 1 and both configurations"
    ;;
  bench)
    "${run[@]}" -np 2 "$qkv" bench --module ring-attention --seq-len 300 --num-heads 2 --head-dim 16 --split zigzag \
      --backward --iters 2 --warmup 0 --threads 1 --json >"$out" 2>"$err"
    status=$?
    [ "$status" = 0 ] || fail "exit status $status"
    tail -n 1 "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
for key in ("median_ms", "comm_hidden", "max_rank_rss_mib"):
    assert key in j, key
assert j["ranks"] == 2 and len(j["per_rank"]) == 2, j
assert sum(r["tokens"] for r in j["per_rank"]) == 300, j["per_rank"]
assert j["median_ms"] > 0 and 0 <= j["comm_hidden"] <= 1 and j["max_rank_rss_mib"] > 0, j
' || fail "rank 0's last line is not the expected JSON object"
    [ "$(grep -c '^{' "$out")" = 1 ] || fail "more than one rank printed"
    # The variants: a causal window shorter than a rank's run ends the contiguous ring after 2 steps.
    "${run[@]}" -np 2 "$qkv" bench --module ring-attention --seq-len 300 --num-heads 2 --head-dim 16 --window 20 \
      --alibi --softcap 5 --backward --iters 1 --warmup 0 --threads 1 --json >"$out" 2>"$err"
    status=$?
    [ "$status" = 0 ] || fail "exit status $status with --window 20 --alibi --softcap 5"
    tail -n 1 "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["window"] == 20 and j["alibi"] is True and j["softcap"] == 5 and j["steps"] == 2, j
' || fail "the JSON does not carry the variants and 2 ring steps"
    ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "ok ($scenario, $((SECONDS - start)) s)"
