"""`vaswani-average-checkpoints`: average the parameters of the last N checkpoints (§6.1).

The paper's base models average the last 5 checkpoints and the big ones the last 20, written at
10-minute intervals; with fairseq, save by update count (`--save-interval-updates`) and pick them
with `--num-update-checkpoints`, or by epoch with `--num-epoch-checkpoints`. fairseq's own averaging
script is not installed by pip, hence this command.

The output is the first (newest) input with its parameters replaced by the average and its optimizer state
left out (it belongs to none of the averaged parameters; resume from it with --reset-optimizer). It
is written to a temporary file first and then renamed, so an interrupted run never leaves a
half-written OUT.
"""
import argparse
import os
import re
import sys
from collections import OrderedDict
from typing import List

from ..checkpoint_io import load_checkpoint, raw_model_config, save_atomically
from ..errors import ConfigError


def select_checkpoints(directory: str, count: int, by: str, upper_bound=None) -> List[str]:
    """The `count` newest checkpoint files of `directory`, by epoch (checkpointE.pt) or by update
    (checkpoint_E_U.pt), newest first."""
    pattern = re.compile(r"checkpoint(\d+)\.pt$" if by == "epoch" else r"checkpoint_\d+_(\d+)\.pt$")
    found = []
    for name in os.listdir(directory):
        m = pattern.fullmatch(name)
        if m and (upper_bound is None or int(m.group(1)) <= upper_bound):
            found.append((int(m.group(1)), os.path.join(directory, name)))
    found.sort(reverse=True)
    if len(found) < count:
        kind = "checkpointN.pt" if by == "epoch" else "checkpoint_E_U.pt"
        raise ConfigError(f"{directory}: wanted the last {count} {kind} files, found {len(found)}")
    return [path for _, path in found[:count]]


def _model_config(state) -> dict:
    model = raw_model_config(state)
    return dict(vars(model)) if isinstance(model, argparse.Namespace) else dict(model or {})


def average_checkpoints(paths: List[str]) -> dict:
    """Element-wise mean of the `model` tensors of `paths`; refuses mismatched architectures.
    Everything else comes from the first path (the newest, when chosen by --num-*-checkpoints)."""
    first = load_checkpoint(paths[0])
    first_cfg = _model_config(first)
    total = OrderedDict((name, value.double() if value.is_floating_point() else value)
                        for name, value in first["model"].items())
    for path in paths[1:]:
        state = load_checkpoint(path)
        params, cfg = state["model"], _model_config(state)
        differing = [k for k in sorted(set(cfg) | set(first_cfg), key=str) if cfg.get(k) != first_cfg.get(k)]
        if differing:
            k = differing[0]
            raise ConfigError(f"{path} and {paths[0]} have different architectures: "
                              f"{k} = {cfg.get(k)!r} vs {first_cfg.get(k)!r}")
        if list(params) != list(total) or any(params[k].shape != total[k].shape for k in params):
            raise ConfigError(f"{path} and {paths[0]} have different parameter sets")
        for name, value in params.items():
            if value.is_floating_point():
                total[name] += value.double()
    averaged = OrderedDict(
        (name, (value / len(paths)).to(first["model"][name].dtype) if value.is_floating_point() else value)
        for name, value in total.items())
    out = dict(first, model=averaged)
    out.pop("last_optimizer_state", None)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="vaswani-average-checkpoints", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint files, or one directory with --num-*-checkpoints")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=int, help="average the last N checkpointE.pt of the directory")
    group.add_argument("--num-update-checkpoints", type=int,
                       help="average the last N checkpoint_E_U.pt of the directory")
    parser.add_argument("--checkpoint-upper-bound", type=int,
                        help="ignore checkpoints after this epoch (or update, with --num-update-checkpoints)")
    args = parser.parse_args(argv)
    count = args.num_epoch_checkpoints or args.num_update_checkpoints
    if count is not None:
        if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
            parser.error("--num-epoch-checkpoints/--num-update-checkpoints take one directory as --inputs")
        if count < 1:
            parser.error("--num-*-checkpoints must be at least 1")
        by = "epoch" if args.num_epoch_checkpoints else "update"
        paths = select_checkpoints(args.inputs[0], count, by, args.checkpoint_upper_bound)
    else:
        paths = args.inputs
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            parser.error(f"no such checkpoint file: {missing[0]}")
    print(f"averaging {len(paths)} checkpoints: {', '.join(paths)}", file=sys.stderr)
    save_atomically(average_checkpoints(paths), args.output)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
