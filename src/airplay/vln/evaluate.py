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

Results are the standard files (README "Results format"): ``episodes.jsonl`` lines carry, in
addition, ``persona``, ``instruction``, ``vln_steps``, ``format_failures`` and ``stop_reason``;
``summary.json`` has, besides ``overall`` and ``per_scene`` (NE, SR, OSR, SPL, ...), a
``per_persona`` block with the same metrics for each persona (scenes weighted equally within it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

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


def vln_status(env_status: str, stop_reason: str, final_distance_m: float, radius_m: float) -> str:
    """The episode's status from the environment's and the navigator's ends (module docstring)."""
    if env_status in ("collision", "out_of_bounds"):
        return env_status
    if final_distance_m <= radius_m:
        return "success"
    if env_status == "running" and stop_reason == "stop":
        return "stopped"
    return "timeout"


def run_vln_episode(env, policy, episode, time_limit_s: float):
    """Fly one episode: (trajectory (T, 3), env status, policy info)."""
    task = episode.to_task(time_limit_s)
    env.render_images = True
    obs, info = env.reset(options={"task": task})
    policy.reset(episode)
    while info["status"] == "running":
        cmd = policy.select_action(obs)
        if getattr(policy, "done", False):
            break
        env.render_images = bool(getattr(policy, "wants_image", True))
        obs, _, _, _, info = env.step(cmd)
    env.render_images = True
    return np.asarray(env.trajectory), info["status"], policy.episode_info() if hasattr(policy, "episode_info") else {}


def evaluate_vln(cfg, out_dir: Path, policy_factory, episodes_file: str | None = None, progress: bool = True,
                 vln_config=None) -> dict:
    """Evaluate ``policy_factory(world)`` (-> a navigator) on ``cfg`` (an
    :class:`airplay.eval.runner.EvalConfig` with ``setting == "vln"``); write results; return the summary."""
    from tqdm import tqdm

    from airplay.eval.aggregate import aggregate
    from airplay.eval.results import format_table, write_results
    from airplay.eval.runner import plot_scene, results_meta
    from airplay.sim.env import AirPlayEnv
    from airplay.sim.world import World
    from airplay.vln.actions import load_vln_config
    from airplay.vln.episodes import for_scene, read_episodes, sample_vln_episodes

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
        radius = vcfg.success_radius_m or world.protocol.success_radius_m
        actions = vcfg.action_space(world.name, world.scene.spec.category)
        max_dz = None if "ASCEND" in actions.names else 0.5 * radius
        episodes = (for_scene(imported, world.name)[: cfg.episodes] if imported is not None
                    else sample_vln_episodes(world, cfg.episodes, cfg.seed, max_dz_m=max_dz))
        # the environment must not end an episode on entering the radius (AirNav: success at the end)
        no_auto_success = replace(world, protocol=replace(world.protocol, success_radius_m=0.0))
        env = AirPlayEnv(no_auto_success, "goalfree", tasks=[e.to_task(1.0) for e in episodes] or None,
                         render_backend=cfg.render_backend, render_images=True)
        if policy is None:
            policy = policy_factory(world)
        if hasattr(policy, "set_actions"):
            policy.set_actions(actions)
        time_limit = actions.max_steps * SECONDS_PER_ACTION_LIMIT
        trajectories, statuses = [], []
        for ep in episodes:
            t0 = time.perf_counter()
            trajectory, env_status, info = run_vln_episode(env, policy, ep, time_limit)
            flying_s += time.perf_counter() - t0
            model_s += float(info.get("model_time_s", 0.0))
            total_steps += len(trajectory) - 1
            final = float(np.linalg.norm(trajectory[-1] - ep.goal_position))
            status = vln_status(env_status, info.get("stop_reason", ""), final, radius)
            base = episode_result(scene=world.name, task_id=ep.episode_id, setting="vln", start=ep.start_position,
                                  goal=ep.goal_position, astar_length_m=ep.astar_length_m, trajectory=trajectory,
                                  status=status, seed=cfg.seed, policy=cfg.policy, dt_s=world.vehicle.control_dt_s)
            results.append(VLNEpisodeResult(**base.to_dict(), persona=ep.persona, instruction=ep.instruction,
                                            vln_steps=int(info.get("vln_steps", 0)),
                                            queries=int(info.get("queries", 0)),
                                            format_failures=int(info.get("format_failures", 0)),
                                            stop_reason=str(info.get("stop_reason", ""))))
            trajectories.append(trajectory)
            statuses.append(status)
            bar.update(1)
            bar.set_postfix(last=status)
        if episodes:
            plot_scene(out_dir / f"{world.name}_trajectories.png", world, [e.to_task(1.0) for e in episodes],
                       trajectories, statuses, cfg)
    bar.close()
    if not results:
        raise ValueError("no VLN episodes to evaluate (an episode file without episodes for these scenes?)")
    summary = aggregate(results, success_radius_m=radius, bootstrap=cfg.bootstrap, seed=cfg.seed)
    summary["per_persona"] = per_persona(results, radius, cfg.bootstrap, cfg.seed)
    elapsed = time.perf_counter() - t_start
    meta = results_meta(cfg, world, "inprocess", total_steps, elapsed, flying_s)
    meta["protocol"]["success_radius_m"] = radius
    meta["vln"] = {"backend": getattr(getattr(policy, "backend", None), "name", ""),
                   "model": str(getattr(getattr(policy, "backend", None), "model_name", "")),
                   "scale": actions.scale, "forward_m": actions.forward_m,
                   "turn_deg": round(float(np.degrees(actions.turn_rad)), 3), "actions": list(actions.names),
                   "max_steps": actions.max_steps, "max_actions_per_step": actions.max_actions_per_step,
                   "history_offsets": list(getattr(getattr(policy, "prompts", None), "history_offsets", ())),
                   "model_time_s": round(model_s, 3),
                   "format_failures": sum(r.format_failures for r in results),
                   "queries": sum(r.queries for r in results),
                   "episodes_file": str(episodes_file or "")}
    write_results(out_dir, results, summary, meta)
    print(format_table(summary))
    print(format_persona_table(summary["per_persona"]))
    print(f"\n{len(results)} VLN episodes, {total_steps} control steps in {flying_s:.1f} s of flying "
          f"({model_s:.1f} s in the model, {meta['vln']['queries']} calls, {meta['vln']['format_failures']} format "
          f"failures). Results in {out_dir}/")
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
