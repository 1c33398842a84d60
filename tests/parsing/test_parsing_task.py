"""--task constituency_parsing end to end through the real command-line tools, on a small synthetic
treebank: prepare -> fairseq-train (--eval-f1) -> fairseq-generate (with and without constrained
decoding) -> fairseq-interactive; and constrained decoding on a randomly initialised model."""
import os
import re
from argparse import Namespace

import pytest
import torch
from helpers import random_parser, run_tool

import vaswani_plugin
import vaswani_plugin.tasks.constituency_parsing  # noqa: F401  (registers the task in this process)
from vaswani_plugin.parsing.evalb import evalb_score
from vaswani_plugin.parsing.linearize import delinearize
from vaswani_plugin.parsing.prepare import prepare
from vaswani_plugin.parsing.synthetic_treebank import write_treebank
from vaswani_plugin.parsing.trees import read_treebank
from vaswani_plugin.parsing.schemes import PRETERMINAL, get_scheme, scheme_names
from vaswani_plugin.tasks.parse_constraints import TargetSymbols, count_words
from vaswani_plugin.tasks.parse_search import ParseConstrainedBeamSearch, ParseSequenceGenerator

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


def _random_model_task(tmp_path, scheme):
    task, model, sample, gold, _ = random_parser(str(tmp_path), TINY, scheme, reverse_source=scheme == "tags")
    return task, model, sample, gold


@pytest.mark.parametrize("scheme", scheme_names())
def test_constrained_decoding_on_a_random_model(tmp_path, scheme):
    """An untrained model, all beams: every hypothesis is well formed with one pre-terminal per word,
    also when the length limit is far too short (it is raised to fit the shortest tree)."""
    task, model, sample, gold = _random_model_task(tmp_path, scheme)
    for max_len_b in (200, 1):
        generator = task.build_generator([model], Namespace(beam=5, max_len_a=0, max_len_b=max_len_b))
        assert count_words(sample["net_input"]["src_tokens"], task.word_start).tolist() == \
            [len(gold[i].words()) for i in sample["id"].tolist()]
        with torch.no_grad():
            hypos = generator.generate([model], sample)
        for row, sent_id in enumerate(sample["id"].tolist()):
            words = gold[sent_id].words()
            assert hypos[row]
            for hypo in hypos[row]:
                tokens = [task.target_dictionary[i] for i in hypo["tokens"].tolist()[:-1]]
                assert delinearize(tokens, words, scheme=scheme).repairs == {}, tokens
                assert sum(get_scheme(scheme).classify(t).kind == PRETERMINAL for t in tokens) == len(words)


def test_constrained_decoding_keeps_its_generator_and_plain_decoding_gets_the_lean_one(tmp_path):
    """The task's constrained search is its own generator class: fairseq's loop, never the lean beam
    search (issue 15); without --constrained-decoding the lean one decodes as fairseq's would."""
    from vaswani_plugin.models.beam_search import VaswaniBeamSearch

    task, model, sample, _ = _random_model_task(tmp_path, "vinyals")
    assert type(task.build_generator([model], Namespace(beam=3))) is ParseSequenceGenerator
    task.cfg.constrained_decoding = False
    options = dict(beam=3, lenpen=0.6, max_len_a=1, max_len_b=10)
    lean = task.build_generator([model], Namespace(**options))
    reference = task.build_generator([model], Namespace(**options, fairseq_beam_search=True))
    assert type(lean) is VaswaniBeamSearch and type(reference) is not VaswaniBeamSearch
    with torch.no_grad():
        for mine, theirs in zip(lean.generate([model], sample), reference.generate([model], sample)):
            assert [h["tokens"].tolist() for h in mine] == [h["tokens"].tolist() for h in theirs]
            assert [float(h["score"]) for h in mine] == pytest.approx([float(h["score"]) for h in theirs], abs=1e-5)


