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

STATUS_COLOURS: dict[str, str] = {
    "success": "tab:green",
    "collision": "tab:red",
    "out_of_bounds": "tab:orange",
    "timeout": "tab:blue",
    "no_command": "tab:purple",
    "stopped": "tab:brown",
    "policy_error": "tab:pink",
    "over_budget": "tab:gray",
}


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
            if status != "success" and len(t):
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
