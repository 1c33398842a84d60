"""Test helpers: build models the way fairseq-train does (argparse flags -> preset -> omegaconf ->
build_model), a model whose hypotheses end at different steps beside fairseq's transformer on its weights,
run the command-line tools, write small parallel corpora."""
import os
import subprocess
import sys

import torch
from conftest import FakeTask
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import build_model

import vaswani_plugin
from vaswani_plugin import convert


def cli_config(arch, *flags, task="translation"):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["/nonexistent-data", "--task", task, "--arch", arch, "--user-dir", vaswani_plugin.user_dir(),
                 *flags])
    return convert_namespace_to_omegaconf(args)


def build_from_cli(arch, task, *flags):
    """Our model or fairseq's, built from command-line flags against a (fake) task."""
    cfg = cli_config(arch, *flags)
    return build_model(cfg.model, task)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def run_tool(tool, *args, check=True, stdin=None, cwd=ROOT, timeout=600):
    """Run a console script of the venv (`fairseq-train`) or a module (`vaswani_plugin.convert`) on
    one thread; with `check`, a non-zero exit fails the test with the end of stderr."""
    command = [sys.executable, "-m", tool] if "." in tool else [os.path.join(BIN, tool)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{tool} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def write_parallel_splits(work, splits, src="en", tgt="de"):
    """Write {split: [(source, target), ...]} as fairseq-preprocess's SPLIT.SRC / SPLIT.TGT files."""
    for split, pairs in splits.items():
        for side, lang in ((0, src), (1, tgt)):
            (work / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")


def preprocess_synthetic(work, sizes, seed=5):
    """fairseq-preprocess (joined dictionary) on synthetic pairs, {split: count} -> the data-bin dir."""
    from vaswani_plugin.data.synthetic_corpus import generate_pairs

    pairs, splits = generate_pairs(sum(sizes.values()), seed=seed), {}
    for split, n in sizes.items():
        splits[split], pairs = pairs[:n], pairs[n:]
    write_parallel_splits(work, splits)
    prefs = [a for split in splits for a in (f"--{split}pref", work / split)]
    run_tool("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", *prefs,
             "--destdir", work / "bin", "--joined-dictionary", "--workers", 1)
    return work / "bin"


def eq3(step, d_model, warmup):
    """lrate of Eq. 3 (§5.3), written from the paper: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def train_tiny_preset(data, save_dir, updates, *extra):
    """fairseq-train of the tiny preset with the paper's loss, optimizer and schedule, one json log
    line per update, same seed and batches whatever `extra` adds (--bf16, --fp16, ...)."""
    return run_tool("fairseq-train", data, "--user-dir", "vaswani_plugin", "--arch", "vaswani_transformer_tiny",
                    "--share-all-embeddings", "--criterion", "label_smoothed_xent", "--optimizer", "adam",
                    "--adam-betas", "(0.9, 0.98)", "--lr-scheduler", "inverse_sqrt_warmup", "--warmup-updates", 40,
                    "--max-tokens", 64, "--max-update", updates, "--seed", 1, "--cpu", "--disable-validation",
                    "--no-save", "--save-dir", save_dir, "--log-format", "json", "--log-interval", 1,
                    "--no-progress-bar", "--num-workers", 0, *extra)


def train_inner_values(proc, key):
    """{num_updates: value of KEY} from the json `train_inner` lines of a fairseq-train run."""
    import json

    out = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        if "train_inner" in line and "{" in line:
            entry = json.loads(line[line.index("{"):])
            out[int(entry["num_updates"])] = float(entry[key])
    return out


def same_weight_pair(dictionary, flags, eos_bias):
    """Our randomly initialised model, its end-of-sentence logit raised by about `eos_bias` (so that
    hypotheses end at different steps), and fairseq's transformer holding its exported weights."""
    task = FakeTask(dictionary)
    cfg = cli_config("vaswani_transformer", *flags)
    ours = build_model(cfg.model, task).eval()
    with torch.no_grad():  # the last LayerNorm's bias reaches every output; align the eos row with it
        bias = ours.decoder.layers[-1].ffn_block.norm.bias
        bias.normal_()
        ours.decoder.embedding.embed_tokens.weight[dictionary.eos()] += eos_bias * bias / bias.norm() ** 2
    exported = convert.vaswani_to_fairseq({"cfg": {"model": cfg.model, "task": {"_name": "translation"}},
                                           "model": ours.state_dict()})
    theirs = build_model(exported["cfg"]["model"], task)
    theirs.load_state_dict(exported["model"])
    return ours, theirs.eval()


def random_parser(root, model_flags, scheme="vinyals", reverse_source=False):
    """A randomly initialised parser on a small synthetic treebank, in eval mode: (task, model, the
    whole test split as one sample, its gold trees, the prepared data directory)."""
    from fairseq import tasks

    from vaswani_plugin.parsing.prepare import prepare
    from vaswani_plugin.parsing.synthetic_treebank import write_treebank
    from vaswani_plugin.parsing.trees import read_treebank

    trees = write_treebank(os.path.join(root, "tb"), train=60, valid=5, test=13, seed=5)
    data = os.path.join(root, "data")
    prepare({"train": [trees["train"]], "valid": [trees["valid"]], "test": [trees["test"]]}, data, scheme=scheme,
            reverse_source=reverse_source)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--task", "constituency_parsing", "--user-dir", vaswani_plugin.user_dir(), *model_flags,
        "--constrained-decoding"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model = task.build_model(cfg.model).eval()
    task.load_dataset("test")
    dataset = task.dataset("test")
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])
    return task, model, sample, read_treebank(trees["test"]), data


def record_kernel_rows(monkeypatch, record):
    """Every product the few-row kernel (modules/few_rows_linear) makes calls record(x2) first."""
    from vaswani_plugin.modules import few_rows_linear

    real = few_rows_linear.bound_product

    def recording(*args):
        call = real(*args)
        return lambda x2, out=None: record(x2) or call(x2, out)

    monkeypatch.setattr(few_rows_linear, "bound_product", recording)
