"""benchmarks/: the training-step benchmark's smoke mode prints its table, its FLOP formula matches
torch's own FLOP counter, and results are appended with the machine header. Speed is not asserted."""
import json
import os
import re
import statistics
import subprocess
import sys

import pytest
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
    assert all(len(row) == len(rows[0]) == 10 for row in rows)  # CPU: with tokens per CPU-second
    assert [rows[2][0], rows[3][0]] == ["ours", "fairseq"]
    assert rows[3][3] == rows[3][5] == rows[3][7] == "1.00x"
    assert rows[2][1] == rows[3][1]  # same parameter count: same shape on both sides
    assert float(rows[2][2].replace(",", "")) > 0
    assert rows[2][8] == rows[3][8] and float(rows[2][8].replace(",", "")) > 0  # one GEMM rate for both
    assert all(float(row[9].rstrip("%")) > 0 for row in rows[2:])


def table_rows(stdout):
    """The data rows of the markdown table a benchmark printed, as lists of cells."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_cli_quick_run_reports_fairseq_trains_own_wps_and_peak_rss(tmp_path):
    """--quick --cli: both models trained by fairseq-train (1 warm-up + 2 updates); the table's wps is
    the median of the timed updates' train_inner lines and its peak RSS GNU time's, both read here from
    the kept logs; both runs have the parameter count of the in-process models (same vocabulary)."""
    logs = tmp_path / "logs"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "train_step.py"), "--quick", "--cli",
                           "--cli-logs", str(logs)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = table_rows(proc.stdout)
    assert [row[0] for row in rows] == ["ours", "fairseq"]
    for row in rows:
        model, wps, peak_mb = row[0], float(row[2].replace(",", "")), float(row[5].replace(",", ""))
        log = (logs / f"{model}-0.log").read_text(encoding="utf-8")
        entries = [json.loads(line.split(" | train_inner | ")[1]) for line in log.splitlines()
                   if " | train_inner | " in line]
        updates = {int(entry["num_updates"]): float(entry["wps"]) for entry in entries}
        assert sorted(updates) == [1, 2, 3]  # --max-update = warm-up + steps
        assert wps > 0 and abs(wps - statistics.median([updates[2], updates[3]])) <= 0.5
        kbytes = re.search(r"Maximum resident set size \(kbytes\): (\d+)", (logs / f"{model}-0.time").read_text())
        assert peak_mb > 0 and abs(peak_mb - int(kbytes.group(1)) / 1024) <= 0.5
        args = train_step.parse_args(["--quick", "--child", "--model", model])
        params = sum(p.numel() for p in train_step.build(args)[1].parameters())
        assert f"num. shared model params: {params:,} " in log
    assert rows[1][3] == rows[1][6] == "1.00x" and rows[0][7] == rows[1][7]


def test_failing_fairseq_train_ends_with_one_error_line_not_a_traceback():
    """A flag fairseq-train refuses, injected into both runs: the benchmark stops at the first (ours)
    with one line naming it and the tail of fairseq-train's stderr."""
    script = (f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r}); import train_cli, train_step; "
              "train_cli.COMMON_FLAGS.append('--no-such-flag'); train_step.main(['--quick', '--cli'])")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error = proc.stderr[proc.stderr.index("train_step.py: error: "):].rstrip().splitlines()
    assert error[0] == "train_step.py: error: fairseq-train for ours failed (2):"
    assert error[-1].endswith("error: unrecognized arguments: --no-such-flag")
    assert "|" not in proc.stdout  # no table


def test_gemm_rate_is_all_flops_over_all_time_and_the_share_divides_by_it():
    # 2 products of 1 GFLOP in 0.5 s each and 1 of 6 GFLOP in 1.5 s: 8 GFLOP in 2.5 s = 3.2 GFLOP/s (the
    # mean of the rows' rates would be 3, the count-weighted mean 2.67).
    rate = train_step.gemm_rate([(2, 1e9, 0.5), (1, 6e9, 1.5)])
    assert abs(rate - 3.2e9) < 1
    # a step of 8 GFLOP in 5 s runs at 1.6 GFLOP/s: half the GEMM rate
    assert train_step.gemm_columns(8e9 / 5, rate) == ["3.2", "50%"]


