"""Triton's cache key: computed once per process in the background before the first launch,
then taken from our disk cache by later processes while Triton's files are unchanged."""

import json
import subprocess
import sys

import pytest

triton_cache = pytest.importorskip("triton.runtime.cache")

#: one process: the prewarm, then what Triton's first launch would see
PROCESS = """
import json, triton.runtime.cache as c
from tensorplay_graph.backends.triton import prewarm
original = c.triton_key
if not hasattr(original, "cache_info"):
    raise SystemExit("triton_key is no longer memoised: the prewarm would not help; revisit it")
prewarm.start(); prewarm.start(); prewarm.wait()   # idempotent: one thread
seen = c.triton_key()
print(json.dumps({"key": seen, "hashed": original.cache_info().misses,
                  "true": original() == seen}))
"""


def _process(cache_dir) -> dict:
    env = {"TPG_CACHE_DIR": str(cache_dir), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", PROCESS], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tritons_key_is_hashed_once_then_read_from_disk_until_triton_changes(tmp_path):
    first = _process(tmp_path)
    assert first["hashed"] == 1 and first["true"]  # computed in the background, once
    store = tmp_path / "triton" / "triton_key.json"
    assert json.loads(store.read_text())["key"] == first["key"]
    second = _process(tmp_path)
    # the stored key: Triton's own hashing did not run (the test's check runs it afterwards)
    assert second["key"] == first["key"] and second["hashed"] == 0 and second["true"]
    record = json.loads(store.read_text())
    store.write_text(json.dumps({"fingerprint": "another triton", "key": "stale"}))
    third = _process(tmp_path)  # a changed installation: hashed again, stored again
    assert third["key"] == first["key"] and third["hashed"] == 1 and third["true"]
    assert json.loads(store.read_text()) == record


def test_tilelang_version_comes_from_metadata_without_importing_tilelang():
    import subprocess
    import sys
    code = ("import sys; from tensorplay_graph.backends.tilelang import cache; "
            "v = cache.tilelang_version(); print(v, 'tilelang' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, imported = out.stdout.split()
    assert version and imported == "False"
