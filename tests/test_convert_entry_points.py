"""Issue 3, drop-in for fairseq's transformer: a model trained by fairseq-train with fairseq's own
`--arch transformer_wmt_en_de`, converted by `python -m vaswani_plugin.convert`, then used through every
fairseq entry point: fairseq-generate (beam, n-best, alignment, sampling), fairseq-interactive with
sentencepiece, fairseq-score and the hub interface. Where both can run, the converted model must
produce exactly what fairseq's original produces.

One module-scoped fixture makes the corpus, the sentencepiece model, the binarised data, the trained
fairseq checkpoint and its conversion.
"""
import re

import pytest
import torch

from helpers import run_tool as run, write_parallel_splits
from vaswani_plugin.data import spm
from vaswani_plugin.data.synthetic_corpus import generate_pairs

N_TEST = 11
FAIRSEQ_TINY = ["--arch", "transformer_wmt_en_de", "--encoder-layers", "1", "--decoder-layers", "1",
                "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
                "--decoder-attention-heads", "2"]  # untied output projection and separate dictionaries


@pytest.fixture(scope="module")
def drop_in(tmp_path_factory):
    work = tmp_path_factory.mktemp("drop_in")
    pairs = generate_pairs(300 + N_TEST, seed=11)
    write_parallel_splits(work, {"train": pairs[:290], "valid": pairs[290:300], "test": pairs[300:]})
    spm.train([str(work / "train.en"), str(work / "train.de")], str(work / "spm"), vocab_size=300, threads=1)
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            spm.encode(str(work / "spm.model"), str(work / f"{split}.{lang}"), str(work / f"{split}.sp.{lang}"))
    run("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", work / "train.sp",
        "--validpref", work / "valid.sp", "--testpref", work / "test.sp", "--destdir", work / "bin", "--workers", 1)
    run("fairseq-train", work / "bin", *FAIRSEQ_TINY, "--optimizer", "adam", "--lr", "0.005",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 10, "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", 0.1, "--max-tokens", 1500, "--max-update", 60, "--disable-validation",
        "--save-interval", 1000, "--save-dir", work / "fairseq", "--seed", 2, "--no-progress-bar",
        "--num-workers", 0, "--data-buffer-size", 0)  # fairseq alone: no loading thread to abort its exit
    (work / "ours").mkdir()
    convert = run("vaswani_plugin.convert", "--from-fairseq", work / "fairseq" / "checkpoint_last.pt",
                  work / "ours" / "model.pt")
    return {"work": work, "bin": work / "bin", "spm": work / "spm.model", "convert": convert,
            "fairseq": work / "fairseq" / "checkpoint_last.pt", "ours": work / "ours" / "model.pt"}


def lines(proc, prefix):
    return [line for line in proc.stdout.splitlines() if line.startswith(prefix)]


def generate(drop_in, path, *flags):
    return run("fairseq-generate", drop_in["bin"], "--user-dir", "vaswani_plugin", "--path", path,
               "--gen-subset", "test", "--batch-size", 4, "--required-batch-size-multiple", 1,
               "--post-process", "sentencepiece", *flags)


@pytest.fixture(scope="module")
def generated(drop_in):
    """fairseq-generate with beam 4, lenpen 0.6, 2-best and alignments, on both checkpoints."""
    flags = ["--beam", 4, "--lenpen", 0.6, "--nbest", 2, "--print-alignment"]
    return {name: generate(drop_in, drop_in[name], *flags) for name in ("fairseq", "ours")}


def test_converter_reports_what_it_wrote(drop_in):
    assert "positions 'fairseq', no tying" in drop_in["convert"].stderr
    state = torch.load(drop_in["ours"])
    assert state["cfg"]["model"]["untie_output_projection"] and "last_optimizer_state" not in state


