"""Top-down plots of executed trajectories over an occupancy slice (map frame, metres).

Grid convention of ``occupancy2d``: an ``(H, W)`` boolean **occupied** mask (True = blocked)
of a horizontal slice at flight height; row ``i`` spans y in
``[origin_y + i * res, origin_y + (i + 1) * res)`` and column ``j`` spans x in
``[origin_x + j * res, origin_x + (j + 1) * res)``, i.e. ``origin_xy`` is the map-frame (x, y)
of the outer corner of cell ``[0, 0]`` (its minimum x and y), row index grows north, column
index grows east. The figure shows x (east) to the right and y (north) up, equal aspect.

Rendering uses the Agg canvas directly (``matplotlib.figure.Figure`` + ``FigureCanvasAgg``):
no display, no pyplot figure registry and no change of the process-wide backend.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from airplay.episode_status import STATUS_COLOURS, EpisodeStatus


def plot_trajectories(
    path_png: str | Path,
    occupancy2d: np.ndarray,
    origin_xy: Sequence[float],
    resolution_m: float,
    trajectories: Sequence[np.ndarray],
    starts: Sequence[Sequence[float]],
    goals: Sequence[Sequence[float]],
    statuses: Sequence[str],
    title: str = "",
    success_radius_m: float = 1.0,
    figsize_in: tuple[float, float] = (8.0, 8.0),
    dpi: int = 100,
) -> Path:
    """Draw trajectories over the occupancy slice and save a PNG atomically.

    Args:
        path_png: output file (``.png``); its directory is created if needed.
        occupancy2d: ``(H, W)`` bool occupied mask (see module docstring for the indexing).
        origin_xy: map (x, y) of the minimum corner of cell ``[0, 0]`` (m).
        resolution_m: cell size (m).
        trajectories: per episode ``(T, 3)`` positions in the map frame (m); z is ignored.
        starts, goals: per episode ``(3,)`` (or ``(2,)``) map positions (m).
        statuses: per episode status (colour; legend shows counts).
        title: figure title.
        success_radius_m: radius of the circle drawn around every goal (m).
        figsize_in, dpi: image size is ``figsize_in * dpi`` pixels (800 x 800 by default).

    Returns:
        The written path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle

    occ = np.asarray(occupancy2d, dtype=bool)
    if occ.ndim != 2:
        raise ValueError(f"plot_trajectories: occupancy2d must be (H, W), got shape {occ.shape}")
    n = len(trajectories)
    if not (len(starts) == len(goals) == len(statuses) == n):
        raise ValueError(
            f"plot_trajectories: {n} trajectories but {len(starts)} starts, {len(goals)} goals, "
            f"{len(statuses)} statuses"
        )
    ox, oy = float(origin_xy[0]), float(origin_xy[1])
    res = float(resolution_m)
    h, w = occ.shape
    extent = (ox, ox + w * res, oy, oy + h * res)

    path = Path(path_png)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=figsize_in, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    try:
        ax = fig.add_subplot()
        ax.imshow(
            occ.astype(np.uint8),
            origin="lower",
            extent=extent,
            cmap=ListedColormap(["white", "0.55"]),
            vmin=0,
            vmax=1,
            interpolation="nearest",
        )
        counts: dict[str, int] = {}
        for traj, start, goal, status in zip(trajectories, starts, goals, statuses):
            t = np.asarray(traj, dtype=float).reshape(-1, 3)
            colour = STATUS_COLOURS.get(status, "black")
            counts[status] = counts.get(status, 0) + 1
            ax.plot(t[:, 0], t[:, 1], color=colour, lw=1.2, alpha=0.85)
            if status != EpisodeStatus.SUCCESS and len(t):
                ax.plot(t[-1, 0], t[-1, 1], marker="x", color=colour, ms=6, mew=1.5)
            s = np.asarray(start, dtype=float)
            g = np.asarray(goal, dtype=float)
            ax.plot(s[0], s[1], marker="o", ms=6, mfc="white", mec="black", ls="none")
            ax.add_patch(Circle((g[0], g[1]), success_radius_m, fill=False, ec="black", lw=0.8, ls="--"))
            ax.plot(g[0], g[1], marker="*", ms=11, mfc="gold", mec="black", mew=0.6, ls="none")

        handles = [
            Line2D([], [], color=STATUS_COLOURS.get(st, "black"), lw=2, label=f"{st} ({counts[st]})")
            for st in [*STATUS_COLOURS, *sorted(set(counts) - set(STATUS_COLOURS))]
            if st in counts
        ]
        handles += [
            Line2D([], [], marker="o", mfc="white", mec="black", ls="none", label="start"),
            Line2D([], [], marker="*", ms=11, mfc="gold", mec="black", ls="none", label="goal"),
            Line2D([], [], color="black", lw=0.8, ls="--", label=f"success radius {success_radius_m:g} m"),
            Line2D([], [], color="0.55", marker="s", ms=9, ls="none", label="occupied"),
        ]
        # Below the axes, so that it never hides a goal.
        fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)

        # Show the whole map, and anything flown outside it.
        pts = [np.asarray(t, dtype=float).reshape(-1, 3)[:, :2] for t in trajectories]
        pts += [np.asarray(p, dtype=float).reshape(1, -1)[:, :2] for p in [*starts, *goals]]
        xmin, xmax, ymin, ymax = extent
        if pts:
            allp = np.concatenate(pts)
            xmin, ymin = min(xmin, allp[:, 0].min()), min(ymin, allp[:, 1].min())
            xmax, ymax = max(xmax, allp[:, 0].max()), max(ymax, allp[:, 1].max())
        ax.set_xlim(xmin, xmax)
        ax.set_ylim(ymin, ymax)
        ax.set_aspect("equal")
        ax.set_xlabel("x (east) [m]")
        ax.set_ylabel("y (north) [m]")
        if title:
            ax.set_title(title)

        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            fig.savefig(tmp, format="png", dpi=dpi)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    finally:
        fig.clear()
    return path


