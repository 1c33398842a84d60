"""A checkpoint written by an earlier version keeps loading and decodes exactly as that version did.

tests/fixtures/v0_checkpoint/ was written once, by the plugin before the refactor of issue 13 (see
its make_v0_checkpoint.py): a 1-layer d_model 16 model, its joined dictionary, four test sentences,
and the hypotheses and scores fairseq-generate, fairseq-interactive and the hub interface produced
then. Here today's code decodes the same inputs through the same three entry points.

Hypotheses must be identical. Scores agree to 1e-4: fairseq prints positional scores with 4 decimals,
and a different linear backend (oneDNN or F.linear) changes float rounding by ~1e-6, not more.
"""
import json
from pathlib import Path

import pytest

from helpers import run_tool
from fixtures.make_v0_checkpoint import DECODE, parse_hypotheses  # the flags the fixture was decoded with

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "v0_checkpoint"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))


def assert_same_decoding(got, expected):
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        assert got[key]["hypothesis"] == want["hypothesis"], key
        assert got[key]["score"] == pytest.approx(want["score"], abs=1e-4), key
        assert got[key]["positional"] == pytest.approx(want["positional"], abs=1e-4), key


def test_fixture_is_small():
    assert sum(p.stat().st_size for p in FIXTURE.iterdir()) < 100_000


def test_fairseq_generate_decodes_the_old_checkpoint_as_before():
    proc = run_tool("fairseq-generate", FIXTURE, "--user-dir", "vaswani_plugin", "--path", FIXTURE / "checkpoint.pt",
                    "--dataset-impl", "raw", "--gen-subset", "test", *DECODE, "--batch-size", 4)
    assert_same_decoding(parse_hypotheses(proc.stdout), EXPECTED["generate"])


def test_fairseq_interactive_decodes_the_old_checkpoint_as_before():
    proc = run_tool("fairseq-interactive", FIXTURE, "--user-dir", "vaswani_plugin", "--path",
                    FIXTURE / "checkpoint.pt", "--source-lang", "en", "--target-lang", "de", *DECODE,
                    stdin="\n".join(EXPECTED["source"]) + "\n")
    assert_same_decoding(parse_hypotheses(proc.stdout), EXPECTED["interactive"])


def test_hub_interface_decodes_the_old_checkpoint_as_before():
    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

    hub = VaswaniTransformerModel.from_pretrained(str(FIXTURE), checkpoint_file="checkpoint.pt",
                                                  data_name_or_path=str(FIXTURE))
    beams = hub.generate([hub.encode(s) for s in EXPECTED["source"]], beam=3, max_len_a=1, max_len_b=4)
    got = {f"{i}.{j}": {"hypothesis": hub.decode(h["tokens"]), "score": h["score"].item(),
                        "positional": h["positional_scores"].tolist()}
           for i, beam in enumerate(beams) for j, h in enumerate(beam)}
    expected = {f"{i}.{j}": h for i, beam in enumerate(EXPECTED["hub"]) for j, h in enumerate(beam)}
    assert_same_decoding(got, expected)
