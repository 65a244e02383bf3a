"""Closed-loop evaluation in-process: scenes x tasks x a policy -> results, table, plots.

``airplay eval --runtime inprocess`` calls :func:`evaluate_inprocess`. Every runtime and
policy writes the same files (docs/evaluation.md): ``episodes.jsonl``,
``summary.json`` and ``<scene>_trajectories.png`` in the output folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import airplay
from airplay.eval.aggregate import aggregate
from airplay.eval.metrics import EpisodeResult, episode_result
from airplay.eval.plots import plot_trajectories
from airplay.eval.results import format_table, write_results
from airplay.policies import guard, make_policy
from airplay.sim.disturbance import Disturbance
from airplay.world.env import AirPlayEnv
from airplay.world import World
from airplay.tasks.sampler import sample_tasks


@dataclass
class EvalConfig:
    """What to evaluate; ``episodes`` per scene, tasks sampled from ``seed``."""

    scenes: list[Path]
    policy: str = "expert"
    setting: str = "pointgoal"
    episodes: int = 10
    seed: int = 0
    render_backend: str = "auto"
    render_images: bool = True
    bootstrap: int = 1000
    checkpoint: str = ""
    """Checkpoint folder of a learned policy (act, dp, cnn_bc); "" for the expert."""
    execution_horizon: int = 0
    """Controls executed per predicted chunk (H); 0 keeps the policy's own."""
    policy_budget_ms: float = 0.0
    """Per-step compute budget of the policy (ms of its CPU time); 0: none
    (:mod:`airplay.policies.guard`)."""
    wind: str = ""
    """Wind, gusts or a velocity impulse acting on the vehicle, as text
    (:mod:`airplay.sim.disturbance`); "": none."""
    command: str = ""
    """The command line that started the run (``summary.json["meta"]["command"]``); "" records
    ``$AIRPLAY_COMMAND`` or this process's own command line."""


def task_result(world: World, task, cfg: EvalConfig, trajectory: np.ndarray, status: str,
                error: str | None = None) -> EpisodeResult:
    """The results line of one flown task (both runtimes write it this way)."""
    return episode_result(
        scene=world.name, task_id=task.task_id, setting=cfg.setting, start=task.start_position,
        goal=task.goal_position, astar_length_m=task.astar_length_m, trajectory=trajectory,
        status=status, seed=cfg.seed, policy=cfg.policy, dt_s=world.vehicle.control_dt_s, error=error)


def results_meta(cfg: EvalConfig, world: World, runtime: str, control_steps: int, wall_s: float,
                 flying_s: float) -> dict:
    """``summary.json["meta"]``: what was run, how fast, and under which protocol."""
    return {
        "runtime": runtime,
        "policy": cfg.policy,
        "setting": cfg.setting,
        "seed": cfg.seed,
        "episodes_per_scene": cfg.episodes,
        "scenes": [str(s) for s in cfg.scenes],
        "render_images": cfg.render_images,
        "control_steps": control_steps,
        "wall_time_s": round(wall_s, 3),
        "flying_time_s": round(flying_s, 3),
        "control_steps_per_s": round(control_steps / max(flying_s, 1e-9), 1),
        "protocol": {
            "success_radius_m": world.protocol.success_radius_m,
            "time_limit_base_s": world.protocol.time_limit_base_s,
            "time_limit_per_astar_m_s": world.protocol.time_limit_per_astar_m_s,
            **vars(world.protocol.task),
        },
        "airplay_version": airplay.__version__,
        "scene_info": scene_info(cfg.scenes),
        **provenance(cfg.command),
        **({"checkpoint": str(cfg.checkpoint)} if cfg.checkpoint else {}),
        **({"execution_horizon": cfg.execution_horizon} if cfg.execution_horizon else {}),
        **({"policy_budget_ms": cfg.policy_budget_ms} if cfg.policy_budget_ms else {}),
        **({"wind": Disturbance.parse(cfg.wind).to_text()} if cfg.wind else {}),
    }


def scene_info(scenes) -> dict:
    """``{scene name: {"category", "split"}}`` from each folder's ``scene.yaml`` (what the report groups by)."""
    from airplay.scene.spec import parse_scene_yaml

    info = {}
    for folder in scenes:
        spec = parse_scene_yaml(folder)
        info[spec.name] = {"category": spec.category, "split": spec.split}
    return info


def provenance(command: str = "") -> dict:
    """``commit`` (of the airplay source, ``+dirty`` with uncommitted changes; None outside a git
    checkout), ``command`` (``command``, else ``$AIRPLAY_COMMAND``, else this process's command
    line) and ``machine`` (host, OS, Python, CPU): what ``airplay report`` shows as the run's metadata."""
    import os
    import platform
    import shlex
    import subprocess
    import sys

    source = Path(airplay.__file__).resolve().parents[2]
    commit = None
    try:
        git = ["git", "-C", str(source)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                   text=True, timeout=10)
            commit = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "commit": commit,
        "command": command or os.environ.get("AIRPLAY_COMMAND") or shlex.join(sys.argv),
        "machine": {"host": platform.node(), "os": platform.platform(), "python": platform.python_version(),
                    "cpu": cpu, "cpus": os.cpu_count()},
    }


@dataclass(frozen=True)
class Flown:
    """One flown task: trajectory (T, 3) map m (start included), status, steps, and the
    ``error`` of a ``policy_error`` / ``over_budget`` episode."""

    trajectory: np.ndarray
    status: str
    steps: int
    error: str | None = None


