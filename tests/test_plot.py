"""vaswani-plot: the attention weights it draws are the model's, its images are real, its curves
read real fairseq-train logs (one tiny run per module, in both of fairseq's log formats)."""
import re
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
from PIL import Image
from torch import nn

from conftest import FakeTask, make_dictionary
from helpers import build_from_cli, eq3, run_tool, write_parallel_splits
from vaswani_plugin.data import spm
from vaswani_plugin.data.synthetic_corpus import generate_pairs
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.plot import figures
from vaswani_plugin.plot.cli import main
from vaswani_plugin.plot.logs import curves, read_log
from vaswani_plugin.plot.sentence import load_model
from vaswani_plugin.plot.weights import attention_modules, attention_weights

TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "16", "--d-ff", "32",
        "--attention-heads", "4", "--share-all-embeddings"]


def reference_weights(module, query, memory, key_padding_mask, causal):
    """The same heads through torch.nn.MultiheadAttention, loaded with the module's projections."""
    d, h = module.embed_dim, module.num_heads
    mha = nn.MultiheadAttention(d, h, batch_first=True)
    with torch.no_grad():
        if hasattr(module, "qkv_proj"):
            mha.in_proj_weight.copy_(module.qkv_proj.weight)
            mha.in_proj_bias.copy_(module.qkv_proj.bias)
        else:
            mha.in_proj_weight.copy_(torch.cat([module.q_proj.weight, module.kv_proj.weight]))
            mha.in_proj_bias.copy_(torch.cat([module.q_proj.bias, module.kv_proj.bias]))
    t, s = query.size(1), memory.size(1)
    future = torch.ones(t, s, dtype=torch.bool).triu(1) if causal else None  # True: may not look
    mha.eval()
    _, weights = mha(query, memory, memory, key_padding_mask=key_padding_mask, attn_mask=future,
                     need_weights=True, average_attn_weights=False)
    return weights  # [B, H, T, S]


def test_weights_are_the_models_per_head_softmax():
    d = make_dictionary(20)
    model = build_from_cli("vaswani_transformer", FakeTask(d), *TINY)
    pad, eos = d.pad(), d.eos()
    # two sentences of different lengths: the source left-padded, the target right-padded (fairseq)
    src = torch.tensor([[pad, pad, 7, 8, 9, eos], [5, 6, 7, 8, 9, eos]])  # [B, S]
    prev = torch.tensor([[eos, 10, 11, pad, pad], [eos, 12, 13, 14, 15]])  # [B, T]
    inputs = {}  # what each attention module received, recorded independently of the code under test

    def record(module, args):
        inputs[module] = args
    modules = attention_modules(model)
    handles = [m.register_forward_pre_hook(record) for ms in modules.values() for m in ms]
    weights = attention_weights(model, src, prev)
    for handle in handles:
        handle.remove()
    assert all(not m._forward_pre_hooks and not m._forward_hooks for ms in modules.values() for m in ms)

    assert {k: len(v) for k, v in weights.items()} == {"encoder": 2, "decoder": 2, "encoder-decoder": 2}
    src_pad = src.eq(pad)
    for kind, causal in (("encoder", False), ("decoder", True), ("encoder-decoder", False)):
        for layer, (module, w) in enumerate(zip(modules[kind], weights[kind])):
            args = inputs[module]
            query = args[0]
            memory = args[1] if kind == "encoder-decoder" else query
            mask = src_pad if kind != "decoder" else None
            expected = reference_weights(module, query, memory, mask, causal)
            assert w.shape == expected.shape == (2, 4, query.size(1), memory.size(1))
            torch.testing.assert_close(w, expected, atol=1e-6, rtol=1e-5, msg=f"{kind} layer {layer}")
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
            if kind != "decoder":
                assert (w[0, :, :, :2] == 0).all()  # the two padded source positions
            else:
                assert (w[..., torch.ones(5, 5, dtype=torch.bool).triu(1)] == 0).all()  # the future


