"""Freed memory stays in the process instead of going back to the kernel (glibc's malloc; speed only,
not in the paper).

torch takes CPU tensors from malloc. With glibc's defaults a block above the mmap threshold (128 KB
at first, rising with the blocks freed, up to 32 MB) is mapped on its own and unmapped when freed,
and the top of the heap goes back to the kernel once 128 KB of it is free: the next block of that
size is faulted in again, page by page, and zero-filled by the kernel. A training step allocates and
frees the same few sizes again and again (activations, their gradients; the big shape's [4096 x 4096]
blocks are 64 MB), so every step paid those faults anew. AMD EPYC Zen 4, two threads, in process,
second step after a warm-up (default / kept): big 844k-1.1M / 16k minor faults, 4.6-7.3 / 0.5 s of
system time, 31.1-31.8 / 27.2 s a step, peak RSS 6,443 / 6,566 MB; base 340k-481k / 13 faults,
8.6 / 8.3 s, 2,860-2,916 / 2,984 MB. Transparent huge pages (torch's THP_MEM_ALLOC_ENABLE) were
slower (base 10.6-11.9 s: the kernel zero-fills and compacts 2 MB pages).

Even kept, glibc's heap grows from step to step: the blocks of a batch are carved from the holes
the last one left, the batches' shapes change (so do the sizes), and the small allocations made
meanwhile (autograd nodes, logging, oneDNN's caches) stay between the pieces. At the big shape, in
process, batches of 20-32 positions: the heap's free space after a step was 38-64 pieces (largest
480 then 176 MB) with 1,000-1,700 small blocks among them, and peak RSS rose step by step, 5,989 ->
6,544 MB in six steps, 0.8 GB above the most bytes in use. So large blocks (1 MB and more) no longer
come from malloc: `block_pool.cpp`, torch's CPU allocator from then on, maps each one on its own,
keeps it when freed and hands it to the next request of about its size (at most a 16th larger;
sizes are rounded up to a 32nd of their power of two, so successive batches share blocks), and
unmaps its oldest kept blocks before it would map beyond the most bytes ever live plus a 32nd. The
same six steps: 5,832-5,853 MB, flat (5,831-5,844 in a later run); through fairseq-train
(benchmarks/train_step.py --cli, two pairs each) peak RSS went 6,535 -> 5,825-5,831 MB at the big
shape and 3,174 -> 2,696 MB at the base shape. Small blocks stay with malloc and the settings above.

`keep_freed_memory()` (the model's build calls it) does both once per process: mallopt's
M_MMAP_MAX 0 (no block is mapped on its own; the heap serves all) and M_TRIM_THRESHOLD the most it
takes (2 GB of free heap top kept), then the block pool (built on first use with the C++ compiler
against torch's headers: modules.c_library; without one, malloc alone). The cost: the process's
resident size no longer falls after a peak (it stays at the largest the heap and the pool have
been). Left alone: a process whose environment sets glibc's malloc itself (`MALLOC_*_` variables,
or glibc.malloc in GLIBC_TUNABLES: the user's choice wins), and a C library that is not glibc.
"""
from __future__ import annotations

import ctypes
import os
from typing import Dict

from .c_library import compile_torch_library

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
LARGEST_INT = 2 ** 31 - 1  # mallopt takes an int
MALLOC_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                    "MALLOC_TRIM_THRESHOLD_")

LARGE_BLOCK = 1 << 20  # bytes: blocks this large come from the block pool
_POOL_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "block_pool.cpp")
_POOL_STATS = ("live", "kept", "most_live", "maps", "unmaps")

_outcome: str | None = None  # what the first call did, for every later one
_pool: ctypes.CDLL | None = None


def _set_by_the_user() -> str | None:
    named = [name for name in MALLOC_VARIABLES if name in os.environ]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        named.append("GLIBC_TUNABLES")
    return ", ".join(named) or None


def keep_freed_memory() -> str:
    """Apply the policy of the module docstring once per process; returns what was done, for a log line."""
    global _outcome
    if _outcome is None:
        _outcome = _apply()
    return _outcome


def _apply() -> str:
    user = _set_by_the_user()
    if user:
        return f"malloc as the environment sets it ({user})"
    try:
        libc_version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc_version = ""
    if not libc_version.startswith("glibc"):
        return "malloc's defaults (not glibc)"
    mallopt = ctypes.CDLL(None).mallopt
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, LARGEST_INT) != 1:
        return "malloc's defaults (mallopt refused)"
    return f"freed memory kept in the process (glibc mallopt: M_MMAP_MAX 0, M_TRIM_THRESHOLD 2 GB; {_install_pool()})"


def _install_pool() -> str:
    global _pool
    library, why = compile_torch_library(_POOL_SOURCE)
    if library is None:
        return f"blocks of 1 MB and more from malloc too: the block pool is not built ({why})"
    library.install_block_pool.argtypes = [ctypes.c_size_t]
    library.install_block_pool(LARGE_BLOCK)
    _pool = library
    return "blocks of 1 MB and more from the block pool"


def block_pool_stats() -> Dict[str, int]:
    """The pool's counts: bytes live, kept and most ever live, blocks mapped and unmapped (zeros
    when it is not installed)."""
    counts = (ctypes.c_uint64 * len(_POOL_STATS))()
    if _pool is not None:
        _pool.block_pool_stats(counts)
    return dict(zip(_POOL_STATS, counts))
