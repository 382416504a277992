#!/usr/bin/env bash
# The main job as it exists today. Grows with the pipeline: plan → example → compile → run.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/dtensor
echo "== dtensor $($B --version)"
