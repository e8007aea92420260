#!/usr/bin/env bash
# Makes the pictures and example pages under docs/ with the built qkv, so that none of them is an
# edited copy:
#   docs/causal_attention.svg, docs/mha*.svg   qkv walkthrough --svg (the chapter's causal weights, per head)
#   docs/train_loss.svg                        the loss curve of `qkv train` with no flags (the default run)
#   docs/explore/book.html                     qkv explore on the book's sentence (the chapter)
#   docs/explore/trained.html                  qkv explore on the default run's checkpoint (not committed:
#                                              .gitignore; open them from here)
#   docs/explore/{book,trained}.*.png          the browser test's screenshots of those two pages
#                                              (tests/explore/test_explore.py --checkpoint ... --shots DIR)
#   docs/explore/gpt2-small.*.png              and of its GPT page: an untrained GPT-2 small (seed 123) on
#                                              "Hello, I am" with 5 generated tokens
#   docs/explore/gpt2-small-1024.*.png         bench/explore_gpt2_bench.py's page: GPT-2 small's twin on
#                                              992 tokens and 32 generated (weights computed in the page)
# The screenshots need Debian's chromium, node and npm (scripts/setup.sh --test); without them, or
# with --no-shots, the PNGs are left as they are.
#
#   scripts/make_docs_pictures.sh [--qkv build/qkv] [--npm-dir build/npm] [--no-shots]
set -euo pipefail
cd "$(dirname "$0")/.."

qkv=build/qkv
npm_dir=build/npm
shots=1
while [ $# -gt 0 ]; do
  case "$1" in
    --qkv) qkv="$2"; shift 2 ;;
    --npm-dir) npm_dir="$2"; shift 2 ;;
    --no-shots) shots=0; shift ;;
    *) echo "make_docs_pictures.sh: unknown argument '$1' (expected --qkv PATH, --npm-dir DIR, --no-shots)" >&2; exit 2 ;;
  esac
done
[ -x "$qkv" ] || { echo "make_docs_pictures.sh: no qkv binary at '$qkv' (build it: bash scripts/setup.sh, or --qkv PATH)" >&2; exit 1; }
qkv=$(realpath "$qkv")
text="Your journey starts with one step."
prompt="deadbeefcafebabe|deadbeefcafebab"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== docs/*.svg: qkv walkthrough --svg" >&2
"$qkv" walkthrough --text "$text" --svg "$tmp/walkthrough" >/dev/null
cp "$tmp"/walkthrough/*.svg docs/

echo "== docs/train_loss.svg: qkv train (the default run)" >&2
(cd "$tmp" && "$qkv" train --quiet --checkpoint trained.safetensors --svg train_loss.svg)
cp "$tmp/train_loss.svg" docs/train_loss.svg

echo "== docs/explore/book.html, trained.html: qkv explore" >&2
mkdir -p docs/explore
"$qkv" explore --text "$text" --out docs/explore/book.html
"$qkv" explore --checkpoint "$tmp/trained.safetensors" --text "$prompt" --out docs/explore/trained.html

if [ "$shots" = 1 ]; then
  if [ ! -x /usr/bin/chromium ] || ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "make_docs_pictures.sh: chromium, node or npm missing (bash scripts/setup.sh --test installs them); the screenshots are left as they are" >&2
    exit 0
  fi
  echo "== docs/explore/*.png: the browser test's screenshots" >&2
  # The test makes the same two pages (the chapter on the same sentence, the checkpoint with the
  # same prompt) among others, checks them, and keeps a screenshot of each view.
  /usr/bin/python3 tests/explore/test_explore.py --qkv "$qkv" --npm-dir "$npm_dir" \
      --checkpoint "$tmp/trained.safetensors" --shots "$tmp/shots" >&2
  for view in pipeline heads model neuron; do
    cp "$tmp/shots/book.$view.png" "docs/explore/book.$view.png"
  done
  for view in pipeline heads model neuron patterns; do
    cp "$tmp/shots/checkpoint.$view.png" "docs/explore/trained.$view.png"
  done
  for view in pipeline heads model neuron patterns lens; do
    cp "$tmp/shots/gpt.$view.png" "docs/explore/gpt2-small.$view.png"
  done
  echo "== docs/explore/gpt2-small-1024.*.png: bench/explore_gpt2_bench.py --shots" >&2
  mkdir -p "$tmp/big"
  /usr/bin/python3 bench/explore_gpt2_bench.py --qkv "$qkv" --npm-dir "$npm_dir" --runs 1 --shots "$tmp/big" >&2
  for view in model pipeline neuron heads; do
    cp "$tmp/big/gpt2-small-1024.$view.png" "docs/explore/gpt2-small-1024.$view.png"
  done
fi
