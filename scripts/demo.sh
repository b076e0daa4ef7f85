#!/usr/bin/env bash
# Installs what sinew needs, builds the release preset and runs the main job:
# the collectives demo on 4 local ranks under `sinew run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec build/release/bin/sinew run --standalone --nproc-per-node "${NPROC:-4}" \
  build/release/bin/collectives_demo "$@"
