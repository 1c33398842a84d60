"""The registered model: names, presets, shapes, parameter counts, incremental decoding."""
import pytest
import torch
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

from conftest import FakeTask, make_dictionary
from helpers import build_from_cli
from vaswani_plugin.criterions.label_smoothed_xent import LabelSmoothedXentCriterion
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel
from vaswani_plugin.optim.inverse_sqrt_warmup import InverseSqrtWarmupSchedule

PRESETS = {
    # name: (N, d_model, d_ff, h, P_drop) from Table 3 / §6.1 / §6.3
    "vaswani_transformer_base": (6, 512, 2048, 8, 0.1),
    "vaswani_transformer_big": (6, 1024, 4096, 16, 0.3),
    "vaswani_transformer_big_en_fr": (6, 1024, 4096, 16, 0.1),
    "vaswani_transformer_parse": (4, 1024, 4096, 16, 0.3),
    "vaswani_transformer_tiny": (3, 256, 1024, 4, 0.1),
}


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_names_resolve_through_fairseq_registries():
    assert MODEL_REGISTRY["vaswani_transformer"] is VaswaniTransformerModel
    for name in PRESETS:
        assert ARCH_MODEL_REGISTRY[name] is VaswaniTransformerModel
    assert CRITERION_REGISTRY["label_smoothed_xent"] is LabelSmoothedXentCriterion
    assert LR_SCHEDULER_REGISTRY["inverse_sqrt_warmup"] is InverseSqrtWarmupSchedule


@pytest.mark.parametrize("arch", sorted(PRESETS))
def test_every_preset_builds_with_its_table_values_and_trains(arch):
    layers, d, d_ff, h, p = PRESETS[arch]
    model = build_from_cli(arch, FakeTask(make_dictionary(20)), "--share-all-embeddings")
    cfg = model.encoder.layers[0]
    assert len(model.encoder.layers) == len(model.decoder.layers) == layers
    assert cfg.self_attn.embed_dim == d and cfg.self_attn.num_heads == h and cfg.ffn.fc1.out_features == d_ff
    assert model.encoder.embedding.dropout == p and cfg.attn_block.dropout == p
    src = torch.randint(4, 24, (2, 5))
    prev = torch.randint(4, 24, (2, 4))
    logits, extra = model(src, torch.tensor([5, 5]), prev)
    assert logits.shape == (2, 4, 24)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_user_flags_override_the_preset():
    model = build_from_cli("vaswani_transformer_big", FakeTask(make_dictionary(20)), "--dropout", "0.2",
                           "--encoder-layers", "2")
    assert model.encoder.embedding.dropout == 0.2 and len(model.encoder.layers) == 2 and len(model.decoder.layers) == 6


@pytest.mark.parametrize("ours,theirs,expected_millions", [
    ("vaswani_transformer_base", "transformer_wmt_en_de", 63.08),
    ("vaswani_transformer_big", "transformer_vaswani_wmt_en_de_big", 214.25),
])
def test_parameter_counts_equal_fairseq_for_the_same_shapes(ours, theirs, expected_millions):
    task = FakeTask(make_dictionary(37000))  # a 37k shared vocabulary, as in §5.1
    a = n_params(build_from_cli(ours, task, "--share-all-embeddings"))
    b = n_params(build_from_cli(theirs, task, "--share-all-embeddings"))
    assert a == b
    assert round(a / 1e6, 2) == expected_millions


def test_three_way_tying_with_joined_dictionary_two_way_otherwise():
    d = make_dictionary(30)
    tied = build_from_cli("vaswani_transformer_tiny", FakeTask(d), "--share-all-embeddings")
    assert tied.encoder.embedding.embed_tokens.weight is tied.decoder.embedding.embed_tokens.weight
    two = build_from_cli("vaswani_transformer_tiny", FakeTask(d, make_dictionary(40))).eval()
    assert two.encoder.embedding.embed_tokens.weight is not two.decoder.embedding.embed_tokens.weight
    logits, _ = two(torch.tensor([[5, 6, 2]]), None, torch.tensor([[2, 7]]))
    # the pre-softmax projection is the target embedding (§3.4): logits = h E^T
    features, _ = two.decoder.extract_features(torch.tensor([[2, 7]]), two.encoder(torch.tensor([[5, 6, 2]])))
    torch.testing.assert_close(logits, features @ two.decoder.embedding.embed_tokens.weight.t())


