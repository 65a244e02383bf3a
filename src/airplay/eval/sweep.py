"""Execution-interval sweeps: one policy flown on the same tasks at several execution horizons H.

``airplay sweep`` calls :func:`run_sweep`. For every H it runs the in-process evaluation
(:func:`airplay.eval.runner.evaluate_inprocess`, the same tasks: they follow from the scenes,
``--episodes`` and ``--seed`` only) into ``OUT/H<H>/`` (``episodes.jsonl``, ``summary.json``, the
trajectory plots), then writes into ``OUT``:

- ``sweep.json``: the settings, and for every scene and for ``all`` (scenes weighted equally)
  SR and CR per H with their 95 % bootstrap intervals (fractions; each H's ``summary.json``);
- ``sweep.csv``: the same, one row per (H, scene, metric);
- ``sweep.png``: SR and CR against H on a log axis, per scene and pooled with the interval;
- ``pairs_<scene>.png``: matched-start pairs, tasks flown with two horizons (``--pair``;
  default the smallest and largest): both trajectories on the flight-height occupancy slice,
  with the executed yaw-rate commands beside them. Tasks whose outcome differs between the two
  horizons are shown first.

H is what :meth:`airplay.policies.base.Policy.set_execution` takes: for chunked policies the
controls executed per predicted chunk (1..chunk size), for one-control policies (the expert,
``random``, CNN-BC: the ``hold`` adapter) how many control periods each command is held.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.eval.results import _jsonable, _write_atomic, read_episodes
from airplay.eval.runner import EvalConfig, evaluate_inprocess, occupancy_slice
from airplay.policies import guard, make_policy
from airplay.policies.checkpoint import checkpoint_label
from airplay.sim.disturbance import Disturbance

SWEEP_FILE = "sweep.json"
SWEEP_CSV = "sweep.csv"
SWEEP_PNG = "sweep.png"
METRICS = ("sr", "cr")
PAIRS_PER_SCENE = 2


def horizon_dir(out_dir: Path, horizon: int) -> Path:
    """Where the evaluation at execution horizon ``horizon`` is written."""
    return Path(out_dir) / f"H{horizon}"


def check_horizons(horizons) -> list[int]:
    """The horizons as a list of distinct integers >= 1 in the given order; ValueError naming
    ``--horizons`` otherwise."""
    hs = list(horizons or [])
    if not hs:
        raise ValueError("--horizons: give at least one execution horizon, e.g. --horizons 1 2 4")
    bad = [h for h in hs if isinstance(h, bool) or not isinstance(h, int) or h <= 0]
    if bad:
        raise ValueError(f"--horizons: execution horizons must be integers >= 1, got {bad}")
    if len(set(hs)) != len(hs):
        raise ValueError(f"--horizons: {hs} repeats a value")
    return hs


def fly_recorded(env, policy, task, budget_ms: float = 0.0) -> dict:
    """Fly one task (as :func:`airplay.eval.runner.run_episode`) keeping the executed commands:
    {"trajectory": (T, 3) map m, "commands": (T-1, 4) [vx, vy, vz, yaw_rate], "status"}."""
    obs, info = env.reset(options={"task": task})
    commands: list[np.ndarray] = []
    status = info["status"]
    error = guard.reset(policy, task)
    if error is not None and status == EpisodeStatus.RUNNING:
        status = guard.POLICY_ERROR
    while status == EpisodeStatus.RUNNING:
        step = guard.act(policy, obs, budget_ms)
        if step.status is not None:
            status = step.status
            break
        commands.append(np.asarray(step.command, dtype=np.float64).reshape(4))
        obs, _, _, _, info = env.step(step.command)
        status = info["status"]
    return {"trajectory": np.asarray(env.trajectory), "commands": np.asarray(commands).reshape(-1, 4),
            "status": status}


def _series(summaries: dict[int, dict], horizons: list[int]) -> dict:
    """{"all" | scene: {metric: [(mean, lo, hi) per H]}} from the per-H summaries."""
    scenes = sorted({s for summary in summaries.values() for s in summary["per_scene"]})
    out: dict = {}
    for name in ["all", *scenes]:
        out[name] = {}
        for metric in METRICS:
            values = []
            for h in horizons:
                summary = summaries[h]
                entry = summary["overall"] if name == "all" else summary["per_scene"].get(name)
                e = None if entry is None else entry.get(metric)
                if e is None:
                    values.append((None, None, None))
                else:
                    lo, hi = e.get("ci95") or (None, None)
                    values.append((e.get("mean"), lo, hi))
            out[name][metric] = values
    return out


def _episodes_per_scene(summaries: dict[int, dict], horizons: list[int]) -> dict:
    return {h: {s: e.get("episodes") for s, e in summaries[h]["per_scene"].items()} for h in horizons}


def write_sweep(out_dir: Path, cfg: EvalConfig, horizons: list[int], summaries: dict[int, dict],
                extra: dict | None = None) -> dict:
    """``sweep.json``, ``sweep.csv`` and ``sweep.png`` from the per-H summaries; returns the JSON document."""
    from airplay.eval.plots import plot_horizon_sweep

    out_dir = Path(out_dir)
    series = _series(summaries, horizons)
    counts = _episodes_per_scene(summaries, horizons)
    doc = {
        "sweep_format": 1,
        "policy": cfg.policy, "checkpoint": str(cfg.checkpoint) if cfg.checkpoint else "",
        "setting": cfg.setting, "seed": cfg.seed, "episodes_per_scene": cfg.episodes,
        "scenes": [str(s) for s in cfg.scenes], "horizons": horizons,
        **({"wind": Disturbance.parse(cfg.wind).to_text()} if cfg.wind else {}),
        "results_folders": {str(h): horizon_dir(out_dir, h).name for h in horizons},
        "ci": "95% percentile bootstrap, stratified by scene (each H's summary.json)",
        "weighting": "'all': per-scene means, scenes weighted equally",
        "metrics": {
            name: {metric: [{"horizon": h, "mean": m, "ci95": [lo, hi],
                             "episodes": (sum(counts[h].values()) if name == "all" else counts[h].get(name))}
                            for h, (m, lo, hi) in zip(horizons, values)]
                   for metric, values in entry.items()}
            for name, entry in series.items()},
        **(extra or {}),
    }
    _write_atomic(out_dir / SWEEP_FILE, json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["horizon", "scene", "metric", "mean", "ci95_low", "ci95_high", "episodes"])
    for name, entry in doc["metrics"].items():
        for metric, rows in entry.items():
            for r in rows:
                writer.writerow([r["horizon"], name, metric, *("" if v is None else repr(float(v))
                                                               for v in (r["mean"], *r["ci95"])), r["episodes"]])
    _write_atomic(out_dir / SWEEP_CSV, buf.getvalue())
    what = f"{cfg.policy}" + (f" ({checkpoint_label(cfg.checkpoint)})" if cfg.checkpoint else "")
    plot_horizon_sweep(out_dir / SWEEP_PNG, horizons, series,
                       title=f"{what}, {cfg.setting}: SR and CR vs execution horizon "
                             f"({len(cfg.scenes)} scenes x {cfg.episodes} tasks, seed {cfg.seed})")
    return doc


def format_sweep(doc: dict) -> str:
    """A text table: one row per H, SR and CR (pooled) with their intervals, in %."""
    def cell(r):
        m, (lo, hi) = r["mean"], r["ci95"]
        if m is None:
            return "-"
        s = f"{100 * m:.1f}"
        return s + (f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else "")

    rows = [("H", "SR % (all)", "CR % (all)", "episodes")]
    pooled = doc["metrics"]["all"]
    for sr, cr in zip(pooled["sr"], pooled["cr"]):
        rows.append((str(sr["horizon"]), cell(sr), cell(cr), str(sr["episodes"])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def _pick_pairs(out_dir: Path, pair: tuple[int, int], scene: str, count: int) -> list[str]:
    """Task ids of ``scene`` to draw as pairs: those whose status differs between the two
    horizons first, then the rest, in evaluation order; at most ``count``."""
    a = {e.task_id: e.status for e in read_episodes(horizon_dir(out_dir, pair[0])) if e.scene == scene}
    b = {e.task_id: e.status for e in read_episodes(horizon_dir(out_dir, pair[1])) if e.scene == scene}
    ids = [t for t in a if t in b]
    return ([t for t in ids if a[t] != b[t]] + [t for t in ids if a[t] == b[t]])[:count]


def plot_pairs(out_dir: Path, cfg: EvalConfig, pair: tuple[int, int], count: int = PAIRS_PER_SCENE) -> list[Path]:
    """Fly ``count`` tasks per scene again with both horizons of ``pair``, recording the commands,
    and draw ``pairs_<scene>.png`` (:func:`airplay.eval.plots.plot_horizon_pairs`)."""
    from airplay.eval.plots import plot_horizon_pairs
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    written = []
    disturbance = Disturbance.parse(cfg.wind)
    for scene_dir in cfg.scenes:
        world = World.load(scene_dir)
        tasks = {t.task_id: t for t in sample_tasks(world.scene, world.grid, cfg.episodes, cfg.seed, cfg.setting,
                                                    world.protocol)}
        chosen = _pick_pairs(out_dir, pair, world.name, count)
        if not chosen:
            continue
        env = AirPlayEnv(world, cfg.setting, render_backend=cfg.render_backend, render_images=cfg.render_images,
                         disturbance=disturbance, disturbance_seed=cfg.seed)
        policies = [make_policy(cfg.policy, world, checkpoint=cfg.checkpoint or None, execution_horizon=h)
                    for h in pair]
        rows = []
        for task_id in chosen:
            task = tasks[task_id]
            runs = []
            for policy in policies:
                flown = fly_recorded(env, policy, task, cfg.policy_budget_ms)
                runs.append({"trajectory": flown["trajectory"], "yaw_rate": flown["commands"][:, 3],
                             "status": flown["status"]})
            rows.append({"task_id": task_id, "start": task.start_position, "goal": task.goal_position, "runs": runs})
        occupied, corner, res, z = occupancy_slice(world)
        path = out_dir / f"pairs_{world.name}.png"
        plot_horizon_pairs(path, occupied, corner, res, world.scene.spec.navigable.polygon, rows,
                           (f"H={pair[0]}", f"H={pair[1]}"), world.vehicle.control_dt_s,
                           title=f"{world.name}: {cfg.policy} at H={pair[0]} and H={pair[1]}, same starts "
                                 f"(obstacles at z = {z:.1f} m)")
        written.append(path)
    return written


def run_sweep(cfg: EvalConfig, horizons, out_dir: str | Path, pair: tuple[int, int] | None = None,
              progress: bool = True) -> dict:
    """Evaluate ``cfg`` at every horizon, write the sweep files (module docstring), print the
    table; return the ``sweep.json`` document. ValueError names a bad argument."""
    horizons = check_horizons(horizons)
    if not cfg.scenes:
        raise ValueError("--scenes: no scene folders given")
    if pair is None:
        pair = (min(horizons), max(horizons))
    pair = (int(pair[0]), int(pair[1]))
    missing = [h for h in pair if h not in horizons]
    if missing:
        raise ValueError(f"--pair: {missing} not among --horizons {horizons}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries: dict[int, dict] = {}
    t0 = time.perf_counter()
    for i, h in enumerate(horizons):
        print(f"[sweep {i + 1}/{len(horizons)}] H = {h}: {cfg.policy}, {len(cfg.scenes)} scenes x {cfg.episodes} "
              f"tasks -> {horizon_dir(out_dir, h)} ({time.perf_counter() - t0:.0f} s so far)", flush=True)
        summaries[h] = evaluate_inprocess(replace(cfg, execution_horizon=h), horizon_dir(out_dir, h),
                                          progress=progress)
    pairs_written: list[Path] = []
    if pair[0] != pair[1]:
        print(f"[sweep] matched-start pairs H = {pair[0]} vs H = {pair[1]}", flush=True)
        pairs_written = plot_pairs(out_dir, cfg, pair)
    doc = write_sweep(out_dir, cfg, horizons, summaries,
                      extra={"pair": list(pair), "pair_plots": [p.name for p in pairs_written],
                             "wall_time_s": round(time.perf_counter() - t0, 3)})
    print(format_sweep(doc))
    print(f"\nsweep over H = {horizons} in {time.perf_counter() - t0:.1f} s: {out_dir / SWEEP_FILE}, "
          f"{out_dir / SWEEP_CSV}, {out_dir / SWEEP_PNG}" + "".join(f", {p}" for p in pairs_written))
    return doc
