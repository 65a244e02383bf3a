"""Observations of :class:`~airplay.world.vector_env.AirPlayVectorEnv`: the N rows' dict, each row's
entries equal to :class:`~airplay.world.env.AirPlayEnv`'s bit for bit.

Keys (as the single environment's): ``rgb`` (N, H, W, 3) uint8 and ``depth`` (N, H, W, 1) float32 m
(each scene's cameras rendered as one batch), ``state`` (N, 13) float32 (position m map ENU,
quaternion x y z w of base_link in map, velocity m/s map, body rates rad/s), ``goal`` (N, 3) float32
(the goal in each vehicle's heading frame: x forward, y left, z up, m), ``goal_image`` (N, H, W, 3)
uint8 and ``instruction`` (a tuple of N texts). Parked rows' images are zeros.
"""

from __future__ import annotations

import time

import numpy as np

from airplay.frames import map_to_heading_xyz
from airplay.world.env_config import INSTRUCTION_KEY
from airplay.world.vector_episodes import EpisodeRows
from airplay.world.vector_scenes import Fleet


class BatchObserver:
    """Renders and assembles the batch's observations of ``keys`` (module docstring).

    Args:
        fleet, episodes: the batch's vehicles and episodes.
        keys: the observation keys (``goal_image`` for ImageGoal's goal, ``instruction`` for VLN).
        want_rgb: render RGB (for ``rgb`` or ``render_mode="rgb_array"``).
        hw: the cameras' (height, width) in pixels.
    """

    def __init__(self, fleet: Fleet, episodes: EpisodeRows, keys: tuple[str, ...], want_rgb: bool,
                 hw: tuple[int, int]) -> None:
        self.fleet, self.episodes, self.keys, self.hw = fleet, episodes, keys, hw
        self.want_rgb, self.want_depth = want_rgb, "depth" in keys
        self.last_rgb: np.ndarray | None = None  # the last full batch's RGB (render_mode "rgb_array")
        self.last_render_s = 0.0  # seconds the last call spent rendering

    def observe(self, parked: np.ndarray, rows: np.ndarray | None = None) -> dict:
        """The observations of all rows, or of ``rows`` only (rendering only those); ``parked`` rows'
        images are zeros."""
        fleet = self.fleet
        n, (h, w) = fleet.num_envs, self.hw
        t = time.perf_counter()
        every = rows is None and not parked.any()
        shown = None if every else (np.arange(n) if rows is None else rows)
        if shown is not None:
            shown = shown[~parked[shown]]
        blank = np.zeros if not every else np.empty
        rgb = blank((n, h, w, 3), np.uint8) if self.want_rgb else None
        depth = blank((n, h, w, 1), np.float32) if self.want_depth else None
        if rgb is not None or depth is not None:
            if len(fleet.scenes) == 1:
                v = fleet.scenes[0].flight.vehicles
                fleet.scenes[0].camera.render(v.position, v.yaw, rgb, depth, which=shown)
            else:  # each scene's cameras as one batch, into the rows of its sub-environments
                pos, yaw = fleet.gather("position"), fleet.gather("yaw")
                for s in fleet.scenes:
                    which = s.rows if shown is None else fleet.in_scene(shown, s)
                    s.camera.render(pos, yaw, rgb, depth, which=which)
        self.last_render_s = time.perf_counter() - t
        if rows is None:
            self.last_rgb = rgb
        obs = self.assemble(rgb, depth)
        return obs if rows is None else {k: (tuple(v[i] for i in rows) if isinstance(v, tuple) else v[rows])
                                         for k, v in obs.items()}

    def assemble(self, rgb: np.ndarray | None, depth: np.ndarray | None) -> dict:
        """The observation dict of all N rows from their rendered images."""
        fleet, ep, keys = self.fleet, self.episodes, self.keys
        n = fleet.num_envs
        obs = {}
        if "rgb" in keys:
            obs["rgb"] = rgb
        if "depth" in keys:
            obs["depth"] = depth
        if "state" in keys:
            obs["state"] = np.concatenate([fleet.gather(k) for k in ("position", "quat_xyzw", "velocity",
                                                                      "angular_velocity_body")],
                                          axis=1).astype(np.float32)
        if "goal" in keys:
            pos, yaw = fleet.gather("position"), fleet.gather("yaw")
            goal = np.empty((n, 3), np.float32)
            for i in range(n):  # the single environment's arithmetic, one vehicle at a time
                d = ep.goals[i] - pos[i]
                goal[i] = map_to_heading_xyz(d[0], d[1], d[2], float(yaw[i]))
            obs["goal"] = goal
        elif "goal_image" in keys:
            obs["goal_image"] = ep.goal_images.copy()
        if INSTRUCTION_KEY in keys:
            obs[INSTRUCTION_KEY] = tuple(ep.instructions)
        return obs
