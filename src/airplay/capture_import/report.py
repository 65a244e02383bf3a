"""The import report: ``import/report.html`` with PNGs beside it (map frame, metres).

* ``topdown.png``  - the fused field at the middle of the flight band: observed free, solid,
                     never observed (counted as solid); the navigable polygon; the sampled
                     free-space camera points and the capture's own camera positions.
* ``heights.png``  - how the Gaussians sit over the found floor (z = 0) and the flight band.
* ``overview.png`` - an oblique view of the splat, of the derived mesh, and both blended.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np


def _overview(path: Path, g_map, mesh, region) -> None:
    import matplotlib.pyplot as plt

    from airplay.render.api import render
    from airplay.scene.camera import PinholeCamera, look_at_viewmat
    from airplay.scene.mesh_depth import MeshRaycaster

    poly = region.polygon
    centre = np.r_[poly.mean(axis=0), 0.5 * (region.z_min + region.z_max)]
    span = float(np.max(poly.max(axis=0) - poly.min(axis=0)))
    eye = centre + np.array([-0.6 * span, -0.6 * span, 0.5 * span + 2.0])
    cam = PinholeCamera.from_fov(320, 240, 70.0)
    vm = look_at_viewmat(eye, centre)
    rgb = render(g_map, vm, cam.K, cam.width, cam.height, backend="cpu", background=(0.5, 0.5, 0.5)).rgb[0]
    depth = MeshRaycaster(mesh).depth(vm, cam.K, cam.width, cam.height)
    hit = np.isfinite(depth)
    shade = np.zeros_like(depth)
    if hit.any():
        d = depth[hit]
        shade[hit] = 1.0 - 0.8 * (d - d.min()) / max(float(np.ptp(d)), 1e-6)
    mesh_rgb = np.stack([shade * 0.9, shade * 0.5, shade * 0.2], axis=-1)
    blend = np.where(hit[..., None], 0.5 * rgb + 0.5 * mesh_rgb, rgb)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
    for ax, img, title in zip(axes, (rgb, mesh_rgb, blend), ("splat (map frame)", "derived collision mesh", "blended")):
        ax.imshow(np.clip(img, 0, 1))
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_report(folder: Path, figures: dict, g_map, field: np.ndarray, origin: np.ndarray, voxel: float,
                 region, mesh, cams: np.ndarray, capture_cams: np.ndarray | None = None) -> None:
    """Write report.html and its PNGs into ``folder`` (created). ``cams``: (K, 3) the sampled
    free-space camera points; ``capture_cams``: (C, 3) the capture's camera centres; map frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    k = int(np.clip(round((0.5 * (region.z_min + region.z_max) - origin[2]) / voxel), 0, field.shape[2] - 1))
    layer = field[:, :, k]
    img = np.full(layer.shape + (3,), 0.55)  # never observed: grey
    img[layer > 0] = (1.0, 1.0, 1.0)
    img[(layer <= 0) & (layer > -0.999)] = (0.15, 0.15, 0.2)
    extent = (origin[0] - voxel / 2, origin[0] + voxel * (layer.shape[0] - 0.5),
              origin[1] - voxel / 2, origin[1] + voxel * (layer.shape[1] - 0.5))
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.imshow(img.transpose(1, 0, 2), origin="lower", extent=extent, interpolation="nearest")
    poly = np.vstack([region.polygon, region.polygon[:1]])
    ax.plot(poly[:, 0], poly[:, 1], "-", color="tab:green", lw=2, label="navigable polygon")
    ax.plot(cams[:, 0], cams[:, 1], "x", color="tab:red", ms=5, label="free-space cameras")
    if capture_cams is not None and len(capture_cams):
        ax.plot(capture_cams[:, 0], capture_cams[:, 1], "^", color="tab:blue", ms=4, mfc="none",
                label="capture's cameras")
    ax.set_xlabel("map x (m)")
    ax.set_ylabel("map y (m)")
    ax.set_title(f"z = {origin[2] + voxel * k:.2f} m: white free, dark solid, grey never observed")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "topdown.png", dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3))
    z = g_map.means[:, 2]
    ax.hist(z[(z > -2) & (z < 10)], bins=120, color="tab:blue")
    ax.axvline(0.0, color="k", lw=1, label="floor found (z = 0)")
    ax.axvspan(region.z_min, region.z_max, color="tab:green", alpha=0.2, label="flight band")
    ax.set_xlabel("map z (m)")
    ax.set_ylabel("Gaussians")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "heights.png", dpi=80)
    plt.close(fig)

    pngs = ["topdown.png", "heights.png"]
    try:
        _overview(folder / "overview.png", g_map, mesh, region)
        pngs.insert(0, "overview.png")
    except (ValueError, RuntimeError, ImportError, MemoryError) as err:  # a picture is not worth failing an import over
        figures.setdefault("notes", []).append(f"overview image not made: {type(err).__name__}: {err}")

    rows = []
    for key, value in figures.items():
        if key == "stage_s":
            value = ", ".join(f"{k} {v:.1f} s" for k, v in value.items())
        elif isinstance(value, dict) and key != "dropped":
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        elif key == "dropped":
            value = ", ".join(f"{k} {v:,}" for k, v in value.items()) + f" (of {figures['gaussians']:,})"
        rows.append(f"<tr><th>{html.escape(key)}</th><td>{html.escape(str(value))}</td></tr>")
    body = "\n".join(rows)
    images = "\n".join(f'<p><img src="{p}" alt="{p}"></p>' for p in pngs)
    (folder / "report.html").write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>airplay import report</title>"
        "<style>body{font-family:sans-serif;max-width:1000px}th{text-align:left;padding-right:1em}"
        "td{font-family:monospace}</style></head><body>\n"
        f"<h1>Import of {html.escape(str(figures.get('capture')))}</h1>\n"
        "<p>Map frame: ENU, metres, floor at z = 0. The transform source &rarr; map is in scene.yaml "
        "(splat.transform) and stays editable. Dropped Gaussians are left out of the collision geometry.</p>\n"
        f"<table>\n{body}\n</table>\n{images}\n</body></html>\n")
