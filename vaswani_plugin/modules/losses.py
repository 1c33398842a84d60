"""Label-smoothed cross-entropy, §5.4 (plain PyTorch)."""
from typing import Optional, Tuple

from torch import Tensor


def label_smoothed_nll_loss(
    lprobs: Tensor, target: Tensor, epsilon: float, ignore_index: Optional[int] = None
) -> Tuple[Tensor, Tensor]:
    """Cross-entropy against a smoothed target distribution, summed over tokens.

    lprobs: [N, V] log-probabilities; target: [N] class ids. The smoothed target puts 1 - ε on
    the gold class and ε / (V - 1) on each of the other V - 1 classes (the paper gives only ε_ls =
    0.1; spreading ε over the *other* classes is tensor2tensor's choice, which fairseq's
    `label_smoothed_cross_entropy` also makes). Tokens equal to `ignore_index` contribute nothing.
    Returns (smoothed loss, plain negative log-likelihood), both summed.
    """
    nll = -lprobs.gather(dim=-1, index=target.unsqueeze(-1)).squeeze(-1)  # [N]
    others = -lprobs.sum(dim=-1) - nll  # [N]: minus the log-probabilities of the V-1 other classes
    loss = (1.0 - epsilon) * nll + epsilon / (lprobs.size(-1) - 1) * others
    if ignore_index is not None:
        pad = target.eq(ignore_index)
        loss, nll = loss.masked_fill(pad, 0.0), nll.masked_fill(pad, 0.0)
    return loss.sum(), nll.sum()