@pytest.mark.parametrize("transposed", [(False, False), (False, True), (True, False)])
def test_every_product_the_gemm_rate_times_computes_a_times_w(transposed):
    """Each library's product is the one the step runs (F.linear's forward and both backward
    products: operands as views of transposed tensors), against float64 matmul."""
    a = train_step._operand(1, 24, 16, transposed[0], "cpu", torch.float32)  # [24, 16]
    w = train_step._operand(1, 16, 40, transposed[1], "cpu", torch.float32)  # [16, 40]
    products = train_step.gemm_products(a, w)
    assert "torch" in products and ("oneDNN" in products) == torch.backends.mkldnn.is_available()
    for product in products.values():
        torch.testing.assert_close(product().double(), a.double() @ w.double(), rtol=1e-5, atol=1e-5)
    batched = train_step.gemm_products(torch.randn(3, 4, 5), torch.randn(3, 5, 6))
    assert list(batched) == ["torch"]  # attention's batched products: torch.bmm alone


def test_step_products_are_the_flop_formula_term_by_term():
    """The products the GEMM timing runs add up to the training FLOPs of the formula, uneven lengths
    included (cross-attention is [tgt x src]), for the tiny shape and the base one."""
    for shape in ("tiny", "base"):
        args = train_step.parse_args([f"--shape={shape}", "--vocab=1000"])
        products = train_step.step_products(args, 5, 7, 11)
        total = sum(count * 2 * batch * n * k * m for count, batch, n, k, m, _, _ in products)
        assert total == train_step.step_flops(args, 5, 7, 11)


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


def test_machine_header_names_the_cpu_vendor_family_model_and_blas():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        first_cpu = f.read().split("\n\n")[0]
    fields = dict(re.findall(r"^(vendor_id|cpu family|model|flags)\s*:\s*(.*)$", first_cpu, re.MULTILINE))
    header = common.machine_header()
    assert f"{fields['vendor_id']}, family {fields['cpu family']}, model {fields['model']};" in header
    amx = "amx_bf16" in fields["flags"].split()
    assert f"AMX bf16 {'yes' if amx else 'no'}" in header
    assert f"MKL {'yes' if torch.backends.mkl.is_available() else 'no'}, " in header
    assert f"oneDNN {'yes' if torch.backends.mkldnn.is_available() else 'no'}" in header


def test_parsing_benchmark_runs_on_a_small_treebank_and_scores_test_files(tmp_path):
    """benchmarks/ptb_sample_parsing.sh end to end on synthetic wsj_*.mrg files: the dev table, the
    TEST_FILES line and trees, and the block appended to RESULTS."""
    from vaswani_plugin.parsing.synthetic_treebank import write_treebank
    from vaswani_plugin.parsing.trees import read_treebank

    trees = write_treebank(str(tmp_path / "tb"), train=120, valid=12, test=9, seed=2)
    ptb = tmp_path / "ptb"
    ptb.mkdir()
    for name, split in (("wsj_0001.mrg", "train"), ("wsj_0160.mrg", "valid"), ("wsj_0190.mrg", "test")):
        os.link(trees[split], ptb / name)  # wsj_0190 is neither train nor dev: only TEST_FILES reads it
    work, results = tmp_path / "work", tmp_path / "RESULTS.md"
    env = dict(os.environ, PTB=str(ptb), WORK_DIR=str(work), RESULTS=str(results), TEST_FILES=str(ptb / "wsj_0190.mrg"),
               TRAIN_HOURS="0.002", THREADS="1", BEAM="2", LAYERS="1", D_MODEL="32", D_FF="64", HEADS="2",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "ptb_sample_parsing.sh")], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--arch vaswani_pointer_parser" in proc.stdout  # the recommended configuration is the default
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| plain", "| constrained"))]
    assert len(rows) == 2 and "| 0/12 (0.00%; none) |" in rows[1]  # constrained: never malformed
    test_line = [line for line in proc.stdout.splitlines() if line.startswith("test: F1 = ")]
    assert len(test_line) == 1 and test_line[0].endswith("| malformed 0/9")
    predicted, gold = read_treebank(str(work / "test.trees")), read_treebank(str(work / "data/gold/test.trees"))
    assert [t.words() for t in predicted] == [t.words() for t in gold] == [t.words() for t in read_treebank(trees["test"])]
    appended = results.read_text(encoding="utf-8")
    assert "## Parsing on the PTB sample: --arch vaswani_pointer_parser" in appended and test_line[0] in appended


def test_git_commit_is_dirty_for_changed_code_but_not_for_appended_results(tmp_path, monkeypatch):
    """A series of benchmarks appends to RESULTS.md between its runs: that alone must not mark the
    later runs' commit dirty; a changed source file must."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("# results\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(common, "ROOT", str(tmp_path))
    clean = common.git_commit()
    assert not clean.endswith("-dirty") and clean != "unknown"
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("# results\nappended\n")
    assert common.git_commit() == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert common.git_commit() == clean + "-dirty"