class _StateCheckingSearch(ParseConstrainedBeamSearch):
    """Before every step, compares the carried state of each live hypothesis with the state recomputed
    from its whole prefix by a plain-Python walk (the reference), and records the beam reorders."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = self.reordered = self.pruned = 0

    def step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None, candidate_multiple=2):
        if step > 0:
            self._check(prev_output_tokens[:, 1:].tolist())
        out = super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs, candidate_multiple)
        beams = out[2]
        self.reordered += int(not torch.equal(beams[:, :lprobs.size(1)], torch.arange(lprobs.size(1)).expand_as(
            beams[:, :lprobs.size(1)])))
        self.steps += 1
        return out

    def prune_sentences(self, batch_idxs):
        self.pruned += 1
        super().prune_sentences(batch_idxs)

    def _check(self, prefixes):
        s = self.symbols
        expected = []
        for prefix in prefixes:
            depth, preterminals, stack, last_open = 0, 0, [], False
            for token in prefix:
                last_open = bool(s.is_open[token])
                if last_open:
                    depth += 1
                    stack.append(int(s.close_of[token]))
                elif s.is_close[token]:
                    depth -= 1
                    stack = stack[:-1]
                preterminals += int(s.is_pre[token])
            expected.append((depth, preterminals, stack[-1] if stack else -1, last_open))
        state = self.state
        carried = list(zip(state.depth.tolist(), state.preterminals.tolist(), state.inner_close.tolist(),
                           state.last_was_open.tolist()))
        assert carried == expected
        assert state.length == len(prefixes[0])


@pytest.mark.parametrize("scheme", scheme_names())
def test_carried_state_equals_the_state_recomputed_from_the_prefix(tmp_path, scheme):
    """The constrained search's state, carried and reordered with the beams (and pruned as sentences
    finish), equals the state recomputed from every hypothesis's full prefix, at every step."""
    task, model, sample, gold = _random_model_task(tmp_path, scheme)
    search = _StateCheckingSearch(task.tgt_dict, TargetSymbols(task.tgt_dict, scheme))
    generator = ParseSequenceGenerator([model], task.tgt_dict, word_start=task.word_start, search_strategy=search,
                                       beam_size=5, max_len_a=0, max_len_b=200)
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    assert search.steps > 10 and search.reordered > 0 and search.pruned > 0  # the hooks were all exercised
    for row, sent_id in enumerate(sample["id"].tolist()):
        tokens = [task.target_dictionary[i] for i in hypos[row][0]["tokens"].tolist()[:-1]]
        assert delinearize(tokens, gold[sent_id].words(), scheme=scheme).repairs == {}


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


def test_trees_are_written_when_the_last_batched_sentence_is_decoded(prepared, tmp_path):
    """No exit hook: the split's trees are written by SplitCollector.finish as soon as the last sentence
    the batches hold is decoded; a sentence filtered out of the batches (too long here) is known from
    the start and gets a flat tree and a warning."""
    import io

    from vaswani_plugin.parsing.linearize import Repairs
    from vaswani_plugin.tasks.parse_generation import SplitCollector

    _, data, _ = prepared
    task, _ = _task(data)
    task.load_dataset("test")
    dataset = task.dataset("test")
    longest = int(dataset.src_sizes.max())
    too_long = {i for i in range(len(dataset)) if dataset.src_sizes[i] == longest}
    task.get_batch_iterator(dataset, max_sentences=8, max_positions=(longest - 1, 1024), ignore_invalid_inputs=True)
    assert task.batched_ids["test"] == set(range(TEST_SENTENCES)) - too_long

    gold = task.gold_trees("test")
    out, printed = str(tmp_path / "t.trees"), io.StringIO()
    collector = SplitCollector("test", gold, out, task.batched_ids["test"], out=printed)
    decoded = sorted(task.batched_ids["test"], reverse=True)  # any order
    for sent_id in decoded[:-1]:
        collector.add(sent_id, gold[sent_id], Repairs())
    assert not os.path.exists(out) and printed.getvalue() == ""
    collector.add(decoded[-1], gold[decoded[-1]], Repairs())
    written = read_treebank(out)
    assert len(written) == TEST_SENTENCES
    for i, tree in enumerate(written):
        assert tree == gold[i] if i not in too_long else tree.label == "TOP" and tree.words() == gold[i].words()
    assert f"WARNING: {len(too_long)} sentences were not decoded" in printed.getvalue()
