#!/usr/bin/env bash
# Data-parallel `qkv train` under mpirun against the single-process run (run by ctest).
#   train_dp_test.sh SCENARIO MPIEXEC QKV_BINARY
# np2, np4:  the same run alone and on 2 / 4 ranks (np4: a batch of 10, slices of 2 and 3; both
#            with dropout on the textbook path, PyTorch's masks): every step's loss and the final
#            weights and optimiser state within 1e-6 relative, the same data position and generator;
#            np2 twice: the same checkpoint, byte for byte (the sums' order is fixed).
# fused:     the same with dropout inside the fused kernel (Philox keyed by the global sequence).
# resume:    2 ranks stop after step 8 (--stop-after), 4 ranks resume to the end: equal to the
#            single-process run that never stopped.
# mismatch:  ranks started with different --lr: one clear message, a non-zero exit.
# batch:     a batch smaller than the rank count: refused with both values, once.
# sigint:    SIGINT sent to one rank stops every rank at a step boundary; the checkpoint is whole
#            and says the step where they stopped.
# ctrlc:     the same with Ctrl-C at mpirun (which sends SIGTERM to every rank).
# die:       one rank killed (SIGKILL): the job ends with an error, no hang; the checkpoint is whole.
# gpt:       `qkv train --model gpt` (chapter 5's loop) on 40% of the book's text, a small model with dropout
#            0.1, alone and on 2 ranks (a batch of 4): every evaluation's losses within 1e-6 relative,
#            one table (rank 0 prints), the weights within 1e-6 of their tensor's largest.
set -u
scenario=$1 mpiexec=$2 qkv=$3
here=$(cd "$(dirname "$0")" && pwd)
compare=("/usr/bin/python3" "$here/compare_checkpoints.py")
run=(timeout 60 "$mpiexec" --oversubscribe --bind-to none)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$dir/out err=$dir/err
fail() { echo "FAIL ($scenario): $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
start=$SECONDS
# A small model on the copy task: 20 steps, seconds each way.
model=(train --length 4 --symbols 6 --d-model 16 --num-heads 2 --num-layers 2 --warmup 4
       --eval-every 0 --eval-sequences 16 --svg "" --quiet)
common=("${model[@]}" --steps 20)

alone() {  # alone OUT_CHECKPOINT ARGS...: the single-process reference
  local ckpt=$1; shift
  timeout 60 "$qkv" "${common[@]}" --checkpoint "$ckpt" "$@" >"$out" 2>"$err" || fail "the single-process run failed"
}
ranks() {  # ranks NP OUT_CHECKPOINT ARGS...
  local np=$1 ckpt=$2; shift 2
  "${run[@]}" -np "$np" "$qkv" "${common[@]}" --checkpoint "$ckpt" "$@" >"$out" 2>"$err"
}
same() { "${compare[@]}" "$1" "$2" >"$dir/cmp" || { cat "$dir/cmp"; fail "$3"; }; cat "$dir/cmp"; }

case "$scenario" in
  np2 | np4 | fused)
    np=2 extra=(--batch-size 8 --dropout 0.1)
    [ "$scenario" = np4 ] && np=4 extra=(--batch-size 10 --dropout 0.1)
    [ "$scenario" = fused ] && extra=(--batch-size 8 --dropout 0.1 --attention fused)
    alone "$dir/alone.safetensors" "${extra[@]}"
    ranks "$np" "$dir/ranks.safetensors" "${extra[@]}" --json; status=$?
    [ "$status" = 124 ] && fail "the job hung"
    [ "$status" = 0 ] || fail "exit status $status"
    [ "$(grep -c '^{' "$out")" = 1 ] || fail "not exactly one JSON summary (rank 0 alone prints)"
    grep -q "\"ranks\":$np" "$out" || fail "the summary does not say $np ranks"
    grep -q "trained 20 steps .*, $np ranks" "$err" || fail "the summary line does not say $np ranks"
    same "$dir/alone.safetensors" "$dir/ranks.safetensors" "$np ranks differ from one process"
    if [ "$scenario" = np2 ]; then  # the sums' order is fixed: a second run gives the same bits
      ranks 2 "$dir/again.safetensors" "${extra[@]}" || fail "the second 2-rank run failed"
      cmp -s "$dir/ranks.safetensors" "$dir/again.safetensors" || fail "two 2-rank runs wrote different checkpoints"
    fi
    ;;
  resume)
    alone "$dir/alone.safetensors" --batch-size 8
    ranks 2 "$dir/ranks.safetensors" --batch-size 8 --stop-after 8; status=$?
    [ "$status" = 0 ] || fail "--stop-after 8 on 2 ranks: exit status $status"
    grep -q "stopped (--stop-after) at step 8 of 20" "$out" || fail "no 'stopped at step 8' message"
    [ "$(grep -c 'stopped (--stop-after)' "$out")" = 1 ] || fail "the stop message is not printed exactly once"
    /usr/bin/python3 - "$dir/ranks.safetensors" <<'PY' || fail "the checkpoint after --stop-after is not whole at step 8"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n])
