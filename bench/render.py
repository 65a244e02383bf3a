"""Benchmark the CPU 3DGS renderer against the plain per-pixel reference.

Scenes: (a) the real capture ``luma-seal.splat`` from ``../shared/data/real`` (skipped,
with a message, where absent); (b) a synthetic urban scene from
:func:`airplay.scene.synthetic.make_scene`. For each: Gaussians, resolution, CPU backend
frames per second (mean over ``--frames`` frames cycling through several views, after a
warm-up that also pays the numba compilation) and CPU time per frame (all threads of the process:
less sensitive than the wall time to other processes on the machine), the reference's frames per second on one
frame at the same resolution, their ratio, and the targets (>= 50 FPS, >= 10x).

    PYTHONPATH=src python bench/render.py                # table
    PYTHONPATH=src python bench/render.py --json         # one JSON object
    PYTHONPATH=src python bench/render.py --profile      # plus per-stage times
    PYTHONPATH=src python bench/render.py --scenes vegetation --size 64 --no-reference --lod-px 1,2,4
    PYTHONPATH=src python bench/render.py --scenes synthetic --no-reference --lod-px '' --kernels plain
    PYTHONPATH=src python bench/render.py --quick        # seconds: synthetic at 4 G/m^2, 32x32, 5 frames, lod 2

Level-of-detail rows (``--lod-px``, default 1,2,4): the same frames rendered from each view's
LOD cut (:mod:`airplay.render.lod`), FPS, the speed-up over the exact row of the same run and
the PSNR of each view against its exact render (mean over views with a difference; min).

The reference takes tens of seconds per 224x224 frame on large scenes (progress is
printed to stderr); ``--no-reference`` skips it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import finish_meta, run_meta, threading_layer

TARGET_FPS = 50.0
TARGET_RATIO = 10.0
REAL_DATA = Path(__file__).resolve().parents[1].parent / "shared/data/real"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def seal_views(gaussians, size: int, count: int = 8):
    """Cameras on a circle around the capture, looking at its median (the capture is y-down)."""
    from airplay.scene.camera import PinholeCamera, look_at_viewmat

    centre = np.median(gaussians.means, axis=0).astype(np.float64)
    lo, hi = np.percentile(gaussians.means, [5, 95], axis=0)
    radius = 0.9 * float(np.linalg.norm(hi - lo))
    cam = PinholeCamera.from_fov(size, size, 60.0)
    viewmats = []
    for a in np.linspace(0.0, 2.0 * math.pi, count, endpoint=False):
        # y points down in this capture: "above" is -y.
        eye = centre + np.array([radius * math.cos(a), -0.3 * radius, radius * math.sin(a)])
        viewmats.append(look_at_viewmat(eye, centre, up=(0.0, -1.0, 0.0)))
    return np.stack(viewmats), cam.K, (0.0, 0.0, 0.0)


def synthetic_scene(size: int, count: int = 8, category: str = "urban", density: float | None = None):
    """A generated scene (seed 0, ``density`` Gaussians per m^2, default the generator's) and vehicle
    cameras in its navigable region; raises ImportError when the generator is not available."""
    from airplay.scene.camera import map_from_base, viewmat_from_pose
    from airplay.scene.scene import Scene
    from airplay.scene.synthetic import make_scene

    with tempfile.TemporaryDirectory(prefix="airplay-bench-") as tmp:
        make_scene(category, 0, Path(tmp) / category, **({} if density is None else {"gaussians_per_m2": density}))
        scene = Scene.load(Path(tmp) / category)
    spec = scene.spec
    cam = spec.camera.intrinsics.scaled(size, size)
    mount = spec.camera.mount
    try:
        from airplay.scene.viewpoints import free_viewpoints

        poses = free_viewpoints(scene, count, seed=0)
    except Exception as exc:  # noqa: BLE001 - fall back to a simple ring of poses
        log(f"free_viewpoints unavailable ({exc}); using poses around the navigable region's centre")
        poses = []
    if not poses:
        c = spec.navigable.polygon.mean(axis=0)
        z = 0.5 * (spec.navigable.z_min + spec.navigable.z_max)
        poses = [(float(c[0]), float(c[1]), z, 2.0 * math.pi * k / count) for k in range(count)]
    viewmats = np.stack([viewmat_from_pose(map_from_base(x, y, z, yaw), mount) for x, y, z, yaw in poses])
    return scene.gaussians, viewmats, cam.K, tuple(spec.background_rgb)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((np.clip(a, 0, 1).astype(np.float64) - np.clip(b, 0, 1)) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(1.0 / mse)


def bench_lod(name, gaussians, viewmats, K, size, frames, background, lod_px, exact_row, profile):
    """One LOD row: FPS over the same frames as the exact row, PSNR of each view against the
    exact render, and the speed-up over the exact row of this run."""
    from airplay.render import lod
    from airplay.render.cpu_backend import PROFILE_KEYS, render_cpu

    bg = np.asarray(background, dtype=np.float32)
    Ks = K[None]
    t = time.perf_counter()
    tree = lod.hierarchy_for(gaussians)
    tree_s = time.perf_counter() - t
    scores = []
    for c in range(len(viewmats)):
        exact = render_cpu(gaussians, viewmats[c : c + 1], Ks, size, size, bg, 0.05, 1e4)[0]
        mine = lod.render_lod_cpu(gaussians, tree, viewmats[c : c + 1], Ks, size, size, bg, 0.05, 1e4, lod_px)[0]
        scores.append(psnr(mine, exact))
    stages: dict = {}
    times = []
    for f in range(frames):
        c = f % len(viewmats)
        t = time.perf_counter()
        lod.render_lod_cpu(gaussians, tree, viewmats[c : c + 1], Ks, size, size, bg, 0.05, 1e4, lod_px,
                           profile=stages if profile else None)
        times.append(time.perf_counter() - t)
    times = np.array(times)
    finite = [x for x in scores if math.isfinite(x)]
    row = {
        "scene": name, "gaussians": len(gaussians), "resolution": f"{size}x{size}", "lod_px": lod_px,
        "views": len(viewmats), "frames": frames, "hierarchy_s": round(tree_s, 3),
        "cpu_fps": round(float(1.0 / times.mean()), 2), "cpu_ms_mean": round(float(1e3 * times.mean()), 3),
        "speedup_vs_exact": round(exact_row["cpu_ms_mean"] / float(1e3 * times.mean()), 2),
        "psnr_db_mean": round(float(np.mean(finite)), 2) if finite else math.inf,
        "psnr_db_min": round(float(min(scores)), 2), "identical_views": len(scores) - len(finite),
    }
    if profile:
        row["stages_ms"] = {k: round(1e3 * stages[k] / frames, 3)
                            for k in PROFILE_KEYS + ("cut",) if k not in ("visible", "tile_pairs")}
        row["cut_size"] = int(stages["cut_size"] / frames)
        row["tile_pairs"] = int(stages["tile_pairs"] / frames)
    return row


def bench_scene(name, gaussians, viewmats, K, size, frames, background, with_reference, profile):
    from airplay.render.cpu_backend import PROFILE_KEYS, render_cpu

    bg = np.asarray(background, dtype=np.float32)
    Ks = K[None]
    log(f"[{name}] warm-up (numba compilation on first use, cached afterwards) ...")
    t = time.perf_counter()
    render_cpu(gaussians, viewmats[:1], Ks, size, size, bg, 0.05, 1e4)
    warm_s = time.perf_counter() - t
    for c in range(len(viewmats)):
        render_cpu(gaussians, viewmats[c : c + 1], Ks, size, size, bg, 0.05, 1e4)
    stages: dict = {}
    times = []
    cpu0 = time.process_time()
    for f in range(frames):
        c = f % len(viewmats)
        t = time.perf_counter()
        render_cpu(gaussians, viewmats[c : c + 1], Ks, size, size, bg, 0.05, 1e4, profile=stages if profile else None)
        times.append(time.perf_counter() - t)
    process_ms = 1e3 * (time.process_time() - cpu0) / frames
    times = np.array(times)
    row = {
        "scene": name,
        "gaussians": len(gaussians),
        "resolution": f"{size}x{size}",
        "views": len(viewmats),
        "frames": frames,
        "first_call_s": round(warm_s, 3),
        "cpu_fps": round(float(1.0 / times.mean()), 2),
        "cpu_fps_median": round(1.0 / float(np.median(times)), 2),
        "cpu_ms_mean": round(float(1e3 * times.mean()), 3),
        "cpu_ms_min": round(float(1e3 * times.min()), 3),
        "cpu_ms_max": round(float(1e3 * times.max()), 3),
        "process_cpu_ms_per_frame": round(process_ms, 3),
    }
    if profile:
        row["stages_ms"] = {k: round(1e3 * stages[k] / frames, 3) for k in PROFILE_KEYS if k not in ("visible", "tile_pairs")}
        row["visible_gaussians"] = int(stages["visible"] / frames)
        row["tile_pairs"] = int(stages["tile_pairs"] / frames)
    if with_reference:
        from airplay.render.reference import reference_render

        log(f"[{name}] plain reference, one {size}x{size} frame (slow by design) ...")
        start = time.perf_counter()
        last = [start]

        def progress(done, total):
            now = time.perf_counter()
            if now - last[0] > 5.0 or done == total:
                last[0] = now
                eta = (now - start) / done * (total - done)
                log(f"[{name}]   reference row {done}/{total}, {now - start:.0f} s, ~{eta:.0f} s left")

        ref = reference_render(gaussians, viewmats[0], K, size, size, background, 0.05, 1e4, progress=progress)
        ref_s = time.perf_counter() - start
        mine = render_cpu(gaussians, viewmats[:1], Ks, size, size, bg, 0.05, 1e4)
        row["reference_fps"] = round(1.0 / ref_s, 5)
        row["reference_s"] = round(ref_s, 2)
        row["ratio"] = round(row["cpu_fps"] * ref_s, 1)
        row["max_rgb_diff_vs_reference_255"] = round(float(np.abs(mine[0][0] - ref[0]).max()) * 255.0, 4)
        row["pass_ratio"] = bool(row["ratio"] >= TARGET_RATIO)
    row["pass_fps"] = bool(row["cpu_fps"] >= TARGET_FPS)
    return row


def print_table(rows, skipped):
    head = f"{'scene':<17}{'Gaussians':>10}{'res':>9}{'CPU FPS':>9}{'median':>8}{'ref FPS':>9}{'ratio':>9}  targets (>= {TARGET_FPS:g} FPS, >= {TARGET_RATIO:g}x)"
    print(head)
    print("-" * len(head))
    for r in rows:
        ref = f"{r['reference_fps']:.4f}" if "reference_fps" in r else "-"
        ratio = f"{r['ratio']:.0f}x" if "ratio" in r else "-"
        fps_ok = "PASS" if r["pass_fps"] else "FAIL"
        ratio_ok = ("PASS" if r["pass_ratio"] else "FAIL") if "pass_ratio" in r else "n/a"
        print(f"{r['scene']:<17}{r['gaussians']:>10}{r['resolution']:>9}{r['cpu_fps']:>9.1f}{r['cpu_fps_median']:>8.1f}"
              f"{ref:>9}{ratio:>9}  FPS {fps_ok}, ratio {ratio_ok}")
        if "stages_ms" in r:
            stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages_ms"].items())
            print(f"{'':<17}stages (ms/frame): {stages}; visible {r['visible_gaussians']}, tile pairs {r['tile_pairs']}")
        if "max_rgb_diff_vs_reference_255" in r:
            print(f"{'':<17}max |rgb - reference| = {r['max_rgb_diff_vs_reference_255']:.3f}/255")
    for name, why in skipped:
        print(f"{name:<17}skipped: {why}")


def print_lod_table(rows):
    print("\nLevel of detail (airplay.render.lod), same frames as the exact rows above; PSNR of each view vs its exact render")
    head = (f"{'scene':<19}{'Gaussians':>10}{'res':>9}{'lod px':>7}{'CPU FPS':>9}{'ms':>8}{'x exact':>8}"
            f"{'PSNR dB mean':>13}{'min':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['scene']:<19}{r['gaussians']:>10}{r['resolution']:>9}{r['lod_px']:>7g}{r['cpu_fps']:>9.1f}"
              f"{r['cpu_ms_mean']:>8.2f}{r['speedup_vs_exact']:>8.2f}{r['psnr_db_mean']:>13.2f}{r['psnr_db_min']:>7.2f}"
              + (f"  ({r['identical_views']} of {r['views']} views identical)" if r["identical_views"] else ""))
        if "stages_ms" in r:
            stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages_ms"].items())
            print(f"{'':<19}stages (ms/frame): {stages}; cut {r['cut_size']} Gaussians, tile pairs {r['tile_pairs']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=None, help="timed frames per scene (default 100, quick 5)")
    parser.add_argument("--size", type=int, default=None, help="square image size in pixels (default 224, quick 32)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--profile", action="store_true", help="also report the per-stage time breakdown")
    parser.add_argument("--no-reference", action="store_true", help="skip the (slow) plain reference")
    parser.add_argument("--scenes", default=None,
                        help="comma-separated: seal, synthetic (urban), vegetation (the collection benchmark's scene); "
                             "default seal,synthetic (quick: synthetic)")
    parser.add_argument("--lod-px", default=None,
                        help="comma-separated LOD thresholds in pixels, one row each per scene ('' = none; "
                             "default 1,2,4, quick 2)")
    parser.add_argument("--density", type=float, default=None,
                        help="Gaussians per m^2 of the synthetic scenes (default: the generator's; quick 4)")
    parser.add_argument("--quick", action="store_true",
                        help="seconds, not minutes (what make test runs): the synthetic scene at 4 Gaussians/m^2, "
                             "32x32, 5 frames, LOD 2 px, the reference included")
    parser.add_argument("--kernels", choices=("auto", "llvm", "plain"), default=None,
                        help="the CPU kernels' numba pieces (sets AIRPLAY_CPU_KERNELS; default: the environment's)")
    args = parser.parse_args(argv)
    meta = run_meta("render")
    quick = args.quick
    args.frames = args.frames or (5 if quick else 100)
    args.size = args.size or (32 if quick else 224)
    args.scenes = args.scenes if args.scenes is not None else ("synthetic" if quick else "seal,synthetic")
    args.lod_px = args.lod_px if args.lod_px is not None else ("2" if quick else "1,2,4")
    if quick and args.density is None:
        args.density = 4.0
    if args.kernels:
        os.environ["AIRPLAY_CPU_KERNELS"] = args.kernels

    import numba

    rows, skipped, inputs = [], [], {}
    wanted = {s.strip() for s in args.scenes.split(",") if s.strip()}
    if "seal" in wanted:
        path = REAL_DATA / "luma-seal.splat"
        if not path.is_file():
            msg = f"{path} not found (real samples absent; see ../shared/data/real/README.md)"
            log(f"[luma-seal] skipped: {msg}")
            skipped.append(("luma-seal", msg))
        else:
            from airplay.scene.splat_io import read_splat

            g = read_splat(path)
            viewmats, K, bg = seal_views(g, args.size)
            rows.append(bench_scene("luma-seal", g, viewmats, K, args.size, args.frames, bg, not args.no_reference, args.profile))
            inputs["luma-seal"] = (g, viewmats, K, bg)
    if "synthetic" in wanted:
        try:
            log("[synthetic-urban] generating the scene ...")
            g, viewmats, K, bg = synthetic_scene(args.size, density=args.density)
        except ImportError as exc:
            msg = f"synthetic generator not available ({exc})"
            log(f"[synthetic-urban] skipped: {msg}")
            skipped.append(("synthetic-urban", msg))
        except Exception as exc:  # noqa: BLE001 - report, keep the other rows
            msg = f"synthetic scene could not be made: {type(exc).__name__}: {exc}"
            log(f"[synthetic-urban] skipped: {msg}")
            skipped.append(("synthetic-urban", msg))
        else:
            rows.append(bench_scene("synthetic-urban", g, viewmats, K, args.size, args.frames, bg, not args.no_reference, args.profile))
            inputs["synthetic-urban"] = (g, viewmats, K, bg)
    if "vegetation" in wanted:
        log("[synthetic-vegetation] generating the scene ...")
        g, viewmats, K, bg = synthetic_scene(args.size, category="vegetation", density=args.density)
        rows.append(bench_scene("synthetic-vegetation", g, viewmats, K, args.size, args.frames, bg, False, args.profile))
        inputs["synthetic-vegetation"] = (g, viewmats, K, bg)
    lod_rows = []
    for px in [float(x) for x in args.lod_px.split(",") if x.strip()]:
        for r in rows:
            g, viewmats, K, bg = inputs[r["scene"]]
            log(f"[{r['scene']}] LOD {px:g} px ...")
            lod_rows.append(bench_lod(r["scene"], g, viewmats, K, args.size, args.frames, bg, px, r, args.profile))
    result = {
        "threads": numba.get_num_threads(),
        "threading_layer": threading_layer(),
        "kernels": os.environ.get("AIRPLAY_CPU_KERNELS", "auto") or "auto",
        "target_fps": TARGET_FPS,
        "target_ratio": TARGET_RATIO,
        "scenes": rows,
        "lod": lod_rows,
        "skipped": [{"scene": n, "reason": why} for n, why in skipped],
        "density": args.density,
        "quick": quick,
    }
    result["meta"] = finish_meta(meta)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"CPU backend, {result['threads']} numba threads ({result['threading_layer']}), "
              f"AIRPLAY_CPU_KERNELS={result['kernels']}")
        print_table(rows, skipped)
        if lod_rows:
            print_lod_table(lod_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
