"""One decoding step of the decoder stack, for the lean beam search (speed only; plain PyTorch).

The maths is the decoder layers' (§3.1-§3.3, `layers.DecoderLayer` in eval mode: no dropout) for
one new token per hypothesis. It is written for `models.beam_search`'s layout (each live sentence's
hypotheses in consecutive rows, `attention_cache.BeamAncestry`) with fewer and larger operations
than the modules' general forward, between whose GEMMs a step spent most of its other time
(issue 15's profiles):
- every tensor is [rows, d], with no [B, T, d] views; the layers' projections and residual blocks
  (`layers._Residual`) are called directly, looked up once a search (`_LayerCalls`);
- attention is one batched product per sentence and head: the queries of a sentence's hypotheses
  against its keys together; the masks (the hypotheses' ancestry, the source padding) are made
  once a step or once a batch for every layer, as 0 / -inf to add to the scores;
- the self-attention's K and V never move (`BeamSelfAttentionCache`), and the encoder-decoder K/V
  are projected once per sentence;
- in float32 on CPU, each attention (every sentence and head) and each post-LN residual close is
  one call of a C kernel (`decoding_kernels`; `_attend` and `_LayerCalls.closes` are the torch path),
  and where every product of a post-LN layer takes the few-row kernel, the whole layer is one
  (`decoding_kernels.bound_decoder_layer`: the same calls in C, the loop below written out there);
  `encode` runs the encoder's layers the same way, once per batch.
Every source sentence has at least one real token (fairseq appends EOS), so no query is blind.
`tests/test_decoding_speedups.py` holds it equal to the modules' full forward over each
hypothesis's history; the beam-search parity tests hold the search equal to fairseq's.
"""
import weakref
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from . import decoding_kernels
from .attention_cache import BeamAncestry, BeamSelfAttentionCache
from .attention_kernels import softmax_lastdim
from .decoding_linear import decoding_product
from .onednn_linear import kernel_rows


