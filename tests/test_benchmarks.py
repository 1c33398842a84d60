"""benchmarks/: the training-step benchmark's smoke mode prints its table, its FLOP formula matches
torch's own FLOP counter, and results are appended with the machine header. Speed is not asserted."""
import os
import subprocess
import sys

import torch
from helpers import ROOT
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import common
import train_step

from vaswani_plugin.modules import onednn_linear


def test_quick_run_prints_one_row_per_model():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "train_step.py"), "--quick"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(lines) == 4  # header, separator, ours, fairseq
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert all(len(row) == len(rows[0]) == 8 for row in rows)  # CPU: with tokens per CPU-second
    assert [rows[2][0], rows[3][0]] == ["ours", "fairseq"]
    assert rows[3][3] == rows[3][5] == rows[3][7] == "1.00x"
    assert rows[2][1] == rows[3][1]  # same parameter count: same shape on both sides
    assert float(rows[2][2].replace(",", "")) > 0


def test_flop_formula_matches_torch_flop_counter_on_a_forward(monkeypatch):
    args = train_step.parse_args(["--quick", "--child", "--model", "ours"])
    _, model, dictionary = train_step.build(args)
    sample, _ = train_step.batch(args, dictionary, seed=0)
    model.eval()
    # The counter sees aten matmuls only: linear layers take F.linear instead of oneDNN's primitive,
    # and the math backend spells attention as matmuls (CPU flash kernels it does not see either).
    monkeypatch.setattr(onednn_linear, "_AVAILABLE", False)
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(**sample["net_input"])
    assert counter.get_total_flops() == train_step.train_flops(args, sample) / 3


def test_append_results_writes_header_notes_and_table(tmp_path, monkeypatch):
    path = tmp_path / "RESULTS.md"
    monkeypatch.setenv("RESULTS_MD", str(path))
    table = common.markdown_table(["a", "b"], [[1, 2]])
    common.append_results("Title", table, notes="a note")
    text = path.read_text()
    assert text.startswith("\n## Title\n")
    for key in ("- date: ", "- machine: ", f"- torch {torch.__version__}", "- commit: `", "a note", "| 1 | 2 |"):
        assert key in text