assert int(h["__metadata__"]["step"]) == 8, h["__metadata__"]["step"]
assert h["train.losses"]["shape"] == [8], h["train.losses"]
assert max(t["data_offsets"][1] for k, t in h.items() if k != "__metadata__") == len(blob) - 8 - n
PY
    "${run[@]}" -np 4 "$qkv" train --resume "$dir/ranks.safetensors" --quiet --svg "" >"$out" 2>"$err"; status=$?
    [ "$status" = 0 ] || fail "--resume on 4 ranks: exit status $status"
    same "$dir/alone.safetensors" "$dir/ranks.safetensors" "2 ranks then 4 ranks differ from one process"
    ;;
  mismatch)
    "${run[@]}" -np 1 "$qkv" "${common[@]}" --checkpoint "$dir/m.safetensors" --lr 0.01 : \
      -np 1 "$qkv" "${common[@]}" --checkpoint "$dir/m.safetensors" --lr 0.02 >"$out" 2>"$err"; status=$?
    [ "$status" = 124 ] && fail "the job hung"
    [ "$status" = 0 ] && fail "ranks with different --lr trained"
    n=$(grep -c "was started with a configuration different from rank 0's" "$err")
    [ "$n" = 1 ] || fail "the configuration message appeared $n times, not once"
    grep -q "qkv: error: qkv train: rank 1 of 2 was started with a configuration different from rank 0's: rank 0 has {.*--lr 0.01.*}, rank 1 has {.*--lr 0.02.*}" "$err" ||
      fail "the message does not name rank 1 and both values of --lr"
    [ -e "$dir/m.safetensors" ] && fail "a checkpoint was written"
    ;;
  batch)
    ranks 4 "$dir/b.safetensors" --batch-size 3; status=$?
    [ "$status" = 124 ] && fail "the job hung"
    [ "$status" = 0 ] && fail "a batch of 3 trained on 4 ranks"
    n=$(grep -c "the batch size (3) must be at least the number of ranks (4)" "$err")
    [ "$n" = 1 ] || fail "the batch-size message appeared $n times, not once"
    [ -e "$dir/b.safetensors" ] && fail "a checkpoint was written"
    ;;
  gpt)
    gpt=(train --model gpt --text-file "$here/../data/the-verdict.txt" --d-model 16 --num-heads 2 --num-layers 1
         --context-length 16 --epochs 1 --train-ratio 0.4 --eval-freq 10 --eval-iter 2 --batch-size 4 --dropout 0.1
         --sample-tokens 4 --svg "" --json)
    timeout 300 "$qkv" "${gpt[@]}" --checkpoint "$dir/alone.safetensors" >"$dir/alone.out" 2>"$err" ||
      { cp "$dir/alone.out" "$out"; fail "the single-process run failed"; }
    timeout 300 "$mpiexec" --oversubscribe --bind-to none -np 2 "$qkv" "${gpt[@]}" \
      --checkpoint "$dir/ranks.safetensors" >"$out" 2>"$err"; status=$?
    [ "$status" = 124 ] && fail "the job hung"
    [ "$status" = 0 ] || fail "exit status $status"
    grep -q "data-parallel over 2 ranks" "$err" || fail "rank 0 does not say it runs on 2 ranks"
    /usr/bin/python3 - "$dir/alone.out" "$out" "$dir/alone.safetensors" "$dir/ranks.safetensors" <<'PY' || fail "2 ranks differ from one process"
