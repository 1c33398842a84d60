"""Builds the C kernels that sit beside the maths they speed up (speed only; not in the paper).

A kernel is one C file in this folder, compiled on first use with the system's C compiler (`$CC`,
else `cc`) for this CPU (`-O3 -march=native -fopenmp`: its widest vectors, and OpenMP threads from
the libgomp that torch has loaded), in a temporary directory, and loaded with ctypes (which
releases the GIL during a call). `compile_c_library` returns the library, or None with the reason,
which the kernel's module logs in one line before its products fall back to torch.
`compile_torch_library` does the same for a C++ file that uses torch's own C++ API.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from typing import Optional, Tuple

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")


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
    return _build("C++", os.environ.get("CXX", "c++"), flags, [source])


def _build(language: str, compiler: str, flags, sources) -> Tuple[Optional[ctypes.CDLL], str]:
    if shutil.which(compiler) is None:
        return None, f"no {language} compiler {compiler!r}; set {'CC' if language == 'C' else 'CXX'}"
    name = os.path.splitext(os.path.basename(sources[0]))[0]
    with tempfile.TemporaryDirectory(prefix=f"vaswani_{name}_") as build_dir:
        library = os.path.join(build_dir, f"{name}.so")
        # flags after the sources: the linker takes libraries (-lc10) after the objects that use them
        done = subprocess.run([compiler, *sources, *flags, "-o", library], capture_output=True, text=True)
        if done.returncode != 0:
            first_error = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip())
            return None, f"{compiler} {' '.join(flags[:3])} ... failed: {first_error[:200]}"
        return ctypes.CDLL(library), ""  # loaded: the file may go with its directory
