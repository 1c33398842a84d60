"""Positional encodings against §3.5's formula and against fairseq's SinusoidalPositionalEmbedding."""
import math

import torch
from fairseq.modules import SinusoidalPositionalEmbedding

from vaswani_plugin.modules import SinusoidalPositions, sinusoid_table


def test_paper_layout_is_the_formula_of_section_3_5():
    d = 10
    table = sinusoid_table(60, d, "paper")
    for pos in (0, 1, 7, 59):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_paper_layout_counts_from_first_real_token_whatever_the_padding():
    pad = 1
    enc = SinusoidalPositions(8, pad, "paper")
    left_padded = torch.tensor([[pad, pad, 5, 6, 7], [4, 5, 6, 7, 8]])
    out = enc(left_padded)
    table = sinusoid_table(5, 8, "paper")
    torch.testing.assert_close(out[0, 2:], table[:3])  # first real token at position 0
    torch.testing.assert_close(out[1], table[:5])


def test_fairseq_layout_equals_fairseq_module():
    pad = 1
    for d in (16, 7):
        ours = SinusoidalPositions(d, pad, "fairseq")
        theirs = SinusoidalPositionalEmbedding(d, pad, init_size=64)
        tokens = torch.tensor([[pad, pad, 9, 8, 7, 6], [5, 6, 7, 8, 9, 10]])  # left-padded like fairseq
        real = tokens.ne(pad).unsqueeze(-1)
        torch.testing.assert_close(ours(tokens) * real, theirs(tokens) * real, atol=1e-6, rtol=1e-6)


def test_table_grows_beyond_its_initial_size_and_last_step_matches():
    enc = SinusoidalPositions(6, 1, "paper", initial_size=4)
    tokens = torch.full((1, 50), 7)
    out = enc(tokens)
    torch.testing.assert_close(out[0], sinusoid_table(50, 6, "paper"))
    torch.testing.assert_close(enc(tokens, last_step_only=True), out[:, -1:])