WARMUP = 4
RUN = ["--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer", "--encoder-layers", "1",
       "--decoder-layers", "1", "--d-model", "32", "--d-ff", "64", "--attention-heads", "2",
       "--share-all-embeddings", "--criterion", "label_smoothed_xent", "--optimizer", "adam",
       "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", WARMUP, "--max-tokens", 1000,
       "--log-interval", 1, "--validate-interval-updates", 3, "--num-workers", 0, "--seed", 2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The quickstart's layout in small: WORK/spm.model beside WORK/data-bin; 4 updates logged in
    fairseq's simple format, then 4 more, resumed, in json with BLEU on the valid set."""
    work = tmp_path_factory.mktemp("plot")
    (work / "raw").mkdir()
    pairs = generate_pairs(220, seed=5)
    write_parallel_splits(work / "raw", {"train": pairs[:200], "valid": pairs[200:]})
    spm.train([str(work / "raw" / "train.en"), str(work / "raw" / "train.de")], str(work / "spm"), vocab_size=150,
              threads=1)
    for split in ("train", "valid"):
        for lang in ("en", "de"):
            spm.encode(str(work / "spm.model"), work / "raw" / f"{split}.{lang}", work / f"{split}.sp.{lang}")
    run_tool("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", work / "train.sp",
             "--validpref", work / "valid.sp", "--destdir", work / "data-bin", "--joined-dictionary", "--workers", 1)
    common = [work / "data-bin", *RUN, "--save-dir", work / "ckpt"]
    proc = run_tool("fairseq-train", *common, "--max-update", 4, "--log-format", "simple")
    (work / "simple.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    proc = run_tool("fairseq-train", *common, "--max-update", 8, "--log-format", "json",
                    "--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 5}')
    (work / "json.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return work


def assert_image(path, size):
    """A real image of SIZE pixels, not one flat colour."""
    with Image.open(path) as image:
        assert image.size == size
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 24)) > 20


def test_logs_in_both_formats_are_read_completely(trained):
    simple, json_ = (curves(read_log(trained / name)) for name in ("simple.log", "json.log"))
    for run, updates, valid_updates, name in ((simple, [1, 2, 3, 4], [3, 4], "simple.log"),
                                              (json_, [5, 6, 7, 8], [6, 8], "json.log")):
        text = (trained / name).read_text(encoding="utf-8")
        assert text.count("| train_inner |") == len(updates)  # every record read, none invented
        assert [u for u, _ in run["train"]["loss"]] == updates
        assert [u for u, _ in run["valid"]["loss"]] == valid_updates
        for u, lr in run["train"]["lr"]:
            assert lr == pytest.approx(eq3(u + 1, 32, WARMUP), rel=1e-3)  # fairseq logs the rate set for u + 1
        for split in ("train", "valid"):  # fairseq's ppl is 2 ** nll_loss: the right fields were paired
            for (_, ppl), (_, nll) in zip(run[split]["ppl"], run[split]["nll_loss"]):
                assert ppl == pytest.approx(2 ** nll, rel=2e-3)
    assert [u for u, _ in json_["valid"]["bleu"]] == [6, 8]
    assert all(0 <= b <= 100 for _, b in json_["valid"]["bleu"])


def test_a_checkpoint_saved_after_eval_bleu_loads_weights_only(trained):
    # fairseq keeps --eval-bleu's n-gram counts as numpy arrays in the checkpoint's metrics
    state = torch.load(trained / "ckpt" / "checkpoint_last.pt")  # torch's default, weights_only=True
    meters = {name: meter for _, name, _, meter in state["extra_state"]["metrics"]["valid"]}
    assert meters["_bleu_counts"]["sum"].shape == (4,)
    assert state["extra_state"]["train_iterator"]["epoch"] >= 1


def test_curves_image(trained, tmp_path):
    out = tmp_path / "curves.png"
    main(["curves", str(trained / "simple.log"), str(trained / "json.log"), "--out", str(out), "--size", "640x480"])
    assert_image(out, (640, 480))


def test_attention_draws_the_models_weights(trained, tmp_path, monkeypatch):
    drawn = []
    original = figures.draw_lines
    monkeypatch.setattr(figures, "draw_lines", lambda *args: drawn.append(args) or original(*args))
    out = tmp_path / "encoder.png"
    source = "the small horse laughs ."
    main(["attention", "--path", str(trained / "ckpt" / "checkpoint_last.pt"), "--data", str(trained / "data-bin"),
          "--source", source, "--layer", "0", "--out", str(out), "--size", "700x300"])
    assert_image(out, (700, 300))
    weights, heads, queries, keys, _, _, _ = drawn[0]
    assert heads == [0, 1] and queries == keys and queries[-1] == "</s>"
    # the labels are the source's pieces; put back through the dictionary they give the same weights
    model, task = load_model(str(trained / "ckpt" / "checkpoint_last.pt"), str(trained / "data-bin"))
    assert "".join(queries[:-1]).replace("\u2581", " ").strip() == source
    src = torch.tensor([[task.source_dictionary.index(p) for p in keys]])
    expected = attention_weights(model, src, torch.tensor([[task.target_dictionary.eos()]]))["encoder"][0][0]
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, len(keys)))


