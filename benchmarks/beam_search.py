"""Beam search speed: vaswani_transformer vs fairseq's `transformer` on the same weights (issue 6).

    python benchmarks/beam_search.py --checkpoint CKPT.pt --data DATA_BIN [--split test] [--bf16]
        [--batch-size 64] [--threads 1] [--repeats 3] [--device cpu|cuda] [--profile]

Our checkpoint is exported with `vaswani-convert --to-fairseq`, so both models compute the same
function. They decode the same batches (sorted by length as fairseq-generate does, last batch kept)
through the generator fairseq-generate would build (task.build_generator + task.inference_step,
beam 4, lenpen 0.6 by default): for ours the plugin's lean beam search (issue 15), for fairseq's
model fairseq's `SequenceGenerator`; a third row decodes ours through fairseq's `SequenceGenerator`
too (`--fairseq-beam-search`), which shows what the lean search buys. Systems are interleaved (the
order reversed every pass) and timed per pass over the whole split; the table gives medians. Speed
only counts when the best hypotheses are identical to fairseq's: the ratio is printed as "n/a"
otherwise. BLEU (sacrebleu, sentencepiece removed) is against the split's
references. `--bf16` adds rows for both models cast to bfloat16 (`model.to(torch.bfloat16)`; scores
and log-probabilities stay float32 in fairseq's generator). `--profile` prints where our decoding
time goes (torch.profiler, one more pass) and adds its costliest operators to the entry. The table
is appended to benchmarks/RESULTS.md.
"""
import argparse
import copy
import os
import sys
import tempfile
import time
from statistics import median

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_results, markdown_table


OURS_FAIRSEQ_SEARCH = "vaswani_transformer, fairseq's SequenceGenerator"


def load_pair(checkpoint, data, workdir):
    """(task, ours, fairseq's): our checkpoint and its --to-fairseq export, loaded by fairseq."""
    from fairseq import checkpoint_utils, tasks

    import vaswani_plugin  # noqa: F401  registers the model
    from vaswani_plugin import convert

    exported = os.path.join(workdir, "fairseq.pt")
    convert.main(["--to-fairseq", checkpoint, exported])
    models = []
    task = None
    for path in (checkpoint, exported):
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        cfg = state["cfg"]
        cfg.task.data = data
        if task is None:
            task = tasks.setup_task(cfg.task)
        [model], _ = checkpoint_utils.load_model_ensemble([path], task=task, arg_overrides={"data": data})
        models.append(model.eval())
    return task, models[0], models[1]


