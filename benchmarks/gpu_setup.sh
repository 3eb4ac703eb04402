#!/usr/bin/env bash
# Source on the GPU machine (device tool) from the repository root, after carrying `.gpu`
# (built by ../shared/tools/gpu-bundle --models):  source benchmarks/gpu_setup.sh
# Extracts the bundles into a fresh directory (a stale one mixes versions), puts it and the
# checkout first on PYTHONPATH, and writes a dist-info so both compiler entry points resolve.
site="/tmp/site_$$"
mkdir -p "$site"
for bundle in .gpu/site.tar.xz .gpu/models.tar.xz .gpu/vision.tar.xz; do
  [ -f "$bundle" ] && python3 -c "import tarfile,sys;tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$bundle" "$site"
done
dist="$site/tensorplay_graph-0.1.0.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: tensorplay_graph\nVersion: 0.1.0\n' > "$dist/METADATA"
sed -n '/^\[project.entry-points.tensorplay_compiler_backends\]/,$p' pyproject.toml \
  | sed -n '/^\[project.entry-points/{s/project.entry-points.//;p;n;p}' | tr -d '"' > "$dist/entry_points.txt"
# Bytecode for the checkout, as `pip install` writes for an installed package: a warm-start
# process should not compile our sources again (the device's copy may not keep __pycache__).
python3 -m compileall -q -j 0 tensorplay_graph > /dev/null || true
export PYTHONPATH="$site:$PWD" TILELANG_CACHE_DIR="/tmp/tlcache_$$" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
