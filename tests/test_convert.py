"""`vaswani-convert` (issue 3): fairseq's transformer <-> vaswani_transformer, with exact parity.

Randomly initialised fairseq transformers of several shapes are built through fairseq's registry from
command-line flags, saved by fairseq's own Trainer, converted, and loaded back through fairseq's
checkpoint_utils; both models must then give the same logits and gradients, the same beam search
hypotheses, scores and alignments, and the round trip must restore every tensor bit for bit.
"""
import argparse
import copy
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils, tasks
from fairseq.dataclass.configs import GenerationConfig
from fairseq.models import build_model
from fairseq.trainer import Trainer

from conftest import FakeTask, make_dictionary
from helpers import build_from_cli, cli_config
from vaswani_plugin import convert
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel
from vaswani_plugin.modules import sinusoid_table

SMALL = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
         "--decoder-ffn-embed-dim", "48"]
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]


def shape(arch, heads, enc, dec, *flags):
    return arch, [*SMALL, "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads),
                  "--encoder-layers", str(enc), "--decoder-layers", str(dec), *flags]


SHAPES = {
    # id: (arch, flags); "--share-all-embeddings" needs the joined dictionary
    "transformer-post_ln-share_all-h4": shape("transformer", 4, 2, 2, "--share-all-embeddings"),
    "wmt_en_de-post_ln-untied-h2": shape("transformer_wmt_en_de", 2, 2, 1),
    "iwslt_de_en-post_ln-untied-h8": shape("transformer_iwslt_de_en", 8, 1, 2),
    "vaswani_big-post_ln-target_tied-h4": shape("transformer_vaswani_wmt_en_de_big", 4, 1, 1,
                                                "--share-decoder-input-output-embed"),
    "vaswani_en_fr_big-pre_ln-untied-h2": shape("transformer_vaswani_wmt_en_fr_big", 2, 1, 1, *PRE_LN),
    "big_t2t-pre_ln-share_all-h8": shape("transformer_wmt_en_de_big_t2t", 8, 2, 2, "--share-all-embeddings"),
}
OURS = {
    "paper-post_ln-share_all": ["--share-all-embeddings"],
    "paper-pre_ln-untied": ["--normalize-before", "--untie-output-projection", "--attention-heads", "2"],
}


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    """Dictionaries only (all a translation task reads at setup): joined, and separate ones."""
    dirs = {}
    for name, sizes in (("joined", (40, 40)), ("separate", (40, 50))):
        d = tmp_path_factory.mktemp(name)
        for lang, size in zip(("en", "de"), sizes):
            make_dictionary(size).save(str(d / f"dict.{lang}.txt"))
        dirs[name] = d
    return dirs


def trainer_checkpoint(arch, flags, data_dir, path):
    """A checkpoint as fairseq-train writes it (cfg, model, optimizer state, ...); returns the task."""
    cfg = cli_config(arch, *flags, "--source-lang", "en", "--target-lang", "de", "--optimizer", "adam",
                     "--lr", "0.001", "--criterion", "cross_entropy", "--cpu")
    cfg.task.data = str(data_dir)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(str(path), {})
    return task


def load(path, task):
    [model], _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
    return model.eval()


def joined(flags):
    return "--share-all-embeddings" in flags


@pytest.fixture(scope="module", params=sorted(SHAPES))
def converted(request, data_dirs, tmp_path_factory):
    arch, flags = SHAPES[request.param]
    work = tmp_path_factory.mktemp("convert")
    task = trainer_checkpoint(arch, flags, data_dirs["joined" if joined(flags) else "separate"],
                              work / "fairseq.pt")
    convert.main(["--from-fairseq", str(work / "fairseq.pt"), str(work / "ours.pt")])
    return {"id": request.param, "task": task, "fairseq": work / "fairseq.pt", "ours": work / "ours.pt",
            "work": work}