def make_batches(task, split, batch_size, max_sentences=None):
    """fairseq-generate's batches: length-sorted, --required-batch-size-multiple 1 (none dropped)."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    subset = max_sentences is not None and max_sentences < len(dataset)
    itr = task.get_batch_iterator(dataset=dataset, max_sentences=batch_size, required_batch_size_multiple=1,
                                  ignore_invalid_inputs=False).next_epoch_itr(shuffle=False)
    batches = []
    for sample in itr:
        if subset:
            keep = sample["id"] < max_sentences
            if not keep.any():
                continue
            if not keep.all():
                sample = _subset(sample, keep)
        batches.append(sample)
    return batches


def _subset(sample, keep):
    net = sample["net_input"]
    return {"id": sample["id"][keep], "nsentences": int(keep.sum()), "target": sample["target"][keep],
            "net_input": {"src_tokens": net["src_tokens"][keep], "src_lengths": net["src_lengths"][keep],
                          "prev_output_tokens": net["prev_output_tokens"][keep]}}


def decode(task, model, generator, batches, device):
    """One pass: {sentence id: best hypothesis tokens}, (wall seconds, CPU seconds of this process),
    target tokens produced. CPU time is the steadier measure when other processes share the cores."""
    from fairseq import utils

    hyps, tokens = {}, 0
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start, cpu_start = time.perf_counter(), time.process_time()
    for sample in batches:
        if device == "cuda":
            sample = utils.move_to_cuda(sample)
        out = task.inference_step(generator, [model], sample)
        for sid, nbest in zip(sample["id"].tolist(), out):
            hyps[sid] = nbest[0]["tokens"].cpu()
            tokens += nbest[0]["tokens"].numel()
    sync()
    return hyps, (time.perf_counter() - start, time.process_time() - cpu_start), tokens


def bleu(task, hyps, batches):
    import sacrebleu

    tgt = task.target_dictionary
    refs = {sid: t for b in batches for sid, t in zip(b["id"].tolist(), b["target"].cpu())}
    ids = sorted(hyps)
    sys_out = [tgt.string(hyps[i], "sentencepiece") for i in ids]
    ref_out = [tgt.string(refs[i][refs[i].ne(tgt.pad())], "sentencepiece") for i in ids]
    return sacrebleu.corpus_bleu(sys_out, [ref_out]).score


def same_hypotheses(a, b):
    return sum(torch.equal(a[i], b[i]) for i in a), len(a)


def profile_ours(task, model, generator, batches, device, rows=25):
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        decode(task, model, generator, batches, device)
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=rows)


def add_decoding_args(p):
    """Options shared with ctranslate2_anchor.py: the model, the sentences, the search, the timing."""
    p.add_argument("--checkpoint", required=True, help="a vaswani_transformer checkpoint")
    p.add_argument("--data", required=True, help="its fairseq-preprocess data directory")
    p.add_argument("--split", default="test")
    p.add_argument("--label", default=None, help="name of the test set in the table (default: DATA:SPLIT)")
    p.add_argument("--max-sentences", type=int, default=None, help="only the first N sentences of the split")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (fairseq-generate --batch-size)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, default=0.6)
    p.add_argument("--max-len-b", type=int, default=200, help="maximum output length (fairseq-generate's)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CTranslate2: intra_threads), the same for all")
    p.add_argument("--repeats", type=int, default=3, help="timed passes per system (interleaved); medians")
    p.add_argument("--bf16", action="store_true", help="also time in bfloat16")
    p.add_argument("--no-append", action="store_true", help="print only; do not append to RESULTS.md")


def check_paths(p, args):
    if not os.path.isfile(args.checkpoint):
        p.error(f"--checkpoint: no such file: {args.checkpoint}")
    if not os.path.isdir(args.data):
        p.error(f"--data: no such directory: {args.data}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="beam_search.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_decoding_args(p)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of our decoding")
    args = p.parse_args(argv)
    check_paths(p, args)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    return args


def run(args):
    """Returns (markdown table, rows as dicts, the profile table or None); prints the profile."""
    from fairseq.dataclass.configs import GenerationConfig

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="beam_search_") as work:
        task, ours, theirs = load_pair(args.checkpoint, args.data, work)
    batches = make_batches(task, args.split, args.batch_size, args.max_sentences)
    gen_cfg = GenerationConfig(beam=args.beam, lenpen=args.lenpen, max_len_b=args.max_len_b)
    variants = [("fp32", torch.float32)] + ([("bf16", torch.bfloat16)] if args.bf16 else [])
    fairseq_search = copy.deepcopy(gen_cfg)
    fairseq_search.fairseq_beam_search = True  # the plugin's generation option (fairseq_fixes/lean_beam_search.py)
    rows, results, profile_text = [], [], None
    for precision, dtype in variants:
        models = {}
        for name, model in (("vaswani_transformer", ours), ("fairseq transformer", theirs)):
            m = copy.deepcopy(model).to(device=args.device, dtype=dtype)
            m.prepare_for_inference_(argparse.Namespace(generation=gen_cfg))
            models[name] = (m, task.build_generator([m], gen_cfg))
        our_model = models["vaswani_transformer"][0]
        models[OURS_FAIRSEQ_SEARCH] = (our_model, task.build_generator([our_model], fairseq_search))
        times = {name: [] for name in models}
        out = {}
        with torch.inference_mode():
            for name, (m, g) in models.items():  # warm-up pass, also gives the hypotheses
                out[name] = decode(task, m, g, batches, args.device)
            for rep in range(args.repeats):
                order = list(models) if rep % 2 == 0 else list(models)[::-1]
                for name in order:
                    m, g = models[name]
                    times[name].append(decode(task, m, g, batches, args.device)[1])
            if args.profile and precision == "fp32":
                m, g = models["vaswani_transformer"]
                profile_text = profile_ours(task, m, g, batches, args.device)
                print(f"\nWhere our {precision} beam search spends its time (torch.profiler, self time):")
                print(profile_text)
        reference = "fairseq transformer"
        measured = {}
        for name in (*(n for n in models if n != reference), reference):  # fairseq's model last
            hyps, _, tokens = out[name]
            same, total = same_hypotheses(hyps, out[reference][0])
            wall, cpu = median([t[0] for t in times[name]]), median([t[1] for t in times[name]])
            measured[name] = {"model": name, "precision": precision, "sent_per_s": total / wall,
                              "tok_per_s": tokens / wall, "cpu_sent_per_s": total / cpu,
                              "bleu": bleu(task, hyps, batches), "identical": same == total, "same": same, "total": total}
        results.extend(measured.values())
        for r in measured.values():
            ratios = [r[key] / measured[reference][key] for key in ("sent_per_s", "cpu_sent_per_s")]
            bold = "**" if r["model"] == "vaswani_transformer" else ""
            ratio_text = ([f"{bold}{x:.2f}x{bold}" for x in ratios] if r["identical"]
                          else [f"n/a ({r['total'] - r['same']} hypotheses differ)"] * 2)
            rows.append([args.label or f"{os.path.basename(os.path.normpath(args.data))}:{args.split}",
                         r["model"], precision, r["total"], f"{r['sent_per_s']:.1f}", f"{r['tok_per_s']:.0f}",
                         f"{r['cpu_sent_per_s']:.1f}", f"{r['bleu']:.2f}", f"{r['same']}/{r['total']}", *ratio_text])
    header = ["test set", "model", "precision", "sentences", "sentences/s", "target tokens/s",
              "sentences per CPU-second", "BLEU", "identical best hypotheses", "speed vs fairseq (wall)",
              "speed vs fairseq (CPU time)"]
    return markdown_table(header, rows), results, profile_text


def main(argv=None):
    args = parse_args(argv)
    table, _, profile_text = run(args)
    print(table)
    if not args.no_append:
        notes = (f"Beam {args.beam}, lenpen {args.lenpen}, batches of {args.batch_size} sentences, "
                 f"{args.threads} thread(s), device {args.device}, medians of {args.repeats} interleaved "
                 f"passes; checkpoint `{args.checkpoint}`. Produced by `benchmarks/beam_search.py`.")
        if profile_text:
            top = "\n".join(profile_text.splitlines()[:18])  # the header and the costliest operators
            notes += f"\n\nWhere our fp32 decoding time goes (torch.profiler, self CPU time):\n\n```\n{top}\n```"
        append_results("Beam search: vaswani_transformer vs fairseq transformer (same weights)", table,
                       device=args.device, notes=notes)


if __name__ == "__main__":
    main()
