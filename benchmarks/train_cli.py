"""`train_step.py --cli`: the training step measured through fairseq-train itself.

Both models are trained by the venv's `fairseq-train` (ours, fairseq, ours, fairseq, ... for
`--repeats` pairs) on one synthetic binarized dataset, with identical flags apart from
`model_flags()` (`COMMON_FLAGS` and `run_flags`): `--user-dir` the plugin for both (it also lets
`--bf16` train on the CPU, as the in-process path's `clear_implied_tpu` does), Adam (0.9, 0.98)
eps 1e-9, lr 5e-4, `--max-tokens`, `--cpu`, `--max-update` = warmup + steps, no checkpoints and no
validation, one json log line per update, `--seed 1`, `--num-workers 0`. The runs inherit the
caller's environment, OMP_NUM_THREADS included.

- speed: fairseq's own `wps` of its per-update `train_inner` lines (target tokens per second; the
  time of an update runs from the previous log line to its own, data loading included), median
  over the updates after the first `--warmup` ones (update 1's meter only starts at the end of
  that update), all runs of a model pooled;
- memory: the whole fairseq-train process's peak RSS, `/usr/bin/time -v`'s "Maximum resident set
  size", median over runs;
- share of the GEMM rate: the training FLOPs of an update over its time (wpb / wps), over the GEMM
  rate `train_step.gemm_child` measures at the in-process batch shape. fairseq's batches sort pairs
  by length and hold `bsz` pairs padded to at most L, so FLOPs are counted as `bsz` pairs padded to L:
  an upper bound by up to 3/L (real lengths L-3..L).

The data: sentence pairs of L-3..L tokens (the last one the end of sentence, as the in-process
batches) of words drawn uniformly from `w0 ... w{V-5}`, enough for every update to fall in the first
epoch, binarized by fairseq-preprocess over a dictionary file of those V-4 words: with fairseq's 4
specials exactly `--vocab` symbols, as `train_step.build()` makes. Built once per invocation in a
temporary directory, or kept in `--cli-data DIR` and reused.
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from statistics import median

from common import markdown_table
from train_step import GEMM_HEADER, fail, gemm_columns, interleaved, model_flags, shortest, step_flops

BIN = os.path.dirname(sys.executable)  # the venv's console scripts: fairseq-train, fairseq-preprocess
GNU_TIME = "/usr/bin/time"
COMMON_FLAGS = ["--task", "translation", "--source-lang", "en", "--target-lang", "de", "--optimizer", "adam",
                "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--lr", "5e-4", "--cpu", "--no-save",
                "--no-epoch-checkpoints", "--disable-validation", "--log-format", "json", "--log-interval", "1",
                "--seed", "1", "--num-workers", "0"]
DATA_PARAMS = "benchmark_data.json"  # what a --cli-data directory was built for


def pairs_needed(args) -> int:
    """Sentence pairs for every update in the first epoch (an epoch boundary would land inside a
    timed update), one batch to spare: a batch holds at most max_tokens // (L - 3) pairs."""
    return (args.warmup + args.steps + 1) * (args.max_tokens // shortest(args.seq_len))


def build_data(args, directory) -> str:
    """The binarized dataset in `directory` (module docstring), reused when it is there already."""
    wanted = {"vocab": args.vocab, "seq_len": args.seq_len}
    marker = os.path.join(directory, DATA_PARAMS)
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            built = json.load(f)
        if {key: built.get(key) for key in wanted} != wanted or built.get("pairs", 0) < pairs_needed(args):
            sys.exit(f"train_step.py: error: --cli-data {directory} was built for {built}, not {wanted} with "
                     f"{pairs_needed(args)} pairs: give another directory")
        return directory
    os.makedirs(directory, exist_ok=True)
    words = [f"w{i}" for i in range(args.vocab - 4)]  # + fairseq's <s> <pad> </s> <unk> = --vocab symbols
    text = os.path.join(directory, "text")
    os.makedirs(text, exist_ok=True)
    with open(os.path.join(text, "dict.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{word} 1\n" for word in words)
    rng = random.Random(1)
    for lang in ("en", "de"):  # L-3..L tokens with the end of sentence fairseq-preprocess appends
        lengths = [rng.randint(shortest(args.seq_len), args.seq_len) for _ in range(pairs_needed(args))]
        with open(os.path.join(text, f"train.{lang}"), "w", encoding="utf-8") as f:
            f.writelines(" ".join(rng.choices(words, k=length - 1)) + "\n" for length in lengths)
    command = [os.path.join(BIN, "fairseq-preprocess"), "--source-lang", "en", "--target-lang", "de",
               "--trainpref", os.path.join(text, "train"), "--destdir", directory, "--joined-dictionary",
               "--srcdict", os.path.join(text, "dict.txt"), "--workers", "1"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        fail("fairseq-preprocess of the synthetic data", proc)
    with open(marker, "w", encoding="utf-8") as f:
        json.dump({**wanted, "pairs": pairs_needed(args)}, f)
    return directory


def shared_flags(args):
    """fairseq-train's arguments that both models get, apart from the data, --user-dir and --save-dir."""
    flags = [*COMMON_FLAGS, "--max-tokens", str(args.max_tokens), "--max-update", str(args.warmup + args.steps)]
    return flags + (["--bf16"] if args.dtype == "bf16" else [])


def run_flags(args, model, data, save_dir):
    """fairseq-train's arguments for `model`; everything but `model_flags` is the same for both."""
    import vaswani_plugin

    return [data, "--user-dir", vaswani_plugin.user_dir(), *model_flags(model, args.shape), *shared_flags(args),
            "--save-dir", save_dir]


def parse_run(args, log, time_report):
    """wps, training FLOP/s and update numbers of the updates after the warm-up ones, params, peak RSS."""
    updates = [json.loads(line[line.index("{"):]) for line in log.splitlines() if " | train_inner | " in line]
    used = [u for u in updates if int(u["num_updates"]) > args.warmup]
    params = re.search(r"num\. shared model params: ([\d,]+)", log)
    peak_kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_report)
    if not used or params is None or peak_kb is None:
        return None
    return {"wps": [float(u["wps"]) for u in used], "updates": [int(u["num_updates"]) for u in used],
            "train_flops_per_s": [step_flops(args, float(u["bsz"]), args.seq_len, args.seq_len)
                                  * float(u["wps"]) / float(u["wpb"]) for u in used],
            "params": int(params.group(1).replace(",", "")), "peak_mb": int(peak_kb.group(1)) / 1024}


def run_fairseq_train(args, model, data, logs, scratch, repeat):
    """One fairseq-train run under GNU time; its log and time report are kept in `logs`."""
    stem = os.path.join(logs, f"{model}-{repeat}")
    command = [GNU_TIME, "-v", "-o", stem + ".time", os.path.join(BIN, "fairseq-train"),
               *run_flags(args, model, data, os.path.join(scratch, "checkpoints"))]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    with open(stem + ".log", "w", encoding="utf-8") as f:
        f.write(proc.stdout + proc.stderr)  # fairseq logs to stdout, errors go to stderr
    if proc.returncode != 0:
        fail(f"fairseq-train for {model}", proc)
    with open(stem + ".time", encoding="utf-8") as f:
        run = parse_run(args, proc.stdout, f.read())
    if run is None:
        sys.exit(f"train_step.py: error: fairseq-train for {model} logged no train_inner line after update "
                 f"{args.warmup}, no parameter count or no peak RSS: see {stem}.log and {stem}.time")
    return run


def table(results, gemm_flops_per_s):
    header = ["model", "params", "wps (median)", "ratio", "wps range", "peak RSS MB (median)", "ratio", *GEMM_HEADER]
    every_wps = {model: [w for run in runs for w in run["wps"]] for model, runs in results.items()}
    wps = {model: median(values) for model, values in every_wps.items()}
    peak = {model: median(run["peak_mb"] for run in runs) for model, runs in results.items()}
    rows = []
    for model, runs in results.items():
        flops_per_s = median(f for run in runs for f in run["train_flops_per_s"])
        rows.append([model, f"{runs[0]['params'] / 1e6:.1f}M", f"{wps[model]:,.0f}",
                     f"{wps[model] / wps['fairseq']:.2f}x", f"{min(every_wps[model]):,.0f}-{max(every_wps[model]):,.0f}",
                     f"{peak[model]:,.0f}", f"{peak[model] / peak['fairseq']:.2f}x",
                     *gemm_columns(flops_per_s, gemm_flops_per_s)])
    return markdown_table(header, rows)


def run(args):
    """The interleaved fairseq-train runs: {model: [parse_run of each run]}."""
    if not os.access(GNU_TIME, os.X_OK):
        sys.exit(f"train_step.py: error: --cli needs GNU time at {GNU_TIME} for the peak RSS (apt-get install time)")
    with tempfile.TemporaryDirectory(prefix="train_cli_") as scratch:
        data = build_data(args, args.cli_data or os.path.join(scratch, "data"))
        logs = args.cli_logs or os.path.join(scratch, "logs")
        os.makedirs(logs, exist_ok=True)
        return interleaved(args, lambda model, repeat: run_fairseq_train(args, model, data, logs, scratch, repeat))


def notes(args, results) -> str:
    updates = results["ours"][0]["updates"]
    return (f"Through fairseq-train: {pairs_needed(args)} synthetic pairs of {shortest(args.seq_len)}.."
            f"{args.seq_len} tokens, {args.vocab} joined vocabulary; flags besides `--user-dir`, the model's and "
            f"`--save-dir`: `{' '.join(shared_flags(args))}`. wps is fairseq's (target tokens/s), median over "
            f"updates {updates[0]}-{updates[-1]} of every run (warm-up: 1-{args.warmup}); peak RSS is "
            "/usr/bin/time's maximum resident set size of the whole process; the GEMM share counts each "
            "update as bsz pairs padded to L (an upper bound) over its time wpb/wps.")
