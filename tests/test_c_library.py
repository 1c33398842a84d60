"""The C kernels' build cache (modules/c_library): a library is compiled once per source, compiler,
CPU and torch, and later processes load it without compiling. The compiler is a wrapper that counts
its runs, and each library's function is checked against a hand-worked value."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

from vaswani_plugin.modules import c_library

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")

ADD = "long combine(long a, long b) { return a + b; }\n"
MULTIPLY = "long combine(long a, long b) { return a * b; }\n"


@pytest.fixture
def counted_cc(tmp_path, monkeypatch):
    """$CC is a script that logs each run and hands over to cc; returns the number of runs so far."""
    runs = tmp_path / "runs"
    wrapper = tmp_path / "counting-cc"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{runs}"\nexec cc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return lambda: len(runs.read_text().splitlines()) if runs.exists() else 0


def _combine(source, text):
    source.write_text(text)
    library, why = c_library.compile_c_library(str(source))
    assert library is not None, why
    library.combine.restype = ctypes.c_long
    return library.combine(6, 7)


def _combine_in_a_new_process(source):
    code = (f"import ctypes; from vaswani_plugin.modules import c_library as c; lib, why = "
            f"c.compile_c_library({str(source)!r}); lib.combine.restype = ctypes.c_long; print(lib.combine(6, 7))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_a_built_library_is_loaded_from_the_cache_and_a_changed_source_builds_anew(tmp_path, counted_cc):
    source = tmp_path / "combine.c"
    assert _combine(source, ADD) == 13 and counted_cc() == 1
    assert _combine(source, ADD) == 13 and counted_cc() == 1  # no compiler run: the kept library
    assert _combine_in_a_new_process(source) == 13 and counted_cc() == 1  # as a second fairseq-generate
    assert _combine(source, MULTIPLY) == 42 and counted_cc() == 2  # the source changed
    kept = sorted(os.listdir(tmp_path / "cache" / "vaswani_plugin"))
    assert len(kept) == 2 and all(name.startswith("combine-") and name.endswith(".so") for name in kept), kept


def test_another_cpu_builds_its_own_library(tmp_path, counted_cc, monkeypatch):
    source = tmp_path / "combine.c"
    assert _combine(source, ADD) == 13 and counted_cc() == 1
    monkeypatch.setattr(c_library, "_cpu", lambda: "vendor_id: OtherVendor\nflags: fpu sse2\n")
    assert _combine(source, ADD) == 13 and counted_cc() == 2  # -march=native: not another CPU's build


def test_a_damaged_cached_library_is_built_again(tmp_path, counted_cc):
    source = tmp_path / "combine.c"
    source.write_text(ADD)
    assert _combine_in_a_new_process(source) == 13 and counted_cc() == 1  # kept, never loaded here
    (kept,) = (tmp_path / "cache" / "vaswani_plugin").iterdir()
    kept.write_bytes(b"not a shared object")  # as a full disk might leave it
    assert _combine(source, ADD) == 13 and counted_cc() == 2
    assert kept.read_bytes()[:4] == b"\x7fELF"


def test_without_a_writable_cache_the_library_is_built_and_nothing_kept(tmp_path, counted_cc, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache's folder cannot be made under a file
    source = tmp_path / "combine.c"
    assert _combine(source, ADD) == 13 and _combine(source, ADD) == 13
    assert counted_cc() == 2 and not (tmp_path / "cache").exists()


def test_a_build_removes_the_same_kernels_libraries_unused_for_thirty_days(tmp_path, counted_cc):
    cache = tmp_path / "cache" / "vaswani_plugin"
    cache.mkdir(parents=True)
    day = 86400
    now = os.path.getmtime(cache)
    files = {"combine-0123456789abcdef0123.so": 31, "combine-fedcba9876543210fedc.so": 29,
             "other-0123456789abcdef0123.so": 400}
    for name, days_unused in files.items():
        (cache / name).write_bytes(b"an earlier build")
        os.utime(cache / name, (now - days_unused * day,) * 2)
    left_by_a_killed_build = cache / "combine-k1ll3d"
    left_by_a_killed_build.mkdir()
    (left_by_a_killed_build / "combine.so").write_bytes(b"half written")
    os.utime(left_by_a_killed_build, (now - 31 * day,) * 2)
    source = tmp_path / "combine.c"
    assert _combine(source, ADD) == 13 and counted_cc() == 1
    left = sorted(path.name for path in cache.iterdir())
    assert "combine-0123456789abcdef0123.so" not in left and "combine-k1ll3d" not in left  # unused 31 days
    assert "combine-fedcba9876543210fedc.so" in left and "other-0123456789abcdef0123.so" in left  # 29; another
    assert len(left) == 3  # and the new build


def test_loading_a_kept_library_marks_it_used(tmp_path, counted_cc):
    source = tmp_path / "combine.c"
    assert _combine(source, ADD) == 13
    (kept,) = (tmp_path / "cache" / "vaswani_plugin").iterdir()
    long_ago = os.path.getmtime(kept) - 100 * 86400
    os.utime(kept, (long_ago, long_ago))
    assert _combine_in_a_new_process(source) == 13 and counted_cc() == 1
    assert os.path.getmtime(kept) > long_ago + 99 * 86400  # a later build of another source keeps it
