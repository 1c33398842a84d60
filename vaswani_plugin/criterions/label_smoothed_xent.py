"""`--criterion label_smoothed_xent`: the label-smoothed loss of §5.4 for fairseq.

The maths is `vaswani_plugin.modules.label_smoothed_nll_loss`; this file adapts it to fairseq's
criterion interface and logs the keys fairseq's `label_smoothed_cross_entropy` logs (loss and
nll_loss in base 2, ppl derived from nll_loss, accuracy with --report-accuracy).

A model whose decoder offers `output_projection_weight()` (ours) takes the fused path: the decoder
returns features only and `modules.fused_output_loss` projects and scores them chunk by chunk, never
holding the [tokens, V] log-probabilities (same loss, gradients and accuracy). Any other model takes
the unfused path through `get_normalized_probs`.
"""
import math
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II

from ..errors import ConfigError
from ..modules import fused_output_loss, label_smoothed_nll_loss


@dataclass
class LabelSmoothedXentConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon_ls, the paper's 0.1 (§5.4); 0 disables"})
    report_accuracy: bool = field(default=False, metadata={"help": "also log token accuracy"})
    ignore_prefix_size: int = field(default=0, metadata={"help": "ignore the first N target tokens of every sentence"})
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("label_smoothed_xent", dataclass=LabelSmoothedXentConfig)
class LabelSmoothedXentCriterion(FairseqCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False):
        super().__init__(task)
        if not 0.0 <= label_smoothing < 1.0:
            raise ConfigError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        if ignore_prefix_size < 0:
            raise ConfigError(f"--ignore-prefix-size must be >= 0, got {ignore_prefix_size}")
        self.sentence_avg = sentence_avg
        self.eps = label_smoothing
        self.ignore_prefix_size = ignore_prefix_size
        self.report_accuracy = report_accuracy

    def forward(self, model, sample, reduce=True):
        decoder = getattr(model, "decoder", None)
        if callable(getattr(decoder, "output_projection_weight", None)):
            loss, nll_loss, n_correct, target = self._fused(model, decoder, sample)
        else:
            loss, nll_loss, n_correct, target = self._unfused(model, sample)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            logging_output["n_correct"] = utils.item(n_correct)
            logging_output["total"] = utils.item(target.ne(self.padding_idx).sum())
        return loss, sample_size, logging_output

    def _fused(self, model, decoder, sample):
        features, extra = model(**sample["net_input"], features_only=True)  # [B, T, d]
        target = self._drop_prefix(model.get_targets(sample, (features, extra))).reshape(-1)  # [N]
        features = self._drop_prefix(features)  # [B, T', d]
        loss, nll_loss, n_correct = fused_output_loss(
            features.reshape(-1, features.size(-1)), decoder.output_projection_weight(), target, self.eps,
            ignore_index=self.padding_idx, count_correct=self.report_accuracy)
        return loss, nll_loss, n_correct, target

    def _unfused(self, model, sample):
        net_output = model(**sample["net_input"])
        lprobs = self._drop_prefix(model.get_normalized_probs(net_output, log_probs=True))  # [B, T', V]
        lprobs = lprobs.reshape(-1, lprobs.size(-1))  # [N, V]
        target = self._drop_prefix(model.get_targets(sample, net_output)).reshape(-1)  # [N]
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target, self.eps, ignore_index=self.padding_idx)
        n_correct = None
        if self.report_accuracy:
            n_correct = (lprobs.argmax(-1).eq(target) & target.ne(self.padding_idx)).sum()
        return loss, nll_loss, n_correct, target

    def _drop_prefix(self, x):
        """[B, T, ...] -> [B, T - ignore_prefix_size, ...]"""
        return x[:, self.ignore_prefix_size:] if self.ignore_prefix_size > 0 else x

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size, ntokens = total("sample_size"), total("ntokens")
        metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", total("nll_loss") / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        n_total = utils.item(total("total"))
        if n_total > 0:
            metrics.log_scalar("total", n_total)
            metrics.log_scalar("n_correct", utils.item(total("n_correct")))
            metrics.log_derived(
                "accuracy",
                lambda meters: round(meters["n_correct"].sum * 100.0 / meters["total"].sum, 3)
                if meters["total"].sum > 0 else float("nan"),
            )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
