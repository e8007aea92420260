#!/bin/bash
# package.pip: `pip install .` of this checkout into a fresh venv (--system-site-packages, for
# Debian's numpy and torch), offline with Debian's setuptools (--no-build-isolation), reusing this
# build's compiled library (QKV_PIP_BUILD_DIR, setup.py); then, from outside the checkout and
# without PYTHONPATH, `import qkv` must come from the venv and the Python suite (tests/python) must
# pass against the installed package.
#   tests/pip_install_test.sh SOURCE_DIR BUILD_DIR PYTHON QKV_BINARY
set -euo pipefail
src=$1 build=$2 python=$3 qkv_binary=$4
work=$build/tests/pip
rm -rf "$work"
mkdir -p "$work/run"
"$python" -m venv --system-site-packages "$work/venv"
unset PYTHONPATH
QKV_PIP_BUILD_DIR=$build "$work/venv/bin/python" -m pip install --no-build-isolation --no-index --quiet "$src"
cd "$work/run"
where=$("$work/venv/bin/python" -c "import qkv, qkv.torch; print(qkv.__file__)")
case $where in
  "$work/venv/"*) echo "import qkv: $where" ;;
  *) echo "FAIL: import qkv found $where, not the venv's package"; exit 1 ;;
esac
for f in py.typed __init__.pyi; do
  [ -f "$(dirname "$where")/$f" ] || { echo "FAIL: the installed package lacks $f"; exit 1; }
done
QKV_BINARY=$qkv_binary "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python"
