"""A recorded flight replayed through a policy: the commands the policy gives on the observations
the bag holds, against the commands the flight sent.

A flight recorded with the fly graph's ``record:=`` (or any episode bag: ``airplay collect``,
the recorder of sim_eval) holds, per stamp, the state (``/odom``), the RGB and depth images and
the command the policy node sent for that observation (``/cmd_vel`` carries the observation's
stamp; :mod:`airplay.nodes.policy_node`). :func:`replay_episode` builds the same observation the
policy node built (state as float32, the goal in the heading frame for PointGoal, the goal
image for ImageGoal), resets the policy with the bag's task as the node did, and calls it on
every recorded observation in stamp order. Where the bag holds every observation the policy
acted on (``dropped`` 0), a deterministic policy gives back the flight's commands bit for bit:
the policy on the vehicle is the policy in the simulator. A chunked policy (ACT, DP) depends
on the order too: an observation the recorder lost shifts its queue, and the replay says so.

Commands are compared as float32 (the policy's dtype; the bag's float64 twist holds them
exactly). The replay runs torch and numba on the threads the policy node used (1 on a vehicle:
:func:`airplay.nodes.common.one_compute_thread`): a matrix product summed by two threads rounds
differently (an ACT checkpoint replayed on 2 threads differed from its flight by up to 4e-7 m/s).
No rclpy: the bag is read with :mod:`airplay.data.bag_reader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class ReplayError(ValueError):
    """A bag that cannot be replayed (no task, a setting the replay does not rebuild); names the bag."""


@dataclass
class Replay:
    """The replay of one bag. ``steps``: observations replayed; ``equal``: commands equal to the
    recorded ones bit for bit (float32); ``max_abs_diff``: the largest |replayed - recorded| of any
    component (m/s or rad/s); ``first_diff_step``: the first step that differs (None: none);
    ``dropped``: commanded stamps the bag lacks an image or state for (not replayed);
    ``diffs``: per step, the largest component difference."""

    bag: Path
    task_id: str
    policy: str
    steps: int
    equal: int
    max_abs_diff: float
    first_diff_step: int | None
    dropped: int
    diffs: np.ndarray = field(repr=False)

    def within(self, tolerance: float) -> bool:
        """Every replayed command within ``tolerance`` of the recorded one (0: bit for bit)."""
        return self.steps > 0 and self.max_abs_diff <= tolerance

    def to_dict(self) -> dict:
        return {"bag": str(self.bag), "task_id": self.task_id, "policy": self.policy, "steps": self.steps,
                "equal": self.equal, "max_abs_diff": self.max_abs_diff, "first_diff_step": self.first_diff_step,
                "dropped": self.dropped}


def observation(episode, t: int, setting: str, task) -> dict:
    """The observation the policy node built for the bag's step ``t`` (its ``_observation``)."""
    from airplay.frames import heading_of_state
    from airplay.world.env import goal_in_heading_frame

    state = episode.state[t]
    obs = {"rgb": episode.rgb[t], "state": state.astype(np.float32)}
    if episode.depth is not None:
        obs["depth"] = episode.depth[t]
    if setting == "pointgoal":
        obs["goal"] = goal_in_heading_frame(state[0:3], heading_of_state(state), task.goal_position).astype(np.float32)
    elif setting == "imagegoal":
        if episode.goal_image is None:
            raise ReplayError(f"{episode.path}: an imagegoal episode without /goal_image")
        obs["goal_image"] = episode.goal_image.copy()
    return obs


def replay_episode(episode, policy, task, setting: str) -> np.ndarray:
    """(T, 4) float32: ``policy`` reset with ``task`` and called on each of the bag's observations."""
    from airplay.policies import guard

    error = guard.reset(policy, task)
    if error is not None:
        raise ReplayError(f"{episode.path}: the policy's reset failed: {error}")
    out = np.zeros((len(episode), 4), np.float32)
    for t in range(len(episode)):
        step = guard.act(policy, observation(episode, t, setting, task))
        if step.command is None:
            raise ReplayError(f"{episode.path}: step {t}: the policy failed ({step.status}): {step.error}")
        out[t] = np.asarray(step.command, np.float32)
    return out


def episode_task(episode):
    """The bag's task (:class:`~airplay.tasks.sampler.Task`) and setting, from its metadata."""
    from airplay.tasks.sampler import Task

    meta = episode.metadata or {}
    setting = str(meta.get("setting") or "pointgoal")
    if setting == "vln":
        raise ReplayError(f"{episode.path}: a VLN flight: its instruction and the navigator's history are not in "
                          "the bag's observations (replay covers pointgoal and imagegoal)")
    task = meta.get("task")
    if not isinstance(task, dict):
        raise ReplayError(f"{episode.path}: the bag's metadata holds no task (field 'task' of /episode/metadata)")
    return Task.from_dict(task), setting


def replay_bag(bag_dir, policy_name: str, checkpoint: str | None = None, execution_horizon: int | None = None,
               world=None, threads: int = 1) -> Replay:
    """Replay the episode bag ``bag_dir`` through the policy ``policy_name`` (:func:`make_policy`,
    loaded from ``checkpoint``), on ``threads`` compute threads (the policy node's: 1 on a vehicle).
    ``world``: the scene for policies that plan in it (default: the bag's ``scene_dir`` where it
    exists, else None)."""
    from airplay.threads import compute_threads

    with compute_threads(threads, torch_too=True):
        return _replay_bag(bag_dir, policy_name, checkpoint, execution_horizon, world)


def _replay_bag(bag_dir, policy_name, checkpoint, execution_horizon, world) -> Replay:
    from airplay.data.bag_reader import read_episode
    from airplay.policies import make_policy

    episode = read_episode(bag_dir)
    task, setting = episode_task(episode)
    if world is None:
        scene_dir = (episode.metadata or {}).get("scene_dir")
        if scene_dir and Path(scene_dir).is_dir():
            from airplay.world import World

            world = World.load(scene_dir)
    policy = make_policy(policy_name, world, checkpoint=checkpoint, execution_horizon=execution_horizon)
    replayed = replay_episode(episode, policy, task, setting)
    recorded = np.asarray(episode.action, np.float32)
    diffs = np.abs(replayed.astype(np.float64) - recorded.astype(np.float64)).max(axis=1)
    differ = np.flatnonzero(np.any(replayed != recorded, axis=1))
    return Replay(Path(bag_dir), task.task_id, policy_name, len(episode), int(len(episode) - len(differ)),
                  float(diffs.max()) if len(diffs) else 0.0, int(differ[0]) if len(differ) else None,
                  int(episode.dropped), diffs)
