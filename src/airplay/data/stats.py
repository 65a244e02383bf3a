"""What an exported dataset holds (``airplay dataset stats DS``): counts, durations, per-scene
episodes and outcomes, action/state statistics, and a PNG of the action distributions.

DS is one LeRobot dataset (``OUT/seen``) or an export folder holding several (``OUT``).
Only the parquet files are read (no video decoding), so this is fast on large datasets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.data.keys import ACTION_KEY, ACTION_NAMES, GOAL_KEY, RGB_KEY, STATE_KEY
from airplay.data.lerobot import DatasetError, LeRobotDataset


@dataclass
class DatasetSummary:
    """Numbers of one dataset; arrays are the per-frame values (float32)."""

    name: str
    root: Path
    episodes: int
    frames: int
    fps: int
    lengths: np.ndarray  # frames per episode
    scenes: dict[str, int]  # scene -> episodes
    successes: int
    tasks: list[str]
    vectors: dict[str, np.ndarray]  # feature -> (N, D)
    names: dict[str, list[str]]
    image_shape: tuple[int, ...] | None


def dataset_roots(path: str | Path) -> list[Path]:
    """The dataset folders at ``path``: itself, or its sub-folders holding meta/info.json."""
    path = Path(path)
    if (path / "meta" / "info.json").is_file():
        return [path]
    roots = sorted(p.parent.parent for p in path.glob("*/meta/info.json"))
    if not roots:
        raise DatasetError(f"{path}: no LeRobot dataset (meta/info.json) here or in its sub-folders")
    return roots


def summarize_dataset(root: Path) -> DatasetSummary:
    ds = LeRobotDataset(root)
    lengths = np.array([e.length for e in ds.episodes], dtype=np.int64)
    scenes: dict[str, int] = {}
    successes = 0
    for e in ds.episodes:
        scene = str(e.meta.get("scene", "?"))
        scenes[scene] = scenes.get(scene, 0) + 1
        successes += bool(e.meta.get("success", False))
    vectors = {k: ds.column(k) for k in (ACTION_KEY, STATE_KEY, GOAL_KEY) if k in ds.features}
    names = {k: list(ds.features[k].get("names") or [str(i) for i in range(vectors[k].shape[1])]) for k in vectors}
    rgb = ds.features.get(RGB_KEY)
    return DatasetSummary(name=root.name, root=root, episodes=ds.num_episodes, frames=len(ds), fps=ds.fps,
                          lengths=lengths, scenes=scenes, successes=successes, tasks=list(ds.tasks.values()),
                          vectors=vectors, names=names, image_shape=tuple(rgb["shape"]) if rgb else None)


def format_summary(s: DatasetSummary) -> str:
    """Readable tables: counts and durations, scenes, then one row per action/state dimension."""
    dur = s.lengths / s.fps
    shape = "x".join(str(v) for v in s.image_shape[1::-1]) if s.image_shape else "-"
    lines = [f"== {s.name}  ({s.root})",
             f"episodes {s.episodes}  frames {s.frames}  fps {s.fps}  images {shape}  "
             f"successes {s.successes}/{s.episodes}",
             f"duration total {dur.sum():.1f} s ({dur.sum() / 3600:.3f} h); per episode mean {dur.mean():.2f} s, "
             f"min {dur.min():.2f} s, max {dur.max():.2f} s",
             "scenes: " + ", ".join(f"{k} ({v})" for k, v in sorted(s.scenes.items())),
             "tasks: " + "; ".join(s.tasks),
             f"{'feature':20} {'dim':10} {'mean':>9} {'std':>9} {'min':>9} {'p1':>9} {'p50':>9} {'p99':>9} {'max':>9}"]
    for key, values in s.vectors.items():
        v = values.astype(np.float64)
        q = np.quantile(v, [0.01, 0.5, 0.99], axis=0)
        for i, dim in enumerate(s.names[key]):
            lines.append(f"{key:20} {dim:10} {v[:, i].mean():9.4f} {v[:, i].std():9.4f} {v[:, i].min():9.4f} "
                         f"{q[0, i]:9.4f} {q[1, i]:9.4f} {q[2, i]:9.4f} {v[:, i].max():9.4f}")
    return "\n".join(lines)


def plot_actions(summaries: list[DatasetSummary], png: str | Path, bins: int = 60) -> Path:
    """Histograms of each action dimension, one colour per dataset, written to ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(ACTION_NAMES), figsize=(4 * len(ACTION_NAMES), 3.2))
    units = ["m/s", "m/s", "m/s", "rad/s"]
    for i, (ax, name) in enumerate(zip(axes, ACTION_NAMES)):
        lo = min(float(s.vectors[ACTION_KEY][:, i].min()) for s in summaries)
        hi = max(float(s.vectors[ACTION_KEY][:, i].max()) for s in summaries)
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-3, bins + 1)  # shared bins: comparable bars
        for s in summaries:
            ax.hist(s.vectors[ACTION_KEY][:, i], bins=edges, alpha=0.55, label=f"{s.name} ({s.frames} frames)",
                    weights=np.full(s.frames, 1.0 / s.frames))
        ax.set_yscale("log")
        ax.set_title(f"action {name}")
        ax.set_xlabel(units[i])
        ax.set_ylabel("fraction of frames (log)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Expert action distributions (heading frame)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def dataset_stats(path: str | Path, png: str | Path | None = None) -> tuple[list[DatasetSummary], str]:
    """Summaries of the dataset(s) at ``path`` and their printable text; writes the plot if asked."""
    summaries = [summarize_dataset(r) for r in dataset_roots(path)]
    text = "\n\n".join(format_summary(s) for s in summaries)
    if png is not None:
        text += f"\n\naction distributions: {plot_actions(summaries, png)}"
    return summaries, text