@pytest.mark.parametrize("flags,message", [
    (["--d-model", "100", "--attention-heads", "8"], "--d-model (100) must be divisible by --attention-heads (8)"),
    (["--share-all-embeddings"], "--share-all-embeddings needs a joined dictionary"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1)"),
])
def test_contradicting_flags_name_the_flag(flags, message):
    task = FakeTask(make_dictionary(20), make_dictionary(25))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        build_from_cli("vaswani_transformer_tiny", task, *flags)


def _small_model(**flags):
    args = ["--encoder-layers", "2", "--decoder-layers", "2", "--d-model", "32", "--d-ff", "64",
            "--attention-heads", "4", "--share-all-embeddings"]
    for k, v in flags.items():
        args += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return build_from_cli("vaswani_transformer", FakeTask(make_dictionary(30)), *args).eval()


@pytest.mark.parametrize("variant", [{}, {"normalize_before": True}, {"positional_layout": "fairseq"}])
def test_incremental_decoding_equals_full_decoding_step_by_step(variant):
    model = _small_model(**variant)
    pad, eos = 1, 2
    src = torch.tensor([[pad, pad, 5, 6, 7, eos], [8, 9, 10, 11, 12, eos]])  # left-padded as fairseq does
    prev = torch.tensor([[eos, 13, 14, 15, 16, 17, 18], [eos, 19, 20, 21, 22, 23, 24]])
    enc = model.encoder(src)
    full, _ = model.decoder(prev, enc)
    state = {}
    steps = [model.decoder(prev[:, : t + 1], enc, incremental_state=state)[0] for t in range(prev.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_beam_reordered_cache_equals_recomputation_on_reordered_batch():
    model = _small_model()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 10, 2], [11, 12, 13, 2]])
    prev = torch.tensor([[2, 14, 15], [2, 16, 17], [2, 18, 19]])
    enc = model.encoder(src)
    state = {}
    for t in range(prev.size(1)):
        model.decoder(prev[:, : t + 1], enc, incremental_state=state)
    order = torch.tensor([1, 1, 0])  # e.g. two beams continue hypothesis 1, one continues 0
    model.decoder.reorder_incremental_state_scripting(state, order)
    enc = model.encoder.reorder_encoder_out(enc, order)
    nxt = torch.cat([prev[order], torch.tensor([[20], [21], [22]])], 1)
    step, _ = model.decoder(nxt, enc, incremental_state=state)
    full, _ = model.decoder(nxt, model.encoder(src[order]))
    torch.testing.assert_close(step, full[:, -1:], atol=1e-5, rtol=1e-5)


def test_right_padded_targets_do_not_change_real_positions():
    """Departure pinned: decoder self-attention uses the causal mask only (no target padding mask)."""
    model = _small_model()
    src = torch.tensor([[5, 6, 7, 2]])
    short = torch.tensor([[2, 14, 15]])
    padded = torch.tensor([[2, 14, 15, 1, 1]])
    a, _ = model(src, None, short)
    b, _ = model(src, None, padded)
    torch.testing.assert_close(a, b[:, :3], atol=1e-6, rtol=1e-6)


def test_alignment_weights_returned_only_when_asked():
    model = _small_model()
    src = torch.tensor([[1, 5, 6, 2], [7, 8, 9, 2]])
    prev = torch.tensor([[2, 14], [2, 16]])
    _, extra = model(src, None, prev)
    assert extra["attn"][0] is None
    model.decoder.make_generation_fast_(need_attn=True)
    _, extra = model(src, None, prev)
    attn = extra["attn"][0]
    assert attn.shape == (2, 2, 4)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 2))
    assert (attn[0, :, 0] == 0).all()  # the padded source position gets no weight
