"""Reading and writing fairseq checkpoints for the plugin's commands (averaging, conversion).

`load_checkpoint` turns anything that is not a fairseq checkpoint into one clear line; it loads with
torch's default weights-only unpickler, which `checkpoint_safety` lets read fairseq's Namespace.
`save_atomically` and `write_atomically` never leave a half-written file behind.
"""
import os
import tempfile
from collections.abc import Callable

import torch

from . import checkpoint_safety  # noqa: F401  (fairseq checkpoints may hold argparse.Namespace)
from .errors import ConfigError


def load_checkpoint(path: str) -> dict:
    """torch.load with one clear line for anything that is not a fairseq checkpoint."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # torch.save's zip, or a legacy pickle
        raise ConfigError(f"{path}: not a checkpoint (starts with {head!r}, not a torch.save file); "
                          f"expected a .pt file written by fairseq")
    try:
        state = torch.load(path, map_location="cpu")
    except Exception as e:  # truncated, corrupt, foreign pickled classes
        first = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:160]
        raise ConfigError(f"{path}: not a readable checkpoint ({type(e).__name__}: {first}); "
                          f"expected a .pt file written by fairseq") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        found = f"a {type(state).__name__}" + (f" with keys {sorted(map(str, state))[:6]}"
                                               if isinstance(state, dict) else "")
        raise ConfigError(f"{path}: not a fairseq checkpoint (found {found}; expected a dict with "
                          f"'model' and 'cfg' or 'args')")
    if state.get("cfg") is None and state.get("args") is None:
        raise ConfigError(f"{path}: fairseq checkpoint without a configuration (neither 'cfg' nor 'args')")
    if state.get("fsdp_metadata") is not None:
        raise ConfigError(f"{path}: a sharded (FSDP) checkpoint; consolidate it into one file first")
    return state


def raw_model_config(state: dict):
    """cfg["model"] (a dict, or a Namespace for fairseq's legacy models), else the legacy `args`."""
    cfg = state.get("cfg")
    raw = cfg.get("model") if isinstance(cfg, dict) else None
    return raw if raw is not None else state.get("args")


def save_atomically(state: dict, output: str) -> None:
    """torch.save to a temporary file beside OUTPUT, then rename: OUTPUT is whole or untouched."""
    write_atomically(output, lambda tmp: torch.save(state, tmp))


def write_atomically(output: str, write: Callable[[str], object]) -> None:
    """`write(tmp)` to a temporary file beside OUTPUT, then rename it to OUTPUT (atomic on POSIX)."""
    directory = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".partial-", suffix=".pt", dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give OUT the permissions of any new file
    try:
        write(tmp)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