def batch(task, seed=0):
    """Left-padded sources, right-padded targets, as fairseq's translation task batches them."""
    g = torch.Generator().manual_seed(seed)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    pad, eos = src_dict.pad(), src_dict.eos()
    src_lens, tgt_lens = [7, 5, 3, 6], [6, 8, 2, 5]
    src = torch.full((4, max(src_lens)), pad)
    target = torch.full((4, max(tgt_lens)), pad)
    prev = torch.full((4, max(tgt_lens)), pad)
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        src[i, -s:-1] = torch.randint(4, len(src_dict), (s - 1,), generator=g)
        src[i, -1] = eos
        words = torch.randint(4, len(tgt_dict), (t - 1,), generator=g)
        target[i, :t] = torch.cat([words, torch.tensor([eos])])
        prev[i, :t] = torch.cat([torch.tensor([eos]), words])
    return src, torch.tensor(src_lens), prev, target


def logits_loss_grads(model, src, src_lens, prev, target, pad):
    model.zero_grad()
    logits, _ = model(src, src_lens, prev)
    lprobs = F.log_softmax(logits.float(), dim=-1)
    loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), ignore_index=pad, reduction="sum")
    loss.backward()
    grads = {k: v.grad for k, v in model.state_dict(keep_vars=True).items() if isinstance(v, torch.nn.Parameter)}
    return logits.detach(), loss.detach(), grads


def assert_same_function(theirs, ours, task, m):
    """Same logits (fp32, real target positions), same loss, same gradients (mapped to our names)."""
    src, src_lens, prev, target = batch(task)
    pad = task.target_dictionary.pad()
    a, loss_a, grads_a = logits_loss_grads(theirs, src, src_lens, prev, target, pad)
    b, loss_b, grads_b = logits_loss_grads(ours, src, src_lens, prev, target, pad)
    real = target.ne(pad)
    diff = (a - b).abs()[real].max().item()
    print(f"max |logit diff| = {diff:.2e}")
    assert diff <= 1e-5
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-6, atol=1e-5)
    mapped = convert.vaswani_state_dict_from_fairseq(grads_a, m)
    assert set(mapped) == set(grads_b)
    worst = max((mapped[k] - grads_b[k]).abs().max().item() for k in grads_b)
    print(f"max |grad diff| = {worst:.2e}")
    for name in grads_b:
        torch.testing.assert_close(mapped[name], grads_b[name], rtol=1e-4, atol=1e-5, msg=name)


def generate(path, task, print_alignment):
    """What fairseq-generate does: load, prepare_for_inference_, the task's generator, inference_step."""
    model = load(path, task)
    gen = GenerationConfig(beam=4, lenpen=0.6, max_len_a=0, max_len_b=10, print_alignment=print_alignment)
    model.prepare_for_inference_(argparse.Namespace(generation=gen))
    generator = task.build_generator([model], gen)
    src, src_lens, _, _ = batch(task, seed=1)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_lens}}
    # fairseq-generate's choice: the lean beam search for ours (issue 15), fairseq's generator for
    # fairseq's model and for --print-alignment
    expected = "SequenceGeneratorWithAlignment" if print_alignment else (
        "VaswaniBeamSearch" if type(model).__name__ == "VaswaniTransformerModel" else "SequenceGenerator")
    assert type(generator).__name__ == expected
    return task.inference_step(generator, [model], sample)


def assert_same_generation(path_a, path_b, task):
    for print_alignment in (None, "hard"):
        hyps_a = generate(path_a, task, print_alignment)
        hyps_b = generate(path_b, task, print_alignment)
        for sent_a, sent_b in zip(hyps_a, hyps_b):
            assert len(sent_a) == len(sent_b) == 4
            for h_a, h_b in zip(sent_a, sent_b):
                assert torch.equal(h_a["tokens"], h_b["tokens"])
                torch.testing.assert_close(h_a["score"], h_b["score"], rtol=0, atol=1e-5)
                torch.testing.assert_close(h_a["positional_scores"], h_b["positional_scores"], rtol=0, atol=1e-5)
                if print_alignment:  # (source word, target word) pairs, and the attention they come from
                    assert len(h_a["alignment"]) > 0 and h_a["alignment"] == h_b["alignment"]
                    torch.testing.assert_close(h_a["attention"], h_b["attention"], rtol=0, atol=1e-5)


