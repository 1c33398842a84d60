"""modules/onednn_linear.py caps oneDNN's primitive cache: without the cap, every new product shape
(training meets new row counts at every update) keeps a primitive and its memory, 1,024 of them.
Each check runs in a fresh process, since oneDNN reads the capacity when it creates its first
primitive."""
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")

GROWTH = """
import sys, torch
if sys.argv[1] == "plugin":
    import vaswani_plugin.modules.onednn_linear
def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
weight = torch.randn(2048, 1024)
torch.ops.mkldnn._linear_pointwise(torch.randn(256, 1024), weight, None, "none", [], "")
start = rss_mb()
for rows in range(264, 264 + 8 * 100, 8):  # 100 shapes oneDNN has not seen
    torch.ops.mkldnn._linear_pointwise(torch.randn(rows, 1024), weight, None, "none", [], "")
print(rss_mb() - start)
"""


def _run(code, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env.update(env_extra or {}, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.split()[-1]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc for the resident set")
def test_a_hundred_new_shapes_keep_far_less_memory_with_the_plugin_loaded():
    plain, plugin = float(_run(GROWTH, "plain")), float(_run(GROWTH, "plugin"))
    if plain < 60:
        pytest.skip(f"oneDNN kept only {plain:.0f} MB for 100 primitives here: nothing to cap")
    assert plugin < plain / 2, (plain, plugin)


def test_the_capacity_is_set_on_import_and_a_users_own_value_kept():
    show = "import os, vaswani_plugin.modules.onednn_linear as o; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    from vaswani_plugin.modules import onednn_linear

    assert _run(show) == str(onednn_linear.PRIMITIVE_CACHE_CAPACITY)
    assert _run(show, env_extra={"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "500"}) == "500"
