"""`python -m vaswani_plugin.cli.score_bleu`: score fairseq-generate's output the way the paper did.

    python -m vaswani_plugin.cli.score_bleu --generate-output generate.out --ref newstest2014.de \\
        --hyp-out test.hyp.de

Reads the hypotheses (`H-<id>` lines) of fairseq-generate run with `--remove-bpe sentencepiece`,
refuses to score unless there is exactly one per reference line (fairseq 0.12 drops a last batch
smaller than --required-batch-size-multiple without a word), writes them in input order and prints:

- detokenized sacreBLEU with its signature (what is comparable across papers today);
- tokenized BLEU with compound splitting, the paper's number: §6.1's BLEU was computed by
  tensor2tensor's get_ende_bleu.sh, which tokenizes hypotheses and references, rewrites every
  hyphenated compound "a-b" as "a ##AT##-##AT## b" (the GNMT/ConvS2S convention) and runs
  multi-bleu.perl on the result.

Departure: get_ende_bleu.sh tokenizes with Moses' tokenizer.perl (after its unicode punctuation
normalisation); we use sacreBLEU's 13a tokenizer (mteval-v13a's rules), which is installed with
sacreBLEU. Both keep intra-word hyphens, so the compound splitting sees the same compounds, but the
two tokenizers split some punctuation differently and the numbers can differ by a few tenths.
multi-bleu.perl does not smooth; neither do we (smooth_method="none").
"""
from __future__ import annotations

import argparse
import re
import sys

from sacrebleu.metrics import BLEU
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from ..errors import ConfigError

PROG = "python -m vaswani_plugin.cli.score_bleu"
#: get_ende_bleu.sh's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`; Python's re.sub scans left to
#: right without overlaps exactly like Perl's /g, so "a-b-c" becomes "a ##AT##-##AT## b-c" in both.
_COMPOUND = re.compile(r"(\S)-(\S)")


def split_compounds(line: str) -> str:
    """Rewrite hyphenated compounds the way get_ende_bleu.sh does: "rich-text" -> "rich ##AT##-##AT## text"."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hypotheses: list[str], references: list[str], compounds: bool = True):
    """Corpus BLEU of 13a-tokenized text, compounds split when `compounds`, no smoothing; a sacreBLEU score."""
    tokenize = Tokenizer13a()

    def prepare(line: str) -> str:
        line = tokenize(line)
        return split_compounds(line) if compounds else line

    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    return metric.corpus_score([prepare(h) for h in hypotheses], [[prepare(r) for r in references]])


def read_hypotheses(generate_output: str, expected: int) -> list[str]:
    """The `H-` lines of fairseq-generate's output in input order; ConfigError unless ids 0..expected-1
    each appear exactly once."""
    found = {}
    with open(generate_output, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("H-"):
                fields = line.rstrip("\n").split("\t")
                found[int(fields[0][2:])] = fields[2] if len(fields) > 2 else ""
    missing = [i for i in range(expected) if i not in found]
    if len(found) != expected or missing:
        example = f" (first missing: sentence {missing[0]})" if missing else ""
        raise ConfigError(f"{generate_output}: {len(found)} hypotheses for {expected} test sentences{example}; "
                          "expected one per sentence: run fairseq-generate with --required-batch-size-multiple 1 "
                          "and without --skip-invalid-size-inputs-valid-test")
    return [found[i] for i in range(expected)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generate-output", required=True, help="fairseq-generate's stdout")
    parser.add_argument("--ref", required=True, help="detokenized references, one per line, in input order")
    parser.add_argument("--hyp-out", required=True, help="where to write the hypotheses, one per line")
    args = parser.parse_args(argv)
    try:
        with open(args.ref, encoding="utf-8") as handle:
            references = handle.read().split("\n")[:-1]  # not splitlines(): \x0c or \u2028 are not line ends
        hypotheses = read_hypotheses(args.generate_output, len(references))
    except (ConfigError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    with open(args.hyp_out, "w", encoding="utf-8") as handle:
        handle.writelines(h + "\n" for h in hypotheses)
    sacre = BLEU()
    detok = sacre.corpus_score(hypotheses, [references])
    print(f"detokenized sacreBLEU on {len(references)} sentences: {detok.score:.2f} ({sacre.get_signature()})")
    print(f"tokenized BLEU (13a tokens, compounds split, the paper's way): "
          f"{tokenized_bleu(hypotheses, references).score:.2f}")
    print(f"tokenized BLEU (13a tokens, compounds not split): "
          f"{tokenized_bleu(hypotheses, references, compounds=False).score:.2f}")
    print(f"hypotheses in {args.hyp_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