@pytest.mark.parametrize("kind,style,out_name", [("encoder-decoder", "heatmap", "cross.png"),
                                                 ("decoder", "lines", "decoder.svg")])
def test_attention_other_kinds_and_styles(trained, tmp_path, kind, style, out_name):
    out = tmp_path / out_name
    main(["attention", "--path", str(trained / "ckpt" / "checkpoint_last.pt"), "--data", str(trained / "data-bin"),
          "--source", "the small horse laughs .", "--target", "das klimme Pralm laucht .", "--kind", kind,
          "--layer", "0", "--heads", "1", "--style", style, "--out", str(out), "--size", "500x400"])
    if out.suffix == ".png":
        assert_image(out, (500, 400))
    else:
        root = ET.parse(out).getroot()
        assert root.tag.endswith("svg") and root.get("width") == "360pt"  # 500 px at 100 dpi, in points


@pytest.mark.parametrize("argv,expected", [
    (["--layer", "3"], "--layer 3: the model has encoder layers 0 to 0"),
    (["--layer", "0", "--heads", "0,2"], "--heads 0,2: the model has heads 0 to 1"),
    (["--layer", "0", "--size", "big"], "--size big: expected WIDTHxHEIGHT in pixels"),
    (["--layer", "0", "--spm-model", "/nonexistent.model"], "--spm-model /nonexistent.model: no such file"),
    (["--layer", "0", "--data", "/nonexistent-dir"], "--data /nonexistent-dir: no dict.*.txt in it"),
])
def test_attention_bad_flags_are_named(trained, tmp_path, argv, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        main(["attention", "--path", str(trained / "ckpt" / "checkpoint_last.pt"), "--data",
              str(trained / "data-bin"), "--source", "the horse .", "--out", str(tmp_path / "a.png"), *argv])


def test_missing_matplotlib_and_bad_logs_stop_with_one_line(trained, tmp_path, monkeypatch):
    not_a_log = tmp_path / "notes.txt"
    not_a_log.write_text("nothing to see\n")
    proc = run_tool("vaswani-plot", "curves", not_a_log, "--out", tmp_path / "c.png", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"vaswani-plot: error: {not_a_log}: no fairseq-train records (train_inner, train or valid lines "
        f"of --log-format json or simple)")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees when it is absent
    with pytest.raises(ConfigError) as error:
        main(["curves", str(trained / "json.log"), "--out", str(tmp_path / "c.png")])
    assert str(error.value) == "matplotlib is not installed; pip install 'vaswani-plugin[plots]'"


def test_a_log_still_being_written_is_read_up_to_its_last_whole_record(trained, tmp_path, capsys):
    lines = (trained / "json.log").read_text(encoding="utf-8").splitlines()
    last = max(i for i, line in enumerate(lines) if "| train_inner |" in line)
    partial = tmp_path / "partial.log"
    partial.write_text("\n".join(lines[:last] + [lines[last][:-20]]), encoding="utf-8")  # cut mid-record
    records = read_log(str(partial))
    assert [r.update for r in records if r.split == "train" and not r.per_epoch] == [5, 6, 7]
    assert f"{partial}:{last + 1}: incomplete last record skipped" in capsys.readouterr().err
    broken = tmp_path / "broken.log"
    broken.write_text("\n".join(lines[:last] + [lines[last][:-20]] + lines[last + 1:]), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{broken}:{last + 1}: a train_inner record that is not valid JSON"):
        read_log(str(broken))