def test_generate_nbest_with_alignment_equals_fairseq(generated):
    ours, theirs = generated["ours"], generated["fairseq"]
    for prefix in ("S-", "T-", "H-", "D-", "A-"):
        mine = [line.split("\t") for line in lines(ours, prefix)]
        assert len(mine) == (N_TEST if prefix in ("S-", "T-") else 2 * N_TEST), prefix
        for a, b in zip(mine, (line.split("\t") for line in lines(theirs, prefix))):
            assert a[0] == b[0] and a[-1] == b[-1], (a, b)  # id and text (tokens, words or alignment)
            if prefix in ("H-", "D-"):
                assert abs(float(a[1]) - float(b[1])) <= 1e-3  # printed with 4 decimals
    assert all(re.fullmatch(r"(\d+-\d+ ?)+", line.split("\t")[1]) for line in lines(ours, "A-"))
    assert all("\u2581" not in line for line in lines(ours, "D-"))  # sentencepiece undone
    assert "BLEU4 = " in lines(ours, "Generate")[0] and lines(ours, "Generate") == lines(theirs, "Generate")


def test_generate_sampling(drop_in):
    proc = generate(drop_in, drop_in["ours"], "--sampling", "--sampling-topk", 5, "--beam", 2, "--nbest", 2,
                    "--seed", 3)
    ids = sorted(int(line.split("\t")[0][2:]) for line in lines(proc, "H-"))
    assert ids == sorted(list(range(N_TEST)) * 2)


def test_score_of_generated_output(drop_in, generated, tmp_path):
    ours = generated["ours"]
    best = {}
    for line in lines(ours, "D-"):
        best.setdefault(int(line.split("\t")[0][2:]), line.split("\t")[2])  # the first is the best
    refs = {int(line.split("\t")[0][2:]): line.split("\t")[1] for line in lines(ours, "T-")}
    (tmp_path / "sys.txt").write_text("".join(best[i] + "\n" for i in range(N_TEST)), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(refs[i] + "\n" for i in range(N_TEST)), encoding="utf-8")
    proc = run("fairseq-score", "--sys", tmp_path / "sys.txt", "--ref", tmp_path / "ref.txt")
    scored = re.search(r"BLEU4 = ([\d.]+)", proc.stdout)
    generated_bleu = re.search(r"BLEU4 = ([\d.]+)", ours.stdout)
    assert scored and generated_bleu and scored.group(1) == generated_bleu.group(1)


def test_interactive_with_sentencepiece_and_hub_interface(drop_in):
    from fairseq.hub_utils import GeneratorHubInterface
    from fairseq.models.transformer import TransformerModel

    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

    raw = (drop_in["work"] / "test.en").read_text(encoding="utf-8").splitlines()[:3]
    proc = run("fairseq-interactive", drop_in["bin"], "--user-dir", "vaswani_plugin", "--path", drop_in["ours"],
               "--source-lang", "en", "--target-lang", "de", "--bpe", "sentencepiece", "--sentencepiece-model",
               drop_in["spm"], "--beam", 4, "--lenpen", 0.6, stdin="\n".join(raw) + "\n")
    interactive = [line.split("\t")[2] for line in lines(proc, "D-")]
    assert len(interactive) == 3 and all(s and "\u2581" not in s for s in interactive)

    hubs = {}
    for name, cls in (("ours", VaswaniTransformerModel), ("fairseq", TransformerModel)):
        hubs[name] = cls.from_pretrained(str(drop_in[name].parent), checkpoint_file=drop_in[name].name,
                                         data_name_or_path=str(drop_in["bin"]), bpe="sentencepiece",
                                         sentencepiece_model=str(drop_in["spm"]), source_lang="en", target_lang="de")
    hub = hubs["ours"]
    assert isinstance(hub, GeneratorHubInterface) and isinstance(hub.models[0], VaswaniTransformerModel)
    assert hub.translate(raw, beam=4, lenpen=0.6) == interactive == hubs["fairseq"].translate(raw, beam=4, lenpen=0.6)
    samples = hub.sample(raw, beam=1, sampling=True, sampling_topk=5)
    assert len(samples) == 3 and all(isinstance(s, str) and "\u2581" not in s for s in samples)
    tokens = [hub.encode(s) for s in raw]
    beams = hub.generate(tokens, beam=4, lenpen=0.6)  # every finished hypothesis of the beam, best first
    reference = hubs["fairseq"].generate(tokens, beam=4, lenpen=0.6)
    assert [len(h) for h in beams] == [4, 4, 4]
    for mine, theirs in zip(beams, reference):
        for a, b in zip(mine, theirs):
            assert torch.equal(a["tokens"], b["tokens"]) and abs(float(a["score"]) - float(b["score"])) <= 1e-5
    assert hub.decode(beams[0][0]["tokens"]) == interactive[0]
