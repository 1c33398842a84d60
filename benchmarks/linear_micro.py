"""Decoding's linear products by row count: the decoding kernel against the libraries (issue 15).

    python benchmarks/linear_micro.py [--rows 1 4 8 16 64 256] [--threads 1] [--d-model 256]
        [--d-ff 1024] [--layers 3] [--vocab 7800] [--repeats 30] [--no-append]

The weights of a decoder's products (per layer: QKV, self-attention out, cross-attention Q and
out, FFN in and out; then the output projection: 19 for the 3+3 d=256 Multi30k model) are
multiplied in turn by `rows` rows, as a decoding step does, so each product reads its weight from
wherever the others left the cache. Per row count, ms for all of them (best of 5 rounds of
`repeats`): only reading the weights (`w.sum()`, the memory bound), MKL (`F.linear`), oneDNN's
packed product, MKL through the dense transposed copy, and the kernel (`few_rows_linear`, float32;
bfloat16 too where the CPU has AVX-512 bf16, beside torch's bfloat16 `F.linear`). Every result is
checked against `F.linear` first. This is the measurement behind `onednn_linear`'s rules
(`KERNEL_MAX_ROWS`, `_mkl_layout`): run it on a new CPU before changing them. The table
is appended to benchmarks/RESULTS.md.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_results, markdown_table


def decoder_weights(d_model, d_ff, layers, vocab):
    """The float32 weights a decoding step multiplies by, in the order it does."""
    shapes = [(3 * d_model, d_model), (d_model, d_model), (d_model, d_model), (d_model, d_model), (d_ff, d_model),
              (d_model, d_ff)] * layers + [(vocab, d_model)]
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, k, generator=g) / k ** 0.5 for n, k in shapes]


def best_ms(fn, weights, inputs, repeats):
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            for w, x in zip(weights, inputs):
                fn(w, x)
        best = min(best, (time.perf_counter() - start) / repeats * 1e3)
    return best


def run(args):
    from vaswani_plugin.modules import few_rows_linear, onednn_linear

    torch.set_num_threads(args.threads)
    weights = decoder_weights(args.d_model, args.d_ff, args.layers, args.vocab)
    bf16 = few_rows_linear.supports(torch.bfloat16, args.d_model)
    weights_bf16 = [w.bfloat16() for w in weights] if bf16 else []
    packed = {id(w): onednn_linear.PackedWeight() for w in weights + weights_bf16}

    def kernel(w, x):  # float32 or bfloat16, as w and x are
        return few_rows_linear.product(x, packed[id(w)].panels(w), None, w.size(0))

    systems = {
        "read only (w.sum())": lambda w, x: w.sum(),
        "MKL (F.linear)": lambda w, x: F.linear(x, w),
    }
    if onednn_linear.onednn_available():
        systems["oneDNN packed"] = lambda w, x: onednn_linear._call(
            "_linear_pointwise", x, packed[id(w)].onednn(w), None, "none", [], "")
    systems["MKL, transposed copy"] = lambda w, x: x @ packed[id(w)].transposed(w)
    if few_rows_linear.kernel_available():
        systems["kernel"] = kernel
    rows_out = []
    for rows in args.rows:
        inputs = [torch.randn(rows, w.size(1)) for w in weights]
        for name, fn in systems.items():  # warm-up, and the values
            if name != "read only (w.sum())":
                for w, x in zip(weights, inputs):
                    torch.testing.assert_close(fn(w, x), F.linear(x, w), rtol=1e-4, atol=1e-4, msg=name)
        row = [rows] + [f"{best_ms(fn, weights, inputs, args.repeats):.3f}" for fn in systems.values()]
        if bf16:
            inputs_bf16 = [x.bfloat16() for x in inputs]
            for w, x in zip(weights_bf16, inputs_bf16):
                expected = F.linear(x.double(), w.double())
                torch.testing.assert_close(kernel(w, x).double(), expected, rtol=2 ** -7, atol=1e-2)
            row += [f"{best_ms(F.linear, weights_bf16, inputs_bf16, args.repeats):.3f}",
                    f"{best_ms(kernel, weights_bf16, inputs_bf16, args.repeats):.3f}"]
        rows_out.append(row)
    header = ["rows"] + [f"{name}, ms" for name in systems] + (
        ["bf16 F.linear, ms", "bf16 kernel, ms"] if bf16 else [])
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    return markdown_table(header, rows_out), megabytes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16, 64, 256])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3, help="decoder layers")
    p.add_argument("--vocab", type=int, default=7800, help="rows of the output projection")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--no-append", action="store_true", help="print the table only")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    table, megabytes = run(args)
    print(table)
    if not args.no_append:
        from vaswani_plugin.modules.onednn_linear import backend_summary

        notes = (f"`python benchmarks/linear_micro.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
                 f"a decoder's {6 * args.layers + 1} products (d_model {args.d_model}, d_ff {args.d_ff}, "
                 f"{args.vocab} outputs last; {megabytes:.1f} MB of float32 weights) in turn, ms for all of them, "
                 f"best of 5 rounds of {args.repeats}, {args.threads} thread(s). The plugin's linear layers here: "
                 f"{backend_summary()}.")
        append_results("Decoding's linear products by row count", table, notes=notes)


if __name__ == "__main__":
    main()
