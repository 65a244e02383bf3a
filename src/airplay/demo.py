"""``airplay demo`` (what ``make sim-eval`` runs until the closed loop lands): scenes and views.

For each category: make the synthetic scene if its folder is missing, validate it, pick free
viewpoints in its navigable region, render RGB, splat depth and mesh depth there, save PNGs
and print a table of what was rendered and how fast.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from airplay.scene.mesh_depth import MeshRaycaster
from airplay.render.views import colorize_depth, render_vehicle_view, save_png
from airplay.scene.check import summarize
from airplay.scene.scene import Scene
from airplay.scene.viewpoints import free_viewpoints


def ensure_scene(folder: Path, category: str, seed: int) -> Scene:
    """Load the scene in ``folder``, generating it first when it has no scene.yaml."""
    if not (folder / "scene.yaml").is_file():
        from airplay.scene.synthetic import make_scene

        t0 = time.perf_counter()
        print(f"[{category}] generating synthetic scene (seed {seed}) in {folder} ...", flush=True)
        make_scene(category, seed, folder)
        print(f"[{category}] generated in {time.perf_counter() - t0:.1f} s", flush=True)
    return Scene.load(folder)


def run_demo(scenes_dir: Path, out_dir: Path, categories: list[str], seed: int, views: int, backend: str) -> int:
    rows = []
    for category in categories:
        scene = ensure_scene(scenes_dir / f"{category}_{seed}", category, seed)
        summary = summarize(scene)
        caster = MeshRaycaster(scene.mesh)
        poses = free_viewpoints(scene, views, seed, caster=caster)
        if not poses:
            print(f"[{category}] no free viewpoint found in the navigable region", flush=True)
            continue
        cam, mount = scene.spec.camera.intrinsics, scene.spec.camera.mount
        sky = scene.spec.background_rgb
        render_vehicle_view(scene.gaussians, cam, poses[0], mount, backend=backend, background=sky)  # warm-up
        times = []
        for i, pose in enumerate(poses):
            t0 = time.perf_counter()
            view = render_vehicle_view(scene.gaussians, cam, pose, mount, backend=backend, background=sky)
            times.append(time.perf_counter() - t0)
            mesh_depth = caster.depth(view.viewmat, cam.K, cam.width, cam.height)
            stem = out_dir / f"{category}_{i}"
            save_png(f"{stem}_rgb.png", view.rgb)
            panel = np.concatenate([colorize_depth(view.splat_depth_m, 15.0), colorize_depth(mesh_depth, 15.0)], axis=1)
            save_png(f"{stem}_depth_splat_mesh.png", panel)
            both = np.isfinite(view.splat_depth_m) & np.isfinite(mesh_depth) & (view.alpha > 0.5)
            agree = float(np.median(np.abs(view.splat_depth_m[both] - mesh_depth[both]))) if both.any() else float("nan")
            x, y, z, yaw = pose
            print(f"[{category}] view {i}: pose ({x:.1f}, {y:.1f}, {z:.1f}) m yaw {np.degrees(yaw):.0f} deg, "
                  f"splat-vs-mesh depth median |diff| {agree:.3f} m -> {stem}_rgb.png", flush=True)
        rows.append((category, summary.gaussians, summary.navigable_area_m2, len(poses),
                     1.0 / float(np.mean(times)), view.backend))
    print()
    print(f"{'scene':<12} {'gaussians':>10} {'nav area m2':>12} {'views':>6} {'render FPS':>11} {'backend':>8}")
    for cat, n, area, nv, fps, be in rows:
        print(f"{cat:<12} {n:>10,} {area:>12.0f} {nv:>6} {fps:>11.1f} {be:>8}")
    print(f"\npictures in {out_dir}/")
    return 0 if rows else 1
