"""A cheap top-down picture of a scene for the report: the splat seen from straight above.

Each Gaussian below the top of the flight band (``navigable.z_max``: ceilings and canopies above
it would hide what the vehicle flies through) and with opacity >= 0.2 is drawn as a small square
of its view-independent colour (the SH DC term), the highest one winning each pixel: an
orthographic "orthophoto" in map metres, x east to the right and y north up, as in
:mod:`airplay.eval.plots`, with the navigable polygon outlined. No rasterizer, no numba: numpy
z-ordering, well under a second for the synthetic scenes, a few seconds for real captures.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

MAX_PIXELS = 560
MIN_OPACITY = 0.2


def topdown_png(scene_dir: str | Path, max_pixels: int = MAX_PIXELS) -> bytes:
    """PNG bytes of the top-down picture of the scene folder ``scene_dir`` (SceneError if unreadable)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Polygon

    from airplay.scene.gaussians import sh_dc_to_rgb
    from airplay.scene.scene import load_gaussians
    from airplay.scene.spec import parse_scene_yaml

    spec = parse_scene_yaml(scene_dir)
    g = load_gaussians(spec.splat_file)
    if not spec.splat_alignment.is_identity():
        g = g.transformed(*spec.splat_alignment.matrix())
    nav = spec.navigable
    keep = (g.means[:, 2] <= nav.z_max) & (g.opacities >= MIN_OPACITY)
    means, rgb = g.means[keep], np.clip(sh_dc_to_rgb(g.sh[keep, 0, :]), 0.0, 1.0)
    size = np.max(g.scales[keep], axis=1) if keep.any() else np.zeros(0)

    lo, hi = nav.polygon.min(axis=0) - 1.0, nav.polygon.max(axis=0) + 1.0
    res = float(max(hi - lo)) / max_pixels
    w, h = (np.ceil((hi - lo) / res).astype(int) + 1).tolist()
    image = np.full((h, w, 3), 0.93, dtype=np.float32)
    inside = (means[:, 0] >= lo[0]) & (means[:, 0] < hi[0]) & (means[:, 1] >= lo[1]) & (means[:, 1] < hi[1])
    means, rgb, size = means[inside], rgb[inside], size[inside]
    if len(means):
        col = ((means[:, 0] - lo[0]) / res).astype(int)
        row = ((means[:, 1] - lo[1]) / res).astype(int)
        # Squares of about the Gaussian's size (1 to 7 pixels) leave no holes between sparse splats.
        k = int(np.clip(np.rint(np.median(size) / res), 0, 3))
        offsets = [(dr, dc) for dr in range(-k, k + 1) for dc in range(-k, k + 1)]
        rows = np.concatenate([row + dr for dr, _ in offsets])
        cols = np.concatenate([col + dc for _, dc in offsets])
        z = np.tile(means[:, 2], len(offsets))
        colours = np.tile(rgb, (len(offsets), 1))
        ok = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
        order = np.argsort(z[ok], kind="stable")  # the highest written last, so it wins
        image[rows[ok][order], cols[ok][order]] = colours[ok][order]

    fig = Figure(figsize=(5.6, 5.6 * h / w + 0.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    try:
        ax = fig.add_subplot()
        ax.imshow(image, origin="lower", extent=(lo[0], lo[0] + w * res, lo[1], lo[1] + h * res),
                  interpolation="nearest")
        ax.add_patch(Polygon(nav.polygon, closed=True, fill=False, ec="black", lw=1.0, ls="--"))
        ax.set_aspect("equal")
        ax.set_xlabel("x (east) [m]")
        ax.set_ylabel("y (north) [m]")
        ax.set_title(f"{spec.name}: splat from above, z <= {nav.z_max:g} m; navigable polygon dashed", fontsize=9)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
    finally:
        fig.clear()
    return buf.getvalue()
