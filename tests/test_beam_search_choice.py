"""Which generator a task builds (issue 15, `fairseq_fixes/lean_beam_search.py`): the lean beam
search for one vaswani_transformer and a plain beam search, fairseq's own generator, untouched, for
every option the lean one does not do, each named in the INFO line; and through fairseq-generate's
command line, the same output from both generators and the flag that asks for fairseq's.
"""
import copy
import logging
from argparse import Namespace

import pytest
from conftest import TINY_TRANSLATION_MODEL, make_dictionary
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from fairseq.sequence_scorer import SequenceScorer
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from helpers import run_tool, same_weight_pair
from test_beam_search_parity import assert_same

from vaswani_plugin.models.beam_search import VaswaniBeamSearch
from vaswani_plugin.models.vaswani_transformer import VaswaniDecoder, VaswaniEncoder

LOGGER = "vaswani_plugin.fairseq_fixes.lean_beam_search"
PRINTED = 1e-4 + 1e-5  # one unit of fairseq-generate's 4 printed decimals, plus the 1e-5 the searches may differ by


@pytest.fixture(scope="module")
def task_and_models():
    d = make_dictionary(20)
    ours, theirs = same_weight_pair(d, ["--encoder-layers", "1", "--decoder-layers", "1", "--d-model", "16", "--d-ff",
                                        "32", "--attention-heads", "2", "--share-all-embeddings"], eos_bias=0.0)
    return TranslationTask(TranslationConfig(), d, d), ours, theirs


def build(task, models, caplog, args, **kwargs):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        generator = task.build_generator(models, args, **kwargs)
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    return generator, lines


@pytest.mark.parametrize("args", [GenerationConfig(beam=4, lenpen=0.6), GenerationConfig(beam=1, nbest=1),
                                  GenerationConfig(beam=5, nbest=3, unkpen=1.0, min_len=2, max_len_a=1.2),
                                  Namespace(beam=4)])  # --eval-bleu passes a Namespace of its JSON
def test_a_plain_beam_search_of_our_model_gets_the_lean_one(task_and_models, caplog, args):
    task, ours, _ = task_and_models
    generator, lines = build(task, [ours], caplog, args)
    assert type(generator) is VaswaniBeamSearch
    assert generator.beam_size == getattr(args, "beam") and generator.min_len == getattr(args, "min_len", 1)
    assert lines == ["beam search: vaswani_plugin's (models/beam_search.py; --fairseq-beam-search for fairseq's "
                     "SequenceGenerator)"]


def _options(**kwargs):
    args = GenerationConfig(beam=4)
    for name, value in kwargs.items():  # setattr: GenerationConfig's __init__ predates the plugin's field
        setattr(args, name, value)
    return args


FAIRSEQ_ONLY = [  # (generation options, the flag the INFO line names, fairseq's generator class)
    (_options(fairseq_beam_search=True), "--fairseq-beam-search", SequenceGenerator),
    (Namespace(beam=4, fairseq_beam_search=True), "--fairseq-beam-search", SequenceGenerator),  # --eval-bleu-args
    (_options(sampling=True, sampling_topk=3), "--sampling", SequenceGenerator),
    (_options(diverse_beam_groups=2), "--diverse-beam-groups", SequenceGenerator),
    (_options(diversity_rate=0.5), "--diversity-rate", SequenceGenerator),
    (_options(match_source_len=True), "--match-source-len", SequenceGenerator),
    (_options(constraints="ordered"), "--constraints", SequenceGenerator),
    (_options(prefix_size=1), "--prefix-size", SequenceGenerator),
    (_options(print_alignment="hard"), "--print-alignment", SequenceGeneratorWithAlignment),
    (_options(no_repeat_ngram_size=2), "--no-repeat-ngram-size", SequenceGenerator),
    (_options(temperature=0.7), "--temperature", SequenceGenerator),
]


@pytest.mark.parametrize("args,reason,cls", FAIRSEQ_ONLY, ids=[f"{r}-{type(a).__name__}" for a, r, _ in FAIRSEQ_ONLY])
def test_every_option_the_lean_search_does_not_do_gets_fairseqs_generator(task_and_models, caplog, args, reason, cls):
    task, ours, _ = task_and_models
    generator, lines = build(task, [ours], caplog, args)
    assert type(generator) is cls
    assert lines == [f"beam search: fairseq's SequenceGenerator ({reason})"]