def test_converted_checkpoint_is_a_vaswani_transformer(converted):
    state = torch.load(converted["ours"])  # weights-only loading
    m = state["cfg"]["model"]
    assert m["_name"] == "vaswani_transformer" and m["positional_layout"] == "fairseq"
    assert "last_optimizer_state" not in state and state["args"] is None
    assert state["cfg"]["task"] == torch.load(converted["fairseq"])["cfg"]["task"]
    model = load(converted["ours"], converted["task"])
    assert isinstance(model, VaswaniTransformerModel)
    assert model.decoder.final_norm is not None if "pre_ln" in converted["id"] else model.decoder.final_norm is None
    tied = model.encoder.embedding.embed_tokens.weight is model.decoder.embedding.embed_tokens.weight
    assert tied == ("share_all" in converted["id"])
    assert (model.decoder.output_projection is None) == ("untied" not in converted["id"])


def test_same_logits_and_gradients(converted):
    m = torch.load(converted["ours"])["cfg"]["model"]
    task = converted["task"]
    assert_same_function(load(converted["fairseq"], task), load(converted["ours"], task), task, m)


def test_same_beam_search_hypotheses_scores_and_alignments(converted):
    assert_same_generation(converted["fairseq"], converted["ours"], converted["task"])


def test_round_trip_restores_every_tensor_bit_for_bit(converted):
    back = converted["work"] / "back.pt"
    convert.main(["--to-fairseq", str(converted["ours"]), str(back)])
    original, restored = torch.load(converted["fairseq"]), torch.load(back)
    assert list(restored["model"]) == list(original["model"])
    for name, value in original["model"].items():
        assert restored["model"][name].dtype == value.dtype and torch.equal(restored["model"][name], value), name
    a, b = original["cfg"]["model"], restored["cfg"]["model"]
    for option in ("encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim",
                   "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                   "encoder_normalize_before", "decoder_normalize_before", "share_all_embeddings",
                   "share_decoder_input_output_embed", "encoder_learned_pos", "activation_fn", "dropout",
                   "attention_dropout", "activation_dropout", "max_source_positions", "max_target_positions"):
        assert getattr(b, option) == getattr(a, option), option
    assert b.task == "translation" and b.source_lang == "en"  # tools rebuild the task from cfg.model


@pytest.mark.parametrize("name", sorted(OURS))
def test_our_models_export_to_fairseq_and_back(name, data_dirs, tmp_path):
    """Native models, paper positions: fairseq gets them as learned positions holding our exact table."""
    flags = ["--encoder-layers", "2", "--decoder-layers", "1", "--d-model", "32", "--d-ff", "48", *OURS[name]]
    task = trainer_checkpoint("vaswani_transformer", flags, data_dirs["joined" if joined(flags) else "separate"],
                              tmp_path / "ours.pt")
    convert.main(["--to-fairseq", str(tmp_path / "ours.pt"), str(tmp_path / "fairseq.pt")])
    convert.main(["--from-fairseq", str(tmp_path / "fairseq.pt"), str(tmp_path / "again.pt")])
    exported = torch.load(tmp_path / "fairseq.pt")
    assert exported["cfg"]["model"].encoder_learned_pos and exported["cfg"]["model"].arch == "transformer"
    m = torch.load(tmp_path / "ours.pt")["cfg"]["model"]
    assert_same_function(load(tmp_path / "fairseq.pt", task), load(tmp_path / "ours.pt", task), task, m)
    assert_same_generation(tmp_path / "fairseq.pt", tmp_path / "ours.pt", task)
    a, b = torch.load(tmp_path / "ours.pt")["model"], torch.load(tmp_path / "again.pt")["model"]
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.load(tmp_path / "again.pt")["cfg"]["model"]["positional_layout"] == "paper"

    # As CTranslate2's fairseq converter reads a checkpoint: cfg.model alone rebuilds task and model.
    exported = torch.load(tmp_path / "fairseq.pt")
    args = exported["args"] or exported["cfg"]["model"]
    args.data = str(data_dirs["joined" if joined(flags) else "separate"])
    model = build_model(args, tasks.setup_task(args))
    model.load_state_dict(exported["model"])  # strict
    positions = model.encoder.embed_positions.weight[model.encoder.embed_positions.padding_idx + 1:]
    assert torch.equal(positions, sinusoid_table(1024, 32, "paper"))