def run_episode(env: AirPlayEnv, policy, task, budget_ms: float = 0.0) -> Flown:
    """Fly one task to its end. The policy is called through :mod:`airplay.policies.guard`: where
    it raises (or a step exceeds ``budget_ms`` of CPU time) the episode ends at that observation."""
    obs, info = env.reset(options={"task": task})
    error = guard.reset(policy, task)
    if error is not None and info["status"] == "running":
        return Flown(np.asarray(env.trajectory), guard.POLICY_ERROR, info["steps"], error)
    while info["status"] == "running":
        step = guard.act(policy, obs, budget_ms)
        if step.status is not None:
            return Flown(np.asarray(env.trajectory), step.status, info["steps"], step.error)
        obs, _, _, _, info = env.step(step.command)
    return Flown(np.asarray(env.trajectory), info["status"], info["steps"])


def evaluate_inprocess(cfg: EvalConfig, out_dir: Path, progress: bool = True) -> dict:
    """Run the evaluation, write results into ``out_dir``, print the table; return the summary."""
    from tqdm import tqdm

    out_dir = Path(out_dir)
    disturbance = Disturbance.parse(cfg.wind)
    results: list[EpisodeResult] = []
    t_start = time.perf_counter()
    total_steps = 0
    flying_s = 0.0  # time inside episodes (reset, policy, step, rendering), without scene set-up
    bar = tqdm(total=cfg.episodes * len(cfg.scenes), unit="ep", disable=not progress, dynamic_ncols=True)
    for scene_dir in cfg.scenes:
        bar.set_description(f"{Path(scene_dir).name}: preparing")
        world = World.load(scene_dir)
        tasks = sample_tasks(world.scene, world.grid, cfg.episodes, cfg.seed, cfg.setting, world.protocol)
        env = AirPlayEnv(world, cfg.setting, tasks=tasks, render_backend=cfg.render_backend,
                         render_images=cfg.render_images, disturbance=disturbance, disturbance_seed=cfg.seed)
        policy = make_policy(cfg.policy, world, checkpoint=cfg.checkpoint or None,
                             execution_horizon=cfg.execution_horizon or None)
        bar.set_description(world.name)
        trajectories, statuses = [], []
        for task in tasks:
            t_episode = time.perf_counter()
            flown = run_episode(env, policy, task, cfg.policy_budget_ms)
            flying_s += time.perf_counter() - t_episode
            total_steps += flown.steps
            results.append(task_result(world, task, cfg, flown.trajectory, flown.status, flown.error))
            trajectories.append(flown.trajectory)
            statuses.append(flown.status)
            bar.update(1)
            bar.set_postfix(steps_per_s=f"{total_steps / max(flying_s, 1e-9):.0f}", last=flown.status)
        plot_scene(out_dir / f"{world.name}_trajectories.png", world, tasks, trajectories, statuses, cfg)
    bar.close()
    elapsed = time.perf_counter() - t_start
    summary = aggregate(results, success_radius_m=world.protocol.success_radius_m, bootstrap=cfg.bootstrap,
                        seed=cfg.seed)
    meta = results_meta(cfg, world, "inprocess", total_steps, elapsed, flying_s)
    write_results(out_dir, results, summary, meta)
    print(format_table(summary))
    images = "with" if cfg.render_images else "without"
    print(f"\n{total_steps} control steps ({total_steps * world.vehicle.control_dt_s:.0f} s simulated) in "
          f"{flying_s:.1f} s of flying = {total_steps / max(flying_s, 1e-9):.0f} steps/s {images} RGB + depth "
          f"every step (real time = {world.vehicle.control_rate_hz:.0f}); {elapsed:.1f} s in all with scene "
          f"set-up. Results in {out_dir}/")
    return summary


def plot_scene(path: Path, world: World, tasks, trajectories, statuses, cfg: EvalConfig) -> None:
    """Trajectories over the obstacles at mid-band height (SDF <= 0)."""
    occupied, corner, resolution_m, z_mid = occupancy_slice(world)
    plot_trajectories(path, occupied, corner, resolution_m, trajectories,
                      [t.start_position for t in tasks], [t.goal_position for t in tasks], statuses,
                      title=f"{world.name}: {cfg.policy}, {cfg.setting}, {len(tasks)} episodes (obstacles at "
                            f"z = {z_mid:.1f} m)",
                      success_radius_m=world.protocol.success_radius_m)


def occupancy_slice(world: World) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The obstacles at mid-band flight height: (occupied (H, W) bool, rows = y and columns = x
    (SDF <= 0), map (x, y) of cell [0, 0]'s outer corner (m), cell size (m), the slice's z (m));
    the grid convention of :mod:`airplay.eval.plots`."""
    nav = world.scene.spec.navigable
    sdf = world.sdf
    z_mid = 0.5 * (nav.z_min + nav.z_max)
    k = int(np.clip(np.rint((z_mid - sdf.origin_m[2]) / sdf.resolution_m), 0, sdf.shape[2] - 1))
    occupied = (sdf.values[:, :, k] <= 0.0).T  # rows = y, columns = x
    corner = sdf.origin_m[:2] - 0.5 * sdf.resolution_m
    return occupied, corner, float(sdf.resolution_m), float(z_mid)
