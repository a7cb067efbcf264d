#!/usr/bin/env bash
# Finds or makes a Python interpreter that has the given modules, and prints its path (nothing
# else goes to stdout; what it does goes to stderr). `make test`, `make test-deps` and `make demo`
# run it.
#
#   tools/python-env.sh PYTHON VENV SPEC...      SPEC = module:pip-requirement, e.g. torch:torch==2.13.0
#
# In order: PYTHON itself when it has every module; else VENV when it exists and has them; else
# pip installs the missing ones into PYTHON; and where PYTHON takes no pip installs (Debian's and
# Ubuntu's /usr/bin/python3 refuse them, PEP 668) or they fail, into the virtual environment VENV
# (made with --system-site-packages, so what the system has stays visible).
#
# torch: PyPI's Linux wheels are CUDA builds that pull several GB of nvidia-* packages. The tests
# need only the CPU, so on Linux torch itself comes from PyTorch's CPU index (TORCH_INDEX_URL, by
# default https://download.pytorch.org/whl/cpu; pip's find-links, where set, are searched too),
# and only its small dependencies from PyPI. Where neither has it, torch is left out with a
# warning: the tests that need it are skipped (pytest.importorskip), the rest still run. An empty
# TORCH_INDEX_URL takes torch from PyPI like any package.
set -euo pipefail

python=$1 venv=$2
shift 2
say() { echo "python-env: $*" >&2; }
torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
[[ $(uname -s) == Linux ]] || torch_index=

# The specs whose modules `$1` (an interpreter) lacks, one a line. find_spec does not import, so
# this costs a fraction of a second even with torch installed.
missing_specs() {
  local interpreter=$1
  shift
  "$interpreter" - "$@" <<'EOF'
import importlib.util, sys
for spec in sys.argv[1:]:
    if importlib.util.find_spec(spec.split(":", 1)[0]) is None:
        print(spec)
EOF
}

# pip-installs the specs into interpreter `$1`. Fails when a required package fails; torch, where
# it cannot be had as a CPU build, only warns.
install_specs() {
  local interpreter=$1 spec module requirement
  shift
  local required=() torch=()
  for spec; do
    module=${spec%%:*} requirement=${spec#*:}
    if [[ $module == torch && -n $torch_index ]]; then torch+=("$requirement"); else required+=("$requirement"); fi
  done
  if ((${#required[@]})); then
    say "pip install ${required[*]} (into $interpreter)"
    "$interpreter" -m pip install -q "${required[@]}" >&2 || return 1
  fi
  for requirement in ${torch[@]+"${torch[@]}"}; do
    say "pip install $requirement, CPU build, from $torch_index (into $interpreter)"
    # Step 1 takes torch alone from the CPU index (or pip's find-links); step 2 finds it
    # installed and brings only its dependencies, from the default index.
    if "$interpreter" -m pip install -q --retries 1 --no-deps --index-url "$torch_index" \
         "$requirement" >&2 && "$interpreter" -m pip install -q "$requirement" >&2; then
      continue
    fi
    say "WARNING: no CPU build of $requirement could be installed (is $torch_index reachable?);"
    say "  the tests that need torch will be skipped. PyPI's torch is a CUDA build of several GB:"
    say "  to take it anyway, run with TORCH_INDEX_URL= (empty)."
  done
}

# Modules still missing after installing, other than torch (see above).
still_missing() {
  missing_specs "$@" | grep -v "^torch:" || true
}

mapfile -t missing < <(missing_specs "$python" "$@")
if ((${#missing[@]} == 0)); then
  echo "$python"
  exit 0
fi

venv_python=$venv/bin/python
if [[ -x $venv_python ]]; then
  mapfile -t venv_missing < <(missing_specs "$venv_python" "$@")
  if ((${#venv_missing[@]} == 0)); then
    echo "$venv_python"
    exit 0
  fi
fi

# PEP 668: an interpreter outside any venv whose standard library carries EXTERNALLY-MANAGED
# refuses pip installs; so does one without pip.
takes_pip=$("$python" - <<'EOF'
import os, sys, sysconfig, importlib.util
managed = sys.prefix == sys.base_prefix and os.path.exists(
    os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
print(0 if managed or importlib.util.find_spec("pip") is None else 1)
EOF
)
if ((takes_pip)) && [[ ! -x $venv_python ]]; then
  if install_specs "$python" "${missing[@]}" && [[ -z $(still_missing "$python" "$@") ]]; then
    echo "$python"
    exit 0
  fi
  say "pip could not install into $python: using the virtual environment $venv"
elif ((!takes_pip)); then
  say "$python takes no pip installs (PEP 668 or no pip): using the virtual environment $venv"
fi

if [[ ! -x $venv_python ]]; then
  say "python -m venv --system-site-packages $venv"
  "$python" -m venv --system-site-packages "$venv" >&2
fi
mapfile -t venv_missing < <(missing_specs "$venv_python" "$@")
if ((${#venv_missing[@]})); then
  install_specs "$venv_python" "${venv_missing[@]}" || { say "pip install failed"; exit 1; }
fi
left=$(still_missing "$venv_python" "$@")
if [[ -n $left ]]; then
  say "still missing after pip: $left"
  exit 1
fi
echo "$venv_python"
