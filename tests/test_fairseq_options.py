"""fairseq's `transformer` option names with `--arch vaswani_transformer*` (`models.fairseq_options`):
option by option against our names and against fairseq's own parsing of the same command line,
through `vaswani-convert --to-fairseq`; the refusals; `--help`.

fairseq's documented commands, scaled down, run through fairseq-train in test_fairseq_commands.py.
"""
import re

import pytest

from conftest import FakeTask, make_dictionary
from helpers import build_from_cli, cli_config, run_tool
from test_convert import trainer_checkpoint
from vaswani_plugin.checkpoint_io import load_checkpoint
from vaswani_plugin.convert import fairseq_model_args
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.models.fairseq_options import OPTIONS, fairseq_defaults, value

SIZES = ["--encoder-layers", "2", "--decoder-layers", "3", "--encoder-attention-heads", "4",
         "--decoder-attention-heads", "4", "--dropout", "0.2", "--attention-dropout", "0.1"]
FAIRSEQ_NAMES = {  # variant: (fairseq's names, ours for the same model)
    "post_ln-target_tied": (
        [*SIZES, "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48",
         "--decoder-ffn-embed-dim", "48", "--activation-dropout", "0.05", "--share-decoder-input-output-embed"],
        [*SIZES, "--d-model", "32", "--d-ff", "48", "--relu-dropout", "0.05"]),
    "pre_ln-share_all": (
        [*SIZES, "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "48", "--encoder-normalize-before",
         "--decoder-normalize-before", "--relu-dropout", "0.05", "--share-all-embeddings", "--activation-fn", "relu",
         "--encoder-layerdrop", "0", "--decoder-output-dim", "32"],  # the last three: at fairseq's defaults
        [*SIZES, "--d-model", "32", "--d-ff", "48", "--normalize-before", "--relu-dropout", "0.05",
         "--share-all-embeddings"]),
}


def model_fields(cfg):
    return {k: v for k, v in dict(cfg.model).items() if k != "_name"}


@pytest.mark.parametrize("variant", FAIRSEQ_NAMES)
def test_fairseq_names_build_the_model_our_names_build(variant):
    fairseq_flags, our_flags = FAIRSEQ_NAMES[variant]
    assert model_fields(cli_config("vaswani_transformer", *fairseq_flags)) == \
        model_fields(cli_config("vaswani_transformer", *our_flags))
    task = FakeTask(make_dictionary(40))
    ours_from_fairseq_names = build_from_cli("vaswani_transformer", task, *fairseq_flags)
    ours = build_from_cli("vaswani_transformer", task, *our_flags)
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours_from_fairseq_names.state_dict().items()} == shapes
    # fairseq's own transformer from the same command line: the same number of weights (Q, K, V packed in ours)
    fairseq = build_from_cli("transformer", task, *fairseq_flags)
    assert sum(p.numel() for p in fairseq.parameters()) == sum(p.numel() for p in ours.parameters())


@pytest.mark.parametrize("variant", FAIRSEQ_NAMES)
def test_to_fairseq_gives_back_the_options_fairseq_reads_from_the_command_line(variant, tmp_path):
    """Option by option: fairseq's own parse of the command line (`--arch transformer`) against the
    options `vaswani-convert --to-fairseq` writes for our model built from the same command line."""
    fairseq_flags, _ = FAIRSEQ_NAMES[variant]
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("en", "de"):
        make_dictionary(40).save(str(data / f"dict.{lang}.txt"))
    trainer_checkpoint("vaswani_transformer", fairseq_flags, data, tmp_path / "ours.pt")
    run_tool("vaswani_plugin.convert", "--to-fairseq", tmp_path / "ours.pt", tmp_path / "fairseq.pt")
    converted = fairseq_model_args(load_checkpoint(str(tmp_path / "fairseq.pt")))
    expected = cli_config("transformer", *fairseq_flags).model
    compared = 0
    for name in OPTIONS:
        if hasattr(expected, name) and name not in MEANT_THE_SAME:
            assert value(converted, name) == value(expected, name), name  # 0 == 0.0, '32' (fairseq) == 32
            compared += 1
    assert compared >= 35  # 37 of the table are in fairseq 0.12's args
    for name, meaning in MEANT_THE_SAME.items():
        assert meaning(converted) == meaning(expected), name


# Written differently by --to-fairseq, with the same meaning for fairseq's transformer.
MEANT_THE_SAME = {
    # layers.py: fairseq falls back on the older --relu-dropout when --activation-dropout is 0
    "activation_dropout": lambda a: a.activation_dropout or a.relu_dropout,
    "relu_dropout": lambda a: a.activation_dropout or a.relu_dropout,
    # --share-all-embeddings ties the decoder's output projection too
    "share_decoder_input_output_embed": lambda a: a.share_decoder_input_output_embed or a.share_all_embeddings,
    # our §3.5 sinusoids, exported as fairseq's learned positions holding exactly that table (convert/cli.py)
    "encoder_learned_pos": lambda a: None,
    "decoder_learned_pos": lambda a: None,
}


