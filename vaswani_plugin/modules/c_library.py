"""Builds the C kernels that sit beside the maths they speed up (speed only; not in the paper).

A kernel is one C file in this folder, compiled on first use with the system's C compiler (`$CC`,
else `cc`) for this CPU (`-O3 -march=native -fopenmp`: its widest vectors, and OpenMP threads from
the libgomp that torch has loaded), in a temporary directory, and loaded with ctypes (which
releases the GIL during a call). `compile_c_library` returns the library, or None with the reason,
which the kernel's module logs in one line before its products fall back to torch.
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
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return None, f"no C compiler {compiler!r}; set CC"
    name = os.path.splitext(os.path.basename(source))[0]
    with tempfile.TemporaryDirectory(prefix=f"vaswani_{name}_") as build_dir:
        library = os.path.join(build_dir, f"{name}.so")
        done = subprocess.run([compiler, *FLAGS, source, *also, "-o", library], capture_output=True, text=True)
        if done.returncode != 0:
            first_error = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip())
            return None, f"{compiler} {' '.join(FLAGS)} failed: {first_error[:200]}"
        return ctypes.CDLL(library), ""  # loaded: the file may go with its directory
