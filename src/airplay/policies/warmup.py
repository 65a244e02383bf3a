"""A policy's warm-up before the policy node reports ready (see :mod:`airplay.world.warmup`).

The policy is reset on a short task of the scene and asked for one command on an observation
shaped as :class:`~airplay.world.env.AirPlayEnv` gives it (blank images of the scene's camera,
the task's start state, the goal in the setting's form): the expert's planner and tracker
kernels compile, a learned policy runs one forward pass. The node resets the policy again for
every real episode, so the warm-up leaves no trace in any result.
"""

from __future__ import annotations

import numpy as np

from airplay.frames import quat_xyzw_from_yaw
from airplay.policies import guard
from airplay.world.warmup import centre_task, warmup_task


def warmup_observation(world, setting: str, task) -> dict:
    """An observation of ``setting`` at ``task``'s start, at rest, with blank images."""
    from airplay.world.env import goal_in_heading_frame

    cam = world.scene.spec.camera.intrinsics
    yaw = float(task.start_yaw)
    state = np.zeros(13, np.float32)
    state[0:3] = task.start_position
    state[3:7] = quat_xyzw_from_yaw(yaw)  # a level vehicle
    obs = {"rgb": np.zeros((cam.height, cam.width, 3), np.uint8),
           "depth": np.zeros((cam.height, cam.width, 1), np.float32), "state": state}
    if setting == "pointgoal":
        obs["goal"] = goal_in_heading_frame(task.start_position, yaw, task.goal_position).astype(np.float32)
    elif setting == "imagegoal":
        obs["goal_image"] = np.zeros((cam.height, cam.width, 3), np.uint8)
    return obs


def warm_policy(policy, world, setting: str) -> str | None:
    """Reset ``policy`` on a warm-up task of ``world`` and act once; the error text where it
    raised (the node logs it: the same error will end the first episode as policy_error). A
    privileged policy (the expert) plans in free space (:func:`~airplay.world.warmup.warmup_task`),
    any other gets :func:`~airplay.world.warmup.centre_task`, which needs no collision model."""
    task = warmup_task(world) if getattr(policy, "privileged", False) else centre_task(world)
    error = guard.reset(policy, task)
    if error is None:
        error = guard.act(policy, warmup_observation(world, setting, task)).error
    return error
