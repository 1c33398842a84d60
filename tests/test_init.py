"""A freshly built model starts with fairseq's transformer's statistics (issue 12).

The paper gives no initialisation. xavier-uniform with gain 1 for Q, K, V and zero feed-forward
biases learned ~0.3 nats less per update than fairseq's transformer on Multi30k, so we take fairseq's
initialisation. The reference is fairseq's own `transformer`, built from the same shape flags; the
tensors are paired through the conversion's name table (Q, K, V blocks of our packed projections
against fairseq's separate ones) and compared by standard deviation, pooled over the layers."""
from collections import defaultdict

import pytest
import torch
from conftest import FakeTask, make_dictionary
from helpers import build_from_cli

from vaswani_plugin.convert.weights import _layer_pairs

# 12 layers, so that a bias group pools 12 x 256 values: the standard deviations of two such samples of
# a uniform distribution then differ by ~1.1% (one standard error), and 5% is ~4.4 of those. The
# departures this guards against are far larger (gain 1 instead of 1/sqrt(2): 41%; xavier instead of
# PyTorch's default for fc2: ~2x; zero instead of uniform biases).
SHAPE = {"layers": 12, "d": 256, "d_ff": 1024, "heads": 4}
TOLERANCE = 0.05  # relative, on the standard deviation


def _models():
    torch.manual_seed(0)  # built at import, before the autouse seed: a fixed draw, not a new one each run
    task = FakeTask(make_dictionary(1000))
    ours = build_from_cli("vaswani_transformer", task, "--share-all-embeddings",
                          "--encoder-layers", str(SHAPE["layers"]), "--decoder-layers", str(SHAPE["layers"]),
                          "--d-model", str(SHAPE["d"]), "--d-ff", str(SHAPE["d_ff"]),
                          "--attention-heads", str(SHAPE["heads"]))
    torch.manual_seed(1)  # a different draw: statistics must agree, values need not
    theirs = build_from_cli("transformer", task, "--share-all-embeddings",
                            "--encoder-layers", str(SHAPE["layers"]), "--decoder-layers", str(SHAPE["layers"]),
                            "--encoder-embed-dim", str(SHAPE["d"]), "--decoder-embed-dim", str(SHAPE["d"]),
                            "--encoder-ffn-embed-dim", str(SHAPE["d_ff"]), "--decoder-ffn-embed-dim", str(SHAPE["d_ff"]),
                            "--encoder-attention-heads", str(SHAPE["heads"]),
                            "--decoder-attention-heads", str(SHAPE["heads"]))
    return ours, theirs


def _pooled_groups():
    """{fairseq tensor name with the layer index as '*': (our values, fairseq's values)}."""
    ours, theirs = _models()
    ours_sd, theirs_sd = ours.state_dict(), theirs.state_dict()
    m = {"encoder_layers": SHAPE["layers"], "decoder_layers": SHAPE["layers"], "normalize_before": False}
    groups = defaultdict(lambda: ([], []))
    for their_name, our_name, block, blocks in _layer_pairs(m):
        key = ".".join("*" if part.isdigit() else part for part in their_name.split("."))
        groups[key][0].append(ours_sd[our_name].chunk(blocks, dim=0)[block].flatten())
        groups[key][1].append(theirs_sd[their_name].flatten())
    embed = "encoder.embed_tokens.weight"
    groups[embed][0].append(ours_sd["encoder.embedding.embed_tokens.weight"][4:].flatten())  # rows of real words
    groups[embed][1].append(theirs_sd[embed][4:].flatten())
    return {key: (torch.cat(a), torch.cat(b)) for key, (a, b) in groups.items()}


GROUPS = _pooled_groups()


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_initial_statistics_equal_fairseq_transformer(name):
    ours, theirs = GROUPS[name]
    assert ours.shape == theirs.shape
    if theirs.std() == 0:  # constants: zero biases, LayerNorm's ones and zeros
        assert torch.equal(ours, theirs), name
        return
    standard_error = theirs.std() * (2 / theirs.numel()) ** 0.5  # of the difference of two means
    assert abs(ours.mean() - theirs.mean()) < 4 * standard_error, name
    assert abs(ours.std() / theirs.std() - 1) < TOLERANCE, (name, ours.std().item(), theirs.std().item())


def test_the_groups_cover_every_kind_of_tensor():
    """The comparison would mean little if a kind of tensor were left out (it can fail: a renamed
    projection drops out of the table and this count changes)."""
    kinds = {key.split(".*.")[-1] for key in GROUPS if ".*." in key}
    assert {"self_attn.q_proj.weight", "self_attn.k_proj.bias", "encoder_attn.v_proj.weight",
            "encoder_attn.out_proj.bias", "fc1.bias", "fc2.weight", "final_layer_norm.weight"} <= kinds
    assert len(GROUPS) == 2 * 8 + 2 * 13 + 1  # weight and bias per encoder/decoder layer tensor, the embedding
