"""`vaswani_plugin.fairseq_fixes`: the fairseq version they were written for, and fairseq's own
behaviour without each fix, where no other test shows it (keep_last_batch: test_no_sentence_lost;
atomic_checkpoints: test_resume; fp16_cpu: test_fp16; full_help: test_fairseq_options)."""
import importlib.util
import io
import math
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from helpers import ROOT, run_tool
from vaswani_plugin import fairseq_fixes
from vaswani_plugin.errors import ConfigError
from vaswani_plugin.fairseq_fixes import checkpoint_errors, clean_exit, too_long_inputs


@pytest.mark.parametrize("version, fits", [("0.12.2", True), ("0.12.3.1", True), ("0.12.0", True),
                                           ("0.10.2", False), ("0.13.0", False), ("1.0.0a0", False)])
def test_other_fairseq_versions_are_named(version, fits):
    message = fairseq_fixes.version_mismatch(version)
    assert (message is None) == fits
    if not fits:
        assert f"written for fairseq 0.12.x, but fairseq {version} is installed" in message


def import_plugin_with_fairseq_version(version):
    code = f"import fairseq; fairseq.__version__ = {version!r}; import vaswani_plugin"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"})


def test_the_version_is_said_once_on_import_and_only_when_it_differs():
    other = import_plugin_with_fairseq_version("0.13.0")
    assert other.returncode == 0, other.stderr[-2000:]
    assert other.stderr.count("were written for fairseq 0.12.x, but fairseq 0.13.0 is installed") == 1
    installed = import_plugin_with_fairseq_version(__import__("fairseq").__version__)
    assert "were written for fairseq" not in installed.stderr


# fairseq's own transformer, tiny: what fairseq-train does without the plugin. No data-loading thread
# (--data-buffer-size 0): without the plugin's clean_exit it can abort the process at exit
FAIRSEQ_TINY = ["--arch", "transformer", "--encoder-layers", 1, "--decoder-layers", 1, "--encoder-embed-dim", 32,
                "--encoder-ffn-embed-dim", 64, "--encoder-attention-heads", 2, "--decoder-attention-heads", 2,
                "--optimizer", "adam", "--lr", "1e-3", "--max-update", 1, "--max-tokens", 500, "--cpu",
                "--disable-validation", "--no-save", "--num-workers", 0, "--data-buffer-size", 0]


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="with torch_xla fairseq's bf16 works")
def test_bf16_cpu_fairseq_alone_asks_torch_xla_for_a_device(small_trained, tmp_path):
    alone = run_tool("fairseq-train", small_trained["bin"], *FAIRSEQ_TINY, "--bf16", "--save-dir", tmp_path,
                     check=False)
    assert alone.returncode != 0 and "'NoneType' object has no attribute 'xla_device'" in alone.stderr
    fixed = run_tool("fairseq-train", small_trained["bin"], "--user-dir", "vaswani_plugin", *FAIRSEQ_TINY, "--bf16",
                     "--save-dir", tmp_path)
    assert "'tpu': False" in fixed.stdout + fixed.stderr