def _per_head(x: Tensor, n: int, heads: int) -> Tensor:
    """[n * g, heads * d_k] (g rows per sentence) -> [n * heads, g, d_k]: a batch entry per sentence and head."""
    d_k = x.size(-1) // heads
    return x.view(n, -1, heads, d_k).transpose(1, 2).reshape(-1, x.size(0) // n, d_k)


def _per_row(x: Tensor, n: int) -> Tensor:
    """The inverse of `_per_head`: [n * heads, g, d_k] -> [n * g, heads * d_k]."""
    g, d_k = x.shape[1:]
    return x.view(n, -1, g, d_k).transpose(1, 2).reshape(n * g, -1)


class _LayerCalls(NamedTuple):
    """What a step calls in one `DecoderLayer`, looked up once a search (a step made 132 `nn.Module`
    attribute lookups with the layers' own attributes, 49 with these), its linear products with
    `linear`'s checks made once (`decoding_linear.decoding_product`)."""
    self_open: Callable[[Tensor], Tensor]
    qkv: Callable[[Tensor], Tensor]
    self_out: Callable[[Tensor], Tensor]
    cross_open: Callable[[Tensor], Tensor]
    cross_q: Callable[[Tensor], Tensor]
    cross_out: Callable[[Tensor], Tensor]
    ffn_open: Callable[[Tensor], Tensor]
    fc1: Callable[[Tensor], Tensor]
    fc2: Callable[[Tensor], Tensor]
    closes: Tuple[Callable[[Tensor, Tensor], Tensor], ...]  # the three blocks' `close(x, sublayer output)`
    kernel_closes: Tuple[Callable[[Tensor, Tensor], Tensor], ...]  # the same, post-LN ones by the C kernel

    @classmethod
    def of(cls, layer: nn.Module) -> "_LayerCalls":
        attn, cross, ffn = layer.self_attn, layer.cross_attn, layer.ffn
        blocks = (layer.self_attn_block, layer.cross_attn_block, layer.ffn_block)
        closes = tuple(block.close for block in blocks)
        kernel_closes = tuple(decoding_kernels.bound_add_layer_norm(block.norm)
                              if decoding_kernels.available() and not block.normalize_before else block.close
                              for block in blocks)
        return cls(layer.self_attn_block.open, decoding_product(attn.qkv_proj), decoding_product(attn.out_proj),
                   layer.cross_attn_block.open, decoding_product(cross.q_proj), decoding_product(cross.out_proj),
                   layer.ffn_block.open, decoding_product(ffn.fc1), decoding_product(ffn.fc2), closes, kernel_closes)


_BOUND: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _bound(layers: nn.ModuleList, bind: Callable[[nn.Module], object]) -> List:
    """[bind(layer) for layer in layers], kept from one search to the next while nothing the calls read
    changes (`_what_binding_reads`): binding a decoder took about 1 ms, a twentieth of a sentence at
    batch 1."""
    signature = _what_binding_reads(layers)
    kept = _BOUND.get(layers)
    if kept is None or kept[0] != signature:
        kept = _BOUND[layers] = (signature, [bind(layer) for layer in layers])
    return kept[1]


def _what_binding_reads(layers: nn.Module) -> tuple:
    """torch's thread count, the forward hooks, and each module's class, packed weights and parameters
    (their storage and version counter: a load_state_dict or an in-place update moves one)."""
    parts = [torch.get_num_threads(), len(_global_forward_hooks), len(_global_forward_pre_hooks)]
    for module in layers.modules():
        parts += (type(module), vars(module).get("packed") is not None,  # (getattr raised AttributeError: slow)
                  len(module._forward_hooks) + len(module._forward_pre_hooks))
        parts += [(p.data_ptr(), p._version) for p in module._parameters.values() if p is not None]
    return tuple(parts)


def _bound_layers(layers: nn.ModuleList) -> Tuple[List[_LayerCalls], Optional[List[Callable[..., Tensor]]]]:
    """The decoder layers' `_LayerCalls`, and each layer as one C call (`decoding_kernels.bound_decoder_layer`;
    None unless all of them fit)."""
    both = _bound(layers, lambda layer: (_LayerCalls.of(layer), decoding_kernels.bound_decoder_layer(layer)))
    in_c = [layer_in_c for _, layer_in_c in both]
    return [calls for calls, _ in both], None if None in in_c else in_c


def encode(encoder: nn.Module, src_tokens: Tensor) -> Optional[Dict[str, Tensor]]:
    """`VaswaniEncoder.forward` for the lean search with each layer one C call
    (`decoding_kernels.bound_encoder_layer`: the layers' maths, §3.1-§3.3 in eval, in the products,
    attention and closes of the decoder's C layers), where every layer fits and the products take the
    few-row kernel at this row count; None elsewhere (the caller runs the encoder's forward). At batch
    1 the encoder's forward made about 60 torch operations and 12 product calls for 11 rows."""
    in_c = _bound(encoder.layers, decoding_kernels.bound_encoder_layer)
    n, s = src_tokens.shape
    if None in in_c or encoder.final_norm is not None or not kernel_rows(n * s):
        return None
    x = encoder.embedding(src_tokens)  # [N, S, d]
    if not decoding_kernels.takes(x):
        return None
    padding_mask = src_tokens.eq(encoder.dictionary.pad())  # [N, S]
    padding_mask = padding_mask if padding_mask.any() else None
    bias = _padding_bias(padding_mask, encoder.layers[0].self_attn.num_heads, x.dtype)
    rows = x.contiguous().view(n * s, -1)
    for layer in in_c:
        layer(rows, n, s, bias)
    out = {"memory": rows.view(n, s, -1)}
    if padding_mask is not None:
        out["memory_padding_mask"] = padding_mask
    return out


def _padding_bias(mask: Optional[Tensor], heads: int, dtype: torch.dtype) -> Optional[Tensor]:
    """mask [N, S] (True at the source padding, or None) -> [N * heads, 1, S]: -inf at the padding, 0
    elsewhere, as the attention kernels and `_attend` add it (None without padding)."""
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    # repeat_interleave copies: the C layers read the rows contiguous, and expand + reshape gives a
    # view with stride 0 for a single padded sentence
    return bias.repeat_interleave(heads, dim=0)[:, None, :]


def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor], scale: float) -> Tensor:
    """Eq. 1 per batch entry, softmax(q kᵀ scale + bias) v: q [b, g, d_k]; k, v [b, S, d_k]; bias
    (0 or -inf; None: nothing hidden) broadcast to [b, g, S] -> [b, g, d_k]. Scaled, then masked, as
    `explicit_attention` does: `baddbmm` would round once where it rounds twice, which moves bf16
    scores."""
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale)  # [b, g, S]
    if bias is not None:
        scores.add_(bias)
    return torch.bmm(softmax_lastdim(scores).to(v.dtype), v)


