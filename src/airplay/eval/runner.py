"""Closed-loop evaluation in-process: scenes x tasks x a policy -> results, table, plots.

``airplay eval --runtime inprocess`` calls :func:`evaluate_inprocess`. Every runtime and
policy writes the same files (docs/evaluation.md): ``episodes.jsonl``,
``summary.json`` and ``<scene>_trajectories.png`` in the output folder.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import numpy as np

import airplay
from airplay.eval.aggregate import aggregate
from airplay.eval.batched import DEFAULT_BATCH, fly_batch_job, fly_batched
from airplay.eval.episode import EvalConfig, Flown, run_episode, task_result  # noqa: F401 - the runner's API
from airplay.eval.episode_jobs import EpisodeJob, clear_cache, fly_job
from airplay.eval.metrics import EpisodeResult
from airplay.eval.plots import plot_trajectories
from airplay.eval.results import format_table, write_results
from airplay.sim.disturbance import Disturbance
from airplay.world import World
from airplay.tasks.sampler import sample_tasks



def vehicle_params(path: str):
    """The VehicleParams of vehicle file ``path`` ("" : config/vehicle.yaml)."""
    from airplay.sim.dynamics import load_vehicle_params

    return load_vehicle_params(path or None)


RUN_FIELDS = ("wall_time_s", "flying_time_s", "control_steps_per_s", "execution", "command", "commit", "machine")
"""``summary.json["meta"]`` fields that describe how a run went (clock times, rate, engine,
workers, episodes resumed, the command line, source commit and machine); the rest follows from
the configuration and the episodes."""


def protocol_meta(protocol) -> dict:
    """The protocol settings ``summary.json["meta"]["protocol"]`` records."""
    return {
        "success_radius_m": protocol.success_radius_m,
        "time_limit_base_s": protocol.time_limit_base_s,
        "time_limit_per_astar_m_s": protocol.time_limit_per_astar_m_s,
        **vars(protocol.task),
    }


def results_meta(cfg: EvalConfig, world: World, runtime: str, control_steps: int, wall_s: float,
                 flying_s: float, steps_per_s: float | None = None) -> dict:
    """``summary.json["meta"]``: what was run, how fast, and under which protocol.
    ``steps_per_s``: the rate (default ``control_steps / flying_s``)."""
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
        "control_steps_per_s": round(control_steps / max(flying_s, 1e-9) if steps_per_s is None else steps_per_s, 1),
        "protocol": protocol_meta(world.protocol),
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


def evaluate_inprocess(cfg: EvalConfig, out_dir: Path, progress: bool = True, workers: int = 1,
                       ray: str | None = None, resume: bool = False, observer=None, batch: int | None = None) -> dict:
    """Run the evaluation, write results into ``out_dir``, print the table; return the summary.

    ``workers`` > 1: the episodes are flown by a spawn process pool of that many processes
    (:mod:`airplay.eval.episode_jobs`); ``ray``: as Ray tasks at that address ("local": a
    private instance); the files are the same as from one process (``summary.json`` apart
    from :data:`RUN_FIELDS`). ``resume``: keep the finished episodes of an earlier run in
    ``out_dir`` and fly the rest (:mod:`airplay.eval.journal`). ``observer``: watches every
    episode (:func:`run_episode`; one process only). ``batch`` N > 1: a learned policy flies N
    episodes of a scene at a time, one forward pass per control step for all
    (:mod:`airplay.eval.batched`; each process of ``workers`` / ``ray`` flies its share so),
    with the same results as one at a time; None: :data:`airplay.eval.batched.DEFAULT_BATCH`
    (1 with ``observer``). ValueError names a bad argument.
    """
    import importlib.util
    import sys

    from tqdm import tqdm

    from airplay.data.collect_plan import task_id as make_task_id
    from airplay.data.collect_workers import run_jobs
    from airplay.eval import journal as jr
    from airplay.scene.spec import parse_scene_yaml
    from airplay.tasks.protocol import load_protocol

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {workers!r}")
    if observer is not None and (workers > 1 or ray):
        raise ValueError("--view shows episodes flown in this process: not with --workers N > 1 or --ray")
    if ray and importlib.util.find_spec("ray") is None:
        raise ValueError("--ray needs the ray package, which is not importable here (pip install 'ray[default]'), "
                         "or run without --ray (--workers N uses a local process pool)")
    if cfg.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {cfg.episodes}")
    if batch is None:
        batch = 1 if observer is not None else DEFAULT_BATCH
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"--batch must be an integer >= 1, got {batch!r}")
    if observer is not None and batch > 1:
        raise ValueError("--view watches one episode at a time: not with --batch N > 1")
    out_dir = Path(out_dir)
    names: list[str] = []
    for scene_dir in cfg.scenes:
        name = parse_scene_yaml(scene_dir).name
        if name in names:
            raise ValueError(f"{scene_dir}: scene name {name!r} given twice (scene.yaml field 'name')")
        names.append(name)
    task_ids = {name: [make_task_id(name, cfg.setting, cfg.seed, k) for k in range(cfg.episodes)] for name in names}
    identity = jr.run_identity(cfg, protocol_meta(load_protocol()))
    batch = batch if batchable(cfg) else 1
    engine = (f"ray ({ray})" if ray else f"process pool ({workers} workers)" if workers > 1 else "in-process") \
        + (f", batches of {batch}" if batch > 1 else "")
    in_process = workers <= 1 and not ray
    t_start = time.perf_counter()
    with jr.Lock(out_dir):
        journal = jr.read_journal(out_dir, identity, task_ids) if resume else None
        jr.start(out_dir, identity, journal)
        done: dict[tuple[str, str], EpisodeResult] = dict(journal.done) if journal else {}
        total = cfg.episodes * len(names)
        if journal is not None:
            notes = [f"{n} {what}" for n, what in ((journal.dropped_torn, "torn last line dropped"),
                                                  (journal.dropped_no_trajectory, "lines without a trajectory "
                                                                                  "file dropped")) if n]
            print(f"resuming {out_dir}: {len(done)} of {total} episodes already flown"
                  + (f" ({', '.join(notes)})" if notes else "") + f"; {total - len(done)} to fly", flush=True)
        jobs = [EpisodeJob(cfg, str(scene_dir), k, threads=1)
                for scene_dir, name in zip(cfg.scenes, names) for k in range(cfg.episodes)
                if (name, task_ids[name][k]) not in done]
        bar = tqdm(total=len(jobs), unit="ep", disable=not progress, dynamic_ncols=True,
                   desc=f"eval ({engine})" if not in_process else "eval")
        appender = jr.Appender(out_dir)
        fly = fly_job if observer is None else partial(fly_job, observer=observer)
        if batch > 1 and in_process:  # episodes recorded as they end
            results = (rec for scene_dir in cfg.scenes for rec in
                       fly_batched(cfg, str(scene_dir), [j.index for j in jobs if j.scene_dir == str(scene_dir)],
                                   batch))
        elif batch > 1:  # each job a share of a scene's episodes, flown batch at a time
            results = (rec for recs in run_jobs(fly_batch_job, batch_jobs(jobs, batch), workers, ray) for rec in recs)
        else:
            results = run_jobs(fly, jobs, workers, ray)
        run_steps, flying_s, flown = 0, 0.0, 0  # this run's episodes; flying: time inside episodes, all workers
        try:
            for rec in results:
                result: EpisodeResult = rec["result"]
                appender.add(result, rec["trajectory"])
                done[(result.scene, str(result.task_id))] = result
                run_steps += rec["steps"]
                flying_s += rec["flying_s"]
                flown += 1
                bar.update(1)
                bar.set_postfix(steps_per_s=f"{run_steps / max(flying_s, 1e-9):.0f}",
                                last=f"{result.scene} {result.status}")
        except BaseException:
            bar.close()
            print(f"\nstopped: {len(done)} of {total} episodes are in {out_dir / jr.EPISODES_FILE}; rerun the "
                  "same command with --resume to fly the rest", file=sys.stderr)
            raise
        finally:
            bar.close()
            appender.close()
            if hasattr(results, "close"):
                results.close()
            if in_process:
                clear_cache()
        ordered: list[EpisodeResult] = []
        for scene_dir, name in zip(cfg.scenes, names):
            world = World.load(scene_dir, vehicle=vehicle_params(cfg.vehicle))
            tasks = sample_tasks(world.scene, world.grid, cfg.episodes, cfg.seed, cfg.setting, world.protocol)
            scene_results = [done[(name, tid)] for tid in task_ids[name]]
            trajectories = [jr.load_trajectory(out_dir, name, tid) for tid in task_ids[name]]
            plot_scene(out_dir / f"{world.name}_trajectories.png", world, tasks, trajectories,
                       [r.status for r in scene_results], cfg)
            ordered += scene_results
        elapsed = time.perf_counter() - t_start
        total_steps = sum(r.steps for r in ordered)
        summary = aggregate(ordered, success_radius_m=world.protocol.success_radius_m, bootstrap=cfg.bootstrap,
                            seed=cfg.seed)
        meta = results_meta(cfg, world, "inprocess", total_steps, elapsed, flying_s,
                            steps_per_s=run_steps / max(flying_s, 1e-9))
        meta["execution"] = {"engine": engine, "workers": 1 if in_process else workers,
                             **({"batch": batch} if batch > 1 else {}), "resumed_episodes": total - flown}
        write_results(out_dir, ordered, summary, meta)
    print(format_table(summary))
    images = "with" if cfg.render_images else "without"
    resumed = f" ({total - flown} episodes from the earlier run)" if total - flown else ""
    print(f"\n{run_steps} control steps ({run_steps * world.vehicle.control_dt_s:.0f} s simulated) in "
          f"{flying_s:.1f} s of flying = {run_steps / max(flying_s, 1e-9):.0f} steps/s {images} RGB + depth "
          f"every step (real time = {world.vehicle.control_rate_hz:.0f}; {engine}, flying time summed over "
          f"workers){resumed}; {elapsed:.1f} s in all with scene set-up. Results in {out_dir}/")
    return summary


def batchable(cfg: EvalConfig) -> bool:
    """Whether ``cfg``'s episodes may fly in batches (:mod:`airplay.eval.batched` decides per scene
    from the loaded policy and world; this rules out what the configuration alone rules out)."""
    from airplay.policies.registry import DEMONSTRATION_POLICIES  # the LearnedPolicy ones (not ppo_depth)

    if not (cfg.policy in DEMONSTRATION_POLICIES and cfg.setting in ("pointgoal", "imagegoal", "goalfree")
            and not cfg.wind and not cfg.policy_budget_ms and cfg.render_images
            and cfg.policy_backend == "torch"):  # the onnxruntime backend flies one at a time
        return False
    if cfg.vehicle:  # a vehicle file with a position-estimate error flies one at a time
        from airplay.sim.estimate_error import load_vehicle_file

        return load_vehicle_file(cfg.vehicle)[1] is None
    return True


def batch_jobs(jobs: list, batch: int) -> list:
    """The episode jobs as :class:`~airplay.eval.batched.BatchJob` s of one scene each, of up to
    ``2 batch`` tasks (a pool worker refills its batch from its share)."""
    from airplay.eval.batched import BatchJob

    out = []
    for scene_dir in dict.fromkeys(j.scene_dir for j in jobs):
        indices = [j.index for j in jobs if j.scene_dir == scene_dir]
        for start in range(0, len(indices), 2 * batch):
            out.append(BatchJob(jobs[0].cfg, scene_dir, tuple(indices[start:start + 2 * batch]), batch))
    return out


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
