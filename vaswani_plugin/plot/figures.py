"""The pictures: attention in the paper's two styles (Figures 3-5) and training curves.

matplotlib is an optional extra (`pip install 'vaswani-plugin[plots]'`), imported only here and only
when a picture is drawn. Figures are built with matplotlib's object API (no pyplot state, no
display needed) and saved at exactly the requested size in pixels (100 dpi).
"""
from typing import Dict, List, Sequence, Tuple

from ..errors import ConfigError

DPI = 100


def require_matplotlib() -> None:
    """Stop with one line, before any work, when the optional extra is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError("matplotlib is not installed; pip install 'vaswani-plugin[plots]'") from None


def _figure(size: Tuple[int, int]):
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI)


def _head_colour(head: int):
    from matplotlib import colormaps

    return colormaps["tab10"](head % 10)


def _save(fig, out: str) -> None:
    try:
        fig.savefig(out, dpi=DPI)
    except (OSError, ValueError) as e:  # missing directory, unknown extension
        raise ConfigError(f"--out {out}: cannot write the image ({e})") from None


def default_attention_size(style: str, n_panels: int, n_rows: int, n_cols: int) -> Tuple[int, int]:
    """Pixels: enough height for one line of text per token."""
    if style == "lines":
        return max(360, 210 * n_panels), max(260, 90 + 17 * max(n_rows, n_cols))
    side = 110 + 16 * max(n_rows, n_cols)
    per_row = min(n_panels, 4)
    return side * per_row + 20, (side + 30) * -(-n_panels // per_row) + 30


def draw_lines(weights, heads: Sequence[int], query_labels: List[str], key_labels: List[str], title: str,
               out: str, size: Tuple[int, int]) -> None:
    """Figures 3-5: queries in the left column, keys in the right one, a line from query i to key j
    as opaque as weight [h, i, j], one colour per head. One panel per head, and a first panel
    with the chosen heads together when there are several. weights: [H, T, S], a tensor."""
    from matplotlib.collections import LineCollection

    fig = _figure(size)
    panels = ([list(heads)] if len(heads) > 1 else []) + [[h] for h in heads]
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    t, s = len(query_labels), len(key_labels)
    rows = max(t, s)
    fontsize = max(5, min(10, 0.55 * size[1] / (rows + 4) / (DPI / 72)))
    for ax, panel in zip(axes, panels):
        segments, colours = [], []
        for h in panel:
            r, g, b, _ = _head_colour(h)
            head = weights[h].tolist()  # [T][S]
            for i in range(t):
                for j in range(s):
                    w = head[i][j]
                    if w > 0.01:  # invisible anyway; keeps the file small
                        segments.append([(0.0, i), (1.0, j)])
                        colours.append((r, g, b, min(1.0, w)))
        ax.add_collection(LineCollection(segments, colors=colours, linewidths=2.0))
        for i, label in enumerate(query_labels):
            ax.text(-0.04, i, label, ha="right", va="center", fontsize=fontsize)
        for j, label in enumerate(key_labels):
            ax.text(1.04, j, label, ha="left", va="center", fontsize=fontsize)
        ax.set_xlim(-0.9, 1.9)
        ax.set_ylim(rows - 0.5, -0.5)
        ax.axis("off")
        name = f"head {panel[0]}" if len(panel) == 1 else f"heads {', '.join(map(str, panel))} together"
        ax.set_title(name, fontsize=fontsize + 1, color="black" if len(panel) > 1 else _head_colour(panel[0]))
    fig.suptitle(title, fontsize=fontsize + 2)
    fig.subplots_adjust(left=0.01, right=0.99, top=1 - 60 / size[1], bottom=0.01, wspace=0.05)
    _save(fig, out)


def draw_heatmaps(weights, heads: Sequence[int], query_labels: List[str], key_labels: List[str], title: str,
                  out: str, size: Tuple[int, int]) -> None:
    """One heatmap per head: row i (a query) holds its weights over the keys, 0 (white) to 1.
    weights: [H, T, S], a tensor."""
    fig = _figure(size)
    per_row = min(len(heads), 4)
    n_rows = -(-len(heads) // per_row)
    axes = fig.subplots(n_rows, per_row, squeeze=False).ravel()
    fontsize = max(4, min(9, 0.6 * size[1] / n_rows / (max(len(query_labels), len(key_labels)) + 8) / (DPI / 72)))
    image = None
    for ax, h in zip(axes, heads):
        image = ax.imshow(weights[h].tolist(), cmap="Blues", vmin=0.0, vmax=1.0,
                          aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(key_labels)), key_labels, rotation=90, fontsize=fontsize)
        ax.set_yticks(range(len(query_labels)), query_labels, fontsize=fontsize)
        ax.set_title(f"head {h}", fontsize=fontsize + 2, color=_head_colour(h))
    for ax in axes[len(heads):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=fontsize + 3)
    fig.tight_layout()
    if image is not None:
        fig.colorbar(image, ax=list(axes[:len(heads)]), shrink=0.6, pad=0.02)
    _save(fig, out)


# panel title -> the metric it shows; a panel is drawn when some run logged its metric
CURVE_PANELS = (("loss (base 2)", "loss"), ("perplexity", "ppl"), ("learning rate", "lr"),
                ("BLEU", "bleu"), ("F1", "f1"))


def draw_curves(runs: Dict[str, Dict[str, Dict[str, List[Tuple[int, float]]]]], out: str,
                size: Tuple[int, int]) -> None:
    """runs: {run name: {"train": {metric: [(update, value)]}, "valid": {...}}}. One panel per
    metric, updates on the x axis, one colour per run, training solid and validation subsets
    dashed (then dotted, dash-dotted)."""
    present = [(title, metric) for title, metric in CURVE_PANELS
               if any(metric in series for run in runs.values() for series in run.values())]
    fig = _figure(size)
    cols = 2 if len(present) > 1 else 1
    axes = fig.subplots(-(-len(present) // cols), cols, squeeze=False).ravel()
    for ax, (title, metric) in zip(axes, present):
        for n, (name, run) in enumerate(runs.items()):
            colour = _head_colour(n)
            splits = ["train"] * ("train" in run) + sorted(set(run) - {"train"})
            for split, style in zip(splits, ("-", "--", ":", "-.") if "train" in run else ("--", ":", "-.")):
                points = run[split].get(metric)
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, style, color=colour, marker=None if split == "train" else "o",
                            markersize=3, linewidth=1.2, label=f"{name} ({split})")
        if metric == "ppl":
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("updates")
        ax.grid(alpha=0.3)
    for ax in axes[len(present):]:
        ax.axis("off")
    if len(present):
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    _save(fig, out)

