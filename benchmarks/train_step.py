"""Training-step throughput and peak memory: our `vaswani_transformer` vs fairseq's `transformer`.

    python benchmarks/train_step.py --shape base --device cpu --dtype fp32 --repeats 2
    python benchmarks/train_step.py --quick            # seconds-long smoke run on a tiny shape
    python benchmarks/train_step.py --cli --shape base --repeats 2    # through fairseq-train itself
    python benchmarks/train_step.py --cli --quick      # its smoke run: 1 warm-up + 2 updates per model
        [--cli-data DIR] [--cli-logs DIR]              # keep (and reuse) the binarized data; keep the logs

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

`--cli` trains both models with the real fairseq-train instead, interleaved the same way, on a
synthetic binarized dataset of the same lengths and vocabulary, and reports fairseq's own wps and
the whole process's peak RSS (/usr/bin/time -v): benchmarks/train_cli.py says how.

Share of the GEMM rate (both modes): the step's training FLOP/s (formula below) over the rate
torch's matmul reaches on the same products in the same dtype, timed in one more subprocess at the
in-process batch shape. Timed: for every linear layer of both stacks (encoder q, k, v, out and the
feed-forward pair; decoder self-attention q, k, v, out, cross-attention q, out and its k, v on the
source, the feed-forward pair) and the output projection, the forward product [N, k] x [k, M] and
both backward ones, dX = g W ([N, M] x [M, k]) and dW = gᵀ x ([M, N] x [N, k]); and attention's
score and weighted-sum products (q kᵀ, p v, each with its two backward products) as batched matmuls
over B x heads, as fairseq's MultiheadAttention computes them (our model's SDPA kernel fuses them).
All with torch.mm / torch.bmm, transposed operands as views, which is what F.linear's autograd runs,
and, for the 2-D fp32 products on CPU, also with oneDNN's linear primitive on dense operands (its
best case: the plugin trains on it off Intel, where it beats MKL): each shape counts at the faster of
the two, so the rate is the CPU's GEMM peak on these shapes, not one library's. One warm-up and
GEMM_REPEATS timed runs per distinct shape and library, median; the GEMM rate is all their FLOPs
over all their time. These are exactly the formula's FLOPs (a test checks it term by term), so the
share is the time those GEMMs alone would take over the step's time: softmax, layer norms, the loss,
Adam and the rest cost time but no FLOPs in it.

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
from collections import Counter
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import append_results, markdown_table

H200_PEAK_FLOPS = 989e12  # dense fp16/bf16 tensor-core peak
GEMM_REPEATS = 3  # timed runs of each product shape (after one warm-up); the median counts
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


def shortest(seq_len) -> int:
    """The shortest real length of a sentence padded to seq_len (L-3, end of sentence included)."""
    return max(2, seq_len - 3)


def batch(args, dictionary, seed):
    """B = max_tokens // L pairs; left-padded sources, right-padded targets (fairseq's defaults)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    length, pad, eos = args.seq_len, dictionary.pad(), dictionary.eos()
    b = args.max_tokens // length
    src = torch.full((b, length), pad)
    prev, target = torch.full((b, length), pad), torch.full((b, length), pad)
    for i in range(b):
        s, t = torch.randint(shortest(length), length + 1, (2,), generator=g).tolist()
        src[i, length - s:] = torch.cat([torch.randint(4, len(dictionary), (s - 1,), generator=g),
                                         torch.tensor([eos])])
        words = torch.randint(4, len(dictionary), (t - 1,), generator=g)
        target[i, :t] = torch.cat([words, torch.tensor([eos])])
        prev[i, :t] = torch.cat([torch.tensor([eos]), words])
    ntokens = int(target.ne(pad).sum())
    sample = {"id": torch.arange(b), "nsentences": b, "ntokens": ntokens, "target": target,
              "net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(1), "prev_output_tokens": prev}}
    return sample, int(src.ne(pad).sum()) + ntokens


def step_flops(args, b, src_len, tgt_len) -> float:
    """Training FLOPs of one step of b sentence pairs padded to src_len and tgt_len (module docstring)."""
    layers, d, d_ff, _ = SHAPES[args.shape][2]
    s, t = b * src_len, b * tgt_len
    forward = 2 * (s * layers * (4 * d * d + 2 * d * d_ff) + t * layers * (6 * d * d + 2 * d * d_ff)
                   + s * layers * 2 * d * d + t * args.vocab * d
                   + 2 * d * (s * src_len * layers + t * tgt_len * layers + t * src_len * layers))
    return 3.0 * forward


def train_flops(args, sample) -> float:
    """Training FLOPs of one step on `sample` by the formula in the module docstring."""
    b, src_len = sample["net_input"]["src_tokens"].shape
    return step_flops(args, b, src_len, sample["target"].size(1))


def _with_backward(count, batch, n, k, m, second_transposed):
    """A forward product [n, k] x [k, m] and its two backward products, each as
    (count, batch, n, k, m, first operand transposed, second operand transposed)."""
    if second_transposed:  # x Wᵀ (F.linear, attention scores q kᵀ): dX = g W, dW = gᵀ x
        return [(count, batch, n, k, m, False, True), (count, batch, n, m, k, False, False),
                (count, batch, m, n, k, True, False)]
    # a b (attention's weighted sum p v): da = g bᵀ, db = aᵀ g
    return [(count, batch, n, k, m, False, False), (count, batch, n, m, k, False, True),
            (count, batch, k, n, m, True, False)]


def step_products(args, b, src_len, tgt_len):
    """Every matrix product of one training step (module docstring), identical ones merged: a list of
    (count, batch, n, k, m, first transposed, second transposed), `count` times [batch x] [n, k] x [k, m]."""
    layers, d, d_ff, heads = SHAPES[args.shape][2]
    s, t, d_head = b * src_len, b * tgt_len, d // heads
    linears = [(4 * layers, s, d, d), (layers, s, d, d_ff), (layers, s, d_ff, d),  # encoder q k v out, FFN
               (6 * layers, t, d, d), (2 * layers, s, d, d),  # decoder q k v out, cross q out; cross k v
               (layers, t, d, d_ff), (layers, t, d_ff, d), (1, t, d, args.vocab)]  # decoder FFN, output
    products = [p for count, n, k, m in linears for p in _with_backward(count, 1, n, k, m, True)]
    for lq, lk in ((src_len, src_len), (tgt_len, tgt_len), (tgt_len, src_len)):  # enc self, dec self, cross
        products += _with_backward(layers, b * heads, lq, d_head, lk, True)  # scores q kᵀ
        products += _with_backward(layers, b * heads, lq, lk, d_head, False)  # weighted sum p v
    merged = Counter()
    for count, *shape in products:
        merged[tuple(shape)] += count
    return [(count, *shape) for shape, count in merged.items()]


def gemm_rate(timings) -> float:
    """FLOP/s over a timing table of (count, FLOPs of one product, seconds of one product): all the
    FLOPs over all the time, so each product weighs by its share of the step, not one vote each."""
    return sum(count * flops for count, flops, _ in timings) / sum(count * seconds for count, _, seconds in timings)


def _operand(batch, rows, cols, transposed, device, dtype):
    """A [batch x] rows x cols operand; `transposed`: a view of a dense cols x rows one, as F.linear's
    autograd hands torch.mm Wᵀ and gᵀ."""
    import torch

    x = (torch.randn(batch, cols, rows, device=device, dtype=dtype).transpose(1, 2) if transposed
         else torch.randn(batch, rows, cols, device=device, dtype=dtype))
    return x[0] if batch == 1 else x


def gemm_products(a, w):
    """The ways to compute a @ w that the GEMM rate tries ({name: no-argument function}): torch's
    matmul on the operands as given; for 2-D fp32 CPU operands also oneDNN's linear primitive, on dense
    operands laid out as it wants them (a [n, k], w as [m, k]; the layout is made before the timing)."""
    import torch

    from vaswani_plugin.modules import onednn_linear

    products = {"torch": lambda: torch.mm(a, w) if a.dim() == 2 else torch.bmm(a, w)}
    if a.dim() == 2 and onednn_linear.cpu_fp32(a, w):  # oneDNN there, fp32 CPU operands
        a_dense, w_rows = a.contiguous(), w.t().contiguous()  # [n, k], [m, k]
        products["oneDNN"] = lambda: onednn_linear._linear(a_dense, w_rows)  # the plugin's own oneDNN product
    return products


def gemm_child(args):
    """Times every product of `step_products` for one in-process batch (B = max_tokens // L pairs, both
    sides padded to L) in the step's dtype with each of `gemm_products`; prints the GEMM rate, each
    shape at its fastest library."""
    import torch

    device, dtype = torch.device(args.device), {"fp32": torch.float32, "bf16": torch.bfloat16,
                                                "fp16": torch.float16}[args.dtype]
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    timings = []
    for count, batch, n, k, m, first_t, second_t in step_products(args, args.max_tokens // args.seq_len,
                                                                  args.seq_len, args.seq_len):
        a, w = _operand(batch, n, k, first_t, device, dtype), _operand(batch, k, m, second_t, device, dtype)
        fastest = float("inf")
        for product in gemm_products(a, w).values():
            seconds = []
            for _ in range(GEMM_REPEATS + 1):  # the first is a warm-up (allocation, kernel choice)
                sync()
                start = time.perf_counter()
                product()
                sync()
                seconds.append(time.perf_counter() - start)
            fastest = min(fastest, median(seconds[1:]))
        timings.append((count, 2.0 * batch * n * k * m, fastest))
    print(json.dumps({"gemm_flops_per_s": gemm_rate(timings)}))


def child(args):
    """One measurement: warm-up steps, then timed steps (or the GEMM timing); prints one JSON line."""
    import torch

    if args.model == "gemm":
        return gemm_child(args)

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
                      "train_flops_per_s": flops / elapsed,
                      "mfu": flops / elapsed / H200_PEAK_FLOPS if cuda and args.dtype != "fp32" else None,
                      "params": sum(p.numel() for p in model.parameters()), "last_loss": losses[-1],
                      "loss_scale": getattr(getattr(trainer.optimizer, "scaler", None), "loss_scale", None)}))