def test_untie_output_projection_is_a_separate_bias_free_linear():
    d = make_dictionary(30)
    model = build_from_cli("vaswani_transformer", FakeTask(d, make_dictionary(35)), "--encoder-layers", "1",
                           "--decoder-layers", "1", "--d-model", "16", "--d-ff", "32", "--attention-heads", "2",
                           "--untie-output-projection").eval()
    proj = model.decoder.output_projection
    assert proj.bias is None and proj.weight.shape == (39, 16)
    assert proj.weight is not model.decoder.embedding.embed_tokens.weight
    src, prev = torch.tensor([[5, 6, 2]]), torch.tensor([[2, 7, 8]])
    logits, _ = model(src, None, prev)
    features, _ = model.decoder.extract_features(prev, model.encoder(src))
    torch.testing.assert_close(logits, features @ proj.weight.t())
    logits.sum().backward()
    assert proj.weight.grad is not None and proj.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="--untie-output-projection contradicts --share-all-embeddings"):
        build_from_cli("vaswani_transformer", FakeTask(d), "--share-all-embeddings", "--untie-output-projection")


def fairseq_state(arch="transformer", *flags):
    """A minimal in-memory checkpoint of a fairseq model built from flags (for the refusals)."""
    cfg = cli_config(arch, *SMALL, "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
                     "--encoder-layers", "1", "--decoder-layers", "1", *flags)
    model = build_model(cfg.model, FakeTask(make_dictionary(30)))
    return {"args": None, "cfg": {"model": cfg.model, "task": {"_name": "translation"}}, "model": model.state_dict()}


