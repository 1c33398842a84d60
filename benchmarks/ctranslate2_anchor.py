"""CTranslate2 as the outside anchor for decoding speed (issue 6).

    pip install ctranslate2        # optional, not a dependency of the plugin (or: pip install -e .[bench])
    python benchmarks/ctranslate2_anchor.py --checkpoint CKPT.pt --data DATA_BIN [--split test]
        [--batch-size 64] [--threads 1] [--repeats 3] [--bf16]

Our checkpoint is exported with `vaswani-convert --to-fairseq`, converted with CTranslate2's
`ct2-fairseq-converter` (float32 weights; `--unsafe_deserialization` because torch >= 2.6 refuses to
unpickle fairseq checkpoints otherwise), and both decode the same sentences with beam 4 and length
penalty 0.6 on the same number of CPU threads (torch threads = CTranslate2 intra_threads, one
translator replica, in a process of its own: `CTranslate2Process`), in the same batches,
interleaved; medians of wall-clock passes. The table gives
sentences/s, our speed as a ratio to CTranslate2's, how many best hypotheses agree and the BLEU of
both against the references. `--bf16` adds a row pair with ours in bfloat16 (cast with .to())
against CTranslate2's compute_type bfloat16, or its float32 where its CPU build has no bfloat16
(the table says which). The table is appended to benchmarks/RESULTS.md.
"""
import argparse
import copy
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from beam_search import (  # the same helpers and batches
    add_decoding_args,
    bleu,
    check_paths,
    decode,
    load_pair,
    make_batches,
)
from common import append_results, markdown_table

INSTALL_HINT = "ctranslate2_anchor.py: error: CTranslate2 is not installed: pip install ctranslate2"


def convert_to_ctranslate2(checkpoint, data, task, workdir):
    """Our checkpoint -> fairseq checkpoint -> CTranslate2 model directory (float32 weights)."""
    from vaswani_plugin import convert

    exported = os.path.join(workdir, "fairseq.pt")
    convert.main(["--to-fairseq", checkpoint, exported])
    converter = shutil.which("ct2-fairseq-converter") or os.path.join(os.path.dirname(sys.executable),
                                                                     "ct2-fairseq-converter")
    out = os.path.join(workdir, "ct2")
    cmd = [converter, "--model_path", exported, "--data_dir", data, "--output_dir", out,
           "--source_lang", task.cfg.source_lang, "--target_lang", task.cfg.target_lang,
           "--quantization", "float32", "--unsafe_deserialization"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"ctranslate2_anchor.py: error: ct2-fairseq-converter failed:\n{proc.stderr[-2000:]}")
    return out


def ct2_batches(task, batches):
    """The same batches as token strings (source pieces without the final </s>, which CTranslate2's
    fairseq models append themselves), with their sentence ids."""
    src = task.source_dictionary
    out = []
    for sample in batches:
        tokens = []
        for row in sample["net_input"]["src_tokens"]:
            row = row[row.ne(src.pad())]
            tokens.append([src[i] for i in row.tolist() if i != src.eos()])
        out.append((sample["id"].tolist(), tokens))
    return out


class CTranslate2Process:
    """A CTranslate2 translator in a process of its own, which decodes when asked (so the passes
    still interleave). In ours it would slow torch: once a translator had decoded in the same process,
    our 2-thread beam search ran at its 1-thread speed (Intel Xeon: 233 -> 134 sentences/s)."""

    def __init__(self, ct2_dir, compute_type, threads):
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, ct2_dir, compute_type, threads), daemon=True)
        self.process.start()

    def translate(self, sources, beam, lenpen, max_len):
        """sources: per batch, its sentences as token lists -> (per batch, the best hypotheses, seconds)."""
        self.conn.send((sources, beam, lenpen, max_len))
        return self.conn.recv()

    def close(self):
        self.conn.send(None)
        self.process.join()


def _serve(conn, ct2_dir, compute_type, threads):
    import ctranslate2

    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                        intra_threads=threads)
    while (job := conn.recv()) is not None:
        sources, beam, lenpen, max_len = job
        start = time.perf_counter()
        out = [[result.hypotheses[0] for result in translator.translate_batch(
                    batch, beam_size=beam, length_penalty=lenpen, max_batch_size=len(batch),
                    max_decoding_length=max_len)] for batch in sources]
        conn.send((out, time.perf_counter() - start))


