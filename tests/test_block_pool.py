"""modules/block_pool.cpp through modules.freed_memory, each case in a fresh process (the pool is
torch's CPU allocator for the rest of a process once installed). References: the kernel's own
counts (getrusage's minor faults, /proc's resident size), the same computation under malloc alone,
and the arithmetic of the policy in freed_memory's docstring."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"),
                                reason="glibc's malloc only")

MB = 2 ** 20


def _run(script, *args, **env):
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().split("\n")


HEADER = """
import resource, sys
import torch
from vaswani_plugin.modules import freed_memory
said = freed_memory.keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
"""

REUSE = HEADER + """
MB = 2 ** 20
block = torch.empty(8 * MB // 4).fill_(1.0); address = block.data_ptr(); del block
before = faults()
near = torch.empty((8 * MB - 100 * 1024) // 4).fill_(1.0)  # within a 16th: the same block, no faults
print(said, near.data_ptr() == address, faults() - before, freed_memory.block_pool_stats()["maps"], sep="\\n")
del near
smaller = torch.empty(7 * MB // 4).fill_(1.0)  # an 8th smaller: the kept block would waste too much
print(smaller.data_ptr() != address, freed_memory.block_pool_stats()["maps"], sep="\\n")
"""


def test_a_kept_block_serves_the_next_request_of_about_its_size_without_page_faults():
    said, same, faults, maps, other, maps_after = _run(REUSE)
    assert "from the block pool" in said
    assert same == "True" and int(faults) < 16, (same, faults)  # 2,023 pages written, none faulted
    assert other == "True" and int(maps_after) == int(maps) + 1


BOUND = HEADER + """
import random
MB = 2 ** 20
random.seed(int(sys.argv[1]))
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
start = rss()
live, most, peak_rss = {}, 0, 0
for step in range(400):
    if live and random.random() < 0.5:
        live.pop(random.choice(list(live)))
    else:
        size = random.choice([1, 3, 8, 15, 16, 24, 40]) * MB + random.randrange(0, MB // 2, 4096)
        live[step] = torch.empty(size // 4).fill_(1.0)
    most = max(most, sum(t.nbytes for t in live.values()))
    peak_rss = max(peak_rss, rss() - start)
stats = freed_memory.block_pool_stats()
print(most, peak_rss, stats["maps"], stats["unmaps"], sep="\\n")
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_mapped_memory_stays_within_the_most_ever_live_plus_the_policys_margins(seed):
    """Rounding adds at most a 32nd to a block, reuse at most a 16th, the mapped total at most a 32nd
    of the most ever live: resident growth <= most live x (1 + 1/16)(1 + 1/32) + one largest block
    (the request that made the total rise), counted by the kernel."""
    most, peak_rss, maps, unmaps = (int(v) for v in _run(BOUND, str(seed)))
    assert peak_rss <= most * (1 + 1 / 16) * (1 + 1 / 32) + 41 * MB, (peak_rss / MB, most / MB)
    assert unmaps <= maps


STEPS = HEADER + """
MB = 2 ** 20
sizes = [16 * MB, 48 * MB, 64 * MB, 4 * MB, 16 * MB, 2 * MB + 4096, 64 * MB, 16 * MB] * 3  # a step's blocks
maps = []
for step in range(4):
    blocks = [torch.empty(n // 4).fill_(1.0) for n in sizes]  # forward: all live at the end
    while blocks:
        blocks.pop()  # backward frees them, last first
    maps.append(freed_memory.block_pool_stats()["maps"])
print(*maps, sep="\\n")
"""


def test_steps_of_the_same_shapes_map_nothing_after_the_first():
    maps = [int(v) for v in _run(STEPS)]
    assert maps[0] == 24 and maps[1:] == [24, 24, 24]


PROFILED = HEADER + """
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    block = torch.empty(24 * 2 ** 20 // 4)
    del block
print(said, *(f"{e.name} {e.cpu_memory_usage}" for e in prof.events()), sep="\\n")
"""


def test_the_profilers_memory_events_see_pool_blocks_at_their_requested_size():
    """torch.profiler(profile_memory=True) reports a pool block as c10's own allocator reports it:
    the tensor's bytes (not the pool's rounded size) allocated by aten::empty, then released."""
    said, *pooled = _run(PROFILED)
    _, *malloc_only = _run(PROFILED, MALLOC_ARENA_MAX="8")
    assert "from the block pool" in said
    assert pooled == malloc_only == ["aten::empty 25165824", "[memory] -25165824"]


TRAIN = HEADER + """
import torch.nn as nn
torch.manual_seed(0)
from vaswani_plugin.modules.layers import EncoderLayer
from vaswani_plugin.modules.onednn_linear import use_onednn_linears_
model = nn.ModuleList([EncoderLayer(64, 4, 256, dropout=0.1) for _ in range(2)])
use_onednn_linears_(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader(torch.randn(8, 16, 64), batch_size=2, num_workers=1)  # a forked worker
losses = []
for _ in range(2):
    for x in data:
        h = x
        for layer in model:
            h = layer(h, None)
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
print(said)
print(repr(losses))
print(repr([float(p.double().sum()) for p in model.parameters()]))
print(freed_memory.block_pool_stats()["maps"])
"""


def test_training_through_the_pool_is_bitwise_training_through_malloc():
    """Every tensor of 4 KB and more from the pool (oneDNN's scratchpads, Adam's state, a forked
    DataLoader worker's batches): the same losses and weights as malloc alone, to the bit."""
    pooled = _run(TRAIN.replace("said = freed_memory", "freed_memory.LARGE_BLOCK = 4096\nsaid = freed_memory"))
    malloc_only = _run(TRAIN, MALLOC_ARENA_MAX="8")  # the user's malloc settings: no pool
    assert "from the block pool" in pooled[0] and "environment" in malloc_only[0]
    assert int(pooled[3]) > 0 and int(malloc_only[3]) == 0
    assert pooled[1:3] == malloc_only[1:3]


def test_without_a_cpp_compiler_malloc_serves_every_block_and_says_why():
    said, *_ = _run(REUSE, CXX="no-such-compiler-here")
    assert "the block pool is not built (no C++ compiler 'no-such-compiler-here'" in said
    assert "M_MMAP_MAX 0" in said  # malloc's half of the policy still applies
