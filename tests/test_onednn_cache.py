"""modules/onednn_linear.py caps oneDNN's primitive cache and ideep's: without the caps, every new
product shape (training meets new row counts at every update) keeps a primitive and its memory, and
the process grows as long as new shapes come. Each check runs in a fresh process, since both caches
read their capacity when the first primitive is created."""
import os
import subprocess
import sys

import pytest
import torch

from vaswani_plugin.modules import onednn_linear

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")

# The resident set's growth over the second of 2 x 200 products of shapes oneDNN has not seen. A
# primitive's memory is mostly its JIT-compiled kernel (~0.6 MB on an Intel Xeon whatever the
# shape), so small products show the growth at little cost.
GROWTH = """
import sys, torch
if sys.argv[1] == "plugin":
    import vaswani_plugin.modules.onednn_linear
def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
weight, x = torch.randn(256, 256), torch.randn(64 + 8 * 400, 256)
def products(first_rows):  # 200 row counts, each new to oneDNN
    for rows in range(first_rows, first_rows + 8 * 200, 8):
        torch.ops.mkldnn._linear_pointwise(x[:rows], weight, None, "none", [], "")
products(64)  # capped caches are full and evict from here on
before = rss_mb()
products(64 + 8 * 200)
print(rss_mb() - before)
"""
# glibc raises its mmap threshold when a large block is freed, after which the products' outputs
# (64-3,264 rows of 256 floats) come from the heap and may stay counted: on an AMD EPYC Zen 3 (AVX2)
# the capped run showed -26 to +26 MB that way, beside 112 MB for oneDNN's uncapped primitives. A
# fixed threshold hands every output back to the system when it is freed: the capped growth is 0.0-0.1 MB.
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def _run(code, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in onednn_linear.CACHE_CAPACITY_VARIABLES}
    env.update(env_extra or {}, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.split()[-1]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc for the resident set")
def test_new_shapes_stop_growing_the_process_with_the_plugin_loaded():
    plain, plugin = (float(_run(GROWTH, which, env_extra=FIXED_MMAP_THRESHOLD)) for which in ("plain", "plugin"))
    if plain < 40:
        pytest.skip(f"oneDNN kept only {plain:.0f} MB for 200 primitives here: nothing to cap")
    assert plugin < plain / 5, (plain, plugin)


@pytest.mark.parametrize("variable", onednn_linear.CACHE_CAPACITY_VARIABLES)
def test_each_capacity_is_set_on_import_and_a_users_own_value_kept(variable):
    show = f"import os, vaswani_plugin.modules.onednn_linear as o; print(os.environ[{variable!r}])"
    assert _run(show) == str(onednn_linear.PRIMITIVE_CACHE_CAPACITY)
    assert _run(show, env_extra={variable: "500"}) == "500"
