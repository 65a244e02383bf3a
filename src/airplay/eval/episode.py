"""One episode of a closed-loop evaluation, whatever runs it (the in-process runner, its worker
processes, the batched flights, the ROS graph's evaluator): what to evaluate
(:class:`EvalConfig`), flying one task through the policy guard (:func:`run_episode`) and its
results line (:func:`task_result`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.eval.metrics import EpisodeResult, episode_result
from airplay.policies import guard

if TYPE_CHECKING:
    from airplay.world import World
    from airplay.world.env import AirPlayEnv


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
    policy_backend: str = "torch"
    """What runs a learned policy: "torch", or "onnxruntime" from the ONNX export of ``checkpoint``
    (:mod:`airplay.policies.onnx_runtime`; episodes then fly one at a time, not batched)."""
    policy_budget_ms: float = 0.0
    """Per-step compute budget of the policy (ms of its CPU time); 0: none
    (:mod:`airplay.policies.guard`)."""
    wind: str = ""
    """Wind, gusts or a velocity impulse acting on the vehicle, as text
    (:mod:`airplay.sim.disturbance`); "": none."""
    vehicle: str = ""
    """The flight model's vehicle file (an identified profile, ``airplay identify``); "":
    config/vehicle.yaml."""
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


@dataclass(frozen=True)
class Flown:
    """One flown task: trajectory (T, 3) map m (start included), status, steps, and the
    ``error`` of a ``policy_error`` / ``over_budget`` episode."""

    trajectory: np.ndarray
    status: str
    steps: int
    error: str | None = None


def run_episode(env: AirPlayEnv, policy, task, budget_ms: float = 0.0, observer=None) -> Flown:
    """Fly one task to its end. The policy is called through :mod:`airplay.policies.guard`: where
    it raises (or a step exceeds ``budget_ms`` of CPU time) the episode ends at that observation.

    ``observer`` (e.g. :class:`airplay.view.live.EnvObserver`, ``airplay eval --view``) is told
    ``episode_started(env, task, obs)`` after the reset, ``episode_step(env, command, obs)`` after
    each step (``command``: what was applied to the previous observation) and
    ``episode_ended(env, flown)``; it only watches (the episode is the same without it)."""
    flown = _fly(env, policy, task, budget_ms, observer)
    if observer is not None:
        observer.episode_ended(env, flown)
    return flown


def _fly(env: AirPlayEnv, policy, task, budget_ms: float, observer) -> Flown:
    obs, info = env.reset(options={"task": task})
    if observer is not None:
        observer.episode_started(env, task, obs)
    error = guard.reset(policy, task)
    if error is not None and info["status"] == EpisodeStatus.RUNNING:
        return Flown(np.asarray(env.trajectory), guard.POLICY_ERROR, info["steps"], error)
    while info["status"] == EpisodeStatus.RUNNING:
        step = guard.act(policy, obs, budget_ms)
        if step.status is not None:
            return Flown(np.asarray(env.trajectory), step.status, info["steps"], step.error)
        obs, _, _, _, info = env.step(step.command)
        if observer is not None:
            observer.episode_step(env, step.command, obs)
    return Flown(np.asarray(env.trajectory), info["status"], info["steps"])
