"""VLN evaluation in-process: ``airplay eval --setting vln --policy airvln_r1 ...``.

Per scene: episodes from the protocol's sampler with generated instructions
(:func:`airplay.vln.episodes.sample_vln_episodes`; without ASCEND/DESCEND only tasks whose goal
lies within half the success radius of the start height, since the default actions cannot
change height), or from an episode file; the
environment flies them as goal-free tasks (the goal is withheld from the policy). AirNav's
rule decides the outcome: an episode ends when the navigator says STOP, when its step budget
(160 actions) is spent, or on collision / leaving the region; it is a *success* when the final
position is within the success radius of the goal (default the protocol's 1.0 m,
``config/vln.yaml``). So the environment's own "success on entering the radius" is switched
off here (its World gets a zero success radius): passing by the goal is OSR, not SR.
Statuses: success, stopped (STOP outside the radius), timeout (budget spent outside it, or
the time limit ``max_steps x 5 s``), collision, out_of_bounds.

The ROS graph (``airplay eval --runtime ros``) flies the same episodes: its nodes take them from
:func:`vln_scene`, the evaluator builds the lines with :func:`vln_episode_result` and writes
with :func:`write_vln_results`, and the sim's status ``policy_stop``
(:attr:`~airplay.episode_status.EpisodeStatus.POLICY_STOP`: the policy ended the episode) plays
the part of "running" here.

Results are the standard files (docs/evaluation.md): ``episodes.jsonl`` lines carry, in
addition, ``persona``, ``instruction``, ``vln_steps``, ``format_failures`` and ``stop_reason``;
``summary.json`` has, besides ``overall`` and ``per_scene`` (NE, SR, OSR, SPL, ...), a
``per_persona`` block with the same metrics for each persona (scenes weighted equally within it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.eval.metrics import EpisodeResult, episode_result

SECONDS_PER_ACTION_LIMIT = 5.0
"""Sim time allowed per budgeted action (a 1 m move takes about 2 s, a 30 deg turn under 1 s)."""


@dataclass
class VLNEpisodeResult(EpisodeResult):
    """An :class:`EpisodeResult` with the VLN fields (persona, instruction, model behaviour)."""

    persona: str = ""
    instruction: str = ""
    vln_steps: int = 0
    queries: int = 0
    format_failures: int = 0
    stop_reason: str = ""


KEPT_STATUSES = (EpisodeStatus.COLLISION, EpisodeStatus.OUT_OF_BOUNDS, EpisodeStatus.NO_COMMAND,
                 EpisodeStatus.POLICY_ERROR, EpisodeStatus.OVER_BUDGET)
"""The environment's ends that are the VLN episode's status as they are (:func:`vln_status`)."""


def vln_status(env_status: str, stop_reason: str, final_distance_m: float, radius_m: float) -> str:
    """The episode's status from the environment's and the navigator's ends (module docstring).

    env_status: the environment's status when the episode ended ("running" when the navigator
    ended it in-process, "policy_stop" (:attr:`EpisodeStatus.POLICY_STOP`) from the ROS sim, where
    the policy ended it, STOP or its step budget, while it was still running); ``no_command`` (the
    policy left the ROS graph), ``policy_error`` and ``over_budget`` (:mod:`airplay.policies.guard`)
    are kept as they are.
    """
    if env_status in KEPT_STATUSES:
        return env_status
    if final_distance_m <= radius_m:
        return EpisodeStatus.SUCCESS.value
    if env_status in (EpisodeStatus.RUNNING, EpisodeStatus.POLICY_STOP) and stop_reason == "stop":
        return EpisodeStatus.STOPPED.value
    return EpisodeStatus.TIMEOUT.value


@dataclass
class VLNScene:
    """One scene's VLN evaluation set-up, the same for both runtimes.

    world: the scene; env_world: the same with a zero success radius (what the environment,
    or the ROS sim, flies: no success on entering the radius); episodes and tasks (their
    ``to_task(time_limit_s)``, goal-free); actions: the scene's action space; radius_m: the
    success radius of the outcome.
    """

    world: object
    env_world: object
    episodes: list
    tasks: list
    actions: object
    radius_m: float
    time_limit_s: float


def vln_scene(world, n: int, seed: int, vln_config=None, imported=None) -> VLNScene:
    """The episodes of ``world`` (``n`` sampled with ``seed``, or the first ``n`` of ``imported``
    for this scene) and what flying them needs (:class:`VLNScene`)."""
    from airplay.vln.actions import load_vln_config
    from airplay.vln.episodes import for_scene, sample_vln_episodes

    vcfg = vln_config or load_vln_config()
    radius = vcfg.success_radius_m or world.protocol.success_radius_m
    actions = vcfg.action_space(world.name, world.scene.spec.category)
    max_dz = None if "ASCEND" in actions.names else 0.5 * radius
    episodes = (for_scene(imported, world.name)[:n] if imported is not None
                else sample_vln_episodes(world, n, seed, max_dz_m=max_dz))
    time_limit = actions.max_steps * SECONDS_PER_ACTION_LIMIT
    # the environment must not end an episode on entering the radius (AirNav: success at the end)
    env_world = replace(world, protocol=replace(world.protocol, success_radius_m=0.0))
    return VLNScene(world, env_world, episodes, [e.to_task(time_limit) for e in episodes], actions, radius,
                    time_limit)


def vln_episode_result(world, episode, cfg, trajectory: np.ndarray, env_status: str, info: dict,
                       radius_m: float) -> VLNEpisodeResult:
    """The results line of one flown VLN episode (both runtimes write it this way)."""
    final = float(np.linalg.norm(np.asarray(trajectory)[-1] - episode.goal_position))
    status = vln_status(env_status, info.get("stop_reason", ""), final, radius_m)
    base = episode_result(scene=world.name, task_id=episode.episode_id, setting="vln", start=episode.start_position,
                          goal=episode.goal_position, astar_length_m=episode.astar_length_m, trajectory=trajectory,
                          status=status, seed=cfg.seed, policy=cfg.policy, dt_s=world.vehicle.control_dt_s,
                          error=info.get("error"))
    return VLNEpisodeResult(**base.to_dict(), persona=episode.persona, instruction=episode.instruction,
                            vln_steps=int(info.get("vln_steps", 0)), queries=int(info.get("queries", 0)),
                            format_failures=int(info.get("format_failures", 0)),
                            stop_reason=str(info.get("stop_reason", "")))


def run_vln_episode(env, policy, episode, time_limit_s: float, budget_ms: float = 0.0):
    """Fly one episode: (trajectory (T, 3), env status, policy info). The navigator is called
    through :mod:`airplay.policies.guard`: where it raises (or exceeds ``budget_ms``) the env
    status is ``policy_error`` (``over_budget``) and ``info["error"]`` says why."""
    from airplay.policies import guard

    task = episode.to_task(time_limit_s)
    env.render_images = True
    obs, info = env.reset(options={"task": task})
    status, error = info["status"], guard.reset(policy, episode)
    if error is not None:
        status = guard.POLICY_ERROR
    while status == EpisodeStatus.RUNNING:
        step = guard.act(policy, obs, budget_ms)
        if step.status is not None:
            status, error = step.status, step.error
            break
        if getattr(policy, "done", False):
            break
        env.render_images = bool(getattr(policy, "wants_image", True))
        obs, _, _, _, info = env.step(step.command)
        status = info["status"]
    env.render_images = True
    report = policy.episode_info() if hasattr(policy, "episode_info") else {}
    if error is not None:
        report["error"] = error
    return np.asarray(env.trajectory), status, report


def evaluate_vln(cfg, out_dir: Path, policy_factory, episodes_file: str | None = None, progress: bool = True,
                 vln_config=None) -> dict:
    """Evaluate ``policy_factory(world)`` (-> a navigator) on ``cfg`` (an
    :class:`airplay.eval.runner.EvalConfig` with ``setting == "vln"``); write results; return the summary."""
    from tqdm import tqdm

    from airplay.eval.runner import plot_scene
    from airplay.world.env import AirPlayEnv
    from airplay.world import World
    from airplay.vln.actions import load_vln_config
    from airplay.vln.episodes import read_episodes

    vcfg = vln_config or load_vln_config()
    out_dir = Path(out_dir)
    results: list[VLNEpisodeResult] = []
    imported = read_episodes(episodes_file) if episodes_file else None
    t_start = time.perf_counter()
    total_steps, flying_s, model_s = 0, 0.0, 0.0
    policy = None
    bar = tqdm(total=cfg.episodes * len(cfg.scenes), unit="ep", disable=not progress, dynamic_ncols=True)
    for scene_dir in cfg.scenes:
        world = World.load(scene_dir)
        vs = vln_scene(world, cfg.episodes, cfg.seed, vcfg, imported)
        env = AirPlayEnv(vs.env_world, "goalfree", tasks=vs.tasks or None, render_backend=cfg.render_backend,
                         render_images=True)
        if policy is None:
            policy = policy_factory(world)
        if hasattr(policy, "set_actions"):
            policy.set_actions(vs.actions)
        trajectories, statuses = [], []
        for ep in vs.episodes:
            t0 = time.perf_counter()
            trajectory, env_status, info = run_vln_episode(env, policy, ep, vs.time_limit_s, cfg.policy_budget_ms)
            flying_s += time.perf_counter() - t0
            model_s += float(info.get("model_time_s", 0.0))
            total_steps += len(trajectory) - 1
            results.append(vln_episode_result(world, ep, cfg, trajectory, env_status, info, vs.radius_m))
            trajectories.append(trajectory)
            statuses.append(results[-1].status)
            bar.update(1)
            bar.set_postfix(last=statuses[-1])
        if vs.episodes:
            plot_scene(out_dir / f"{world.name}_trajectories.png", world, vs.tasks, trajectories, statuses, cfg)
    bar.close()
    backend = getattr(policy, "backend", None)
    return write_vln_results(out_dir, cfg, results, vs, "inprocess", total_steps, time.perf_counter() - t_start,
                             flying_s, model_s, backend=getattr(backend, "name", ""),
                             model=str(getattr(backend, "model_name", "")),
                             history_offsets=getattr(getattr(policy, "prompts", None), "history_offsets", ()),
                             episodes_file=episodes_file)


def write_vln_results(out_dir: Path, cfg, results: list, scene: VLNScene, runtime: str, total_steps: int,
                      elapsed_s: float, flying_s: float, model_s: float, backend: str = "", model: str = "",
                      history_offsets=(), episodes_file: str | None = None) -> dict:
    """Aggregate (overall, per scene, ``per_persona``), write the results files with ``meta.vln``,
    print the tables; return the summary. ``scene``: the last scene's :class:`VLNScene` (its
    radius and action space go into the meta). Both runtimes call this."""
    from airplay.eval.aggregate import aggregate
    from airplay.eval.results import format_table, write_results
    from airplay.eval.runner import results_meta

    if not results:
        raise ValueError("no VLN episodes to evaluate (an episode file without episodes for these scenes?)")
    radius, actions = scene.radius_m, scene.actions
    summary = aggregate(results, success_radius_m=radius, bootstrap=cfg.bootstrap, seed=cfg.seed)
    summary["per_persona"] = per_persona(results, radius, cfg.bootstrap, cfg.seed)
    meta = results_meta(cfg, scene.world, runtime, total_steps, elapsed_s, flying_s)
    meta["protocol"]["success_radius_m"] = radius
    meta["vln"] = {"backend": backend, "model": model,
                   "scale": actions.scale, "forward_m": actions.forward_m,
                   "turn_deg": round(float(np.degrees(actions.turn_rad)), 3), "actions": list(actions.names),
                   "max_steps": actions.max_steps, "max_actions_per_step": actions.max_actions_per_step,
                   "history_offsets": list(history_offsets),
                   "model_time_s": round(model_s, 3),
                   "format_failures": sum(r.format_failures for r in results),
                   "queries": sum(r.queries for r in results),
                   "episodes_file": str(episodes_file or "")}
    write_results(out_dir, results, summary, meta)
    print(format_table(summary))
    print(format_persona_table(summary["per_persona"]))
    print(f"\n{len(results)} VLN episodes, {total_steps} control steps in {flying_s:.1f} s of flying "
          f"({model_s:.1f} s in the model, {meta['vln']['queries']} calls, {meta['vln']['format_failures']} format "
          f"failures). Results in {out_dir}/", flush=True)
    return summary


def per_persona(results, radius_m: float, bootstrap: int, seed: int) -> dict:
    """``{persona: {metric: {"mean", "ci95"}, "episodes": n}}`` (scenes weighted equally within each)."""
    from airplay.eval.aggregate import aggregate

    out = {}
    for persona in sorted({r.persona for r in results}):
        subset = [r for r in results if r.persona == persona]
        s = aggregate(subset, success_radius_m=radius_m, bootstrap=bootstrap, seed=seed)
        out[persona] = {**s["overall"], "episodes": len(subset)}
    return out


def format_persona_table(per: dict) -> str:
    """NE / SR / OSR / SPL per persona, plain text."""
    lines = [f"{'persona':<14}{'NE m':>8}{'SR %':>8}{'OSR %':>8}{'SPL %':>8}{'episodes':>10}"]
    for persona, m in per.items():
        lines.append(f"{persona:<14}{m['ne']['mean']:>8.2f}{100 * m['sr']['mean']:>8.1f}{100 * m['osr']['mean']:>8.1f}"
                     f"{100 * m['spl']['mean']:>8.1f}{m['episodes']:>10}")
    return "\n".join(lines)
