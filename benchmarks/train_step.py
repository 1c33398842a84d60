"""Training-step throughput and peak memory: our `vaswani_transformer` vs fairseq's `transformer`.

    python benchmarks/train_step.py --shape base --device cpu --dtype fp32 --repeats 2
    python benchmarks/train_step.py --quick            # seconds-long smoke run on a tiny shape

Both models are built through fairseq's registries from command-line flags with the same
hyperparameters (shared embeddings over one 32k joined dictionary, dropout 0.1, label smoothing 0.1,
Adam 0.9/0.98/1e-9) and trained by fairseq's own `Trainer.train_step` (forward, criterion, backward,
Adam step; `--fp16` with fairseq's loss scaler, `--bf16` through the plugin's `bf16_cpu` route):

    ours:    --arch vaswani_transformer_{base,big} --criterion label_smoothed_xent
    fairseq: --arch transformer_wmt_en_de / transformer_vaswani_wmt_en_de_big
             --criterion label_smoothed_cross_entropy

Batches follow fairseq's `--max-tokens 4096` convention: B = 4096 // L sentence pairs padded to
length L (default 32; real lengths L-3..L), so about 4,096 source and 4,096 target positions;
tokens/s counts the real (non-pad) source + target tokens. Every measurement runs in its own
subprocess, so its peak memory is its own: peak RSS (ru_maxrss, which includes the ~0.4 GB of
imported libraries) on CPU, torch.cuda.max_memory_allocated on CUDA. Runs alternate ours, fairseq,
ours, fairseq, ... (`--repeats` pairs); the table gives medians and ours/fairseq ratios.

MFU (CUDA, fp16/bf16 only) = achieved training FLOP/s / 989e12 (H200 dense fp16/bf16 peak, no
sparsity). Training FLOPs = 3 x forward FLOPs (backward = 2 x forward); forward FLOPs of a batch,
counting padded positions (they are computed), with S = B x source length and T = B x target length:
    2 x [ S x N_enc (4d² + 2 d d_ff)            encoder projections and feed-forward
        + T x N_dec (6d² + 2 d d_ff) + S x N_dec 2d²   decoder (cross-attention K, V on the source)
        + T x V d                               output projection
        + 2 d (S L_src N_enc + T L_tgt N_dec + T L_src N_dec) ]   attention scores and weighted sums
(the causal half of decoder self-attention is counted: kernels compute it).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import append_results, markdown_table

H200_PEAK_FLOPS = 989e12  # dense fp16/bf16 tensor-core peak
SHAPES = {  # ours' preset, fairseq's arch, (layers, d_model, d_ff, heads)
    "base": ("vaswani_transformer_base", "transformer_wmt_en_de", (6, 512, 2048, 8)),
    "big": ("vaswani_transformer_big", "transformer_vaswani_wmt_en_de_big", (6, 1024, 4096, 16)),
    "tiny": ("vaswani_transformer_tiny", "transformer", (2, 64, 128, 4)),  # smoke runs (--quick, dry runs)
}


def model_flags(model, shape):
    ours_arch, fairseq_arch, (layers, d, d_ff, heads) = SHAPES[shape]
    if model == "ours":
        flags = ["--arch", ours_arch, "--criterion", "label_smoothed_xent"]
        if shape == "tiny":
            flags += ["--encoder-layers", layers, "--decoder-layers", layers, "--d-model", d, "--d-ff", d_ff,
                      "--attention-heads", heads]
    else:
        flags = ["--arch", fairseq_arch, "--criterion", "label_smoothed_cross_entropy"]
        if shape == "tiny":
            for side in ("encoder", "decoder"):
                flags += [f"--{side}-layers", layers, f"--{side}-embed-dim", d, f"--{side}-ffn-embed-dim", d_ff,
                          f"--{side}-attention-heads", heads]
    return [*map(str, flags), "--share-all-embeddings", "--dropout", "0.1", "--label-smoothing", "0.1"]


def build(args):
    """Task, model, criterion and fairseq Trainer, as fairseq-train would build them."""
    import torch
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.tasks.translation import TranslationTask
    from fairseq.trainer import Trainer

    import vaswani_plugin
    from vaswani_plugin.fairseq_fixes.bf16_cpu import clear_implied_tpu

    # Neither model has attention or feed-forward dropout by default (both arches' defaults: 0).
    flags = ["/nonexistent-data", "--task", "translation", "--user-dir", vaswani_plugin.user_dir(),
             *model_flags(args.model, args.shape), "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)",
             "--adam-eps", "1e-9", "--lr", "5e-4", "--max-tokens", str(args.max_tokens), "--seed", "1"]
    flags += {"fp32": [], "fp16": ["--fp16"], "bf16": ["--bf16"]}[args.dtype]
    if args.device == "cpu":
        flags.append("--cpu")
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), flags))
    clear_implied_tpu(cfg)  # as fairseq-train does with the plugin: --bf16 without torch_xla
    dictionary = Dictionary()
    for i in range(args.vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    task = TranslationTask(cfg.task, dictionary, dictionary)
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    return trainer, model, dictionary


def batch(args, dictionary, seed):
    """B = max_tokens // L pairs; left-padded sources, right-padded targets (fairseq's defaults)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    length, pad, eos = args.seq_len, dictionary.pad(), dictionary.eos()
    b = args.max_tokens // length
    src = torch.full((b, length), pad)
    prev, target = torch.full((b, length), pad), torch.full((b, length), pad)
    for i in range(b):
        s, t = torch.randint(max(2, length - 3), length + 1, (2,), generator=g).tolist()
        src[i, length - s:] = torch.cat([torch.randint(4, len(dictionary), (s - 1,), generator=g),
                                         torch.tensor([eos])])
        words = torch.randint(4, len(dictionary), (t - 1,), generator=g)
        target[i, :t] = torch.cat([words, torch.tensor([eos])])
        prev[i, :t] = torch.cat([torch.tensor([eos]), words])
    ntokens = int(target.ne(pad).sum())
    sample = {"id": torch.arange(b), "nsentences": b, "ntokens": ntokens, "target": target,
              "net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(1), "prev_output_tokens": prev}}
    return sample, int(src.ne(pad).sum()) + ntokens


def train_flops(args, sample) -> float:
    """Training FLOPs of one step by the formula in the module docstring."""
    layers, d, d_ff, _ = SHAPES[args.shape][2]
    b, ls = sample["net_input"]["src_tokens"].shape
    lt = sample["target"].size(1)
    s, t = b * ls, b * lt
    forward = 2 * (s * layers * (4 * d * d + 2 * d * d_ff) + t * layers * (6 * d * d + 2 * d * d_ff)
                   + s * layers * 2 * d * d + t * args.vocab * d
                   + 2 * d * (s * ls * layers + t * lt * layers + t * ls * layers))
    return 3.0 * forward


def child(args):
    """One measurement: warm-up steps, then timed steps; prints one JSON line."""
    import torch

    trainer, model, dictionary = build(args)
    cuda = args.device == "cuda"
    samples = [batch(args, dictionary, seed) for seed in range(4)]
    losses = []

    def step(i):
        sample, _ = samples[i % len(samples)]
        log = trainer.train_step([sample])
        losses.append(float(log["loss"]) if log else float("nan"))

    for i in range(args.warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize()
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        step(i)
    if cuda:
        torch.cuda.synchronize()
    elapsed, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    tokens = sum(samples[i % len(samples)][1] for i in range(args.steps))
    flops = sum(train_flops(args, samples[i % len(samples)][0]) for i in range(args.steps))
    peak = (torch.cuda.max_memory_allocated() if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps({"tokens_per_s": tokens / elapsed, "tokens_per_cpu_s": tokens / cpu_seconds, "peak_mb": peak / 2 ** 20,
                      "mfu": flops / elapsed / H200_PEAK_FLOPS if cuda and args.dtype != "fp32" else None,
                      "params": sum(p.numel() for p in model.parameters()), "last_loss": losses[-1],
                      "loss_scale": getattr(getattr(trainer.optimizer, "scaler", None), "loss_scale", None)}))


def run_child(args, model):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--model", model, *args.passthrough]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"train_step.py: error: the {model} measurement failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(args, results):
    """Medians per model; on CPU also tokens per CPU-second (process time, all threads), which a
    machine shared with other jobs disturbs much less than wall-clock tokens/s."""
    header = ["model", "params", "src+tgt tokens/s (median)", "ratio", "peak memory MB (median)", "ratio"]
    header += ["MFU"] if args.device == "cuda" else ["tokens/CPU-s (median)", "ratio"]
    rows = []

    def med(model, key):
        return median([r[key] for r in results[model]])

    for model in ("ours", "fairseq"):
        speed, mem = med(model, "tokens_per_s"), med(model, "peak_mb")
        row = [model, f"{results[model][0]['params'] / 1e6:.1f}M", f"{speed:,.0f}",
               f"{speed / med('fairseq', 'tokens_per_s'):.2f}x", f"{mem:,.0f}", f"{mem / med('fairseq', 'peak_mb'):.2f}x"]
        if args.device == "cpu":
            cpu_speed = med(model, "tokens_per_cpu_s")
            row += [f"{cpu_speed:,.0f}", f"{cpu_speed / med('fairseq', 'tokens_per_cpu_s'):.2f}x"]
        else:
            mfu = results[model][0]["mfu"]
            row.append("n/a (fp32)" if mfu is None else f"{median([r['mfu'] for r in results[model]]):.1%}")
        rows.append(row)
    return markdown_table(header, rows)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="base")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--repeats", type=int, default=3, help="ours/fairseq pairs, run alternately")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (allocator, Adam state)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per measurement")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=32, help="padded sentence length L (real lengths L-3..L)")
    p.add_argument("--vocab", type=int, default=32000, help="joined dictionary size, specials included")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny shape, 1 pair, 1+1 steps, 512 tokens, "
                                                        "2k vocabulary, not appended")
    p.add_argument("--no-append", action="store_true", help="print the table only")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", choices=["ours", "fairseq"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.shape, args.repeats, args.warmup, args.steps = "tiny", 1, 1, 1
        args.max_tokens, args.vocab, args.seq_len, args.no_append = 512, 2000, 16, True
    if args.device == "cuda" and not args.child:
        import torch
        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device visible")
    if args.dtype == "fp16" and args.device == "cpu":
        p.error("--dtype fp16 needs --device cuda (fairseq's fp16 path and loss scaler are CUDA-only)")
    for name in ("repeats", "steps", "max_tokens", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    args.passthrough = [f"--shape={args.shape}", f"--device={args.device}", f"--dtype={args.dtype}",
                        f"--warmup={args.warmup}", f"--steps={args.steps}", f"--max-tokens={args.max_tokens}",
                        f"--seq-len={args.seq_len}", f"--vocab={args.vocab}"]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)
    results = {"ours": [], "fairseq": []}
    for _ in range(args.repeats):
        for model in ("ours", "fairseq"):  # interleaved: A B A B
            results[model].append(run_child(args, model))
            print(f"{model}: {results[model][-1]}", file=sys.stderr, flush=True)
    text = table(args, results)
    print(text)
    if not args.no_append:
        notes = (f"`python benchmarks/train_step.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
                 f"{args.shape} shape, {args.dtype}, --max-tokens {args.max_tokens} (L = {args.seq_len}), "
                 f"{args.vocab} joined vocabulary, {args.repeats} interleaved pairs of {args.warmup} warm-up + "
                 f"{args.steps} timed steps; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
        append_results(f"Training step, {args.shape}, {args.device} {args.dtype}", text, args.device, notes)


if __name__ == "__main__":
    main()
