#!/usr/bin/env bash
# The system packages `make test` and .ci/run need, installed where they are missing: the one
# place that knows them (`make test` runs it before building anything; .ci/run through make).
#
#   tools/install-system-deps.sh           install what is missing (apt; sudo when not root)
#   tools/install-system-deps.sh --check   only list what is missing (exit 1 if anything is)
#
# Prints nothing when everything is present. On Debian and Ubuntu it installs through apt-get and
# says what it installs. Elsewhere (macOS, other Linux) it installs nothing: it names what is
# missing and exits 0, and the tests that need it fail with their own messages. PYTHON (default
# python3) is the interpreter whose pip and venv are checked.
#
# Lists: the core's below; each area may keep one more in tests/<area>/apt-packages.txt (one
# Debian package a line, # comments), e.g. tests/metal/apt-packages.txt for test-metal (clang's
# OpenCL C++ type checks, PoCL, GNUstep).
set -euo pipefail

cd "$(dirname "$0")/.."
check_only=0
[[ ${1:-} == --check ]] && check_only=1
python=${PYTHON:-python3}
say() { echo "install-system-deps: $*" >&2; }

# "probe|Debian package": the package is needed when the probe fails.
CORE_PACKAGES=(
  "command -v clang|clang"              # the preferred compiler; test-metal and the fuzzer need it
  "command -v g++|g++"                  # the second compiler .ci/run builds and tests with
  "command -v make|make"
  "command -v cmake|cmake"              # test-install: a CMake consumer of the installed package
  "command -v pkg-config|pkg-config"    # test-install: a pkg-config consumer
  "command -v $python|python3"
  "$python -m pip --version|python3-pip"
  "$python -c 'import ensurepip'|python3-venv"   # the test venv, where pip may not install (PEP 668)
  # torch.compile builds its CPU kernels as Python extensions: the interpreter's C headers.
  "$python -c 'import os, sysconfig; assert os.path.isfile(os.path.join(sysconfig.get_path(\"include\"), \"Python.h\"))'|python3-dev"
)

missing=()
for entry in "${CORE_PACKAGES[@]}"; do
  sh -c "${entry%|*}" >/dev/null 2>&1 || missing+=("${entry##*|}")
done

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  # Not Debian: nothing is installed from here. The area lists name Debian packages, so only the
  # core's probes are reported.
  if ((${#missing[@]})); then
    say "no apt-get on this $(uname -s) machine: install these yourself (Debian names): ${missing[*]}"
    ((check_only)) && exit 1
  fi
  exit 0
fi

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

for list in tests/*/apt-packages.txt; do
  [[ -f $list ]] || continue
  while read -r package _; do
    [[ -z $package || $package == \#* ]] && continue
    installed "$package" || missing+=("$package")
  done < "$list"
done

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  elif ((${#missing[@]})) && ((!check_only)); then
    say "missing: ${missing[*]}; not root and no sudo: run as root"
    say "  apt-get install --no-install-recommends ${missing[*]}"
    say "or skip this step: make test SYSTEM_DEPS=skip"
    exit 1
  fi
fi

updated=0
apt_install() {
  say "installing $* (apt-get${as_root:+, through sudo})"
  if ((!updated)); then
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    updated=1
  fi
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "$@" >/dev/null
}

if ((${#missing[@]})); then
  # Each package once, in the order first named.
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
  if ((check_only)); then
    say "missing: ${missing[*]}"
    exit 1
  fi
  apt_install "${missing[@]}"
fi

# The sanitizer and fuzzer builds (tests/reliability) need clang's compiler-rt: its runtimes and
# libFuzzer's header. Debian ships them apart from clang (libclang-rt-N-dev, a recommendation the
# install above leaves out); elsewhere (Ubuntu's older clang) they come with clang itself, so the
# probe is a compile, unless Debian's package is already there.
compiler_rt_works() {
  local dir status
  dir=$(mktemp -d)
  echo 'int main(void) { return 0; }' > "$dir/main.c"
  echo '#include <fuzzer/FuzzedDataProvider.h>' > "$dir/fuzz.cpp"
  clang -fsanitize=address "$dir/main.c" -o "$dir/asan" >/dev/null 2>&1 &&
    clang -fsanitize=thread "$dir/main.c" -o "$dir/tsan" >/dev/null 2>&1 &&
    clang++ -fsyntax-only "$dir/fuzz.cpp" >/dev/null 2>&1
  status=$?
  rm -rf "$dir"
  return $status
}
if command -v clang >/dev/null 2>&1; then
  compiler_rt=libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev
  if ! installed "$compiler_rt" && ! compiler_rt_works; then
    if ((check_only)); then
      say "missing: $compiler_rt"
      exit 1
    fi
    apt_install "$compiler_rt"
  fi
fi
exit 0
