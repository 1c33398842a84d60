"""`vaswani-plot`: look at what a model learned and how its training went.

    vaswani-plot attention --path CKPT --data DATA-BIN --source "..." [--target "..."] --layer L \\
        [--kind encoder|decoder|encoder-decoder] [--heads all|0,3] [--style lines|heatmap] --out FILE.png|svg
    vaswani-plot curves LOG [LOG ...] --out FILE.png

`attention` draws one sentence's attention weights, per head, as the model computes them (the
explicit weights path of its attention modules, eval mode): lines between two columns of tokens,
one colour per head, as in the paper's Figures 3-5, or heatmaps. Layers and heads count from 0.
Queries (rows, left column) are labelled by what their position predicts, keys (columns, right
column) by the token their position holds. For the encoder both are the source pieces; on the
decoder side a position holds the previous target token (</s> first, as fairseq feeds it) and
predicts the next, so decoder self-attention's "looking at itself" links a token to the one before.

`curves` draws loss, perplexity, learning rate and BLEU / F1 (when logged, e.g. with --eval-bleu
or --eval-f1) over updates from fairseq-train logs, --log-format json or simple (the default when
the output goes to a file), one colour per log.
"""
import argparse
import logging
import os
from typing import List, Optional, Tuple

from ..errors import ConfigError

PROG = "vaswani-plot"


def parse_size(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """'1200x800' -> (1200, 800) pixels."""
    if text is None:
        return None
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--size {text}: expected WIDTHxHEIGHT in pixels, e.g. 1200x800") from None
    if not (50 <= w <= 10000 and 50 <= h <= 10000):
        raise ConfigError(f"--size {text}: width and height must be between 50 and 10000 pixels")
    return w, h


def parse_heads(text: str, num_heads: int) -> List[int]:
    """'all' or a comma-separated list of head numbers, from 0."""
    if text == "all":
        return list(range(num_heads))
    try:
        heads = [int(h) for h in text.split(",")]
    except ValueError:
        raise ConfigError(f"--heads {text}: expected 'all' or head numbers such as 0,3") from None
    bad = [h for h in heads if not 0 <= h < num_heads]
    if bad:
        raise ConfigError(f"--heads {text}: the model has heads 0 to {num_heads - 1}")
    return heads


def _check_out(out: str, extensions) -> None:
    if os.path.splitext(out)[1].lower() not in extensions:
        raise ConfigError(f"--out {out}: expected a file name ending in {' or '.join(extensions)}")


def attention(args) -> None:
    from . import figures
    from .sentence import find_spm_model, load_model, prepare
    from .weights import attention_weights

    figures.require_matplotlib()
    _check_out(args.out, (".png", ".svg"))
    size = parse_size(args.size)
    model, task = load_model(args.path, args.data)
    spm_path = None if args.pretokenized else find_spm_model(args.data, args.spm_model)
    sentence = prepare(model, task, args.source, args.target, spm_path)
    layers = attention_weights(model, sentence.src_tokens, sentence.prev_output_tokens)[args.kind]
    if not 0 <= args.layer < len(layers):
        raise ConfigError(f"--layer {args.layer}: the model has {args.kind} layers 0 to {len(layers) - 1}")
    weights = layers[args.layer][0]  # [H, T, S] of the one sentence
    heads = parse_heads(args.heads, weights.size(0))
    queries = sentence.source_labels if args.kind == "encoder" else sentence.decoder_outputs
    keys = sentence.decoder_inputs if args.kind == "decoder" else sentence.source_labels
    name = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
            "encoder-decoder": "encoder-decoder attention"}[args.kind]
    title = f"{name}, layer {args.layer} (of 0-{len(layers) - 1})"
    panels = len(heads) + (args.style == "lines" and len(heads) > 1)
    size = size or figures.default_attention_size(args.style, panels, len(queries), len(keys))
    draw = figures.draw_lines if args.style == "lines" else figures.draw_heatmaps
    draw(weights, heads, queries, keys, title, args.out, size)
    print(f"{PROG}: wrote {args.out} ({size[0]}x{size[1]} px; {name}, layer {args.layer}, heads "
          f"{','.join(map(str, heads))}; target: {' '.join(sentence.decoder_outputs[:-1])})")


def curves(args) -> None:
    from . import figures
    from .logs import curves as to_curves
    from .logs import read_log

    figures.require_matplotlib()
    _check_out(args.out, (".png", ".svg", ".pdf"))
    size = parse_size(args.size) or (1200, 800)
    names = [os.path.basename(p) for p in args.logs]
    if len(set(names)) < len(names):
        names = list(args.logs)  # same file names in different directories: tell them apart
    runs = {name: to_curves(read_log(path)) for name, path in zip(names, args.logs)}
    figures.draw_curves(runs, args.out, size)
    print(f"{PROG}: wrote {args.out} ({size[0]}x{size[1]} px; {len(runs)} run(s))")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("attention", help="one sentence's attention weights, per head")
    a.add_argument("--path", required=True, help="a vaswani_transformer checkpoint (.pt)")
    a.add_argument("--data", required=True, help="the data directory it was trained on (its dictionaries)")
    a.add_argument("--source", required=True, help="the source sentence, raw text")
    a.add_argument("--target", help="the target sentence, raw text (default: the model's translation, "
                                    "beam 4, length penalty 0.6)")
    a.add_argument("--spm-model", help="sentencepiece model (default: spm.model in --data or the directory "
                                       "above it, where recipes/quickstart.sh writes it)")
    a.add_argument("--pretokenized", action="store_true",
                   help="--source and --target are already space-separated dictionary tokens; no sentencepiece")
    a.add_argument("--kind", choices=["encoder", "decoder", "encoder-decoder"], default="encoder",
                   help="encoder self-attention (the paper's figures; default), decoder self-attention, "
                        "or encoder-decoder attention")
    a.add_argument("--layer", type=int, required=True, help="layer, from 0")
    a.add_argument("--heads", default="all", help="'all' (default) or head numbers from 0, e.g. 0,3")
    a.add_argument("--style", choices=["lines", "heatmap"], default="lines",
                   help="lines between two columns of tokens (Figures 3-5; default) or heatmaps")
    a.add_argument("--size", help="WIDTHxHEIGHT in pixels (default: from the number of tokens and heads)")
    a.add_argument("--out", required=True, help="FILE.png or FILE.svg")
    a.set_defaults(run=attention)
    c = sub.add_parser("curves", help="training curves from fairseq-train logs")
    c.add_argument("logs", nargs="+", metavar="LOG", help="fairseq-train output, --log-format json or simple")
    c.add_argument("--size", help="WIDTHxHEIGHT in pixels (default: 1200x800)")
    c.add_argument("--out", required=True, help="FILE.png, FILE.svg or FILE.pdf")
    c.set_defaults(run=curves)
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    logging.getLogger().setLevel(logging.WARNING)  # fairseq's and matplotlib's chatter would bury our one line
    args.run(args)


if __name__ == "__main__":
    main()