@pytest.mark.parametrize("flags,message", [
    (["--encoder-learned-pos", "--decoder-learned-pos"], "--encoder-learned-pos (learned positional embeddings)"),
    (["--encoder-learned-pos"], "--encoder-learned-pos = True and --decoder-learned-pos = False differ"),
    (["--encoder-layerdrop", "0.1"], "--encoder-layerdrop = 0.1 (LayerDrop)"),
    (["--adaptive-softmax-cutoff", "10"], "--adaptive-softmax-cutoff = [10] (adaptive softmax)"),
    (["--activation-fn", "gelu"], "--activation-fn = 'gelu'"),
    (["--no-scale-embedding"], "--no-scale-embedding = True"),
    (["--layernorm-embedding"], "--layernorm-embedding = True"),
    (["--decoder-embed-dim", "48"], "--encoder-embed-dim = 32 and --decoder-embed-dim = 48 differ"),
    (["--decoder-output-dim", "48"], "--decoder-output-dim = 48 differ"),
    (["--decoder-ffn-embed-dim", "64"], "--encoder-ffn-embed-dim = 48 and --decoder-ffn-embed-dim = 64 differ"),
    (["--decoder-attention-heads", "2"], "--encoder-attention-heads = 4 and --decoder-attention-heads = 2 differ"),
    (["--encoder-normalize-before"], "--encoder-normalize-before = True and --decoder-normalize-before = False"),
    ([*PRE_LN, "--no-decoder-final-norm"], "--no-decoder-final-norm"),
    (["--cross-self-attention"], "--cross-self-attention = True (cross+self-attention)"),
    (["--quant-noise-pq", "0.1"], "--quant-noise-pq = 0.1 (quantization noise)"),
    (["--no-token-positional-embeddings"], "--no-token-positional-embeddings = True"),
])
def test_inexpressible_options_are_refused_by_name(flags, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        convert.fairseq_to_vaswani(fairseq_state("transformer", *flags), "in.pt")
    assert str(info.value).startswith("in.pt: ") and "\n" not in str(info.value)


def test_other_architectures_and_directions_are_refused():
    state = fairseq_state()
    lstm = dict(state, cfg=dict(state["cfg"], model=argparse.Namespace(**dict(vars(state["cfg"]["model"]),
                                                                                arch="lstm", _name="lstm"))))
    with pytest.raises(ConfigError, match=r"in.pt: architecture 'lstm' \(model 'lstm'\) is not fairseq's "
                                          r"transformer; expected one of: .*transformer_iwslt_de_en"):
        convert.fairseq_to_vaswani(lstm, "in.pt")
    with pytest.raises(ConfigError, match="use --from-fairseq"):
        convert.vaswani_to_fairseq(state, "in.pt")
    ours = convert.fairseq_to_vaswani(state, "in.pt")
    with pytest.raises(ConfigError, match="already ours; --to-fairseq goes the other way"):
        convert.fairseq_to_vaswani(ours, "in.pt")
    state["model"]["decoder.layers.0.extra.weight"] = torch.zeros(1)
    with pytest.raises(ConfigError, match="tensor decoder.layers.0.extra.weight has no counterpart"):
        convert.fairseq_to_vaswani(state, "in.pt")


def legacy_variants(state):
    """The same checkpoint as older fairseq versions wrote it."""
    args_only = {"args": copy.deepcopy(state["cfg"]["model"]), "cfg": None, "model": state["model"]}
    as_dict = dict(state, cfg=dict(state["cfg"], model=dict(vars(state["cfg"]["model"]))))
    sd, old = state["model"], {}
    for name, value in sd.items():
        if re.search(r"attn\.[kv]_proj\.", name):
            continue  # packed with q below
        m = re.fullmatch(r"(.*)\.q_proj\.(weight|bias)", name)
        if m:
            old[f"{m[1]}.in_proj_{m[2]}"] = torch.cat([sd[f"{m[1]}.{p}_proj.{m[2]}"] for p in "qkv"])
            continue
        norms = (["self_attn_layer_norm", "final_layer_norm"] if name.startswith("encoder.") else
                 ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"])
        for j, norm in enumerate(norms):
            name = name.replace(f".{norm}.", f".layer_norms.{j}.")
        old[name.replace("decoder.output_projection.weight", "decoder.embed_out")] = value
    assert any("in_proj_weight" in n for n in old) and any("layer_norms.2" in n for n in old)
    return {"args_only": args_only, "dict_cfg": as_dict, "old_names": dict(state, model=old)}


def test_legacy_checkpoint_formats_convert_to_the_same_model():
    state = fairseq_state("transformer_iwslt_de_en")  # untied: exercises decoder.embed_out
    expected = convert.fairseq_to_vaswani(state, "in.pt")
    for name, variant in legacy_variants(state).items():
        out = convert.fairseq_to_vaswani(variant, "in.pt")
        assert out["cfg"]["model"] == expected["cfg"]["model"], name
        assert list(out["model"]) == list(expected["model"]), name
        assert all(torch.equal(out["model"][k], v) for k, v in expected["model"].items()), name


def test_bad_inputs_stop_with_one_line_and_write_nothing(tmp_path, data_dirs):
    good = tmp_path / "good.pt"
    trainer_checkpoint(*SHAPES["wmt_en_de-post_ln-untied-h2"], data_dirs["separate"], good)
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    (tmp_path / "truncated.pt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    torch.save(fairseq_state("transformer", "--activation-fn", "gelu"), tmp_path / "gelu.pt")
    out = tmp_path / "out.pt"
    out.write_text("an older OUT, left alone\n")
    cases = [
        ("text.pt", "--from-fairseq", "text.pt: not a checkpoint (starts with b'not ', not a torch.save file)"),
        ("truncated.pt", "--from-fairseq", "truncated.pt: not a readable checkpoint ("),
        ("foreign.pt", "--from-fairseq", "foreign.pt: not a fairseq checkpoint (found a dict with keys ['weights']"),
        ("gelu.pt", "--from-fairseq", "gelu.pt: fairseq option --activation-fn = 'gelu' (an activation other "
                                    "than the ReLU of §3.3) cannot be expressed"),
        ("good.pt", "--to-fairseq", "good.pt: architecture 'transformer_wmt_en_de' (fairseq's transformer: use "
                                    "--from-fairseq) is not vaswani_transformer"),
    ]
    for name, direction, message in cases:
        with pytest.raises(SystemExit) as info:
            convert.main([direction, str(tmp_path / name), str(out)])
        assert message in info.value.code and info.value.code.count("\n") == 0, info.value.code
    assert out.read_text() == "an older OUT, left alone\n"
    assert sorted(os.listdir(tmp_path)) == ["foreign.pt", "gelu.pt", "good.pt", "out.pt", "text.pt", "truncated.pt"]

    # the real command: one line on stderr, exit status 1, no traceback
    proc = subprocess.run([sys.executable, "-m", "vaswani_plugin.convert", "--from-fairseq",
                           str(tmp_path / "truncated.pt"), str(tmp_path / "new.pt")],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "error: " + str(tmp_path / "truncated.pt") + ": not a readable checkpoint" in proc.stderr.splitlines()[-1]
    assert not (tmp_path / "new.pt").exists()
