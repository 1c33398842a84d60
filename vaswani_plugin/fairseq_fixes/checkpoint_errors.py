"""One clear line, not a traceback, for a checkpoint fairseq cannot use.

fairseq 0.12 reports a bad `--path` or `--restore-file` with a traceback from deep inside its loader
(`KeyError: 'best_loss'` for a torch.save of some other dict, `KeyError: 101` for a text file,
a zip-reader message for a truncated file), says "Model file not found" with a traceback, starts
training from scratch without a word when an explicit `--restore-file` does not exist, and
answers a checkpoint of another architecture with "please ensure that the architectures match"
and no detail. When the plugin is loaded, each of these ends the tool with one line naming the
file and what was expected (`ConfigError`, exit status 1):

- `checkpoint_utils.load_checkpoint_to_cpu` (every fairseq tool and the hub interface read
  checkpoints through it): when it fails, `checkpoint_io.load_checkpoint` says what the file is;
- `checkpoint_utils.load_model_ensemble_and_task` (fairseq-generate, -interactive, the hub):
  a missing file is named before fairseq looks for it;
- `checkpoint_utils.load_checkpoint` (fairseq-train): an explicit `--restore-file` must exist;
- `Trainer.load_checkpoint`: parameters that do not fit the model built from `--arch` name the
  first mismatch (torch's message: which parameter, which shapes, or which keys are missing).

Failures we cannot explain better are re-raised untouched.
"""
import inspect
import os

from fairseq import checkpoint_utils
from fairseq.trainer import Trainer

from ..checkpoint_io import load_checkpoint
from ..errors import ConfigError

_load_checkpoint_to_cpu = checkpoint_utils.load_checkpoint_to_cpu
_load_model_ensemble_and_task = checkpoint_utils.load_model_ensemble_and_task
_ensemble_signature = inspect.signature(_load_model_ensemble_and_task)
_load_training_checkpoint = checkpoint_utils.load_checkpoint
_trainer_load_checkpoint = Trainer.load_checkpoint


def load_checkpoint_to_cpu(path, *args, **kwargs):
    try:
        return _load_checkpoint_to_cpu(path, *args, **kwargs)
    except Exception:
        if os.path.isfile(path):
            load_checkpoint(path)  # raises ConfigError saying what the file is instead
        raise


def load_model_ensemble_and_task(*args, **kwargs):
    call = _ensemble_signature.bind(*args, **kwargs)
    call.apply_defaults()
    if not call.arguments["suffix"] and call.arguments["num_shards"] == 1:  # one file per model
        for filename in call.arguments["filenames"]:
            if not os.path.isfile(filename):
                raise ConfigError(f"{filename}: no such checkpoint file (--path); expected a .pt file "
                                  f"written by fairseq-train")
    return _load_model_ensemble_and_task(*args, **kwargs)


def load_training_checkpoint(cfg, trainer, **kwargs):
    if cfg.restore_file != "checkpoint_last.pt" and not os.path.isfile(cfg.restore_file):
        # fairseq would train from scratch; only its default name may be absent (a first run)
        raise ConfigError(f"{cfg.restore_file}: no such checkpoint file (--restore-file)")
    return _load_training_checkpoint(cfg, trainer, **kwargs)


def trainer_load_checkpoint(self, filename, *args, **kwargs):
    try:
        return _trainer_load_checkpoint(self, filename, *args, **kwargs)
    except Exception as e:
        cause = e.__cause__ or e.__context__
        if not str(e).startswith("Cannot load model parameters") or cause is None:
            raise
        # torch: "Error(s) in loading state_dict for M:" then one tab-indented line per kind of problem
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()] or [type(cause).__name__]
        detail = lines[1] if len(lines) > 1 else lines[0]
        detail = detail if len(detail) <= 200 else detail[:200] + " ..."
        raise ConfigError(f"{filename}: parameters do not fit --arch {self.cfg.model._name} "
                          f"({detail}); expected a checkpoint of the same architecture") from None


checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task
checkpoint_utils.load_checkpoint = load_training_checkpoint
Trainer.load_checkpoint = trainer_load_checkpoint
