"""Benchmark expert flight collection: flights per second per core, rendering and writing included.

Scene: the synthetic vegetation scene of seed 0 (navigable polygon about 1,080 m^2), made
at each ``--density`` (Gaussians per m^2 of surface; 90 is the generator's default, which
gives about 257 k Gaussians). Each row runs :func:`airplay.data.collect.collect` in this
process with one numba thread (one core), ``--flights`` PointGoal flights of the expert at
50 Hz, RGB rendered with the CPU backend at ``--size`` (plus mesh depth with ``--depth``),
one rosbag2 MCAP bag per flight written atomically, at each ``--lod-px`` (level of detail of
the images, protocol.yaml ``render: lod_px``; default the shipped protocol's, 0 = exact), and
with ``--lod-cell M,DEG`` also with the cut made once per pose cell of M metres x DEG degrees
(``render: lod_cell_m`` / ``lod_cell_deg``; a row each, ``off`` = per-view cut). The
rate excludes loading the scene, building or reading its LOD hierarchy and warming up (one
frame rendered, which loads the renderer's compiled kernels, and the expert's wall-penalty grid:
once per worker in a real run, :func:`airplay.data.collect_flight._warm_up`) and counts everything
per flight: rendering, flight
simulation + expert, CDR encoding + MCAP writing + publishing. Flights per second per core
= flights / CPU time of the process (one thread), so that other load on a shared machine
does not count; the wall-clock rate is printed too. Target: >= 1 flight/s/core.

A line then gives where one frame's render time goes (cut, cull, sort, project, bin,
rasterize, ms per frame, and how many Gaussians are drawn): the poses of the first three
recorded flights rendered again with the renderer's stage profile, best of three passes.

A second table rewrites one recorded flight with each MCAP chunk compression (zstd at the
bag writer's default level, ``bag_writer.ZSTD_LEVEL``, and at zstd's own default 3; lz4;
none): write time (per flight and per step) and size, the time as a ratio to the reference
measured in the same run, rosbags' own rosbag2 Writer in MCAP storage (no chunk
compression, no periodic flush, no fsync) writing the same messages.

    PYTHONPATH=src python bench/collect.py                 # table
    PYTHONPATH=src python bench/collect.py --json          # one JSON object
    PYTHONPATH=src python bench/collect.py --density 4 --size 32 --flights 20
    PYTHONPATH=src python bench/collect.py --density 90 --lod-px 0 2      # exact vs LOD
    PYTHONPATH=src python bench/collect.py --density 90 --lod-cell off 0.5,15   # per-view vs per-cell cut
    PYTHONPATH=src python bench/collect.py --quick         # seconds: 2 flights, 4 G/m^2, 16x16 (make test)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # one core: set before numba is imported

import numpy as np
from benchlib import threading_layer

TARGET = 1.0
"""flights per second per core"""
SCENE = ("vegetation", 0)
STAGE_FLIGHTS = 3
"""Recorded flights whose poses the "Render stages" line renders again (one is not typical)."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def polygon_area(poly) -> float:
    x, y = np.asarray(poly)[:, 0], np.asarray(poly)[:, 1]
    return float(0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))


def protocol_with_lod(tmp: Path, lod_px: float, cell: tuple[float, float] | None = None) -> Path:
    """config/protocol.yaml with ``render: lod_px`` (and ``lod_cell_m`` / ``lod_cell_deg``: ``cell``,
    None = off) set, everything else as shipped."""
    import yaml

    from airplay.config import config_dir

    data = yaml.safe_load((config_dir() / "protocol.yaml").read_text())
    render = data.setdefault("render", {})
    render["lod_px"] = float(lod_px)
    render["lod_cell_m"], render["lod_cell_deg"] = (float(cell[0]), float(cell[1])) if cell else (0.0, 0.0)
    path = tmp / f"protocol_lod{lod_px:g}_{cell_label(cell)}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cell_label(cell: tuple[float, float] | None) -> str:
    return f"{cell[0]:g}m{cell[1]:g}d" if cell else "off"