def test_checkpoint_errors_fairseq_alone_raises_from_inside_its_loader(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("model weights\n")
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    for path in (text, foreign):
        with pytest.raises(Exception) as alone:
            checkpoint_errors._load_checkpoint_to_cpu(str(path))
        assert not isinstance(alone.value, ConfigError) and str(path) not in str(alone.value)
        with pytest.raises(ConfigError, match="^" + str(path)):
            checkpoint_errors.load_checkpoint_to_cpu(str(path))
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(OSError, match="Model file not found"):
        checkpoint_errors._load_model_ensemble_and_task([missing])
    with pytest.raises(ConfigError, match="missing.pt: no such checkpoint file"):
        checkpoint_errors.load_model_ensemble_and_task([missing])


class TooLong:
    """Just what FairseqTask.filter_indices_by_size reads: sample 2 is over the limits."""

    def filter_indices_by_size(self, indices, max_positions):
        return indices[indices != 2], [2]

    def size(self, index):
        return (300, 12)


def test_too_long_inputs_fairseq_alone_raises_a_bare_exception():
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    task = TranslationTask(TranslationConfig(), src_dict=None, tgt_dict=None)
    indices = np.arange(4)
    with pytest.raises(Exception) as alone:
        too_long_inputs._fairseq_filter_indices_by_size(task, indices, TooLong(), (256, 256))
    assert type(alone.value) is Exception and "Size of sample #2 is invalid (=(300, 12))" in str(alone.value)
    with pytest.raises(ConfigError, match=r"Size of sample #2 is invalid .* \(limits set by --max-source-positions"):
        task.filter_indices_by_size(indices, TooLong(), (256, 256))
    assert list(task.filter_indices_by_size(indices, TooLong(), (256, 256), ignore_invalid_inputs=True)) == [0, 1, 3]


def test_an_explicit_restore_file_fairseq_alone_trains_from_scratch(small_trained, tmp_path):
    flags = [small_trained["bin"], *FAIRSEQ_TINY, "--save-dir", tmp_path, "--restore-file", tmp_path / "typo.pt"]
    alone = run_tool("fairseq-train", *flags)
    assert "No existing checkpoint found" in alone.stdout + alone.stderr  # and it trained: exit status 0
    fixed = run_tool("fairseq-train", "--user-dir", "vaswani_plugin", *flags, check=False)
    assert fixed.returncode == 1 and "Traceback" not in fixed.stderr
    assert fixed.stderr.strip().splitlines()[-1].endswith(f"{tmp_path / 'typo.pt'}: no such checkpoint file "
                                                          f"(--restore-file)")



def test_resuming_another_shape_fairseq_alone_says_only_that_architectures_must_match(small_trained, tmp_path):
    """fairseq's Trainer.load_checkpoint, on parameters of another shape: an Exception whose message
    names neither the parameter nor the shapes (torch's detail is only in the exception it replaced,
    printed as a traceback); the fix's one line names them (test_bad_input runs it through fairseq-train)."""
    from fairseq import tasks
    from fairseq.trainer import Trainer

    from conftest import TINY_TRANSLATION_MODEL
    from helpers import cli_config

    cfg = cli_config("vaswani_transformer", *TINY_TRANSLATION_MODEL[2:], "--d-model", "64", "--optimizer", "adam",
                     "--lr", "0.001", "--cpu", "--save-dir", str(tmp_path))
    cfg.task.data = str(small_trained["bin"])
    task = tasks.setup_task(cfg.task)
    trainer = Trainer(cfg, task, task.build_model(cfg.model), task.build_criterion(cfg.criterion))
    with pytest.raises(Exception) as alone:
        checkpoint_errors._trainer_load_checkpoint(trainer, str(small_trained["ckpt"]))
    assert not isinstance(alone.value, ConfigError)
    assert str(alone.value).endswith("please ensure that the architectures match.")
    assert "size mismatch" not in str(alone.value) and "size mismatch" in str(alone.value.__context__)
    with pytest.raises(ConfigError, match="parameters do not fit --arch vaswani_transformer .*size mismatch for "):
        trainer.load_checkpoint(str(small_trained["ckpt"]))


# fairseq's BufferedIterator over batches that take torch ~0.1 s each: the main thread takes one and
# exits while the background thread is still computing the next ones
EXIT_WHILE_COLLATING = """
import sys, torch
from fairseq.data.iterators import BufferedIterator
if sys.argv[1] == "plugin":
    import vaswani_plugin
class Batches:
    def __len__(self): return 100
    def __iter__(self): return (torch.ones(1500, 1500) @ torch.ones(1500, 1500) for _ in range(100))
next(iter(BufferedIterator(10, Batches())))
print("trained", flush=True)  # before the exit: an abort does not flush
"""


@pytest.mark.parametrize("plugin", [False, True])
def test_clean_exit_fairseq_alone_aborts_when_the_loading_thread_is_collating(plugin):
    proc = subprocess.run([sys.executable, "-c", EXIT_WHILE_COLLATING, "plugin" if plugin else "alone"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"})
    assert proc.stdout == "trained\n"
    if plugin:
        assert proc.returncode == 0, proc.stderr[-2000:]
    else:
        assert proc.returncode == -signal.SIGABRT
        assert "terminate called without an active exception" in proc.stderr


def test_clean_exit_gives_up_on_a_source_that_never_yields():
    from fairseq.data.iterators import BufferedIterator

    release = threading.Event()

    class Stuck:
        def __len__(self):
            return 2

        def __iter__(self):
            yield 0
            release.wait()  # a dead DataLoader worker: no batch comes
            yield 1

    loader = BufferedIterator(2, Stuck())
    assert next(loader) == 0
    start = time.monotonic()
    clean_exit.stop_background_consumers(give_up_seconds=0.3)
    assert 0.3 <= time.monotonic() - start < 5 and loader._consumer.is_alive()
    release.set()
    loader._consumer.join(timeout=10)  # its cut length ends it after the batch in hand
    assert not loader._consumer.is_alive()


def _scores(stdout, prefix="H-"):
    """{sentence id: hypothesis score} from fairseq-generate's or fairseq-interactive's H- lines."""
    return {int(line.split("\t")[0][len(prefix):]): float(line.split("\t")[1])
            for line in stdout.splitlines() if line.startswith(prefix)}


def test_bf16_generation_decodes_as_the_models_cast_to_bfloat16_in_process(small_trained):
    """fairseq-generate --bf16 alone decodes in float32 (the same scores to the last bit); with the
    plugin, as the same checkpoint cast with `.bfloat16()` and decoded by the task's generator."""
    from fairseq import checkpoint_utils, options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    flags = [small_trained["bin"], "--user-dir", "vaswani_plugin", "--path", small_trained["ckpt"], "--gen-subset",
             "test", "--beam", 4, "--max-len-b", 10, "--batch-size", 16]  # the 13 sentences in one batch
    fp32 = _scores(run_tool("fairseq-generate", *flags).stdout)
    bf16 = _scores(run_tool("fairseq-generate", *flags, "--bf16").stdout)
    from fairseq_cli import generate

    args = options.parse_args_and_arch(options.get_generation_parser(), [str(f) for f in flags] + ["--bf16"])
    cfg = convert_namespace_to_omegaconf(args)
    out = io.StringIO()
    generate._main(cfg, out)  # fairseq alone: the fix casts only inside the tool's main
    assert _scores(out.getvalue()) == fp32

    task = tasks.setup_task(cfg.task)
    task.load_dataset("test")
    models, _ = checkpoint_utils.load_model_ensemble([str(small_trained["ckpt"])], task=task)
    model = models[0].bfloat16()
    model.prepare_for_inference_(cfg)
    generator = task.build_generator([model], cfg.generation)
    batches = task.get_batch_iterator(dataset=task.dataset("test"), max_sentences=16).next_epoch_itr(shuffle=False)
    reference = {}
    for sample in batches:
        for i, hypotheses in enumerate(task.inference_step(generator, [model], sample)):
            reference[int(sample["id"][i])] = hypotheses[0]["score"].item() / math.log(2)  # printed in base 2
    assert sorted(bf16) == sorted(reference) == list(range(13))
    for i in reference:
        assert bf16[i] == pytest.approx(reference[i], rel=1e-6)
    assert bf16 != fp32 and all(abs(bf16[i] - fp32[i]) < 0.1 for i in fp32)


def test_bf16_generation_casts_in_fairseq_interactive_too(small_trained):
    """fairseq-interactive --bf16 with the plugin: other scores than float32's, close to them."""
    flags = [small_trained["bin"], "--user-dir", "vaswani_plugin", "--path", small_trained["ckpt"], "--beam", 4,
             "--max-len-b", 10, "--source-lang", "en", "--target-lang", "de"]
    text = (small_trained["work"] / "test.en").read_text()
    fp32 = _scores(run_tool("fairseq-interactive", *flags, stdin=text).stdout)
    bf16 = _scores(run_tool("fairseq-interactive", *flags, "--bf16", stdin=text).stdout)
    assert sorted(bf16) == sorted(fp32) and len(fp32) == len(text.splitlines())
    assert bf16 != fp32 and all(abs(bf16[i] - fp32[i]) < 0.1 for i in fp32)