import json, struct, sys
from array import array
def evals(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
a, b = evals(sys.argv[1]), evals(sys.argv[2])
assert len(a) == len(b) > 2, f"{len(a)} evaluations alone, {len(b)} on 2 ranks (rank 0 alone prints)"
worst = 0.0
for x, y in zip(a, b):
    assert (x["epoch"], x["step"], x["tokens_seen"]) == (y["epoch"], y["step"], y["tokens_seen"]), (x, y)
    for k in ("train_loss", "val_loss"):
        worst = max(worst, abs(x[k] - y[k]) / abs(x[k]))
assert worst <= 1e-6, f"the worst evaluation loss differs by {worst:.2e} relative"
def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = json.loads(blob[8:8 + n]); h.pop("__metadata__", None)
    out = {}
    for k, t in h.items():
        v = array("f"); v.frombytes(blob[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]); out[k] = v
    return out
ta, tb = tensors(sys.argv[3]), tensors(sys.argv[4])
assert ta.keys() == tb.keys()
wt = 0.0
for k in ta:
    scale = max(abs(v) for v in ta[k]) or 1.0
    wt = max(wt, max(abs(p - q) for p, q in zip(ta[k], tb[k])) / scale)
assert wt <= 1e-6, f"the worst weight differs by {wt:.2e} of its tensor's largest"
print(f"{len(a)} evaluations: worst loss {worst:.2e} relative; worst weight {wt:.2e}")
PY
    ;;
  sigint | ctrlc | die)
    "$mpiexec" --oversubscribe --bind-to none -np 2 "$qkv" "${model[@]}" --steps 100000 --batch-size 4 \
      --checkpoint "$dir/s.safetensors" --checkpoint-every 5 >"$out" 2>"$err" &
    job=$!
    for _ in $(seq 300); do [ -e "$dir/s.safetensors" ] && break; sleep 0.1; done
    [ -e "$dir/s.safetensors" ] || { kill -9 "$job"; fail "no checkpoint after 30 s"; }
    rank=$(pgrep -P "$job" -f "$qkv" | tail -n 1)   # one rank (a child of mpirun)
    [ -n "$rank" ] || { kill -9 "$job"; fail "no rank process found under mpirun ($job)"; }
    case "$scenario" in
      sigint) kill -INT "$rank" ;;   # one rank alone gets the signal
      ctrlc) kill -INT "$job" ;;     # Ctrl-C at mpirun: it passes SIGTERM to every rank
      die) kill -KILL "$rank" ;;
    esac
    for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then kill -9 "$job"; fail "the ranks did not stop within 30 s of the signal"; fi
    wait "$job"; status=$?
    [ "$status" = 0 ] && fail "a stopped run exited 0"
    said="interrupted (Ctrl-C)"
    [ "$scenario" = ctrlc ] && said="terminated"
    if [ "$scenario" = die ]; then  # the other rank ends without finishing; the last checkpoint is whole
      grep -q "trained 100000 steps" "$out" && fail "the run finished past a dead rank"
      step=$(/usr/bin/python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; print(json.loads(b[8:8+n])["__metadata__"]["step"])' "$dir/s.safetensors")
    else
      n=$(grep -c "$said at step" "$out")
      [ "$n" = 1 ] || fail "the message '$said at step' appeared $n times, not once"
      step=$(sed -n "s/.*$said at step \\([0-9]*\\) of 100000.*/\\1/p" "$out")
    fi
    /usr/bin/python3 - "$dir/s.safetensors" "$step" <<'PY' || fail "the checkpoint is not whole at the step the ranks stopped"
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n])
step = int(h["__metadata__"]["step"])
assert step == int(sys.argv[2]) and 5 <= step < 100000, (step, sys.argv[2])
assert h["train.losses"]["shape"] == [step], h["train.losses"]
assert max(t["data_offsets"][1] for k, t in h.items() if k != "__metadata__") == len(blob) - 8 - n
PY
    echo "stopped at step $step"
    ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac
echo "ok ($scenario, $((SECONDS - start)) s)"