def bench_density(tmp: Path, density: float, size: int, flights: int, depth: bool, lod_px: float,
                  cell: tuple[float, float] | None = None) -> dict:
    from airplay.data.collect import collect
    from airplay.data.collect_plan import CollectConfig, read_ledger
    from airplay.policies import make_policy
    from airplay.scene.scene import Scene
    from airplay.scene.synthetic import make_scene

    category, seed = SCENE
    scene_dir = tmp / f"{category}_{seed}_d{density:g}"
    if not scene_dir.exists():
        log(f"[{density:g} G/m^2] making the {category} scene (seed {seed}) ...")
        make_scene(category, seed, scene_dir, gaussians_per_m2=density, name=f"{category}_{seed}")
    scene = Scene.load(scene_dir)
    out = tmp / f"bags_d{density:g}_lod{lod_px:g}_{cell_label(cell)}"
    k = 1
    while out.exists():  # a repeated row flies again (the same folder would resume: nothing to fly)
        k += 1
        out = tmp / f"bags_d{density:g}_lod{lod_px:g}_{cell_label(cell)}_{k}"
    cfg = CollectConfig(scenes=(scene_dir,), per_scene=flights, out=out, seed=0, depth=depth,
                        image_size=(size, size), threads=1, protocol=protocol_with_lod(tmp, lod_px, cell))
    log(f"[{density:g} G/m^2, lod_px {lod_px:g}, cell {cell_label(cell)}] {flights} flights at {size}x{size} ...")
    summary = collect(cfg, progress=sys.stderr.isatty(), make_expert=make_policy)
    recs = [r for r in read_ledger(out).values()]
    t = {k: float(sum(r["timings"].get(k, 0.0) for r in recs))
         for k in ("load", "render", "sim", "write", "encode", "wall", "cpu")}
    flying = t["wall"] - t["load"]
    steps = sum(r["steps"] for r in recs)
    frames = sum(r["frames"] for r in recs)
    bag_bytes = sum(f.stat().st_size for f in out.rglob("*.mcap"))
    row = {
        "scene": f"{category}_{seed}", "gaussians_per_m2": density, "gaussians": len(scene.gaussians),
        "area_m2": round(polygon_area(scene.spec.navigable.polygon), 1), "resolution": f"{size}x{size}",
        "lod_px": lod_px, "lod_cell": cell_label(cell),
        "depth": depth, "flights": len(recs), "written": summary["total"]["written"],
        "mean_steps": round(steps / max(len(recs), 1), 1), "frames": frames,
        "load_s": round(t["load"], 3), "flying_s": round(flying, 3),
        "cpu_s": round(t["cpu"], 3),
        "flights_per_s_per_core": round(len(recs) / t["cpu"], 3),
        "flights_per_s_wall": round(len(recs) / flying, 3),
        "ratio_to_target": round(len(recs) / t["cpu"] / TARGET, 3),
        "cpu_ms_per_step": round(1e3 * t["cpu"] / max(steps, 1), 3),
        "breakdown_s": {"render": round(t["render"], 3), "sim_expert": round(t["sim"], 3),
                        "encode_write": round(t["write"], 3), "encode": round(t["encode"], 3),
                        "other": round(flying - t["render"] - t["sim"] - t["write"], 3)},
        "mb_per_flight": round(bag_bytes / 1e6 / max(summary["total"]["written"], 1), 2),
    }
    row["pass"] = row["flights_per_s_per_core"] >= TARGET
    bags = sorted(str(m.parent) for m in out.glob("*/*/metadata.yaml"))
    row["_bag"] = bags[0] if bags else None
    row["_bags"] = bags[:STAGE_FLIGHTS]
    row["_scene_dir"], row["_protocol"] = str(scene_dir), str(cfg.protocol)
    return row


