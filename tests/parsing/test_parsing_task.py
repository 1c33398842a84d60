"""--task constituency_parsing end to end through the real command-line tools, on a small synthetic
treebank: prepare -> fairseq-train (--eval-f1) -> fairseq-generate (with and without constrained
decoding) -> fairseq-interactive; and constrained decoding on a randomly initialised model."""
import os
import re
from argparse import Namespace

import pytest
import torch
from helpers import run_tool

import vaswani_plugin
import vaswani_plugin.tasks.constituency_parsing  # noqa: F401  (registers the task in this process)
from vaswani_plugin.parsing.evalb import evalb_score
from vaswani_plugin.parsing.linearize import delinearize
from vaswani_plugin.parsing.prepare import prepare
from vaswani_plugin.parsing.synthetic_treebank import write_treebank
from vaswani_plugin.parsing.trees import read_treebank
from vaswani_plugin.tasks.parse_constraints import count_words

USER_DIR = vaswani_plugin.user_dir()
TEST_SENTENCES = 37  # not a multiple of 8: fairseq would drop a last partial batch
TINY = ["--arch", "vaswani_transformer", "--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "32",
        "--d-ff", "64", "--attention-heads", "2"]


def _run(tool, *args, stdin=None):
    return run_tool(tool, *args, stdin=stdin, timeout=300)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("parse")
    trees = write_treebank(str(root / "treebank"), train=300, valid=21, test=TEST_SENTENCES, seed=3)
    data = str(root / "data")
    prepare({"train": [trees["train"]], "valid": [trees["valid"]], "test": [trees["test"]]}, data)
    return root, data, trees


@pytest.fixture(scope="module")
def trained(prepared):
    root, data, _ = prepared
    save = str(root / "checkpoints")
    done = _run("fairseq-train", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", *TINY,
                "--criterion", "label_smoothed_xent", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
                "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", "30", "--lr", "3e-3", "--lr-as-peak",
                "--batch-size", "16", "--max-update", "60", "--save-dir", save, "--no-epoch-checkpoints",
                "--eval-f1", "--eval-f1-args", '{"beam": 2, "max_len_a": 1, "max_len_b": 30}',
                "--best-checkpoint-metric", "f1", "--maximize-best-checkpoint-metric", "--validate-interval", "2",
                "--log-format", "simple", "--cpu", "--seed", "1")
    return os.path.join(save, "checkpoint_best.pt"), done.stdout + done.stderr


def _generate(data, checkpoint, out, *flags):
    done = _run("fairseq-generate", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", "--path",
                checkpoint, "--gen-subset", "test", "--trees-output", out, "--cpu", *flags)
    hypotheses = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", done.stdout, flags=re.M))
    return done.stdout, {int(k): v for k, v in hypotheses.items()}


def test_eval_f1_is_logged_during_training(trained):
    checkpoint, log = trained
    valid_lines = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert valid_lines and all(re.search(r"\| f1 [\d.]+ \|", line) for line in valid_lines), valid_lines
    assert all(re.search(r"\| malformed [\d.]+ ", line) for line in valid_lines)
    assert len(valid_lines) >= 2 and "| best_f1 " in valid_lines[-1]  # --best-checkpoint-metric f1 works
    assert os.path.isfile(checkpoint)


def test_generate_writes_one_tree_per_sentence_and_its_f1(prepared, trained, tmp_path):
    _, data, trees = prepared
    out = str(tmp_path / "test.trees")
    # default --required-batch-size-multiple (8) and 5-sentence batches: no sentence may be dropped
    stdout, hypotheses = _generate(data, trained[0], out, "--beam", "4", "--batch-size", "5", "--max-len-a", "1",
                                   "--max-len-b", "50")
    gold = read_treebank(trees["test"])
    predicted = read_treebank(out)
    assert len(gold) == len(predicted) == len(hypotheses) == TEST_SENTENCES
    assert [t.words() for t in predicted] == [t.words() for t in gold]
    printed = float(re.search(r"^Parse test: EVALB \(COLLINS\) F1 = ([\d.]+)", stdout, flags=re.M).group(1))
    assert printed == pytest.approx(round(evalb_score(gold, predicted).f1, 2), abs=1e-9)
    malformed = sum(delinearize(hypotheses[i], gold[i].words()).repairs.count > 0 for i in range(TEST_SENTENCES))
    assert f"malformed outputs {malformed}/{TEST_SENTENCES} " in stdout
    assert os.path.isfile(out + ".evalb")