def ct2_decode(translator, task, batches, beam, lenpen, max_len):
    """One pass: {sentence id: best hypothesis as target ids + </s>}, seconds, target tokens."""
    tgt = task.target_dictionary
    hyps, tokens = {}, 0
    out, seconds = translator.translate([sources for _, sources in batches], beam, lenpen, max_len)
    for (ids, _), best in zip(batches, out):
        for sid, words in zip(ids, best):
            hyps[sid] = torch.tensor([tgt.index(w) for w in words] + [tgt.eos()])
            tokens += len(words) + 1
    return hyps, seconds, tokens


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="ctranslate2_anchor.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_args(p)
    args = p.parse_args(argv)
    check_paths(p, args)
    return args


def run(args):
    try:
        import ctranslate2
    except ImportError:
        sys.exit(INSTALL_HINT)
    from fairseq.dataclass.configs import GenerationConfig

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="ct2_anchor_") as work:
        task, ours, _ = load_pair(args.checkpoint, args.data, work)
        ct2_dir = convert_to_ctranslate2(args.checkpoint, args.data, task, work)
        batches = make_batches(task, args.split, args.batch_size, args.max_sentences)
        sources = ct2_batches(task, batches)
        gen_cfg = GenerationConfig(beam=args.beam, lenpen=args.lenpen, max_len_b=args.max_len_b)
        label = args.label or f"{os.path.basename(os.path.normpath(args.data))}:{args.split}"
        rows = []
        for precision, dtype, compute_type in [("fp32", torch.float32, "float32")] + (
                [("bf16", torch.bfloat16, "bfloat16")] if args.bf16 else []):
            model = copy.deepcopy(ours).to(dtype)
            model.prepare_for_inference_(argparse.Namespace(generation=gen_cfg))
            generator = task.build_generator([model], gen_cfg)
            ct2_precision = precision
            if compute_type not in ctranslate2.get_supported_compute_types("cpu"):
                compute_type, ct2_precision = "float32", "fp32 (no bf16 on this CPU build)"
            translator = CTranslate2Process(ct2_dir, compute_type, args.threads)
            systems = {
                "vaswani_transformer": lambda m=model, g=generator: decode(task, m, g, batches, "cpu"),
                f"CTranslate2 {ctranslate2.__version__}": lambda t=translator: ct2_decode(t, task, sources, args.beam,
                                                                             args.lenpen, args.max_len_b),
            }
            out, times = {}, {name: [] for name in systems}
            with torch.inference_mode():
                for name, fn in systems.items():  # warm-up, and the hypotheses
                    out[name] = fn()
                for rep in range(args.repeats):
                    for name in (list(systems) if rep % 2 == 0 else list(systems)[::-1]):
                        elapsed = systems[name]()[1]
                        times[name].append(elapsed[0] if isinstance(elapsed, tuple) else elapsed)
            translator.close()
            (ours_name, ct2_name) = list(systems)
            same = sum(torch.equal(out[ours_name][0][i], out[ct2_name][0][i]) for i in out[ours_name][0])
            total = len(out[ours_name][0])
            speed = {name: total / median(times[name]) for name in systems}
            for name in systems:
                rows.append([label, name, precision if name == ours_name else ct2_precision, total, f"{speed[name]:.1f}",
                             f"{out[name][2] / median(times[name]):.0f}", f"{bleu(task, out[name][0], batches):.2f}",
                             f"{same}/{total}",
                             f"**{speed[ours_name] / speed[ct2_name]:.2f}x**" if name == ours_name else "1.00x"])
    header = ["test set", "system", "precision", "sentences", "sentences/s", "target tokens/s", "BLEU",
              "identical best hypotheses", "ours / CTranslate2 (sentences/s)"]
    return markdown_table(header, rows)


def main(argv=None):
    args = parse_args(argv)
    table = run(args)
    print(table)
    if not args.no_append:
        notes = (f"Beam {args.beam}, lenpen {args.lenpen}, batches of {args.batch_size} sentences, CPU, "
                 f"{args.threads} thread(s) for both (CTranslate2: intra_threads, one replica), medians of "
                 f"{args.repeats} interleaved passes; checkpoint `{args.checkpoint}`. Produced by "
                 "`benchmarks/ctranslate2_anchor.py`.")
        append_results("Decoding vs CTranslate2 (same model, same sentences)", table, notes=notes)


if __name__ == "__main__":
    main()