def bench_render_stages(row: dict, size: int, repeats: int = 3) -> dict:
    """Where one frame's render time goes: the poses of up to :data:`STAGE_FLIGHTS` recorded
    flights (their /odom) rendered again as collection renders them (World.camera_images'
    pose-cell path), with the renderer's stage profile; best of ``repeats`` passes over those
    poses, ms per frame (the best pass: a lower bound of what a frame costs inside the
    flight loop)."""
    from airplay.data.bag import iter_bag_messages
    from airplay.data.collect_flight import world_with_camera
    from airplay.data.messages import decode, position_yaw_of
    from airplay.render import lod
    from airplay.render.cpu_backend import PROFILE_KEYS
    from airplay.tasks.protocol import load_protocol
    from airplay.world.world import FAR_PLANE_M, NEAR_PLANE_M, World

    world = world_with_camera(World.load(row["_scene_dir"], protocol=load_protocol(row["_protocol"])), (size, size))
    h, spec, pr = world.lod_hierarchy(), world.scene.spec, world.protocol
    poses = []
    for bag in row["_bags"]:
        for _, msgtype, _, cdr in iter_bag_messages(bag, ["/odom"]):
            poses.append(position_yaw_of(decode(msgtype, cdr).pose))  # odometry's pose: a pose with covariance
    cam = spec.camera.intrinsics
    settings = lod.CellSettings(spec.camera.mount, cam.K, cam.width, cam.height, spec.background_rgb, NEAR_PLANE_M,
                                FAR_PLANE_M, pr.render_lod_px, pr.render_lod_cell_m, pr.render_lod_cell_deg,
                                depth=False)
    best: dict = {}
    for _ in range(repeats):
        lod.clear_cell_cache()
        prof = {k: 0.0 for k in PROFILE_KEYS + ("cut", "cut_size")}
        t = time.process_time()
        for position, yaw in poses:
            lod.render_lod_cell_cpu(world.scene.gaussians, h, [position], [yaw], settings, profile=prof)
        prof["total"] = time.process_time() - t
        if not best or prof["total"] < best["total"]:
            best = prof
    n = max(len(poses), 1)
    ms = {k: round(1e3 * best[k] / n, 3) for k in ("cut", "cull", "sort", "project", "bin", "rasterize", "total")}
    return {"flights": len(row["_bags"]), "frames": len(poses), "ms_per_frame": ms, "drawn": round(best["visible"] / n),
            "cut_size": round(best["cut_size"] / n), "cell_miss_pct": round(100 * best.get("cell_misses", 0) / n, 1),
            "scene": row["scene"], "gaussians_per_m2": row["gaussians_per_m2"], "resolution": row["resolution"]}


def bench_compression(bag_dir: str, tmp: Path, repeats: int = 3) -> list[dict]:
    """Rewrite one recorded flight with each chunk compression: best-of write time and size."""
    from airplay.data.bag import BagWriter, iter_bag_messages
    from airplay.data.bag_writer import ZSTD_LEVEL

    records = [(topic, stamp, cdr) for topic, _, stamp, cdr in iter_bag_messages(bag_dir)
               if topic != "/episode/metadata"]
    raw = sum(len(c) for _, _, c in records)
    steps = max(1, sum(1 for topic, _, _ in records if topic == "/odom"))
    rows = []
    levels = [ZSTD_LEVEL] + ([3] if ZSTD_LEVEL != 3 else [])
    for compression, level in [("zstd", lv) for lv in levels] + [("lz4", None), ("", None)]:
        label = f"zstd {level}" + (" (default)" if level == ZSTD_LEVEL else "") if compression == "zstd" \
            else compression or "none"
        best = float("inf")
        for _ in range(repeats):
            path = tmp / f"rewrite_{compression or 'none'}{level or ''}"
            shutil.rmtree(path, ignore_errors=True)
            t = time.perf_counter()
            with BagWriter(path, compression=compression, zstd_level=level) as writer:
                for record in records:
                    writer.write(*record)
            best = min(best, time.perf_counter() - t)
        size = sum(f.stat().st_size for f in path.glob("*.mcap"))
        rows.append({"writer": "airplay BagWriter", "compression": label,
                     "write_ms": round(1e3 * best, 2), "ms_per_step": round(1e3 * best / steps, 4),
                     "mb": round(size / 1e6, 3), "ratio": round(raw / size, 2), "messages": len(records)})
    rows.append(rosbags_reference(records, tmp, repeats, raw, steps))
    ours = next(r for r in rows if r["writer"] == "airplay BagWriter" and r["compression"] == "none")
    for r in rows:
        r["time_vs_rosbags"] = round(r["write_ms"] / rows[-1]["write_ms"], 2)
    ours["reference"] = rows[-1]["writer"]
    return rows


