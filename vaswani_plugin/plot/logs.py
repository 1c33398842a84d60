"""Training and validation records from fairseq-train's logs (plain Python).

fairseq-train logs one line per record through Python's logging, tagged by the logger's name:
`train_inner` (every --log-interval updates), `train` (end of epoch) and the validation subset's
name (`valid`). Two body formats are read, the ones fairseq writes to a file or pipe:

    --log-format json:    ... | INFO | train_inner | {"epoch": 1, "loss": "9.57", "num_updates": "1", ...}
                          ... | INFO | valid | {"epoch": 1, "valid_loss": "7.89", "valid_num_updates": "3"}
    --log-format simple:  ... | INFO | train_inner | epoch 001:      1 / 4 loss=9.571, ..., num_updates=1, lr=0.044
                          ... | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.892 | ... | num_updates 3

(the default when stdout is not a terminal is simple; tqdm's progress bars are not read).
"""
import json
import re
import sys
from dataclasses import dataclass
from typing import Dict, List

from ..errors import ConfigError

_LINE = re.compile(r"\| (?:INFO|WARNING) \| (?P<tag>[\w.-]+) \| (?P<body>.*)$")
_SIMPLE_INNER = re.compile(r"(\w+)=([^,\s]+)")
_SIMPLE_PIPE = re.compile(r"^(\w+) (\S+)$")


@dataclass
class Record:
    split: str  # "train" (train_inner or end-of-epoch train lines), or the validation subset ("valid")
    per_epoch: bool  # an end-of-epoch average (`train` tag) rather than a train_inner / valid line
    update: int
    stats: Dict[str, float]


def _numbers(pairs) -> Dict[str, float]:
    out = {}
    for key, value in pairs:
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            pass  # text fields ("valid on 'valid' subset"), not metrics
    return out


def _parse_body(tag: str, body: str):
    """(split, per_epoch, stats) of one tagged line, or None when it is not a metrics record."""
    if body.startswith("{"):
        if tag != "train_inner" and f'"{tag}_num_updates"' not in body:
            return None  # another logger's dict, e.g. fairseq_cli.train's configuration
        fields = json.loads(body)
        if tag == "train_inner":
            return "train", False, _numbers(fields.items())
        prefix = tag + "_"
        if f"{prefix}num_updates" not in fields:
            return None
        stats = _numbers((k[len(prefix):], v) for k, v in fields.items() if k.startswith(prefix))
        return ("train", True, stats) if tag == "train" else (tag, False, stats)
    if tag == "train_inner":
        return "train", False, _numbers(_SIMPLE_INNER.findall(body))
    parts = [p.strip() for p in body.split(" | ")]
    if tag == "train" or f"valid on '{tag}' subset" in parts:
        stats = _numbers(m.groups() for m in map(_SIMPLE_PIPE.match, parts) if m)
        return ("train", True, stats) if tag == "train" else (tag, False, stats)
    return None


def read_log(path: str) -> List[Record]:
    """Every metrics record of one fairseq-train log, in file order."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the log ({e.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        match = _LINE.search(line)
        if match is None:
            continue
        try:
            parsed = _parse_body(match["tag"], match["body"])
        except json.JSONDecodeError as e:
            if number == len(lines):  # the last line of a log still being written
                print(f"vaswani-plot: warning: {path}:{number}: incomplete last record skipped", file=sys.stderr)
                continue
            raise ConfigError(f"{path}:{number}: a {match['tag']} record that is not valid JSON ({e.msg})") from None
        if parsed is None:
            continue
        split, per_epoch, stats = parsed
        if "num_updates" not in stats:
            raise ConfigError(f"{path}:{number}: a {match['tag']} record without num_updates")
        records.append(Record(split, per_epoch, int(stats.pop("num_updates")), stats))
    if not records:
        raise ConfigError(f"{path}: no fairseq-train records (train_inner, train or valid lines of "
                          f"--log-format json or simple)")
    return records


def curves(records: List[Record]) -> Dict[str, Dict[str, list]]:
    """{"train": {metric: [(update, value), ...]}, "valid": {...}, ...}. Training curves come from
    the train_inner records, or from the end-of-epoch averages when a log has none."""
    has_inner = any(r.split == "train" and not r.per_epoch for r in records)
    out: Dict[str, Dict[str, list]] = {}
    for r in records:
        if r.split == "train" and r.per_epoch == has_inner:
            continue
        for metric, value in r.stats.items():
            out.setdefault(r.split, {}).setdefault(metric, []).append((r.update, value))
    return out
