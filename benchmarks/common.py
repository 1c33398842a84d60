"""Shared helpers for the benchmark scripts: where a run happened, and appending its table to
benchmarks/RESULTS.md.

    from common import machine_header, append_results   # run from benchmarks/ or with it on sys.path
    append_results("Training step (CPU)", table_markdown)
"""
import datetime
import os
import platform
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")


def cpu_info() -> dict:
    """The first processor's fields of /proc/cpuinfo ("vendor_id", "cpu family", "model", "flags", ...);
    empty where there is no /proc/cpuinfo."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends at the first blank line
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _yes_no(present: bool) -> str:
    return "yes" if present else "no"


def _cpu_line(cpu: dict) -> str:
    """Vendor, family/model numbers and the bf16 matrix extensions: which kernels MKL and oneDNN pick."""
    flags = set(cpu.get("flags", "").split())  # x86 only: ARM's /proc/cpuinfo has none of these fields
    return (f"{cpu.get('vendor_id', 'vendor unknown')}, family {cpu.get('cpu family', '?')}, "
            f"model {cpu.get('model', '?')}; "
            f"AVX-512 bf16 {_yes_no('avx512_bf16' in flags)}, AMX bf16 {_yes_no('amx_bf16' in flags)}")


def _blas_line() -> str:
    """torch's BLAS (BLAS_INFO of its build) and whether MKL and oneDNN are there, with oneDNN's version."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    onednn = re.search(r"MKL-DNN (v[\d.]+)", config)
    return (f"BLAS_INFO={blas.group(1) if blas else 'unknown'}, MKL {_yes_no(torch.backends.mkl.is_available())}, "
            f"oneDNN {_yes_no(torch.backends.mkldnn.is_available())}" + (f" {onednn.group(1)}" if onednn else ""))


def git_commit() -> str:
    """Short commit hash, with '-dirty' when the tree has uncommitted changes other than RESULTS.md
    ('unknown' outside git)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # RESULTS.md itself does not count: a series of benchmarks appends to it between its runs
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/RESULTS.md")
        return commit + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_header(device: str = "cpu") -> str:
    """Markdown bullet lines: date, machine (CPU model, cores, threads; GPU name on cuda), the CPU's
    vendor, family/model numbers and bf16 extensions, torch's BLAS/oneDNN, versions, commit."""
    import torch

    try:
        import fairseq
        fairseq_version = fairseq.__version__
    except ImportError:
        fairseq_version = "not installed"
    cpu = cpu_info()
    model = cpu.get("model name") or platform.processor() or platform.machine()
    machine = f"{model}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"
    if device == "cuda" and torch.cuda.is_available():
        machine += f"; GPU {torch.cuda.get_device_name()}"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        f"- date: {now}",
        f"- machine: {machine}",
        f"- cpu: {_cpu_line(cpu)}",
        f"- torch BLAS: {_blas_line()}",
        f"- torch {torch.__version__}, fairseq {fairseq_version}, python {platform.python_version()}",
        f"- commit: `{git_commit()}`",
    ])


def markdown_table(header, rows) -> str:
    """A markdown table from a header row and data rows (cells are str()-ed)."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def append_results(title: str, table_markdown: str, device: str = "cpu", notes: str = "",
                   path: str = RESULTS) -> str:
    """Append `## title`, the machine header, optional notes and the table to RESULTS.md, say where on
    stderr, and return the appended text (RESULTS_MD in the environment redirects it, e.g. to $OUT on a
    lent GPU)."""
    path = os.environ.get("RESULTS_MD", path)
    text = f"\n## {title}\n\n{machine_header(device)}\n\n"
    if notes:
        text += notes.rstrip() + "\n\n"
    text += table_markdown.rstrip() + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    print(f"appended to {path}", file=sys.stderr)
    return text
