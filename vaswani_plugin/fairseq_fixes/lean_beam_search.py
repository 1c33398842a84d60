"""fairseq's `FairseqTask.build_generator` gives one vaswani_transformer the plugin's lean beam search.

fairseq-generate, fairseq-interactive, the hub interface and `--eval-bleu` validation all take their
generator from the task's `build_generator`, which builds fairseq's general `SequenceGenerator`.
When the plugin is loaded, that call builds `models.beam_search.VaswaniBeamSearch` instead (same
arguments, same hypotheses, less work per step) when the search is a plain beam search of a single
vaswani_transformer; anything else (the options in `fairseq_only_reason`, a task's own generator
class such as the parsing task's constrained search) gets fairseq's generator, unchanged. One INFO
line says which generator decodes and why. `--fairseq-beam-search` (a generation option added here,
also a keyword of the hub's `generate`/`translate`) always asks for fairseq's.
"""
import dataclasses
import logging
from typing import Optional

from fairseq.dataclass.configs import GenerationConfig
from fairseq.dataclass.initialize import hydra_init
from fairseq.tasks import FairseqTask

logger = logging.getLogger(__name__)

FLAG = "fairseq_beam_search"
_fairseq_build_generator = FairseqTask.build_generator


def _add_generation_option(name: str, default: bool, help_text: str) -> None:
    """A bool field of fairseq's GenerationConfig: `--NAME` in every generation parser (and --help),
    kept by the namespace -> omegaconf conversion, read as `cfg.generation.NAME`. hydra's schema
    of the config is registered again so that it knows the field."""
    if name in GenerationConfig.__dataclass_fields__:
        return
    spec = dataclasses.field(default=default, metadata={"help": help_text})
    spec.name, spec.type, spec._field_type = name, bool, dataclasses._FIELD
    GenerationConfig.__dataclass_fields__[name] = spec
    GenerationConfig.__annotations__[name] = bool
    setattr(GenerationConfig, name, default)
    hydra_init()


_add_generation_option(FLAG, False, "decode with fairseq's SequenceGenerator, not vaswani_plugin's lean beam search "
                                    "(which a single vaswani_transformer gets by default)")


def fairseq_only_reason(models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None) -> Optional[str]:
    """Why these models and generation options need fairseq's generator; None when the lean beam
    search does the same job."""
    from ..models.vaswani_transformer import VaswaniDecoder, VaswaniEncoder, VaswaniTransformerModel

    def option(name, default):
        value = getattr(args, name, default)
        return default if value is None else value

    # fairseq-generate always passes lm_model (None without --lm-path) and lm_weight
    extra = {key: value for key, value in (extra_gen_cls_kwargs or {}).items()
             if not (key == "lm_model" and value is None) and key != "lm_weight"}
    reasons = [
        (option(FLAG, False), "--fairseq-beam-search"),
        (option("score_reference", False), "--score-reference"),
        (seq_gen_cls is not None, "the task builds its own generator"),
        (len(models) != 1, f"an ensemble of {len(models)} models"),
        (not all(isinstance(m, VaswaniTransformerModel) for m in models), "a model that is not a vaswani_transformer"),
        # The lean search runs VaswaniDecoder's maths itself (modules/decoding_step.py) and makes no
        # reorder_encoder_out calls: a subclass of either half (the parser's pointer) may need both.
        (not all(type(m.encoder) is VaswaniEncoder and type(m.decoder) is VaswaniDecoder for m in models),
         f"{type(models[0]).__name__} has its own encoder or decoder class"),
        (option("sampling", False), "--sampling"),
        (option("diverse_beam_groups", -1) > 0, "--diverse-beam-groups"),
        (option("diversity_rate", -1) > -1, "--diversity-rate"),
        (option("match_source_len", False), "--match-source-len"),
        (bool(option("constraints", None)), "--constraints"),
        (option("prefix_size", 0) > 0, "--prefix-size"),
        (prefix_allowed_tokens_fn is not None or option("prefix_allowed_tokens_fn", None) is not None,
         "a prefix_allowed_tokens_fn"),
        (bool(option("print_alignment", False)), "--print-alignment"),
        (option("no_repeat_ngram_size", 0) > 0, "--no-repeat-ngram-size"),
        (option("temperature", 1.0) != 1.0, "--temperature"),
        ("lm_model" in extra, "--lm-path"),
        (bool(set(extra) - {"lm_model"}), f"generator arguments {sorted(set(extra) - {'lm_model'})}"),
    ]
    return next((reason for used, reason in reasons if used), None)


def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
    """fairseq's `build_generator`, with `VaswaniBeamSearch` as the generator class where it fits."""
    from ..models.beam_search import VaswaniBeamSearch

    reason = fairseq_only_reason(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
    if reason is None:
        logger.info("beam search: vaswani_plugin's (models/beam_search.py; --fairseq-beam-search for fairseq's "
                    "SequenceGenerator)")
        return _fairseq_build_generator(self, models, args, VaswaniBeamSearch, extra_gen_cls_kwargs)
    if reason != "--score-reference":  # fairseq's SequenceScorer: no search at all
        logger.info("beam search: fairseq's SequenceGenerator (%s)", reason)
    return _fairseq_build_generator(self, models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)


FairseqTask.build_generator = build_generator
