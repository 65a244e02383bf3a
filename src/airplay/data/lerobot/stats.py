"""Per-feature statistics of a LeRobot dataset (meta/stats.json and the episodes' stats/ columns).

Numeric features: min, max, mean, std, count and the quantiles q01 q10 q50 q90 q99 over the
frames (per element); RGB frames: the same per channel of values in [0, 1], shapes (3, 1, 1).
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{int(round(q * 100)):02d}" for q in QUANTILES)


def numeric_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min/max/mean/std/count/q01..q99 over axis 0 (LeRobot's stats of a numeric feature)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    out = {"min": v.min(axis=0), "max": v.max(axis=0), "mean": v.mean(axis=0), "std": v.std(axis=0),
           "count": np.array([v.shape[0]], dtype=np.int64)}
    qs = np.quantile(v, QUANTILES, axis=0)
    out.update({k: qs[i] for i, k in enumerate(QUANTILE_KEYS)})
    return out


def aggregate_numeric_stats(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Combine per-episode stats: exact min/max/mean/std, count-weighted quantiles (as LeRobot)."""
    counts = np.array([float(p["count"][0]) for p in parts])
    shape = (-1,) + (1,) * np.ndim(parts[0]["mean"])
    w = counts.reshape(shape)
    means = np.stack([p["mean"] for p in parts])
    mean = (means * w).sum(axis=0) / counts.sum()
    var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * w).sum(axis=0) / counts.sum()
    out = {"min": np.min(np.stack([p["min"] for p in parts]), axis=0),
           "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(counts.sum())], dtype=np.int64)}
    for key in QUANTILE_KEYS:
        out[key] = (np.stack([p[key] for p in parts]) * w).sum(axis=0) / counts.sum()
    return out


class ImageStats:
    """Per-channel statistics of uint8 RGB frames, exact (256-bin histograms), in [0, 1].

    Shapes follow LeRobot: (3, 1, 1) per statistic, count (1,) = number of frames.
    """

    def __init__(self) -> None:
        self.hist = np.zeros((3, 256), dtype=np.int64)
        self.frames = 0

    def update(self, frames: np.ndarray) -> None:
        for c in range(3):
            self.hist[c] += np.bincount(frames[..., c].reshape(-1), minlength=256)
        self.frames += int(frames.shape[0])

    def merge(self, other: ImageStats) -> None:
        self.hist += other.hist
        self.frames += other.frames

    def result(self) -> dict[str, np.ndarray]:
        levels = np.arange(256, dtype=np.float64) / 255.0
        n = self.hist.sum(axis=1).astype(np.float64)
        mean = (self.hist * levels).sum(axis=1) / n
        var = (self.hist * levels ** 2).sum(axis=1) / n - mean ** 2
        nonzero = self.hist > 0
        cdf = np.cumsum(self.hist, axis=1) / n[:, None]
        out = {"min": np.array([levels[np.argmax(nz)] for nz in nonzero]),
               "max": np.array([levels[255 - np.argmax(nz[::-1])] for nz in nonzero]),
               "mean": mean, "std": np.sqrt(np.maximum(var, 0.0))}
        for q, key in zip(QUANTILES, QUANTILE_KEYS):
            out[key] = np.array([levels[np.searchsorted(cdf[c], q)] for c in range(3)])
        out = {k: v.reshape(3, 1, 1) for k, v in out.items()}
        out["count"] = np.array([self.frames], dtype=np.int64)
        return out


def jsonable_stats(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    """Statistics as nested lists (meta/stats.json)."""
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}
