"""Per-head attention weights of every layer, as the model computes them (§3.2, Figures 3-5).

The model's forward pass asks its attention modules for weights only where fairseq needs them
(one decoder layer, averaged over heads, for alignments). To read every head of every layer without
changing that signature, `recording_attention` hooks the attention modules for the duration of one
forward pass: a pre-hook switches on `need_weights` (the explicit softmax(QK^T / sqrt(d_k)) path
of `scaled_dot_product`) and a forward hook keeps the weights it returns. The outputs are the same
as without the hooks up to float rounding (the explicit path instead of the fused kernel).
"""
import contextlib
import inspect
from typing import Dict, Iterator, List

import torch
from torch import Tensor, nn

# encoder self-attention, decoder (masked) self-attention, encoder-decoder attention (§3.2.3)
KINDS = ("encoder", "decoder", "encoder-decoder")


def attention_modules(model: nn.Module) -> Dict[str, List[nn.Module]]:
    """{kind: [the attention module of layer 0, 1, ...]} of a `vaswani_transformer`."""
    return {
        "encoder": [layer.self_attn for layer in model.encoder.layers],
        "decoder": [layer.self_attn for layer in model.decoder.layers],
        "encoder-decoder": [layer.cross_attn for layer in model.decoder.layers],
    }


def _force_need_weights(module, args, kwargs):
    # The layers pass need_weights by position or by name, or not at all: bind to find it.
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.arguments["need_weights"] = True
    return bound.args, bound.kwargs


@contextlib.contextmanager
def recording_attention(model: nn.Module) -> Iterator[Dict[str, List[Tensor]]]:
    """Within the block, each forward pass appends, per kind and in layer order, the weights
    [B, H, T, S] of every attention module to the yielded dict."""
    recorded: Dict[str, List[Tensor]] = {kind: [] for kind in KINDS}
    handles = []
    for kind, modules in attention_modules(model).items():
        def keep(module, args, output, kind=kind):
            recorded[kind].append(output[1].detach())
        for module in modules:
            handles.append(module.register_forward_pre_hook(_force_need_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(keep))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


def attention_weights(model: nn.Module, src_tokens: Tensor, prev_output_tokens: Tensor) -> Dict[str, List[Tensor]]:
    """One teacher-forced forward pass in eval mode (no dropout) ->
    {"encoder": L_enc x [B, H, S, S], "decoder": L_dec x [B, H, T, T],
     "encoder-decoder": L_dec x [B, H, T, S]}, float32.

    src_tokens [B, S] (fairseq's left padding is fine); prev_output_tokens [B, T], the target
    shifted right (fairseq starts it with </s>), right-padded. Rows sum to 1; padded source
    positions and future target positions get weight 0.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), recording_attention(model) as recorded:
            src_lengths = src_tokens.ne(model.encoder.dictionary.pad()).sum(dim=1)  # [B]
            model(src_tokens, src_lengths, prev_output_tokens)
    finally:
        model.train(was_training)
    return {kind: [w.float() for w in layers] for kind, layers in recorded.items()}
