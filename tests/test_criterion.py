"""`label_smoothed_xent` against fairseq's `label_smoothed_cross_entropy` on the same inputs."""
import copy

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.logging import metrics

from conftest import FakeTask, make_dictionary
from helpers import build_from_cli
from vaswani_plugin.criterions import label_smoothed_xent
from vaswani_plugin.criterions.label_smoothed_xent import LabelSmoothedXentCriterion
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.modules import label_smoothed_nll_loss


def _sample(pad=1):
    src = torch.tensor([[pad, 5, 6, 7, 2], [8, 9, 10, 11, 2], [pad, pad, 12, 13, 2]])
    target = torch.tensor([[14, 15, 16, 2, pad], [17, 18, 19, 20, 2], [21, 2, pad, pad, pad]])
    prev = torch.tensor([[2, 14, 15, 16, pad], [2, 17, 18, 19, 20], [2, 21, pad, pad, pad]])
    return {"net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(1), "prev_output_tokens": prev},
            "target": target, "ntokens": int(target.ne(pad).sum())}


@pytest.mark.parametrize("untie", [(), ("--untie-output-projection",)])
@pytest.mark.parametrize("eps,prefix,accuracy", [(0.1, 0, False), (0.0, 0, True), (0.25, 1, True)])
def test_matches_fairseq_loss_nll_and_gradients(eps, prefix, accuracy, untie):
    """Our model takes the fused projection + loss path; fairseq's criterion the unfused one."""
    task = FakeTask(make_dictionary(30))
    model = build_from_cli("vaswani_transformer", task, "--encoder-layers", "1", "--decoder-layers", "1",
                           "--d-model", "16", "--d-ff", "32", "--attention-heads", "2", "--dropout", "0", *untie)
    twin = copy.deepcopy(model)
    ours = LabelSmoothedXentCriterion(task, False, eps, prefix, accuracy)
    theirs = LabelSmoothedCrossEntropyCriterion(task, False, eps, prefix, accuracy)
    sample = _sample()
    loss, size, log = ours(model, sample)
    ref_loss, ref_size, ref_log = theirs(twin, sample)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(log["nll_loss"], ref_log["nll_loss"], atol=1e-5, rtol=1e-6)
    assert size == ref_size
    assert {k: v for k, v in log.items() if k not in ("loss", "nll_loss")} == \
           {k: v for k, v in ref_log.items() if k not in ("loss", "nll_loss")}
    loss.backward()
    ref_loss.backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_pure_loss_is_the_smoothed_cross_entropy_written_out():
    """q = (1-eps) on the gold class, eps/(V-1) elsewhere; loss = -sum_c q_c log p_c (pads skipped)."""
    v, eps = 7, 0.1
    lprobs = torch.log_softmax(torch.randn(4, v, dtype=torch.float64), -1)
    target = torch.tensor([3, 0, 1, 6])
    q = torch.full((4, v), eps / (v - 1), dtype=torch.float64)
    q[torch.arange(4), target] = 1 - eps
    keep = target.ne(1)
    expected = -(q * lprobs).sum(-1)[keep].sum()
    loss, nll = label_smoothed_nll_loss(lprobs, target, eps, ignore_index=1)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, -lprobs[torch.arange(4), target][keep].sum())


def test_logged_keys_and_ppl_like_fairseq():
    logs = [{"loss": torch.tensor(20.0), "nll_loss": torch.tensor(15.0), "ntokens": 10, "nsentences": 2,
             "sample_size": 10, "n_correct": 4, "total": 10}]
    with metrics.aggregate() as ours_agg:
        LabelSmoothedXentCriterion.reduce_metrics(logs)
    with metrics.aggregate() as theirs_agg:
        LabelSmoothedCrossEntropyCriterion.reduce_metrics(logs)
    assert ours_agg.get_smoothed_values() == theirs_agg.get_smoothed_values()
    assert set(ours_agg.get_smoothed_values()) >= {"loss", "nll_loss", "ppl", "accuracy"}


def test_bad_label_smoothing_names_the_flag():
    with pytest.raises(ConfigError, match="--label-smoothing"):
        LabelSmoothedXentCriterion(FakeTask(make_dictionary(5)), False, 1.0)


def _refuse(*args, **kwargs):
    raise AssertionError("this path must not be taken")


@pytest.mark.parametrize("arch,flags,refused", [
    ("vaswani_transformer", ["--d-model", "16", "--d-ff", "32", "--attention-heads", "2"], "label_smoothed_nll_loss"),
    ("transformer", ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                     "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
                     "--decoder-attention-heads", "2"], "fused_output_loss"),
])
def test_fused_path_for_our_model_fallback_for_others(arch, flags, refused, monkeypatch):
    """Ours (decoder has output_projection_weight) never builds the unfused log-probabilities; fairseq's
    transformer (no such method) falls back to them, and both agree with fairseq's criterion."""
    task = FakeTask(make_dictionary(30))
    model = build_from_cli(arch, task, "--encoder-layers", "1", "--decoder-layers", "1", "--dropout", "0", *flags)
    assert hasattr(model.decoder, "output_projection_weight") == (arch == "vaswani_transformer")
    twin = copy.deepcopy(model)
    ref_loss, _, ref_log = LabelSmoothedCrossEntropyCriterion(task, False, 0.1, 0, True)(twin, _sample())
    monkeypatch.setattr(label_smoothed_xent, refused, _refuse)
    loss, _, log = LabelSmoothedXentCriterion(task, False, 0.1, 0, True)(model, _sample())
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-6)
    assert (log["n_correct"], log["total"]) == (ref_log["n_correct"], ref_log["total"])