def rosbags_reference(records, tmp: Path, repeats: int, raw: int, steps: int) -> dict:
    """The reference in the same run: rosbags' own rosbag2 Writer (MCAP storage, no chunk
    compression, no periodic flush, no fsync) writing the same messages, best of ``repeats``."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from airplay.data.messages import TOPICS, typestore

    best = float("inf")
    for _ in range(repeats):
        path = tmp / "rewrite_rosbags"
        shutil.rmtree(path, ignore_errors=True)
        t = time.perf_counter()
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = {}
            for topic, stamp, cdr in records:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, TOPICS[topic], typestore=typestore())
                writer.write(conns[topic], stamp, cdr)
        best = min(best, time.perf_counter() - t)
    size = sum(f.stat().st_size for f in path.glob("*.mcap"))
    return {"writer": "rosbags Writer (reference)", "compression": "none", "write_ms": round(1e3 * best, 2),
            "ms_per_step": round(1e3 * best / steps, 4), "mb": round(size / 1e6, 3), "ratio": round(raw / size, 2),
            "messages": len(records)}


def print_tables(result: dict) -> None:
    print(f"Expert flight collection, one core ({result['threads']} numba thread, {result['threading_layer']}); "
          f"target >= {TARGET:g} flight/s/core")
    head = (f"{'scene':<14}{'G/m2':>6}{'Gaussians':>10}{'area m2':>9}{'image':>8}{'lod px':>7}{'cell':>9}{'flights':>8}{'steps':>7}"
            f"{'flights/s/core':>15}{'x target':>9}{'CPU ms/step':>12}{'wall fl/s':>10}"
            "  render / sim+expert / encode+write")
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        b = r["breakdown_s"]
        total = max(r["flying_s"], 1e-9)
        parts = " / ".join(f"{100 * b[k] / total:.0f} %" for k in ("render", "sim_expert", "encode_write"))
        print(f"{r['scene']:<14}{r['gaussians_per_m2']:>6g}{r['gaussians']:>10}{r['area_m2']:>9.0f}"
              f"{r['resolution']:>8}{r['lod_px']:>7g}{r['lod_cell']:>9}{r['flights']:>8}{r['mean_steps']:>7.0f}{r['flights_per_s_per_core']:>15.3f}"
              f"{r['ratio_to_target']:>9.2f}{r['cpu_ms_per_step']:>12.2f}{r['flights_per_s_wall']:>10.3f}  {parts}  "
              f"{'PASS' if r['pass'] else 'FAIL'}")
        # Stage shares are of wall time; scaled to the CPU time per step.
        per_step = {k: r["cpu_ms_per_step"] * b[k] / total for k in b}
        per_step["mcap"] = per_step["encode_write"] - per_step["encode"]
        print(f"{'':<14}CPU per step: render {per_step['render']:.2f} ms, sim+expert {per_step['sim_expert']:.2f} ms, "
              f"encode+write {per_step['encode_write']:.3f} ms (CDR {per_step['encode']:.3f}, "
              f"MCAP {per_step['mcap']:.3f}); {r['mb_per_flight']:.2f} MB per bag; "
              f"scene load {r['load_s']:.1f} s (once per worker)")
    st = result.get("render_stages")
    if st:
        ms = st["ms_per_frame"]
        print(f"\nRender stages per frame ({st['scene']}, {st['gaussians_per_m2']:g} G/m^2, {st['resolution']}; "
              f"{st['flights']} flights' {st['frames']} poses rendered again, best of 3 passes), ms:")
        print("  ".join(f"{k} {ms[k]:.3f}" for k in ("cut", "cull", "sort", "project", "bin", "rasterize", "total"))
              + f"; {st['drawn']} Gaussians drawn of a {st['cut_size']}-node cut, new cell on "
              f"{st['cell_miss_pct']:g} % of frames")
    if result.get("compression"):
        print(f"\nWriting one recorded flight again ({result['compression_source']}), per MCAP chunk compression, "
              "against rosbags' own rosbag2 MCAP Writer in the same run:")
        print(f"{'writer':<28}{'compression':<18}{'write ms':>9}{'ms/step':>9}{'MB':>8}{'ratio':>7}"
              f"{'time / rosbags':>16}")
        for c in result["compression"]:
            print(f"{c['writer']:<28}{c['compression']:<18}{c['write_ms']:>9.1f}{c['ms_per_step']:>9.4f}"
                  f"{c['mb']:>8.2f}{c['ratio']:>7.2f}{c['time_vs_rosbags']:>16.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flights", type=int, default=None, help="flights per row (default 8, quick 2)")
    parser.add_argument("--size", type=int, default=None, help="square image size in pixels (default 64, quick 16)")
    parser.add_argument("--density", type=float, nargs="+", default=None,
                        help="Gaussians per m^2, one row each (default 90 = the generator's default, and 4; quick 4)")
    parser.add_argument("--depth", action="store_true", help="also render and record mesh depth")
    parser.add_argument("--lod-px", type=float, nargs="+", default=None,
                        help="render level(s) of detail, one row each per density (protocol.yaml render.lod_px; "
                             "0 = exact; default: the shipped protocol's value)")
    parser.add_argument("--lod-cell", nargs="+", default=None, metavar="M,DEG|off",
                        help="pose cell(s) of the LOD cut, one row each per level: 'M,DEG' (metres, degrees) or "
                             "'off' (per-view cut); default: the shipped protocol's")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument("--quick", action="store_true",
                        help="seconds, not minutes (what make test runs): one row of 2 flights at 4 G/m^2, 16x16")
    args = parser.parse_args(argv)
    args.flights = args.flights or (2 if args.quick else 8)
    args.size = args.size or (16 if args.quick else 64)
    args.density = args.density or ([4.0] if args.quick else [90.0, 4.0])

    import numba

    from airplay.tasks.protocol import load_protocol

    shipped = load_protocol()
    lods = args.lod_px if args.lod_px is not None else [shipped.render_lod_px]
    if args.lod_cell is None:
        cells = [(shipped.render_lod_cell_m, shipped.render_lod_cell_deg) if shipped.render_lod_cell_m > 0 else None]
    else:
        cells = [None if c == "off" else tuple(float(v) for v in c.split(",")) for c in args.lod_cell]
    rows = []
    with tempfile.TemporaryDirectory(prefix="airplay-bench-collect-") as tmp:
        for density in args.density:
            for lod_px in lods:
                for cell in (cells if lod_px > 0 else [None]):
                    rows.append(bench_density(Path(tmp), density, args.size, args.flights, args.depth, lod_px, cell))
        source = next((r for r in rows if r["_bag"]), None)
        compression = bench_compression(source["_bag"], Path(tmp)) if source else []
        staged = next((r for r in rows if r["_bag"] and r["lod_px"] > 0 and r["lod_cell"] != "off"), None)
        if staged:
            log(f"[{staged['gaussians_per_m2']:g} G/m^2] render stages, {STAGE_FLIGHTS} flights' poses again ...")
        stages = bench_render_stages(staged, args.size) if staged else None
    for r in rows:
        for key in ("_bag", "_bags", "_scene_dir", "_protocol"):
            r.pop(key)
    result = {"threads": numba.get_num_threads(), "threading_layer": threading_layer(), "target": TARGET,
              "rows": rows, "compression": compression, "render_stages": stages,
              "compression_source": (f"{source['gaussians_per_m2']:g} G/m^2, {source['resolution']}"
                                     if source else None), "quick": args.quick}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
