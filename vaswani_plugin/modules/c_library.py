"""Builds the C kernels that sit beside the maths they speed up (speed only; not in the paper).

A kernel is one C file in this folder, compiled on first use with the system's C compiler (`$CC`,
else `cc`) for this CPU (`-O3 -march=native -fopenmp`: its widest vectors, and OpenMP threads from
the libgomp that torch has loaded), and loaded with ctypes (which releases the GIL during a call).
`compile_c_library` returns the library, or None with the reason, which the kernel's module logs in
one line before its products fall back to torch. `compile_torch_library` does the same for a C++
file that uses torch's own C++ API.

Built libraries are kept in `$XDG_CACHE_HOME/vaswani_plugin` (else `~/.cache/vaswani_plugin`), named
by a hash of everything the build depends on: the sources' bytes, the compiler (its path, size and
time), the flags, the CPU (its model and feature flags: `-march=native` builds for this CPU only)
and, for C++, torch's version. A process that finds its library there loads it without compiling
(the builds took ~2 s of each fairseq-train/-generate/-interactive start); a changed source, another
compiler, CPU or torch builds anew. Loading a kept library marks it used (its time); a build removes
the same kernel's libraries unused for `UNUSED_DAYS` (the builds of an earlier source, compiler or
torch), so the cache does not grow with every upgrade while two CPUs sharing a home keep their own.
Where the cache cannot be written, a temporary directory serves.
`cpu_fields` reads /proc/cpuinfo once for this key and for `onednn_linear`'s vendor rule.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from typing import Dict, Optional, Sequence, Tuple

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
UNUSED_DAYS = 30  # a kept library not loaded for this long is removed when its kernel is built again


def compile_c_library(source: str, *also: str) -> Tuple[Optional[ctypes.CDLL], str]:
    """The C file `source` (a path), with the files `also` whose functions it calls, built into one
    library and loaded -> (library, "") or (None, why it is not)."""
    return _build("C", os.environ.get("CC", "cc"), FLAGS, [source, *also])


def compile_torch_library(source: str) -> Tuple[Optional[ctypes.CDLL], str]:
    """The C++ file `source`, which uses torch's C++ API (c10), built against the torch that runs
    (its headers and libc10, C++17, `$CXX` else `c++`) and loaded -> (library, "") or (None, why)."""
    import torch  # only here: the C kernels need no torch to build
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    lib = library_paths()[0]
    flags = ("-O2", "-std=c++17", "-shared", "-fPIC", abi, *(f"-I{path}" for path in include_paths()),
             f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}")
    return _build("C++", os.environ.get("CXX", "c++"), flags, [source], torch.__version__)


@functools.lru_cache(maxsize=None)
def cpu_fields() -> Dict[str, str]:
    """The first CPU's fields in /proc/cpuinfo ("vendor_id", "cpu family", "model", "model name",
    "flags", ...), read once; {} where there is no such file."""
    try:
        with open("/proc/cpuinfo") as info:
            first_cpu = info.read().split("\n\n", 1)[0]
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, colon, value in (line.partition(":") for line in first_cpu.splitlines())
            if colon}


def _build(language: str, compiler: str, flags, sources, *depends_on: str) -> Tuple[Optional[ctypes.CDLL], str]:
    compiler_path = shutil.which(compiler)
    if compiler_path is None:
        return None, f"no {language} compiler {compiler!r}; set {'CC' if language == 'C' else 'CXX'}"
    name = os.path.splitext(os.path.basename(sources[0]))[0]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vaswani_plugin")
    kept = os.path.join(cache, f"{name}-{_build_hash(compiler_path, flags, sources, depends_on)}.so")
    if os.path.exists(kept):
        try:
            library = ctypes.CDLL(kept)
        except OSError:  # a damaged file (a full disk, say): build it again
            pass
        else:
            _mark_used(kept)
            return library, ""
    try:
        os.makedirs(cache, exist_ok=True)
        build_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=cache)
    except OSError:  # no writable cache: build where the temporary files go, keep nothing
        build_dir, kept = tempfile.mkdtemp(prefix=f"vaswani_{name}_"), None
    try:
        library = os.path.join(build_dir, f"{name}.so")
        # flags after the sources: the linker takes libraries (-lc10) after the objects that use them
        done = subprocess.run([compiler, *sources, *flags, "-o", library], capture_output=True, text=True)
        if done.returncode != 0:
            first_error = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip())
            return None, f"{compiler} {' '.join(flags[:3])} ... failed: {first_error[:200]}"
        if kept is not None:
            os.replace(library, kept)  # atomic: a process building the same library at once loses nothing
            library = kept
            _remove_unused(cache, name)
        return ctypes.CDLL(library), ""  # loaded: a file removed later stays mapped
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


def _mark_used(path: str) -> None:
    try:
        os.utime(path)
    except OSError:  # a read-only cache still serves
        pass


def _remove_unused(cache: str, name: str) -> None:
    """Removes `name`'s kept libraries, and build folders a killed process left, unused for UNUSED_DAYS."""
    oldest_kept = time.time() - UNUSED_DAYS * 86400
    for entry in os.scandir(cache):
        if not entry.name.startswith(f"{name}-"):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime >= oldest_kept:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.remove(entry.path)
        except OSError:  # another process removed it first, or it is not ours to remove
            pass


def _build_hash(compiler_path: str, flags, sources: Sequence[str], depends_on: Sequence[str]) -> str:
    digest = hashlib.sha256()
    compiler = os.path.realpath(compiler_path)
    stat = os.stat(compiler)
    for part in (compiler, stat.st_size, stat.st_mtime_ns, *flags, _cpu(), *depends_on):
        digest.update(f"{part}\0".encode())
    for source in sources:
        with open(source, "rb") as file:
            digest.update(file.read())
    return digest.hexdigest()[:20]


def _cpu() -> str:
    """What -march=native builds for: the CPU's vendor, family, model and feature flags."""
    fields = cpu_fields()
    if not fields:
        return platform.processor() + platform.machine()
    return "\n".join(f"{key}: {fields.get(key, '')}" for key in ("vendor_id", "cpu family", "model", "model name", "flags"))
