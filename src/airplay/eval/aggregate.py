"""Aggregate episode metrics: per scene first, then scenes weighted equally (DESIGN.md section 6).

- Per scene: the mean of each metric over the scene's episodes; ``tts`` over the scene's
  successful episodes only (NaN if it has none).
- Overall: the mean of the per-scene values with every scene weighted equally, whatever its
  episode count; for ``tts`` over the scenes that have a value (NaN if none has).
- Confidence intervals: 95% percentile bootstrap, stratified by scene: each replicate
  resamples episodes with replacement within every scene, recomputes the per-scene means and
  then the equal-weight mean; the interval is the 2.5th and 97.5th percentiles of the
  replicates (replicates where a NaN-able metric is undefined are left out). Per-scene
  intervals come from the same replicates. ``bootstrap=0`` gives no intervals (NaN bounds).
  Seeded with ``np.random.default_rng(seed)``; scenes are visited in sorted order, so the
  result does not depend on the order of scenes in the input.

Units follow :mod:`airplay.eval.metrics`: ``ne`` in m, ``tts`` in s, the rest fractions in
[0, 1]. NaN stands for "undefined" here; :mod:`airplay.eval.results` writes it as JSON null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from airplay.eval.metrics import DEFAULT_SUCCESS_RADIUS_M, METRICS, EpisodeResult, episode_metrics

_CHUNK_ELEMENTS = 4_000_000  # bootstrap work array size per chunk (float64: 32 MB)


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    """Mean over ``axis`` ignoring NaN; NaN where every value is NaN (no warning)."""
    valid = ~np.isnan(x)
    count = valid.sum(axis=axis)
    total = np.where(valid, x, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _ci(samples: np.ndarray) -> list[float]:
    """2.5 and 97.5 percentiles of ``samples`` (B,) ignoring NaN; [nan, nan] if none."""
    s = samples[~np.isnan(samples)]
    if s.size == 0:
        return [float("nan"), float("nan")]
    lo, hi = np.percentile(s, [2.5, 97.5])
    return [float(lo), float(hi)]


def _entry(mean: float, samples: np.ndarray | None) -> dict[str, Any]:
    ci = _ci(samples) if samples is not None else [float("nan"), float("nan")]
    return {"mean": float(mean), "ci95": ci}


def bootstrap_mean_ci(values: np.ndarray, bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``{"mean", "ci95": [lo, hi]}`` of the mean of ``values`` (N,), with a 95% percentile
    bootstrap over the values (resampled with replacement, ``np.random.default_rng(seed)``);
    NaN bounds when ``bootstrap`` is 0 or there are no values. For per-item scores (one
    stratum); :func:`aggregate` does the per-scene stratified version for episodes."""
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        return {"mean": float("nan"), "ci95": [float("nan"), float("nan")]}
    samples = None
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        chunk = max(1, _CHUNK_ELEMENTS // v.size)
        samples = np.concatenate([v[rng.integers(0, v.size, size=(min(chunk, bootstrap - b0), v.size))].mean(axis=1)
                                  for b0 in range(0, bootstrap, chunk)])
    return _entry(float(v.mean()), samples)


def aggregate(
    results: Sequence[EpisodeResult],
    success_radius_m: float = DEFAULT_SUCCESS_RADIUS_M,
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Summarise episodes of one policy and one setting.

    Args:
        results: the episodes (any order; at least one).
        success_radius_m: success radius (m), decides ``osr``.
        bootstrap: number of bootstrap replicates B (0: no intervals).
        seed: seed of the bootstrap generator.

    Returns:
        ``{"overall": {metric: {"mean", "ci95": [lo, hi]}},
        "per_scene": {scene: {metric: {...}, "episodes": n}}, "episodes": n_total,
        "scenes": k, "aggregation": {...settings...}}`` with metrics :data:`METRICS`.

    Raises:
        ValueError: no results, or results mixing policies or settings.
    """
    if len(results) == 0:
        raise ValueError("aggregate: no episode results")
    combos = sorted({(r.policy, r.setting) for r in results})
    if len(combos) > 1:
        raise ValueError(f"aggregate: results mix policy/setting combinations {combos}; aggregate each separately")
    if bootstrap < 0:
        raise ValueError(f"aggregate: bootstrap must be >= 0, got {bootstrap}")

    by_scene: dict[str, list[np.ndarray]] = {}
    for r in results:
        m = episode_metrics(r, success_radius_m)
        by_scene.setdefault(r.scene, []).append(np.array([m[k] for k in METRICS], dtype=float))
    scenes = sorted(by_scene)
    values = {s: np.stack(by_scene[s]) for s in scenes}  # (n_s, M)

    rng = np.random.default_rng(seed)
    scene_means = np.stack([_nanmean(values[s], axis=0) for s in scenes])  # (k, M)
    overall_mean = _nanmean(scene_means, axis=0)  # (M,)
    if bootstrap > 0:
        boot_scene = np.empty((bootstrap, len(scenes), len(METRICS)))
        for j, s in enumerate(scenes):
            v = values[s]
            chunk = max(1, _CHUNK_ELEMENTS // v.size)  # bound memory of v[idx] for large scenes
            for b0 in range(0, bootstrap, chunk):
                b1 = min(bootstrap, b0 + chunk)
                idx = rng.integers(0, len(v), size=(b1 - b0, len(v)))
                boot_scene[b0:b1, j, :] = _nanmean(v[idx], axis=1)
        boot_overall = _nanmean(boot_scene, axis=1)  # (B, M)

    overall = {
        k: _entry(overall_mean[i], boot_overall[:, i] if bootstrap > 0 else None) for i, k in enumerate(METRICS)
    }
    per_scene: dict[str, dict[str, Any]] = {}
    for j, s in enumerate(scenes):
        entry: dict[str, Any] = {
            k: _entry(scene_means[j, i], boot_scene[:, j, i] if bootstrap > 0 else None) for i, k in enumerate(METRICS)
        }
        entry["episodes"] = len(values[s])
        per_scene[s] = entry
    return {
        "overall": overall,
        "per_scene": per_scene,
        "episodes": len(results),
        "scenes": len(scenes),
        "aggregation": {
            "success_radius_m": float(success_radius_m),
            "bootstrap": int(bootstrap),
            "bootstrap_seed": int(seed),
            "ci": "95% percentile bootstrap, stratified by scene",
            "weighting": "per-scene means, scenes weighted equally",
        },
    }
