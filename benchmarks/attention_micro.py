"""Attention micro-benchmark: our FusedSelfAttention vs fairseq's MultiheadAttention (issue 6).

    python benchmarks/attention_micro.py [--lengths 16 32 64 128 256] [--batch 16] [--d-model 512]
        [--heads 8] [--threads 1] [--repeats 20] [--device cpu|cuda]

Both modules hold the same weights (fairseq's separate Q, K, V projections copied into our packed
one; outputs compared before timing). Two modes per length T:
- training: forward + backward of causal self-attention over [B, T, d];
- incremental: one decoding step (1 query) against a cache of T earlier steps, plus the beam reorder
  fairseq's generator performs before every step (identity order here: same work, same rows).
Ours is timed twice: as a plain module (F.linear) and with its projections through oneDNN, as the
model runs it on CPU (`use_onednn_linears_`: OneDNNLinear layers). Timings interleave the modules and take medians; the
table is appended to benchmarks/RESULTS.md.
"""
import argparse
import copy
import os
import sys
import time
from statistics import median

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_results, markdown_table


def same_weight_pair(d_model, heads, device):
    from fairseq.modules import MultiheadAttention

    from vaswani_plugin.modules import FusedSelfAttention

    theirs = MultiheadAttention(d_model, heads, self_attention=True).to(device)
    ours = FusedSelfAttention(d_model, heads).to(device)
    with torch.no_grad():
        ours.qkv_proj.weight.copy_(torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight]))
        ours.qkv_proj.bias.copy_(torch.cat([theirs.q_proj.bias, theirs.k_proj.bias, theirs.v_proj.bias]))
        ours.out_proj.load_state_dict(theirs.out_proj.state_dict())
    return ours, theirs


def causal_mask(t, device):
    return torch.triu(torch.full((t, t), float("-inf"), device=device), 1)  # fairseq's future mask


def training_step(ours, theirs, x):
    """Closures running forward + backward; their outputs are checked equal first."""
    mask = causal_mask(x.size(1), x.device)
    xt = x.transpose(0, 1).contiguous()  # fairseq is time-major [T, B, d]

    def run_ours():
        out, _ = ours(x, causal=True)
        out.sum().backward()
        return out

    def run_theirs():
        out, _ = theirs(xt, xt, xt, attn_mask=mask, need_weights=False)
        out.sum().backward()
        return out.transpose(0, 1)

    torch.testing.assert_close(run_ours(), run_theirs(), atol=1e-4, rtol=1e-4)
    return run_ours, run_theirs


def incremental_step(ours, theirs, x):
    """Closures decoding the step after x ([B, T, d] already cached), reorder included."""
    b, t, _ = x.shape
    order = torch.arange(b, device=x.device)
    xt = x.transpose(0, 1).contiguous()
    with torch.no_grad():
        state_ours, state_theirs = {}, {}
        ours(x, causal=True, incremental_state=state_ours)
        for i in range(t):  # fairseq's cache grows one step at a time
            theirs(xt[i:i + 1], xt[i:i + 1], xt[i:i + 1], incremental_state=state_theirs, need_weights=False)
        ours.reorder_incremental_state(state_ours, order)  # steady state: our spare reorder buffer exists
    snapshot_ours = {k: copy.copy(v) for k, v in state_ours.items()}
    snapshot_theirs = {k: copy.copy(v) for k, v in state_theirs.items()}
    new = torch.randn(b, 1, x.size(2), device=x.device)

    def run_ours():
        state = {k: copy.copy(v) for k, v in snapshot_ours.items()}
        ours.reorder_incremental_state(state, order)
        return ours(new, causal=True, incremental_state=state)[0]

    def run_theirs():
        state = {k: copy.copy(v) for k, v in snapshot_theirs.items()}
        theirs.reorder_incremental_state(state, order)
        q = new.transpose(0, 1)
        return theirs(q, q, q, incremental_state=state, need_weights=False)[0].transpose(0, 1)

    with torch.no_grad():
        torch.testing.assert_close(run_ours(), run_theirs(), atol=1e-4, rtol=1e-4)
    return run_ours, run_theirs


def timed(fn, device):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def run(args):
    from vaswani_plugin.modules import use_onednn_linears_

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours, theirs = same_weight_pair(args.d_model, args.heads, args.device)
    # As inside the model: the projections' GEMMs through oneDNN on CPU (F.linear elsewhere)
    ours_onednn = use_onednn_linears_(copy.deepcopy(ours))
    rows = []
    for mode, build, grad in (("training fwd+bwd", training_step, True), ("incremental step", incremental_step, False)):
        for t in args.lengths:
            x = torch.randn(args.batch, t, args.d_model, device=args.device)
            run_ours, run_theirs = build(ours, theirs, x)
            run_onednn, _ = build(ours_onednn, theirs, x)
            systems = (("ours", run_ours), ("ours+oneDNN", run_onednn), ("fairseq", run_theirs))
            times = {name: [] for name, _ in systems}
            with torch.set_grad_enabled(grad):
                for rep in range(args.repeats + 2):  # two warm-up rounds
                    for name, fn in (systems if rep % 2 == 0 else systems[::-1]):
                        elapsed = timed(fn, args.device)
                        if rep >= 2:
                            times[name].append(elapsed)
            a, c, b = median(times["ours"]), median(times["ours+oneDNN"]), median(times["fairseq"])
            rows.append([mode, t, f"{a * 1e3:.3f}", f"{c * 1e3:.3f}", f"{b * 1e3:.3f}", f"**{b / a:.2f}x**",
                         f"**{b / c:.2f}x**"])
    header = ["mode", "length T", "ours (ms)", "ours, oneDNN linears (ms)", "fairseq MultiheadAttention (ms)",
              "speed-up", "speed-up, oneDNN"]
    return markdown_table(header, rows)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="attention_micro.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    p.add_argument("--batch", type=int, default=16, help="B (sentences, or hypotheses when decoding)")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=20, help="timed runs per module and point; medians")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--no-append", action="store_true", help="print only; do not append to RESULTS.md")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    if args.d_model % args.heads:
        p.error(f"--d-model ({args.d_model}) must be divisible by --heads ({args.heads})")
    return args


def main(argv=None):
    args = parse_args(argv)
    table = run(args)
    print(table)
    if not args.no_append:
        notes = (f"B {args.batch}, d_model {args.d_model}, {args.heads} heads, fp32, {args.threads} thread(s), "
                 f"device {args.device}; medians of {args.repeats} interleaved runs. Produced by "
                 "`benchmarks/attention_micro.py`.")
        append_results("Attention micro-benchmark: FusedSelfAttention vs fairseq MultiheadAttention", table,
                       device=args.device, notes=notes)


if __name__ == "__main__":
    main()
