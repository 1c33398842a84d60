"""Quick-mode runs of the decoding benchmarks (issue 6) on a tiny random model: tables, the identical
hypotheses check and the RESULTS.md entry; not speed."""
import os
import sys

import pytest
import torch
from helpers import ROOT, preprocess_synthetic
from test_convert import trainer_checkpoint

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import attention_micro
import beam_search

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "16", "--d-ff", "32",
        "--attention-heads", "2", "--share-all-embeddings"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench")
    data = preprocess_synthetic(work, {"train": 30, "test": 6})
    trainer_checkpoint("vaswani_transformer", TINY, data, work / "ours.pt")
    return {"data": str(data), "checkpoint": str(work / "ours.pt")}


def quick(tiny, *flags):
    return ["--checkpoint", tiny["checkpoint"], "--data", tiny["data"], "--batch-size", "4", "--repeats", "1",
            "--max-len-b", "8", *flags]


def test_beam_search_table_and_results_entry(tiny, tmp_path, monkeypatch, capsys):
    results = tmp_path / "RESULTS.md"
    monkeypatch.setenv("RESULTS_MD", str(results))
    beam_search.main(quick(tiny, "--bf16", "--profile"))
    out = capsys.readouterr().out
    assert "Where our fp32 beam search spends its time" in out and "aten::" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "test" in line and "model" not in line]
    assert len(rows) == 6  # fp32 and bf16: ours (lean search), ours through fairseq's generator, fairseq's
    fp32 = [row.split(" | ") for row in rows[:3]]
    assert [r[1] for r in fp32] == ["vaswani_transformer", beam_search.OURS_FAIRSEQ_SEARCH, "fairseq transformer"]
    assert all(r[8] == "6/6" for r in fp32) and fp32[0][9].startswith("**") and fp32[2][9] == "1.00x"
    entry = results.read_text()
    assert "Where our fp32 decoding time goes" in entry and "aten::" in entry
    assert "## Beam search" in entry and f"torch {torch.__version__}" in entry and "- commit: `" in entry


def test_beam_search_refuses_a_speed_ratio_when_hypotheses_differ(tiny, monkeypatch):
    load_pair = beam_search.load_pair

    def perturbed(*args):
        task, ours, theirs = load_pair(*args)
        with torch.no_grad():
            theirs.decoder.embed_tokens.weight.mul_(-1.0)  # another function: other hypotheses
        return task, ours, theirs

    monkeypatch.setattr(beam_search, "load_pair", perturbed)
    table, results, _ = beam_search.run(beam_search.parse_args(quick(tiny, "--no-append")))
    assert not results[0]["identical"]
    assert "n/a (" in table.splitlines()[2] and "hypotheses differ" in table.splitlines()[2]


def test_attention_micro_compares_same_weight_modules(capsys):
    attention_micro.main(["--lengths", "4", "8", "--batch", "2", "--d-model", "16", "--heads", "2",
                          "--repeats", "1", "--no-append"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "x**" in line]
    assert [r.split(" | ")[0:2] for r in rows] == [["| training fwd+bwd", "4"], ["| training fwd+bwd", "8"],
                                                   ["| incremental step", "4"], ["| incremental step", "8"]]


def test_linear_micro_checks_each_product_and_tables_each_row_count(capsys):
    import linear_micro

    from vaswani_plugin.modules import few_rows_linear

    linear_micro.main(["--rows", "1", "9", "--d-model", "16", "--d-ff", "32", "--layers", "1", "--vocab", "40",
                       "--repeats", "1", "--no-append"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in lines[1:]] == ["| 1", "| 9"]
    assert lines[0].startswith("| rows | read only (w.sum()), ms | MKL (F.linear), ms")
    assert ("| kernel, ms" in lines[0]) == few_rows_linear.kernel_available()


def test_ctranslate2_anchor_decodes_the_same_sentences(tiny, capsys):
    pytest.importorskip("ctranslate2")
    import ctranslate2_anchor

    ctranslate2_anchor.main(quick(tiny, "--no-append"))
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "fp32" in line]
    assert [r[1] for r in rows] == ["vaswani_transformer", f"CTranslate2 {__import__('ctranslate2').__version__}"]
    assert rows[0][3] == "6" and rows[0][7].endswith("/6")
