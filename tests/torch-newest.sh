#!/usr/bin/env bash
# The torch tests against the newest torch that pip can install (`make test-torch-newest`; .ci/run
# runs it), so that a torch release that breaks the build turns CI red before a user's install
# fails. `make test` tests the pinned torch; this second, shorter pass:
#   1. a fresh virtual environment VENV, which sees PYTHON's packages (numpy, pytest, ...), gets
#      the newest torch pip offers, over PYTHON's pinned one: a CPU build from TORCH_INDEX_URL
#      first (as tools/python-env.sh does), else the default index's;
#   2. `pip install --no-build-isolation ./python` into it (CPU only, METALTOPK_CUDA=0), which
#      must ship the AOTInductor shim and the fast path for that torch, both loading;
#   3. tests/torch against that installed package, on the fast path and on the cffi path.
# Where no torch newer than PYTHON's can be installed (no network, no index), it says so and
# exits 0: the pinned torch has been tested all the same.
#
#   tests/torch-newest.sh PYTHON VENV
set -uo pipefail

python=$1 venv=$2
cd "$(dirname "$0")/.."
repo=$PWD
say() { echo "test-torch-newest: $*" >&2; }
torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
[[ $(uname -s) == Linux ]] || torch_index=
pinned=$("$python" -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)

rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv" || { say "FAILED: python -m venv $venv"; exit 1; }
venv_python=$venv/bin/python
pip() { "$venv_python" -m pip "$@"; }

# Step 1 takes torch alone from the CPU index, step 2 its dependencies (tools/python-env.sh).
installed=
if [[ -n $torch_index ]] &&
   pip install -q --upgrade --retries 1 --timeout 30 --no-deps --index-url "$torch_index" torch &&
   pip install -q torch; then
  installed=1
elif pip install -q --upgrade torch; then
  installed=1
fi
newest=$("$venv_python" -c "import torch; print(torch.__version__)" 2>/dev/null)
if [[ -z $installed || -z $newest ]]; then
  say "SKIPPED: no torch could be installed into $venv (is an index reachable?); the pinned torch $pinned was tested by make test"
  exit 0
fi
if [[ $newest == "$pinned" ]]; then
  say "SKIPPED: the newest torch pip offers is the pinned $pinned, which make test tested"
  exit 0
fi
say "torch $newest (the pinned one is $pinned)"

status=0
pip install -q "setuptools>=61" wheel || { say "FAILED: pip install setuptools wheel"; exit 1; }
METALTOPK_CUDA=0 pip install --no-build-isolation ./python || { say "FAILED: pip install ./python with torch $newest"; exit 1; }
(cd "$venv" && env -u METALTOPK_LIBRARY -u PYTHONPATH "$venv_python" \
  "$repo/tests/check_installed_package.py" --torch-parts=built) || status=1
env -u METALTOPK_LIBRARY -u PYTHONPATH METALTOPK_EXPECT_TORCH_FAST_PATH=1 \
  "$venv_python" -m pytest -q -rs tests/torch || status=1
((status == 0)) || say "FAILED with torch $newest"
exit $status