def _save_figure(fig, path: Path, dpi: int) -> Path:
    """Save ``fig`` as a PNG at ``path`` atomically (its folder created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fig.savefig(tmp, format="png", dpi=dpi)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
        fig.clear()
    return path


def plot_horizon_sweep(path_png: str | Path, horizons: Sequence[int], series: dict, title: str = "",
                       dpi: int = 100) -> Path:
    """SR and CR against the execution horizon H (log x axis), one line per scene and the pooled
    (equal-weight) line with its 95 % interval as a band and error bars.

    series: {"all": {"sr": [(mean, lo, hi), ...], "cr": [...]}, scene: {...}, ...}, one tuple per
    horizon (fractions in [0, 1]; None for an undefined value). Returns the written path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    h = np.asarray(horizons, dtype=float)
    fig = Figure(figsize=(11.0, 4.5), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, metric, label in zip(axes, ("sr", "cr"), ("SR (success rate) %", "CR (collision rate) %")):
        for name, entry in series.items():
            values = np.array([[np.nan if v is None else v for v in t] for t in entry[metric]], dtype=float) * 100
            if name == "all":
                ax.fill_between(h, values[:, 1], values[:, 2], color="black", alpha=0.12, lw=0)
                ax.errorbar(h, values[:, 0], yerr=[values[:, 0] - values[:, 1], values[:, 2] - values[:, 0]],
                            color="black", lw=2.0, marker="o", capsize=3, label="all scenes (equal weight), 95% CI")
            else:
                ax.plot(h, values[:, 0], lw=1.0, marker=".", alpha=0.8, label=name)
        ax.set_xscale("log")
        ax.set_xticks(h)
        ax.set_xticklabels([f"{int(v)}" for v in h])
        ax.minorticks_off()
        ax.set_xlabel("execution horizon H (controls executed per chunk, log scale)")
        ax.set_ylabel(label)
        ax.set_ylim(-3, 103)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    return _save_figure(fig, path_png, dpi)


def plot_horizon_pairs(path_png: str | Path, occupancy2d: np.ndarray, origin_xy: Sequence[float],
                       resolution_m: float, polygon: np.ndarray, pairs: Sequence[dict], labels: tuple[str, str],
                       dt_s: float, title: str = "", dpi: int = 100) -> Path:
    """Matched-start trajectory pairs: each row one task flown with two settings (``labels``,
    e.g. ``H=1``, ``H=50``): left, both trajectories over the occupancy slice with the navigable
    polygon, the start (dot), the goal (star) and each end (cross); right, the executed yaw-rate
    commands over time.

    pairs: per row {"start": (3,), "goal": (3,), "task_id": str, "runs": [two dicts with
    "trajectory" (T, 3) map m, "yaw_rate" (T-1,) rad/s, "status" str]}. Returns the written path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    occ = np.asarray(occupancy2d, dtype=bool)
    ox, oy, res = float(origin_xy[0]), float(origin_xy[1]), float(resolution_m)
    extent = (ox, ox + occ.shape[1] * res, oy, oy + occ.shape[0] * res)
    rows = max(1, len(pairs))
    fig = Figure(figsize=(12.0, 5.0 * rows), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.asarray(fig.subplots(rows, 2, gridspec_kw={"width_ratios": [1.1, 1.0]})).reshape(rows, 2)
    colours = ("tab:blue", "tab:orange")
    poly = np.asarray(polygon, dtype=float).reshape(-1, 2)
    for row, pair in enumerate(pairs):
        ax, ax_yaw = axes[row]
        ax.imshow(occ.astype(np.uint8), origin="lower", extent=extent, cmap=ListedColormap(["white", "0.55"]),
                  vmin=0, vmax=1, interpolation="nearest")
        closed = np.vstack([poly, poly[:1]])
        ax.plot(closed[:, 0], closed[:, 1], color="tab:green", lw=1.0, ls="--", label="navigable polygon")
        for run, colour, label in zip(pair["runs"], colours, labels):
            t = np.asarray(run["trajectory"], dtype=float).reshape(-1, 3)
            ax.plot(t[:, 0], t[:, 1], color=colour, lw=1.5, label=f"{label}: {run['status']}")
            ax.plot(t[-1, 0], t[-1, 1], marker="x", color=colour, ms=9, mew=2, ls="none")
            yaw_rate = np.asarray(run["yaw_rate"], dtype=float)
            ax_yaw.plot(np.arange(len(yaw_rate)) * dt_s, yaw_rate, color=colour, lw=1.0, label=label)
        s, g = np.asarray(pair["start"], dtype=float), np.asarray(pair["goal"], dtype=float)
        ax.plot(s[0], s[1], marker="o", ms=8, mfc="white", mec="black", ls="none", label="start (query)")
        ax.plot(g[0], g[1], marker="*", ms=14, mfc="gold", mec="black", ls="none", label="goal")
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        ax.set_aspect("equal")
        ax.set_xlabel("x (east) [m]")
        ax.set_ylabel("y (north) [m]")
        ax.set_title(f"task {pair['task_id']} (ends: crosses)", fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
        ax_yaw.set_xlabel("time [s]")
        ax_yaw.set_ylabel("executed yaw-rate command [rad/s]")
        ax_yaw.grid(True, alpha=0.3)
        ax_yaw.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return _save_figure(fig, path_png, dpi)
