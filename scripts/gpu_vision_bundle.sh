#!/usr/bin/env bash
# Pack timm (pure Python) for the GPU machine, which has torchvision but no registry:
# writes .gpu/vision.tar.xz, which benchmarks/gpu_setup.sh extracts beside the other bundles.
# Run from the repository root after ../shared/tools/gpu-bundle --models (timm's needs --
# huggingface_hub, safetensors, pyyaml -- travel in models.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
  --implementation cp --target "$work/site" "timm==${TIMM_VERSION:-1.0.31}"
find "$work/site" -name __pycache__ -type d -prune -exec rm -rf {} +
tar -C "$work/site" -cf - . | xz -T2 -6 > .gpu/vision.tar.xz
ls -la .gpu/vision.tar.xz
