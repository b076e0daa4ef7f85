#!/usr/bin/env bash
# Builds and runs the whole test suite: the dev build, an asan+ubsan build of
# the tests, and a tsan build of the shared-memory and threading core.
# ctest's closing line of each stage is printed; any failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
JOBS="${JOBS:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

stage() { echo; echo "=== $* ==="; }

stage "dev build + full test suite"
cmake --preset dev >/dev/null
cmake --build --preset dev -j "$JOBS"
ctest --preset dev -j "$JOBS" --timeout 600

stage "asan+ubsan build + tests"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS"
# LeakSanitizer cannot follow UCX's and OpenMPI's internal allocations across
# their own threads; leaks are still checked in sinew's own tests (see
# tests/sanitizers/lsan.supp for the exact suppressions and why).
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp" \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --preset asan -j "$JOBS" --timeout 900

stage "tsan build of the shared-memory and threading core"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j "$JOBS"
TSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/tsan.supp halt_on_error=1" \
  ctest --preset tsan -j "$JOBS" --timeout 900