def fail(what, proc):
    """End the benchmark with one line naming what failed, then the tail of its stderr (no traceback)."""
    sys.exit(f"train_step.py: error: {what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def run_child(args, model):
    command = [sys.executable, os.path.abspath(__file__), "--child", "--model", model, *args.passthrough]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        fail(f"the {model} measurement", proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


GEMM_HEADER = ["GEMM GFLOP/s", "share of GEMM rate"]


def gemm_columns(train_flops_per_s, gemm_flops_per_s):
    """The GEMM rate and the share of it a step reaches: its training FLOP/s over the GEMM rate."""
    return [f"{gemm_flops_per_s / 1e9:,.1f}", f"{train_flops_per_s / gemm_flops_per_s:.0%}"]


def interleaved(args, measure):
    """{model: [measure(model, repeat), ...]}, run ours, fairseq, ours, fairseq, ... (`--repeats` pairs)."""
    results = {"ours": [], "fairseq": []}
    for repeat in range(args.repeats):
        for model in results:
            results[model].append(measure(model, repeat))
            print(f"{model}: {results[model][-1]}", file=sys.stderr, flush=True)
    return results


def table(args, results, gemm_flops_per_s):
    """Medians per model; on CPU also tokens per CPU-second (process time, all threads), which a
    machine shared with other jobs disturbs much less than wall-clock tokens/s; then the GEMM share."""
    header = ["model", "params", "src+tgt tokens/s (median)", "ratio", "peak memory MB (median)", "ratio"]
    header += (["MFU"] if args.device == "cuda" else ["tokens/CPU-s (median)", "ratio"]) + GEMM_HEADER
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
        rows.append(row + gemm_columns(med(model, "train_flops_per_s"), gemm_flops_per_s))
    return markdown_table(header, rows)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="base")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--repeats", type=int, default=3, help="ours/fairseq pairs, run alternately")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps (--cli: updates) first (Adam state)")
    p.add_argument("--steps", type=int, help="timed steps per measurement (default 3; updates with --cli: 5)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=32, help="padded sentence length L (real lengths L-3..L)")
    p.add_argument("--vocab", type=int, default=32000, help="joined dictionary size, specials included")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny shape, 1 pair, 1+1 steps (1+2 updates "
                                                        "with --cli), 512 tokens, 2k vocabulary, not appended")
    p.add_argument("--no-append", action="store_true", help="print the table only")
    p.add_argument("--cli", action="store_true", help="through fairseq-train runs instead (benchmarks/train_cli.py)")
    p.add_argument("--cli-data", metavar="DIR", help="--cli: keep the binarized data here and reuse it next time")
    p.add_argument("--cli-logs", metavar="DIR", help="--cli: keep fairseq-train's logs and time reports here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", choices=["ours", "fairseq", "gemm"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 5 if args.cli else 3
    if args.quick:
        args.shape, args.repeats, args.warmup, args.steps = "tiny", 1, 1, 2 if args.cli else 1
        args.max_tokens, args.vocab, args.seq_len, args.no_append = 512, 2000, 16, True
    if args.cli and args.device != "cpu":
        p.error("--cli measures CPU training (fairseq-train --cpu): leave --device at cpu")
    if (args.cli_data or args.cli_logs) and not args.cli:
        p.error("--cli-data and --cli-logs go with --cli")
    if args.device == "cuda" and not args.child:
        import torch
        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device visible")
    if args.dtype == "fp16" and args.device == "cpu":
        p.error("--dtype fp16 needs --device cuda (fairseq's fp16 path and loss scaler are CUDA-only)")
    for name in ("repeats", "steps", "max_tokens", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_tokens < args.seq_len:
        p.error("--max-tokens must be at least --seq-len (one sentence pair per batch)")
    args.passthrough = [f"--shape={args.shape}", f"--device={args.device}", f"--dtype={args.dtype}",
                        f"--warmup={args.warmup}", f"--steps={args.steps}", f"--max-tokens={args.max_tokens}",
                        f"--seq-len={args.seq_len}", f"--vocab={args.vocab}"]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)
    if args.cli:
        import train_cli  # imports this module: only here, where the CLI mode is asked for

        results = train_cli.run(args)
    else:
        results = interleaved(args, lambda model, _: run_child(args, model))
    gemm_flops_per_s = run_child(args, "gemm")["gemm_flops_per_s"]
    text = train_cli.table(results, gemm_flops_per_s) if args.cli else table(args, results, gemm_flops_per_s)
    print(text)
    if not args.no_append:
        from vaswani_plugin.modules.onednn_linear import backend_summary

        steps = "updates" if args.cli else "timed steps"
        notes = (f"`python benchmarks/train_step.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
                 f"{args.shape} shape, {args.dtype}, --max-tokens {args.max_tokens} (L = {args.seq_len}), "
                 f"{args.vocab} joined vocabulary, {args.repeats} interleaved pairs of {args.warmup} warm-up + "
                 f"{args.steps} {steps}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
                 f"the plugin's linear layers: {backend_summary()}.")
        if args.cli:
            notes += "\n\n" + train_cli.notes(args, results)
        mode = ", through fairseq-train" if args.cli else ""
        append_results(f"Training step, {args.shape}, {args.device} {args.dtype}{mode}", text, args.device, notes)


if __name__ == "__main__":
    main()