@pytest.mark.parametrize("flags, message", [
    (["--encoder-learned-pos"], "fairseq option --encoder-learned-pos = True (learned positional embeddings) cannot "
                                "be expressed by vaswani_transformer; only fairseq's default (False) is accepted"),
    (["--decoder-layerdrop", "0.1"], "--decoder-layerdrop = 0.1 (LayerDrop) cannot be expressed"),
    (["--adaptive-softmax-cutoff", "10,20"], "--adaptive-softmax-cutoff = [10, 20] (adaptive softmax)"),
    (["--activation-fn", "gelu"], "--activation-fn = 'gelu' (an activation other than the ReLU of §3.3)"),
    (["--no-scale-embedding"], "--no-scale-embedding = True (unscaled embeddings"),
    (["--checkpoint-activations"], "--checkpoint-activations = True (activation checkpointing)"),
    (["--encoder-embed-dim", "32", "--decoder-embed-dim", "64"],
     "--encoder-embed-dim 32 and --decoder-embed-dim 64 disagree; vaswani_transformer has one --d-model for both"),
    (["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "128"], "one --d-ff for both"),
    (["--encoder-attention-heads", "4", "--decoder-attention-heads", "8"], "one --attention-heads for both"),
    (["--encoder-embed-dim", "32", "--d-model", "64"], "--encoder-embed-dim 32 and --d-model 64 disagree: both set"),
    (["--activation-dropout", "0.1", "--relu-dropout", "0.2"], "--activation-dropout 0.1 and --relu-dropout 0.2"),
    (["--share-decoder-input-output-embed", "--untie-output-projection"],
     "--share-decoder-input-output-embed and --untie-output-projection disagree"),
])
def test_inexpressible_or_contradicting_options_stop_with_one_line(flags, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        cli_config("vaswani_transformer_tiny", *flags)
    assert "\n" not in str(info.value)


def test_one_sided_options_set_both_sides_and_say_so(caplog):
    with caplog.at_level("INFO"):
        cfg = cli_config("vaswani_transformer_tiny", "--encoder-attention-heads", "2", "--decoder-normalize-before")
    assert cfg.model.attention_heads == 2 and cfg.model.normalize_before
    said = [r.getMessage() for r in caplog.records if r.name.endswith("fairseq_options")]
    assert said == ["--encoder-attention-heads sets --attention-heads for the decoder too: vaswani_transformer has "
                    "one for both",
                    "--decoder-normalize-before sets --normalize-before for the encoder too: vaswani_transformer "
                    "has one for both"]


def test_the_table_covers_every_option_of_fairseqs_transformer_and_its_defaults_are_fairseqs():
    import argparse

    from fairseq.models.transformer import TransformerModel

    parser = argparse.ArgumentParser()
    TransformerModel.add_args(parser)
    names = [a.dest for a in parser._actions if a.dest != "help"]
    assert set(names) - {"max_source_positions", "max_target_positions"} <= set(OPTIONS)  # positions: the task's
    defaults = fairseq_defaults()
    # spot checks written from fairseq's base_architecture / TransformerConfig
    assert (defaults["activation_fn"], defaults["encoder_layerdrop"], defaults["quant_noise_pq_block_size"],
            defaults["adaptive_softmax_factor"], defaults["encoder_learned_pos"]) == ("relu", 0, 8, 4, False)


def test_help_shows_each_option_once_and_what_fairseqs_names_do():
    proc = run_tool("fairseq-train", "/nonexistent-data", "--user-dir", "vaswani_plugin", "--arch",
                    "vaswani_transformer_tiny", "--help")
    options = re.findall(r"^  (--[a-z0-9-]+)", proc.stdout, flags=re.M)
    duplicated = sorted({o for o in options if options.count(o) > 1})
    assert not duplicated
    assert {"--d-model", "--encoder-embed-dim", "--activation-dropout", "--relu-dropout",
            "--share-decoder-input-output-embed", "--encoder-learned-pos", "--lr"} <= set(options)
    text = " ".join(proc.stdout.split())
    assert "--encoder-embed-dim ENCODER_EMBED_DIM fairseq's name: sets --d-model (one value for encoder and " \
           "decoder)" in text
    # the one option whose meaning differs from fairseq's, said in its help line
    assert "fairseq's default (untied) is --untie-output-projection here" in text


def test_fairseq_alone_leaves_the_models_options_out_of_help_and_the_plugin_lists_them():
    """fairseq_fixes.full_help: fairseq acts on -h before it adds the --arch's options."""
    flags = ["/nonexistent-data", "--arch", "transformer", "--lr-scheduler", "inverse_sqrt", "--help"]
    alone = run_tool("fairseq-train", *flags).stdout
    fixed = run_tool("fairseq-train", "--user-dir", "vaswani_plugin", *flags).stdout
    for option in ("--encoder-embed-dim", "--warmup-init-lr"):
        assert option not in alone and option in fixed, option


def test_an_option_fairseq_ignores_alone_is_accepted_alone_and_refused_with_what_it_qualifies():
    """fairseq reads --adaptive-softmax-dropout only with --adaptive-softmax-cutoff (its
    AdaptiveSoftmax); alone it changes nothing, there and here."""
    assert cli_config("vaswani_transformer_tiny", "--adaptive-softmax-dropout", "0.2").model.d_model == 256
    fairseq = build_from_cli("transformer", FakeTask(make_dictionary(40)), *FAIRSEQ_NAMES["post_ln-target_tied"][0],
                             "--adaptive-softmax-dropout", "0.2")
    assert fairseq.decoder.adaptive_softmax is None
    with pytest.raises(ConfigError, match=re.escape("--adaptive-softmax-cutoff = [10] (adaptive softmax)")):
        cli_config("vaswani_transformer_tiny", "--adaptive-softmax-dropout", "0.2", "--adaptive-softmax-cutoff", "10")
