"""`python -m vaswani_plugin.data.spm`: learn and apply a joint sentencepiece vocabulary (§5.1).

The paper encodes WMT14 English-German with a shared source-target byte-pair vocabulary of about
37000 tokens. The sentencepiece package installs no command-line tools of its own, so the recipes
use this module:

    python -m vaswani_plugin.data.spm train --inputs train.en train.de --model-prefix spm --vocab-size 37000
    python -m vaswani_plugin.data.spm encode --model spm.model --input train.en train.de \
        --output train.sp.en train.sp.de

`encode` takes several files in one process: each start of Python imports fairseq through this
package (seconds a start), so the recipes encode every split and language with one call.
"""
import argparse
import os
import sys


def train(inputs, model_prefix: str, vocab_size: int, model_type: str = "bpe", threads: int = 2,
          normalization: str = "nmt_nfkc") -> None:
    """One vocabulary for all `inputs` (source and target together: joint, as in §5.1).
    `normalization` is sentencepiece's normalization rule (its default, or "identity")."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(inputs), model_prefix=model_prefix, vocab_size=vocab_size, model_type=model_type,
        normalization_rule_name=normalization, character_coverage=1.0, num_threads=threads,
        input_sentence_size=10_000_000,
        shuffle_input_sentence=True, minloglevel=2,
        # fairseq-preprocess builds its own dictionary with its own specials: keep spm's out of the text
        bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
    )


def encode(model: str, input_path: str, output_path: str) -> int:
    """Write each line of `input_path` as space-separated pieces; returns the line count."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model)
    count = 0
    with open(input_path, encoding="utf-8") as src, open(output_path, "w", encoding="utf-8") as out:
        for count, line in enumerate(src, 1):
            out.write(" ".join(sp.encode(line.rstrip("\n"), out_type=str)) + "\n")
    return count


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vaswani_plugin.data.spm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="learn a joint vocabulary from raw text files")
    t.add_argument("--inputs", nargs="+", required=True, help="raw text, one sentence per line")
    t.add_argument("--model-prefix", required=True, help="writes PREFIX.model and PREFIX.vocab")
    t.add_argument("--vocab-size", type=int, required=True, help="pieces in the vocabulary")
    t.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe", help="default: bpe, as the paper")
    e = sub.add_parser("encode", help="split raw text into pieces")
    e.add_argument("--model", required=True, help="PREFIX.model from `train`")
    e.add_argument("--input", nargs="+", required=True, help="raw text files")
    e.add_argument("--output", nargs="+", required=True, help="one output per --input file, in the same order")
    args = parser.parse_args(argv)
    if args.command == "encode" and len(args.input) != len(args.output):
        parser.error(f"--input names {len(args.input)} file(s) but --output {len(args.output)}; "
                     "expected one output per input")
    if args.command == "train":
        named = [("--inputs", path) for path in args.inputs]
    else:
        named = [("--model", args.model)] + [("--input", path) for path in args.input]
    for flag, path in named:  # one line naming the flag, not sentencepiece's traceback
        if not os.path.isfile(path):
            parser.error(f"{flag} {path}: no such file")
    if args.command == "train":
        train(args.inputs, args.model_prefix, args.vocab_size, args.model_type)
        print(f"wrote {args.model_prefix}.model and {args.model_prefix}.vocab", file=sys.stderr)
    else:
        for input_path, output_path in zip(args.input, args.output):
            n = encode(args.model, input_path, output_path)
            print(f"encoded {n} lines: {input_path} -> {output_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