def test_constrained_generate_never_emits_a_malformed_tree(prepared, trained, tmp_path):
    _, data, trees = prepared
    out = str(tmp_path / "constrained.trees")
    stdout, hypotheses = _generate(data, trained[0], out, "--constrained-decoding", "--beam", "21", "--lenpen", "0.3",
                                   "--max-len-a", "1", "--max-len-b", "300", "--required-batch-size-multiple", "1")
    gold = read_treebank(trees["test"])
    assert len(hypotheses) == len(read_treebank(out)) == TEST_SENTENCES
    for i, tree in enumerate(gold):
        tokens = hypotheses[i].split()
        assert sum(not t.startswith(("(", ")")) for t in tokens) == len(tree.words())
        assert delinearize(tokens, tree.words()).repairs == {}, hypotheses[i]
    assert f"malformed outputs 0/{TEST_SENTENCES} (0.00%) | repairs: none" in stdout


def test_interactive_turns_a_sentence_into_a_tree(prepared, trained):
    _, data, _ = prepared
    sentence = "the company bought a new bank ."
    done = _run("fairseq-interactive", data, "--user-dir", USER_DIR, "--task", "constituency_parsing", "--path",
                trained[0], "--beam", "4", "--constrained-decoding", "--cpu", stdin=sentence + "\nJones rose .\n")
    trees = re.findall(r"^D-\d+\t\S+\t(.*)$", done.stdout, flags=re.M)
    assert len(trees) == 2
    from vaswani_plugin.parsing.trees import parse_tree

    assert parse_tree(trees[0]).words() == sentence.split()
    assert parse_tree(trees[1]).words() == ["Jones", "rose", "."]


def _task(data, *flags):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       [data, "--task", "constituency_parsing", "--user-dir", USER_DIR, *TINY, *flags])
    cfg = convert_namespace_to_omegaconf(args)
    return tasks.setup_task(cfg.task), cfg


def test_no_sentence_is_dropped_outside_training(prepared):
    _, data, _ = prepared
    task, _ = _task(data)
    for split, size in (("valid", 21), ("test", TEST_SENTENCES)):
        task.load_dataset(split)
        batches = task.get_batch_iterator(task.dataset(split), max_sentences=8, required_batch_size_multiple=8,
                                          ).next_epoch_itr(shuffle=False)
        ids = sorted(i for batch in batches for i in batch["id"].tolist())
        assert ids == list(range(size))
        assert {batch["parse_split"] for batch in task.get_batch_iterator(
            task.dataset(split), max_sentences=8).next_epoch_itr(shuffle=False)} == {split}


@pytest.mark.parametrize("scheme", ["vinyals", "tags"])
def test_constrained_decoding_on_a_random_model(tmp_path, scheme):
    """An untrained model, all beams: every hypothesis is well formed with one pre-terminal per word,
    also when the length limit is far too short (it is raised to fit the shortest tree)."""
    trees = write_treebank(str(tmp_path / "tb"), train=60, valid=5, test=13, seed=5)
    data = str(tmp_path / "data")
    prepare({"train": [trees["train"]], "valid": [trees["valid"]], "test": [trees["test"]]}, data, scheme=scheme,
            reverse_source=scheme == "tags")
    task, cfg = _task(data, "--constrained-decoding")
    torch.manual_seed(0)
    model = task.build_model(cfg.model).eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    gold = read_treebank(trees["test"])
    for max_len_b in (200, 1):
        generator = task.build_generator([model], Namespace(beam=5, max_len_a=0, max_len_b=max_len_b))
        sample = dataset.collater([dataset[i] for i in range(len(dataset))])
        assert count_words(sample["net_input"]["src_tokens"], task.word_start).tolist() == \
            [len(gold[i].words()) for i in sample["id"].tolist()]
        with torch.no_grad():
            hypos = generator.generate([model], sample)
        for row, sent_id in enumerate(sample["id"].tolist()):
            words = gold[sent_id].words()
            assert hypos[row]
            for hypo in hypos[row]:
                tokens = [task.target_dictionary[i] for i in hypo["tokens"].tolist()[:-1]]
                assert delinearize(tokens, words).repairs == {}, tokens
                assert sum(not t.startswith(("(", ")")) for t in tokens) == len(words)


def test_min_len_with_constrained_decoding_is_refused_in_one_line(prepared):
    """fairseq masks EOS while step < --min-len, before the search step: the constrained search could not
    end a finished tree there, so the combination is refused by name instead of silently misbehaving."""
    from vaswani_plugin.errors import ConfigError

    _, data, _ = prepared
    task, cfg = _task(data, "--constrained-decoding")
    model = task.build_model(cfg.model)
    with pytest.raises(ConfigError) as refused:
        task.build_generator([model], Namespace(beam=2, min_len=3))
    message = str(refused.value)
    assert "\n" not in message and "--constrained-decoding" in message and "--min-len" in message
    task.build_generator([model], Namespace(beam=2, min_len=1))  # the default stays allowed