class BeamDecodingStep:
    """Called once per step with the newest token of every row -> logits [rows, V]. `decoder` is a
    `VaswaniDecoder` (its `embedding`, `layers`, `final_norm` and `decoding_output_layer`); memory [N, S, d]
    and memory_padding_mask [N, S] (True at padding, or None) are the encoder's output."""

    def __init__(self, decoder: nn.Module, memory: Tensor, memory_padding_mask: Optional[Tensor],
                 ancestry: BeamAncestry):
        self.embedding, self.final_norm = decoder.embedding, decoder.final_norm
        layers = decoder.layers  # read here only: a step calls `self.calls` or `self.layers_in_c`
        self.output_layer: Callable[[Tensor], Tensor] = decoder.decoding_output_layer()
        self.ancestry = ancestry
        self.calls, self.layers_in_c = _bound_layers(layers)
        self.work = None  # the C layers' scratch: [rows, 5 d + d_ff]
        self.d_ff = layers[0].ffn.fc1.out_features
        attn = layers[0].self_attn
        self.heads, self.scale = attn.num_heads, attn.head_dim ** -0.5
        n, s, _ = memory.shape
        self.self_kv = [BeamSelfAttentionCache(ancestry) for _ in layers]
        self.memory_kv = []  # per layer: K, V [N, H, S, d_k], projected once per sentence (§3.2.3)
        for layer in layers:
            k, v = layer.cross_attn.kv_proj(memory).chunk(2, dim=-1)  # 2 x [N, S, d]
            self.memory_kv.append([t.reshape(n, s, self.heads, -1).transpose(1, 2).contiguous() for t in (k, v)])
        self.memory_padding_mask = memory_padding_mask
        self.memory_bias = _padding_bias(self.memory_padding_mask, self.heads, self.memory_kv[0][0].dtype)

    def keep_sentences(self, sentences: Tensor) -> None:
        """Only `sentences` (indices of the live ones, in order) go on."""
        for cache in self.self_kv:
            cache.keep_sentences(sentences)
        if decoding_kernels.takes(self.memory_kv[0][0]):  # in place, as the self-attention caches
            self.memory_kv = [[decoding_kernels.compact_sentences(t, sentences, t.size(2)) for t in kv]
                              for kv in self.memory_kv]
        else:
            self.memory_kv = [[t.index_select(0, sentences) for t in kv] for kv in self.memory_kv]
        if self.memory_padding_mask is not None:
            self.memory_padding_mask = self.memory_padding_mask.index_select(0, sentences)
            self.memory_bias = _padding_bias(self.memory_padding_mask, self.heads, self.memory_kv[0][0].dtype)

    def __call__(self, tokens: Tensor, step: int) -> Tensor:
        """tokens [rows]: the token each row feeds in at `step` -> logits [rows, V]."""
        n, heads = tokens.numel() // self.ancestry.group, self.heads
        emb = self.embedding  # §3.4, §3.5: every row holds step + 1 real tokens, so one position for all
        x = F.embedding(tokens, emb.embed_tokens.weight) * emb.scale + emb.positions.at(step)  # [rows, d]
        d = x.size(-1)
        kernels = decoding_kernels.takes(x)
        if kernels and self.layers_in_c is not None and kernel_rows(x.size(0)):
            return self._finish(self._layers_in_c(x, n))
        self_bias = self.ancestry.bias(heads, x.dtype)  # [N * H, group, steps x beam]
        for calls, cache, (memory_k, memory_v) in zip(self.calls, self.self_kv, self.memory_kv):
            self_close, cross_close, ffn_close = calls.kernel_closes if kernels else calls.closes
            # masked self-attention: this step's K, V join the sentence's; each query sees its ancestors'
            qkv = calls.qkv(calls.self_open(x))  # [rows, 3d]: q, k, v side by side, heads inside each
            k, v = (qkv[:, i * d:(i + 1) * d].view(n, -1, heads, d // heads).transpose(1, 2) for i in (1, 2))
            keys, values = cache.append(k, v)  # 2 x [N, H, steps x beam, d_k]
            out = self._attend(qkv, keys, values, self_bias, n, kernels)  # [rows, d]
            x = self_close(x, calls.self_out(out))
            # encoder-decoder attention
            out = self._attend(calls.cross_q(calls.cross_open(x)), memory_k, memory_v, self.memory_bias, n, kernels)
            x = cross_close(x, calls.cross_out(out))
            # position-wise feed-forward (Eq. 2)
            x = ffn_close(x, calls.fc2(calls.fc1(calls.ffn_open(x)).relu_()))
        return self._finish(x)

    def _finish(self, x: Tensor) -> Tensor:
        """The last layer's output [rows, d] -> logits [rows, V], valid until the next step's."""
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.output_layer(x)

    def _layers_in_c(self, x: Tensor, n: int) -> Tensor:
        """The loop of `__call__`, a layer a C call (`decoding_kernels.bound_decoder_layer`): x [rows, d]
        (a fresh tensor: it is updated in place) -> the last layer's output."""
        rows, d = x.shape
        size = rows * (5 * d + self.d_ff)
        if self.work is None or self.work.numel() < size:
            self.work = x.new_empty(size)
        for layer, cache, (memory_k, memory_v) in zip(self.layers_in_c, self.self_kv, self.memory_kv):
            column = cache.reserve(n, self.heads, d // self.heads, x)
            layer(x, n, rows // n, self.work, cache.k, cache.v, column, cache.filled, self.ancestry.visible, memory_k,
                  memory_v, self.memory_bias)
        return x

    def _attend(self, q: Tensor, keys: Tensor, values: Tensor, bias: Optional[Tensor], n: int, kernels: bool) -> Tensor:
        """q [rows, >= d] (a row's first d columns its queries), keys and values [N, H, S, d_k], bias as
        `_attend` takes it -> [rows, d]: the C kernel, or the same maths in torch operations."""
        if kernels:
            return decoding_kernels.grouped_attention(q, keys, values, bias, self.scale)
        d = keys.size(1) * keys.size(3)
        out = _attend(_per_head(q[:, :d], n, self.heads), keys.flatten(0, 1), values.flatten(0, 1), bias, self.scale)
        return _per_row(out, n)
