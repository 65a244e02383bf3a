"""Local disturbance tests (AirPlayground Table 11): how a policy recovers from a velocity push.

``airplay disturb`` calls :func:`run_disturb`. Protocol:

1. **Clean flights.** The policy flies the evaluation's tasks (scenes x ``episodes``, ``seed``),
   undisturbed.
2. **Anchors** are states along these clean trajectories (every control step while the episode
   still runs, not the start), grouped by their clearance c, the scene's signed distance from the
   vehicle's centre to the nearest obstacle surface (m; the sim collides at c < vehicle radius,
   0.25 m): **Low** c < 0.75 m, **Medium** 0.75 <= c < 1.5 m, **High** c >= 1.5 m
   (:data:`GROUPS`). Per task and group up to ``anchors_per_group`` anchors are drawn (seeded,
   uniformly among that task's candidates). Anchors whose nearest-obstacle direction is (almost)
   vertical (horizontal part of the SDF gradient < 0.2 of its norm) are not used.
3. **Conditions**, paired on the same anchor: the task is flown again from its start with the
   same policy, and at the anchor's control step a velocity of ``speed`` (0.5 m/s) is added
   (:class:`airplay.sim.disturbance.Disturbance`'s impulse), horizontally: **Clean** (none),
   **Toward** the nearest obstacle (minus the horizontal SDF gradient), **Tangential** (that
   direction turned 90 degrees counter-clockwise), **Away** (along the gradient). The replayed
   flight reaches the anchor in the same state as the clean one (the runtimes are deterministic;
   ``replay_error_m`` records any difference).
4. **Outcomes in the observation region**: from the anchor step until the vehicle first leaves
   the ball of ``region`` (1 m) around the anchor, the episode ends, or ``window`` (5 s) passes:
   **CR_ref**, 1 when the episode ends in a collision inside that window; **d_min_ref**, the
   smallest clearance c over the window's positions (m).
5. **Aggregation** per group and condition: mean over the scene's anchors, then scenes weighted
   equally (scenes without anchors in the group left out); 95 % percentile intervals from a task
   bootstrap (tasks resampled with replacement within each scene, with all their anchors), and the
   paired differences to Clean on the same resamples.

Files in ``OUT``: ``disturb.json`` (settings, thresholds, the table), ``disturb.csv`` (the table,
one row per group x condition) and ``anchors.jsonl`` (one row per anchor x condition).
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.eval.results import _jsonable, _write_atomic
from airplay.policies import guard, make_policy
from airplay.sim.disturbance import Disturbance

CONDITIONS = ("clean", "toward", "tangential", "away")
GROUPS: tuple[tuple[str, float, float], ...] = (("low", 0.0, 0.75), ("medium", 0.75, 1.5), ("high", 1.5, math.inf))
"""(name, lowest clearance, highest clearance (exclusive)) in m; clearances below 0 cannot occur
on a running flight (it would have collided)."""
MIN_HORIZONTAL_FRACTION = 0.2


@dataclass
class DisturbConfig:
    """What to test; tasks as ``airplay eval`` samples them (``episodes`` per scene, ``seed``)."""

    scenes: list[Path]
    policy: str = "expert"
    checkpoint: str = ""
    execution_horizon: int = 0
    setting: str = "pointgoal"
    episodes: int = 10
    seed: int = 0
    anchors_per_group: int = 1
    speed_m_s: float = 0.5
    region_m: float = 1.0
    window_s: float = 5.0
    render_backend: str = "auto"
    render_images: bool = True
    bootstrap: int = 1000
    policy_budget_ms: float = 0.0

    def check(self) -> None:
        """ValueError naming the option that is out of range."""
        if not self.scenes:
            raise ValueError("--scenes: no scene folders given")
        for name, value, ok in (("--episodes", self.episodes, self.episodes >= 1),
                                ("--anchors-per-group", self.anchors_per_group, self.anchors_per_group >= 1),
                                ("--speed", self.speed_m_s, math.isfinite(self.speed_m_s) and self.speed_m_s > 0),
                                ("--region", self.region_m, math.isfinite(self.region_m) and self.region_m > 0),
                                ("--window", self.window_s, math.isfinite(self.window_s) and self.window_s > 0),
                                ("--bootstrap", self.bootstrap, self.bootstrap >= 0)):
            if not ok:
                raise ValueError(f"{name} must be > 0 (--bootstrap >= 0), got {value}")


@dataclass(frozen=True)
class Anchor:
    """A state on a clean trajectory: the task, the control step (trajectory index), the map
    position (m), its clearance (m) and group, and the unit horizontal direction to the nearest
    obstacle (map x, y)."""

    scene: str
    task_id: str
    step: int
    position: np.ndarray
    clearance_m: float
    group: str
    toward_xy: np.ndarray


@dataclass
class Outcome:
    """One condition at one anchor (module docstring, step 4)."""

    anchor: Anchor
    condition: str
    collision: bool
    d_min_m: float
    status: str
    window_steps: int
    replay_error_m: float
    extra: dict = field(default_factory=dict)

    def row(self) -> dict:
        a = self.anchor
        return {"scene": a.scene, "task_id": a.task_id, "step": a.step, "group": a.group,
                "clearance_m": a.clearance_m, "position": a.position, "toward_xy": a.toward_xy,
                "condition": self.condition, "collision": self.collision, "d_min_m": self.d_min_m,
                "status": self.status, "window_steps": self.window_steps, "replay_error_m": self.replay_error_m}


def group_of(clearance_m: float) -> str | None:
    for name, lo, hi in GROUPS:
        if lo <= clearance_m < hi:
            return name
    return None


def sdf_gradient(sdf, points: np.ndarray) -> np.ndarray:
    """(N, 3) central-difference gradient of the SDF at ``points`` (N, 3) map m, step one cell."""
    h = float(sdf.resolution_m)
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    grad = np.empty_like(p)
    for axis in range(3):
        e = np.zeros(3)
        e[axis] = h
        grad[:, axis] = (sdf.query(p + e) - sdf.query(p - e)) / (2 * h)
    return grad


def direction(toward_xy: np.ndarray, condition: str) -> np.ndarray | None:
    """The unit map-frame (3,) direction of ``condition`` at an anchor (None for clean)."""
    t = np.asarray(toward_xy, dtype=np.float64)
    if condition == "clean":
        return None
    if condition == "toward":
        d = t
    elif condition == "away":
        d = -t
    elif condition == "tangential":
        d = np.array([-t[1], t[0]])
    else:
        raise ValueError(f"unknown condition {condition!r}; conditions: {', '.join(CONDITIONS)}")
    return np.array([d[0], d[1], 0.0])


def make_anchors(world, task, trajectory: np.ndarray, per_group: int, rng: np.random.Generator) -> list[Anchor]:
    """Anchors of one clean trajectory (module docstring, step 2)."""
    traj = np.asarray(trajectory, dtype=np.float64).reshape(-1, 3)
    if len(traj) < 3:
        return []
    steps = np.arange(1, len(traj) - 1)  # not the start; the last position may be the end (a collision)
    pts = traj[steps]
    clearance = world.sdf.query(pts).astype(np.float64)
    grad = sdf_gradient(world.sdf, pts)
    horizontal = np.linalg.norm(grad[:, :2], axis=1)
    ok = horizontal >= MIN_HORIZONTAL_FRACTION * np.maximum(np.linalg.norm(grad, axis=1), 1e-12)
    anchors = []
    for name, lo, hi in GROUPS:
        candidates = np.flatnonzero(ok & (clearance >= lo) & (clearance < hi))
        if len(candidates) == 0:
            continue
        pick = np.sort(rng.choice(candidates, size=min(per_group, len(candidates)), replace=False))
        for j in pick:
            toward = -grad[j, :2] / horizontal[j]
            anchors.append(Anchor(world.name, task.task_id, int(steps[j]), traj[steps[j]].copy(),
                                  float(clearance[j]), name, toward))
    return anchors


def fly_condition(env, policy, task, anchor: Anchor, condition: str, speed_m_s: float = 0.5,
                  region_m: float = 1.0, window_s: float = 5.0, budget_ms: float = 0.0) -> Outcome:
    """Fly ``task`` with ``policy`` in ``env``, pushed at ``anchor`` under ``condition``; the
    outcome in the observation region (module docstring, steps 3 and 4)."""
    d = direction(anchor.toward_xy, condition)
    disturbance = None if d is None else Disturbance(impulse=tuple(speed_m_s * d), impulse_step=anchor.step)
    obs, info = env.reset(options={"task": task, "disturbance": disturbance})
    status = info["status"]
    if guard.reset(policy, task) is not None and status == EpisodeStatus.RUNNING:
        status = guard.POLICY_ERROR
    sdf = env.world.sdf
    window_steps = int(round(window_s / env.world.vehicle.control_dt_s))
    replay_error = float("nan")
    window: list[np.ndarray] = []
    end_in_window = False
    while True:
        k = env.steps
        if k == anchor.step:
            replay_error = float(np.linalg.norm(env.position - anchor.position))
        if k >= anchor.step:
            p = env.position.copy()
            if np.linalg.norm(p - anchor.position) > region_m or k - anchor.step > window_steps:
                break
            window.append(p)
            if status != EpisodeStatus.RUNNING:
                end_in_window = True
                break
        elif status != EpisodeStatus.RUNNING:
            break  # ended before the anchor (only where the replay differs from the clean flight)
        step = guard.act(policy, obs, budget_ms)
        if step.status is not None:
            status = step.status
            if k < anchor.step:
                break
            end_in_window = True
            break
        obs, _, _, _, info = env.step(step.command)
        status = info["status"]
    if not window:
        return Outcome(anchor, condition, False, float("nan"), status, 0, replay_error)
    clearance = sdf.query(np.asarray(window))
    collided = end_in_window and status == EpisodeStatus.COLLISION
    return Outcome(anchor, condition, bool(collided), float(clearance.min()),
                   status, len(window) - 1, replay_error)


def summarize(outcomes: list[Outcome], bootstrap: int = 1000, seed: int = 0) -> dict:
    """The table (module docstring, step 5): {group: {condition: {"cr", "d_min", "delta_cr",
    "delta_d_min": {"mean", "ci95"}, "anchors": n, "scenes": k}}}, groups plus ``all``."""
    groups = [g[0] for g in GROUPS] + ["all"]
    scenes = sorted({o.anchor.scene for o in outcomes})
    # per scene: tasks x groups x conditions sums of (collision, d_min) and anchor counts
    per_scene = {}
    for s in scenes:
        rows = [o for o in outcomes if o.anchor.scene == s and math.isfinite(o.d_min_m)]
        tasks = sorted({o.anchor.task_id for o in rows})
        ti = {t: i for i, t in enumerate(tasks)}
        sums = np.zeros((len(tasks), len(groups), len(CONDITIONS), 4))  # cr, d_min, delta_cr, delta_d_min
        counts = np.zeros((len(tasks), len(groups), len(CONDITIONS)))
        by_anchor: dict = {}
        for o in rows:
            by_anchor.setdefault((o.anchor.task_id, o.anchor.step), {})[o.condition] = o
        for (task_id, _), conds in by_anchor.items():
            if "clean" not in conds:
                continue
            clean = conds["clean"]
            for c, cond in enumerate(CONDITIONS):
                o = conds.get(cond)
                if o is None:
                    continue
                v = [float(o.collision), o.d_min_m, float(o.collision) - float(clean.collision),
                     o.d_min_m - clean.d_min_m]
                for g in (groups.index(o.anchor.group), groups.index("all")):
                    sums[ti[task_id], g, c] += v
                    counts[ti[task_id], g, c] += 1
        if tasks:
            per_scene[s] = (sums, counts)
    scenes = sorted(per_scene)

    def scene_means(idx_by_scene):
        means = []
        for s in scenes:
            sums, counts = per_scene[s]
            idx = idx_by_scene[s]
            tot, n = sums[idx].sum(axis=-4), counts[idx].sum(axis=-3)
            with np.errstate(invalid="ignore", divide="ignore"):
                means.append(np.where(n[..., None] > 0, tot / np.maximum(n, 1)[..., None], np.nan))
        return np.stack(means)  # (scenes, [B,] G, C, 4)

    def nanmean(x, axis):
        valid = ~np.isnan(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(valid.any(axis=axis), np.where(valid, x, 0).sum(axis=axis) / np.maximum(
                valid.sum(axis=axis), 1), np.nan)

    point = nanmean(scene_means({s: np.arange(len(per_scene[s][0]))[None, :] for s in scenes})[:, 0], axis=0)
    boot = None
    if bootstrap > 0 and scenes:
        rng = np.random.default_rng(seed)
        idx = {s: rng.integers(0, len(per_scene[s][0]), size=(bootstrap, len(per_scene[s][0]))) for s in scenes}
        boot = nanmean(scene_means(idx), axis=0)  # (B, G, C, 4)
    metric_names = ("cr", "d_min", "delta_cr", "delta_d_min")
    table: dict = {}
    for g, group in enumerate(groups):
        table[group] = {}
        for c, cond in enumerate(CONDITIONS):
            n_anchors = int(sum(per_scene[s][1][:, g, c].sum() for s in scenes))
            n_scenes = int(sum(per_scene[s][1][:, g, c].sum() > 0 for s in scenes))
            entry: dict = {"anchors": n_anchors, "scenes": n_scenes}
            for m, name in enumerate(metric_names):
                ci = [float("nan"), float("nan")]
                if boot is not None:
                    samples = boot[:, g, c, m]
                    samples = samples[~np.isnan(samples)]
                    if samples.size:
                        ci = [float(v) for v in np.percentile(samples, [2.5, 97.5])]
                entry[name] = {"mean": float(point[g, c, m]), "ci95": ci}
            table[group][cond] = entry
    return table


def format_table(table: dict) -> str:
    """Fixed-width text: one row per group x condition, CR_ref % and d_min_ref m with intervals."""
    def cell(e, scale, digits):
        m, (lo, hi) = e["mean"], e["ci95"]
        if m is None or not math.isfinite(m):
            return "-"
        s = f"{m * scale:.{digits}f}"
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            s += f" [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"
        return s

    rows = [("group", "condition", "CR_ref %", "d_min_ref m", "dCR vs clean %", "anchors", "scenes")]
    for group, conds in table.items():
        for cond, e in conds.items():
            rows.append((group, cond, cell(e["cr"], 100, 1), cell(e["d_min"], 1, 3),
                         "-" if cond == "clean" else cell(e["delta_cr"], 100, 1), str(e["anchors"]),
                         str(e["scenes"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1])]
                       + [c.rjust(w) for c, w in zip(r[2:], widths[2:])]) for r in rows]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def run_disturb(cfg: DisturbConfig, out_dir: str | Path, progress: bool = True) -> dict:
    """The protocol of the module docstring over ``cfg``; writes the files, prints the table and
    returns the ``disturb.json`` document."""
    from tqdm import tqdm

    from airplay.eval.sweep import fly_recorded
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    cfg.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    outcomes: list[Outcome] = []
    clean_statuses: dict[str, dict[str, int]] = {}
    for n_scene, scene_dir in enumerate(cfg.scenes, 1):
        world = World.load(scene_dir)
        tasks = sample_tasks(world.scene, world.grid, cfg.episodes, cfg.seed, cfg.setting, world.protocol)
        env = AirPlayEnv(world, cfg.setting, tasks=tasks, render_backend=cfg.render_backend,
                         render_images=cfg.render_images)
        policy = make_policy(cfg.policy, world, checkpoint=cfg.checkpoint or None,
                             execution_horizon=cfg.execution_horizon or None)
        print(f"[disturb {n_scene}/{len(cfg.scenes)}] {world.name}: {len(tasks)} clean flights "
              f"({time.perf_counter() - t0:.0f} s so far)", flush=True)
        anchors: list[tuple[object, Anchor]] = []
        statuses = clean_statuses.setdefault(world.name, {})
        for task in tasks:
            flown = fly_recorded(env, policy, task, cfg.policy_budget_ms)
            statuses[flown["status"]] = statuses.get(flown["status"], 0) + 1
            rng = np.random.default_rng([cfg.seed, zlib.crc32(task.task_id.encode()), 0x414E43])
            anchors += [(task, a) for a in make_anchors(world, task, flown["trajectory"], cfg.anchors_per_group, rng)]
        print(f"[disturb {n_scene}/{len(cfg.scenes)}] {world.name}: {len(anchors)} anchors "
              f"({', '.join(f'{g[0]} {sum(a.group == g[0] for _, a in anchors)}' for g in GROUPS)}) "
              f"x {len(CONDITIONS)} conditions", flush=True)
        bar = tqdm(total=len(anchors) * len(CONDITIONS), unit="run", disable=not progress, dynamic_ncols=True,
                   desc=world.name)
        for task, anchor in anchors:
            for cond in CONDITIONS:
                outcomes.append(fly_condition(env, policy, task, anchor, cond, cfg.speed_m_s, cfg.region_m,
                                              cfg.window_s, cfg.policy_budget_ms))
                bar.update(1)
        bar.close()
    table = summarize(outcomes, cfg.bootstrap, cfg.seed)
    replay = [o.replay_error_m for o in outcomes if math.isfinite(o.replay_error_m)]
    doc = {
        "disturb_format": 1,
        "policy": cfg.policy, "checkpoint": str(cfg.checkpoint) if cfg.checkpoint else "",
        "execution_horizon": cfg.execution_horizon, "setting": cfg.setting, "seed": cfg.seed,
        "episodes_per_scene": cfg.episodes, "scenes": [str(s) for s in cfg.scenes],
        "anchors_per_group": cfg.anchors_per_group, "speed_m_s": cfg.speed_m_s,
        "observation_region_m": cfg.region_m, "window_s": cfg.window_s,
        "clearance_groups_m": {name: [lo, None if math.isinf(hi) else hi] for name, lo, hi in GROUPS},
        "clearance": "signed distance from the vehicle's centre to the nearest obstacle surface, m",
        "conditions": list(CONDITIONS),
        "ci": "95% percentile task bootstrap (tasks resampled within each scene), scenes weighted equally",
        "bootstrap": cfg.bootstrap,
        "clean_statuses": clean_statuses,
        "max_replay_error_m": max(replay) if replay else None,
        "table": table,
        "wall_time_s": round(time.perf_counter() - t0, 3),
    }
    _write_atomic(out_dir / "disturb.json", json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    names = ("cr", "d_min", "delta_cr", "delta_d_min")
    writer.writerow(["group", "condition", "anchors", "scenes"]
                    + [f"{n}_{part}" for n in names for part in ("mean", "ci95_low", "ci95_high")])
    for group, conds in table.items():
        for cond, e in conds.items():
            values = [v for n in names for v in (e[n]["mean"], *e[n]["ci95"])]
            writer.writerow([group, cond, e["anchors"], e["scenes"]]
                            + ["" if not math.isfinite(v) else repr(v) for v in values])
    _write_atomic(out_dir / "disturb.csv", buf.getvalue())
    _write_atomic(out_dir / "anchors.jsonl",
                  "".join(json.dumps(_jsonable(o.row()), allow_nan=False) + "\n" for o in outcomes))
    print(format_table(table))
    print(f"\n{len(outcomes)} disturbed and clean runs in {time.perf_counter() - t0:.1f} s "
          f"({cfg.speed_m_s:g} m/s push, {cfg.region_m:g} m observation region). Results in "
          f"{out_dir}/disturb.json, disturb.csv, anchors.jsonl")
    return doc