def test_ensembles_other_models_lm_fusion_own_generator_classes_and_prefix_functions_get_fairseqs(
        task_and_models, caplog):
    task, ours, theirs = task_and_models
    args = GenerationConfig(beam=4)
    own_halves = []  # the decoding step runs VaswaniDecoder's maths: a subclass of either half (the parser's
    for half, cls in (("encoder", VaswaniEncoder), ("decoder", VaswaniDecoder)):  # pointer) is not it
        model = copy.deepcopy(ours)
        getattr(model, half).__class__ = type(f"Own{cls.__name__}", (cls,), {})
        own_halves.append((dict(models=[model]), f"{type(ours).__name__} has its own encoder or decoder class"))
    cases = own_halves + [
        (dict(models=[ours, ours]), "an ensemble of 2 models"),
        (dict(models=[theirs]), "a model that is not a vaswani_transformer"),
        (dict(models=[ours], extra_gen_cls_kwargs={"lm_model": theirs, "lm_weight": 0.5}), "--lm-path"),
        (dict(models=[ours], prefix_allowed_tokens_fn=lambda batch, prefix: [4, 5]), "a prefix_allowed_tokens_fn"),
        (dict(models=[ours], seq_gen_cls=SequenceGenerator), "the task builds its own generator"),
    ]
    for kwargs, reason in cases:
        generator, lines = build(task, kwargs.pop("models"), caplog, args, **kwargs)
        assert type(generator) is SequenceGenerator, reason
        assert lines == [f"beam search: fairseq's SequenceGenerator ({reason})"]
    scorer, lines = build(task, [ours], caplog, GenerationConfig(score_reference=True))
    assert type(scorer) is SequenceScorer and lines == []  # scoring, not a search: nothing to choose
    # fairseq-generate passes lm_model=None and lm_weight without --lm-path: still the lean one
    generator, _ = build(task, [ours], caplog, args, extra_gen_cls_kwargs={"lm_model": None, "lm_weight": 1.0})
    assert type(generator) is VaswaniBeamSearch


def hypotheses(proc):
    """{sentence id: [(score, tokens), ...]} from fairseq-generate's H- lines, and its P- lines."""
    out, positional = {}, {}
    for line in proc.stdout.splitlines():
        if line.startswith(("H-", "P-")):
            fields = line.split("\t")
            sid = int(fields[0][2:])
            if line.startswith("H-"):
                out.setdefault(sid, []).append((float(fields[1]), fields[2]))
            else:
                positional.setdefault(sid, []).append([float(x) for x in fields[1].split()])
    return out, positional


def test_fairseq_generate_prints_what_fairseqs_generator_prints(small_trained):
    flags = [small_trained["bin"], "--user-dir", "vaswani_plugin", "--path", small_trained["ckpt"], "--gen-subset",
             "test", "--beam", 4, "--lenpen", 0.6, "--nbest", 2, "--max-len-b", 12, "--batch-size", 5]
    lean = run_tool("fairseq-generate", *flags)
    fairseq = run_tool("fairseq-generate", *flags, "--fairseq-beam-search")
    assert "beam search: vaswani_plugin's (models/beam_search.py" in lean.stderr
    assert "beam search: fairseq's SequenceGenerator (--fairseq-beam-search)" in fairseq.stderr
    (ours, our_positional), (theirs, their_positional) = hypotheses(lean), hypotheses(fairseq)
    assert sorted(ours) == list(range(13)) and all(len(h) == 2 for h in ours.values())
    assert ours.keys() == theirs.keys()
    for sid in ours:
        assert [t for _, t in ours[sid]] == [t for _, t in theirs[sid]], sid
        # printed with 4 decimals: scores 1e-5 apart may print one unit (1e-4) apart
        assert [s for s, _ in ours[sid]] == pytest.approx([s for s, _ in theirs[sid]], abs=PRINTED)
        for a, b in zip(our_positional[sid], their_positional[sid]):
            assert a == pytest.approx(b, abs=PRINTED)
    help_text = run_tool("fairseq-generate", "--user-dir", "vaswani_plugin", "--help").stdout
    assert "--fairseq-beam-search" in help_text and "lean beam search" in help_text


def test_hub_interface_decodes_as_fairseqs_generator_and_takes_the_keyword(small_trained, caplog):
    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

    ckpt = small_trained["ckpt"]
    hub = VaswaniTransformerModel.from_pretrained(str(ckpt.parent), checkpoint_file=ckpt.name,
                                                  data_name_or_path=str(small_trained["bin"]))
    sources = [hub.encode(line) for line in ("w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10")]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        lean = hub.generate(sources, beam=3, lenpen=0.6, max_len_b=8)
        reference = hub.generate(sources, beam=3, lenpen=0.6, max_len_b=8, fairseq_beam_search=True)
    assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == LOGGER] == [
        "beam search: vaswani_plugin's", "beam search: fairseq's SequenceGenerator"]
    assert_same(lean, reference)
