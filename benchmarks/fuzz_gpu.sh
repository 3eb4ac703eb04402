#!/usr/bin/env bash
# The differential fuzzer on the GPU machine (device tool), torch programs on CUDA, several
# fuzz.py processes side by side (one per seed range), each stopped after SECONDS and printing
# its table. Run from the repository root after `source benchmarks/gpu_setup.sh`:
#   bash benchmarks/fuzz_gpu.sh SEED_START SECONDS OUT_DIR
# Cells: output programs through backend auto (Triton kernels, CUDA graphs: each program is
# called three times) and reference, and training programs through every entry point (rotate).
set -u
start=${1:?seed start}; secs=${2:?seconds}; out=${3:?out dir}
mkdir -p "$out"
run() {  # name, seed offset, fuzz.py arguments...
  local name=$1 offset=$2; shift 2
  timeout -s TERM "$secs" python benchmarks/fuzz.py --device cuda --framework torch \
    --seed-start $((start + offset)) --out "$out/$name" --shrink-s 20 --chunk 40 "$@" \
    > "$out/$name.log" 2>&1 &
}
for i in 0 1 2 3 4 5; do run "auto$i" $((i * 10000)) --n 5000 --backend auto; done
for i in 0 1; do run "reference$i" $((60000 + i * 10000)) --n 5000 --backend reference; done
for i in 0 1 2 3 4; do run "grad$i" $((80000 + i * 10000)) --grad --n 5000 --backend rotate; done
wait
for f in "$out"/*.log; do echo "== $f"; grep -v "^\s*$" "$f" | tail -12; done
