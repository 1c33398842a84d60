"""`--arch vaswani_pointer_parser`: the §6.3 parser whose decoder knows which word it is at (issue 17).

Departure from §6.3, where the decoder sees only its previous outputs: every decoder input also
carries the encoder's state of the next word to cover,

    x_t = Embed(y_{t-1}) + Dropout(W_p memory[p_t]),

where p_t is the source position of the first piece of word k_t, k_t the number of pre-terminals in
y_1 .. y_{t-1} (each word is written as one pre-terminal), and the EOS position once every word is
covered (`modules.word_pointer`). This is the deterministic attention of Liu, Zhu and Shi (2018),
added to the input instead of being an extra attention head. W_p is one d x d linear layer. Pinned
by tests/parsing/test_pointer_parser.py (the input against a plain-Python walk over pieces and
pre-terminals; incremental decoding after beam reorders against full decoding). On the Penn
Treebank sample it is what parses: 75.8 dev F1 against 27.8 without it (benchmarks/RESULTS.md).

In training k_t comes from the target prefix; in beam search from each hypothesis's prefix, which
fairseq's generator passes at every step already reordered with the beams, so nothing extra is
carried in the incremental state. The model needs `--task constituency_parsing` (the task says which
source pieces start a word and which target symbols are pre-terminals) and a source in reading order
(not `--reverse-source`). Shape defaults are §6.3's (`vaswani_transformer_parse`).
"""
from typing import Dict, Optional

import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model
from torch import Tensor, nn

from ..errors import ConfigError
from ..modules.dropout import dropout_add
from ..modules.word_pointer import covered_words, pointed_positions, word_start_table
from .presets import PRESETS, preset_architecture
from .vaswani_transformer import (VaswaniDecoder, VaswaniEncoder, VaswaniTransformerConfig,
                                  VaswaniTransformerModel)


class PointerEncoder(VaswaniEncoder):
    """The encoder, plus where each source word starts ("word_positions", [B, S])."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding, word_start: Tensor):
        super().__init__(cfg, dictionary, embed_tokens)
        self.register_buffer("word_start", word_start, persistent=False)  # [V_src] bool, from the task

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused) -> Dict[str, Tensor]:
        out = super().forward(src_tokens, src_lengths)
        out["word_positions"] = word_start_table(src_tokens, self.word_start, self.dictionary.eos())  # [B, S]
        return out


class PointerDecoder(VaswaniDecoder):
    """The decoder whose input also carries the encoder state of the next word to cover."""

    def __init__(self, cfg, dictionary, embed_tokens: nn.Embedding, is_preterminal: Tensor):
        super().__init__(cfg, dictionary, embed_tokens)
        self.register_buffer("is_preterminal", is_preterminal, persistent=False)  # [V_tgt] bool, from the task
        self.pointer = nn.Linear(cfg.d_model, cfg.d_model)  # W_p
        self.pointer_dropout = cfg.dropout

    def decoder_input(self, prev_output_tokens: Tensor, encoder_out: Dict[str, Tensor],
                      incremental_state: Optional[Dict] = None) -> Tensor:
        x = super().decoder_input(prev_output_tokens, encoder_out, incremental_state)  # [B, T, d]
        # [B, T], or [B, 1] for the newest position only while decoding incrementally
        covered = covered_words(prev_output_tokens, self.is_preterminal, last_only=incremental_state is not None)
        table = encoder_out["word_positions"]  # [B0, S], one row per source sentence
        memory = encoder_out["memory"]  # [B0, S, d]
        rows = encoder_out.get("memory_rows")  # [B] decoder row -> source row, during beam search
        if rows is None:
            rows = torch.arange(table.size(0), device=table.device)
        positions = pointed_positions(table.index_select(0, rows), covered)  # [B, T]
        pointed = memory[rows.unsqueeze(1), positions]  # [B, T, d]
        return dropout_add(x, self.pointer(pointed), self.pointer_dropout, self.training)  # x + Dropout(W_p m)


@register_model("vaswani_pointer_parser", dataclass=VaswaniTransformerConfig)
class PointerParserModel(VaswaniTransformerModel):
    """The Transformer of §6.3 with the word pointer in its decoder input (see the module docstring)."""

    @classmethod
    def build_encoder_decoder(cls, cfg, task, src_embed: nn.Embedding, tgt_embed: nn.Embedding):
        word_start = getattr(task, "word_start", None)
        symbols = getattr(task, "target_symbols", None)
        if word_start is None or symbols is None:
            raise ConfigError("--arch vaswani_pointer_parser needs --task constituency_parsing")
        if getattr(task, "reverse_source", False):
            raise ConfigError("--arch vaswani_pointer_parser reads the words in order: prepare the data "
                              "without --reverse-source")
        return (PointerEncoder(cfg, task.source_dictionary, src_embed, word_start.clone()),
                PointerDecoder(cfg, task.target_dictionary, tgt_embed, symbols.is_pre.clone()))


# The architecture of the same name: §6.3's shape under whatever the command line sets.
ARCH_CONFIG_REGISTRY["vaswani_pointer_parser"] = preset_architecture(
    "vaswani_pointer_parser", PRESETS["vaswani_transformer_parse"])
