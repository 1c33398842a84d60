"""Shared helpers for the tests: seeded RNG and small fairseq dictionaries/tasks."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def make_dictionary(num_symbols: int):
    """A fairseq Dictionary with the 4 special symbols plus `num_symbols` words."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(num_symbols):
        d.add_symbol(f"w{i}")
    return d


class FakeTask:
    """Just what build_model reads from a fairseq translation task."""

    def __init__(self, src_dict, tgt_dict=None):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict if tgt_dict is not None else src_dict
