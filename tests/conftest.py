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


TINY_TRANSLATION_MODEL = ["--arch", "vaswani_transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                          "--d-model", "32", "--d-ff", "64", "--attention-heads", "2", "--share-all-embeddings"]


@pytest.fixture(scope="session")
def small_trained(tmp_path_factory):
    """A binarized synthetic corpus (train 200, valid 13, test 13: not multiples of 8) and the
    `checkpoint_last.pt` of 2 updates of a 1-layer model, shared by the tests that only need some
    real checkpoint to run fairseq's tools on."""
    from helpers import preprocess_synthetic, run_tool

    work = tmp_path_factory.mktemp("small_trained")
    data = preprocess_synthetic(work, {"train": 200, "valid": 13, "test": 13})
    run_tool("fairseq-train", data, "--user-dir", "vaswani_plugin", *TINY_TRANSLATION_MODEL, "--optimizer", "adam",
             "--lr", "1e-3", "--max-update", 2, "--max-tokens", 2000, "--save-dir", work / "ckpt",
             "--disable-validation", "--no-epoch-checkpoints")
    return {"work": work, "bin": data, "ckpt": work / "ckpt" / "checkpoint_last.pt"}
