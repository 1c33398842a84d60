"""The table of benchmarks/multi30k_fidelity.sh: valid loss / nll and test2016 BLEU of fairseq's
transformer and ours at equal updates, per seed, with mean and spread; appended to RESULTS.md.

    python benchmarks/fidelity_table.py --runs multi30k-work/fidelity --short 810 --long 3000

Reads what the shell script left in each run directory MODEL-sSEED/: `eval-UPDATES.txt` (the
fairseq-validate line and vaswani_plugin.cli.score_bleu's output) and the json training log.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_results, markdown_table  # noqa: E402

MODELS = {"fairseq": "fairseq `transformer`", "ours": "`vaswani_transformer_tiny`"}
VALID = re.compile(r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+)")
BLEU = re.compile(r"detokenized sacreBLEU on (\d+) sentences: ([\d.]+)")


def read_eval(path: str) -> dict:
    text = open(path, encoding="utf-8").read()
    valid, bleu = VALID.search(text), BLEU.search(text)
    if not valid or not bleu:
        raise SystemExit(f"fidelity_table.py: error: {path}: expected a fairseq-validate line and a sacreBLEU line")
    return {"loss": float(valid[1]), "nll": float(valid[2]), "bleu": float(bleu[2]), "sentences": int(bleu[1])}


def train_losses(log: str) -> dict:
    """{num_updates: loss} of the json `train_inner` lines of a training log ({} when it is missing)."""
    losses = {}
    if os.path.exists(log):
        with open(log, encoding="utf-8") as handle:
            for line in handle:
                if "| train_inner |" in line:
                    entry = json.loads(line[line.index("{"):])
                    losses[int(entry["num_updates"])] = float(entry["loss"])
    return losses


def collect(runs: str) -> dict:
    """{(model, seed): {updates: eval dict}} plus the train loss 10 updates before each."""
    found = {}
    for run in sorted(glob.glob(os.path.join(runs, "*-s*"))):
        model, seed = os.path.basename(run).rsplit("-s", 1)
        losses = train_losses(os.path.join(run, f"{model}-s{seed}.log"))  # read once per run
        for path in glob.glob(os.path.join(run, "eval-*.txt")):
            updates = int(os.path.basename(path)[5:-4])
            result = read_eval(path)
            result["train_loss"] = losses.get(updates - 10)
            found.setdefault((model, int(seed)), {})[updates] = result
    return found


def fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def summary(values, digits=2) -> str:
    """mean (min-max) of the values that exist."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0], digits)
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def short_table(found: dict, short: int) -> str:
    rows = []
    for model, label in MODELS.items():
        results = [(seed, r[short]) for (m, seed), r in sorted(found.items()) if m == model and short in r]
        for seed, r in results:
            rows.append([label, seed, fmt(r["train_loss"]), fmt(r["loss"]), fmt(r["nll"]), fmt(r["bleu"])])
        if len(results) > 1:
            rows.append([f"**{label}, mean (min-max)**", len(results),
                         *(f"**{summary([r[key] for _, r in results])}**"
                           for key in ("train_loss", "loss", "nll", "bleu"))])
    return markdown_table([f"model (at {short} updates)", "seed", f"train loss at {short - 10}",
                           "valid loss", "valid nll", "test2016 sacreBLEU"], rows)


def long_table(found: dict, seed: int) -> str:
    updates = sorted({u for (m, s), r in found.items() if s == seed for u in r})
    rows = []
    for u in updates:
        row = [u]
        for model in MODELS:
            r = found.get((model, seed), {}).get(u)
            row += ["-", "-", "-"] if r is None else [fmt(r["train_loss"]), fmt(r["nll"]), fmt(r["bleu"])]
        rows.append(row)
    header = ["updates"] + [f"{MODELS[m]} {what}" for m in MODELS for what in ("train loss", "valid nll", "BLEU")]
    return markdown_table(header, rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", required=True, help="the run directories' parent (MODEL-sSEED/)")
    parser.add_argument("--short", type=int, default=810)
    parser.add_argument("--long", type=int, default=3000)
    parser.add_argument("--seed-long", type=int, default=1, help="the seed trained to --long updates")
    args = parser.parse_args(argv)
    found = collect(args.runs)
    if not found:
        raise SystemExit(f"fidelity_table.py: error: no scored runs under {args.runs}")
    table = short_table(found, args.short)
    if args.long > args.short:
        table += f"\n\nSeed {args.seed_long} along the way to {args.long} updates:\n\n" + long_table(found, args.seed_long)
    sentences = {r["sentences"] for results in found.values() for r in results.values()}
    notes = (
        "Multi30k en->de (joint sentencepiece 8k, `benchmarks/multi30k_prepare.sh`), 3+3 layers, d_model 256, "
        "d_ff 1024, 4 heads, shared embeddings, dropout 0.1, label smoothing 0.1, Adam (0.9, 0.98), peak lr "
        "1e-3 after 1000 warmup updates, --max-tokens 4096, same data-bin and seeds, one thread per run. "
        "Valid: fairseq-validate on val (1,014 sentences); BLEU: fairseq-generate beam 4, lenpen 0.6 on "
        f"test2016 ({', '.join(map(str, sorted(sentences)))} sentences), detokenized sacreBLEU. "
        "Produced by `bash benchmarks/multi30k_fidelity.sh`.")
    print(table)
    append_results("Same quality: learning per update against fairseq's transformer (Multi30k)", table, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
