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

`keep_freed_memory()` (the model's build calls it) sets, once per process, mallopt's M_MMAP_MAX to 0
(no block is mapped on its own; the heap serves all) and M_TRIM_THRESHOLD to the most it takes
(2 GB of free heap top kept). The cost: the process's resident size no longer falls after a peak
(it stays at the largest the heap has been). Left alone: a process whose environment sets glibc's
malloc itself (`MALLOC_*_` variables, or glibc.malloc in GLIBC_TUNABLES: the user's choice wins),
and a C library that is not glibc.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
LARGEST_INT = 2 ** 31 - 1  # mallopt takes an int
MALLOC_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                    "MALLOC_TRIM_THRESHOLD_")

_outcome: str | None = None  # what the first call did, for every later one


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
    return "freed memory kept in the process (glibc mallopt: M_MMAP_MAX 0, M_TRIM_THRESHOLD 2 GB)"
