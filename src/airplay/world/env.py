"""``AirPlayEnv``: the in-process runtime, a Gymnasium environment over one scene.

Observation (a dict; keys depend on the setting):

* ``rgb``        (H, W, 3) uint8 camera image (the scene's camera on its mount).
* ``depth``      (H, W, 1) float32 metres along the optical axis, of the collision mesh
                 (as AirPlayground): a compiled z-buffer that gives the image of ray
                 casting through pixel centres (tested against Embree); pixels that see
                 nothing read ``MAX_DEPTH_M``.
* ``state``      (13,) float32: position in map (m, 3), orientation of base_link in map as
                 a quaternion (x, y, z, w), linear velocity in map (m/s, 3), angular velocity
                 in base_link (rad/s, 3).
* ``goal``       (3,) float32, PointGoal only: goal position relative to the vehicle, in the
                 heading frame (x forward, y left, z up; metres).
* ``goal_image`` (H, W, 3) uint8, ImageGoal only: the camera image at the goal pose.
  Goal-free episodes have neither goal key: the target is withheld.

Action: (4,) float32 ``[vx, vy, vz, yaw_rate]``: heading-frame velocity (m/s) and yaw rate
(rad/s), applied for ``action_repeat`` 50 Hz control periods (default 1; see
:mod:`airplay.sim.dynamics`). With ``action_repeat`` R > 1 a step runs the same per-period
dynamics, checks and episode bookkeeping R times and stops at the first period in which the
episode ends; the reward is the sum of the periods' rewards (in period order) and the
observation is rendered once, after the last period run. ``info["steps"]`` and the time limit
count control periods whatever R.

Episodes end with an explicit status (``info["status"]``): ``success`` (within the
protocol's success radius of the goal), ``collision`` (sphere against the mesh),
``out_of_bounds`` (left the navigable polygon or height band) - these terminate - or
``timeout`` (the protocol's time limit for the task), which truncates.

Configuration: one :class:`~airplay.world.env_config.EnvConfig` (or its keywords), shared with
:func:`~airplay.world.env_factory.make_env` and :class:`~airplay.world.vector_env.AirPlayVectorEnv`.

Reward (for RL users; evaluation uses the metrics, not the reward; ``config.reward``, a
:class:`~airplay.world.env_config.RewardConfig`): ``progress_weight`` (keyword ``reward_progress``) x
the progress towards the goal in metres, plus ``success`` (``reward_success``, +10) on success and
``collision`` (``reward_collision``, -10) on collision or leaving the region. ``progress="euclidean"``
(the default) measures it as the drop in straight-line distance each control period;
``progress="geodesic"`` as the drop, over the step, of the goal's cost-to-go around obstacles
(:mod:`airplay.world.geodesic`), added after the periods' bonuses.

``config.observations`` picks the keys: any of "rgb", "depth", "state" and "goal" (the ``goal``
vector of PointGoal or the ``goal_image`` of ImageGoal; goal-free tasks have none); images
that are not asked for are not rendered.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import gymnasium as gym
import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.frames import map_to_heading_xyz
from airplay.sim.flight import CODE_STATUS, FlightSim
from airplay.tasks.sampler import SETTINGS, Task, sample_tasks
from airplay.world.env_config import EnvConfig, env_config, observation_keys
from airplay.world.env_config import FAILURE_REWARD, OBSERVATION_KEYS, SUCCESS_REWARD  # noqa: F401  (their old home)
from airplay.world.geodesic import cost_to_go, field_cache, geodesic_progress, goal_field
from airplay.world.world import World

MAX_DEPTH_M = 100.0

# step() runs 50 times per simulated second: the statuses without enum attribute lookups
_RUNNING, _SUCCESS, _TIMEOUT = EpisodeStatus.RUNNING, EpisodeStatus.SUCCESS, EpisodeStatus.TIMEOUT
_COLLISION, _OUT_OF_BOUNDS = EpisodeStatus.COLLISION, EpisodeStatus.OUT_OF_BOUNDS


def repeated_metadata(metadata: dict, action_repeat: int) -> dict:
    """``metadata`` with ``render_fps`` divided by ``action_repeat``: frames come once per step."""
    if action_repeat == 1:
        return metadata
    return {**metadata, "render_fps": metadata["render_fps"] / action_repeat}


def goal_in_heading_frame(position: np.ndarray, yaw: float, goal: np.ndarray) -> np.ndarray:
    """Goal minus position, rotated from map into the heading frame (x fwd, y left, z up)."""
    d = np.asarray(goal, dtype=np.float64) - np.asarray(position, dtype=np.float64)
    return map_to_heading_xyz(d[0], d[1], d[2], yaw)


class AirPlayEnv(gym.Env):
    """A quadrotor in one scene, given tasks of one setting (pointgoal, imagegoal, goalfree).

    Args:
        world: a :class:`World` or a scene folder (loaded with ``config.cache_dir``; its camera at
            ``config.image_size`` where one is given).
        config: an :class:`~airplay.world.env_config.EnvConfig`, or the setting's name ("pointgoal",
            "imagegoal" or "goalfree"); ``options`` (its field names, or the flat reward keywords
            ``reward_progress``, ``reward_success``, ``reward_collision``, ``progress``) change it.
            What matters here: ``setting``; ``observations`` (module docstring; None: all keys);
            ``num_tasks``, ``task_seed`` and ``task_order`` (None: "cycle": ``reset`` takes the tasks in
            order and a reset seed re-samples them; "random": ``reset`` draws one of ``tasks`` with the
            environment's seeded generator); ``render_backend``; ``render_images`` (False: zero RGB
            and depth, for state-only uses such as collecting the expert's commands fast);
            ``render_mode``; ``action_repeat`` and ``reward`` (module docstring); ``disturbance``
            (wind, gusts or a velocity impulse, :mod:`airplay.sim.disturbance`;
            ``reset(options={"disturbance": ...})`` replaces it for one episode), its gusts seeded by
            ``disturbance_seed`` and the task's id, and so is the vehicle's position-estimate error
            where ``world.estimate_error`` has one (:mod:`airplay.sim.estimate_error`: the policy then
            sees the estimate, the task's rules judge the truth).
        tasks: the tasks to fly, in order (``reset`` cycles through them); default: sample
            ``num_tasks`` with the protocol's sampler from the seed given to ``reset``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, world: World | str | Path, config: EnvConfig | Mapping | str | None = None, *,
                 tasks: list[Task] | None = None, **options) -> None:
        super().__init__()
        config = self.config = env_config(config, **options)
        setting = config.setting
        if setting not in SETTINGS:
            raise ValueError(f"setting: AirPlayEnv flies one of {', '.join(SETTINGS)}, got {setting!r} "
                             "(vln: airplay.world.env_factory.make_env or AirPlayVLNEnv)")
        self.action_repeat = config.action_repeat
        self.progress = config.reward.progress
        self.metadata = repeated_metadata(self.metadata, self.action_repeat)
        self.observation_keys = observation_keys(config.observations, setting)
        self.reward_progress = config.reward.progress_weight
        self.reward_success, self.reward_collision = config.reward.success, config.reward.collision
        task_order = config.task_order or "cycle"
        if task_order == "random" and not tasks:
            raise ValueError("task_order='random' draws from the given tasks; pass tasks=[...]")
        self.task_order = task_order
        render_mode = config.render_mode
        self.world = world if isinstance(world, World) else World.load(world, cache_dir=config.cache_dir)
        if config.image_size is not None:
            self.world = self.world.with_camera_size(*config.image_size)
        self.setting = setting
        self.render_mode = render_mode
        self.render_backend = config.render_backend
        self.render_images = config.render_images
        self._given_tasks = list(tasks) if tasks is not None else None
        self._num_tasks = config.num_tasks
        self._tasks: list[Task] = self._given_tasks or []
        self._next_task = 0
        spec = self.world.scene.spec
        self.camera, self.mount = spec.camera.intrinsics, spec.camera.mount
        self.flight = FlightSim(self.world.vehicle, self.world.checker, 1)
        self.vehicle = self.flight.vehicles
        v = self.world.vehicle
        high = np.array([v.max_speed_xy_m_s, v.max_speed_xy_m_s, v.max_speed_up_m_s, v.max_yaw_rate_rad_s], np.float32)
        low = np.array([-v.max_speed_xy_m_s, -v.max_speed_xy_m_s, -v.max_speed_down_m_s, -v.max_yaw_rate_rad_s],
                       np.float32)
        self.action_space = gym.spaces.Box(low=low, high=high, dtype=np.float32)
        h, w = self.camera.height, self.camera.width
        # Bounds: positions inside the SDF's box (the episode ends out of bounds before
        # leaving it), speeds within twice the model's limits, body rates within 1 / control period:
        # the model's rates are the vee map of R_prev^T R (components of sin(angle) * axis, so at
        # most 1) over the period (``airplay.sim.dynamics``), and an abrupt command tilts the
        # vehicle by up to ~0.95 rad in one period.
        lo_p, hi_p = self.world.sdf.origin_m, self.world.sdf.upper_m
        v_max = 2.0 * max(v.max_speed_xy_m_s, v.max_speed_up_m_s, v.max_speed_down_m_s)
        w_max = 1.0 / v.control_dt_s
        state_low = np.concatenate([lo_p, -np.ones(4), -v_max * np.ones(3), -w_max * np.ones(3)]).astype(np.float32)
        state_high = np.concatenate([hi_p, np.ones(4), v_max * np.ones(3), w_max * np.ones(3)]).astype(np.float32)
        reach = float(np.linalg.norm(hi_p - lo_p))
        spaces = {
            "rgb": gym.spaces.Box(0, 255, (h, w, 3), np.uint8),
            "depth": gym.spaces.Box(0.0, MAX_DEPTH_M, (h, w, 1), np.float32),
            "state": gym.spaces.Box(state_low, state_high, (13,), np.float32),
        }
        if setting == "pointgoal":
            spaces["goal"] = gym.spaces.Box(-reach, reach, (3,), np.float32)
        elif setting == "imagegoal":
            spaces["goal_image"] = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        self.observation_space = gym.spaces.Dict({k: spaces[k] for k in self.observation_keys})
        self._want_rgb = "rgb" in self.observation_keys or render_mode == "rgb_array"
        self._want_depth = "depth" in self.observation_keys
        self.task: Task | None = None
        self.status = EpisodeStatus.RUNNING
        self._goal_image: np.ndarray | None = None
        self._last_rgb: np.ndarray | None = None
        self.trajectory: list[np.ndarray] = []
        self._dt = self.world.vehicle.control_dt_s
        self._success_radius_m = self.world.protocol.success_radius_m
        self.disturbance = config.disturbance
        self.disturbance_seed = config.disturbance_seed
        self._disturb = None  # this episode's DisturbanceRun, or None
        self._estimate = None  # this episode's EstimateErrorRun (world.estimate_error), or None
        self._fields = field_cache(self.world) if self.progress == "geodesic" else None
        self._field = None  # this episode's cost-to-go field (geodesic progress)
        self._cost_to_go = np.inf  # its value at the vehicle after the last step, m

    # -- episode ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start the next task (or ``options["task"]``); ``seed`` re-samples the task list."""
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
        elif self.task_order == "random":
            task = self._tasks[int(self.np_random.integers(len(self._tasks)))]
        else:
            if seed is not None and self._given_tasks is None:
                self._tasks = sample_tasks(self.world.scene, self.world.grid, self._num_tasks, seed,
                                           self.setting, self.world.protocol)
                self._next_task = 0
            if not self._tasks:
                self._tasks = sample_tasks(self.world.scene, self.world.grid, self._num_tasks, 0,
                                           self.setting, self.world.protocol)
            task = self._tasks[self._next_task % len(self._tasks)]
            self._next_task += 1
        self.task = task
        spec = options.get("disturbance", self.disturbance)
        self._disturb = spec.start(self.disturbance_seed, task.task_id, self._dt) if spec is not None else None
        model = self.world.estimate_error
        self._estimate = model.start(self.disturbance_seed, task.task_id, self._dt) if model is not None else None
        self.flight.reset(task.start_position[None, :], np.array([task.start_yaw]))
        self.status = EpisodeStatus.RUNNING
        self.steps = 0
        self.path_length_m = 0.0
        self.trajectory = [self.position.copy()]
        self._goal64 = np.ascontiguousarray(task.goal_position, dtype=np.float64).reshape(3)
        self._distance = self.distance_to_goal_m
        self.min_distance_m = self._distance
        if self._fields is not None:
            self._field = goal_field(self._fields, self._goal64)
            self._cost_to_go = cost_to_go(self._fields, self._field, self.position)[0]
        self._goal_image = self._render_rgb_at(task.goal_position, task.goal_yaw) \
            if self.setting == "imagegoal" and self.render_images else None
        if self.setting == "imagegoal" and self._goal_image is None:
            self._goal_image = self._blank_images()[0]
        if self._distance <= self.world.protocol.success_radius_m:
            self.status = EpisodeStatus.SUCCESS
        return self._observation(), self._info()

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.status is not _RUNNING:
            raise RuntimeError(f"episode already ended ({self.status.value}); call reset()")
        if type(action) is np.ndarray and action.shape == (4,) and action.dtype.char in "fd":
            cmd = action  # the kernel reads float32 and float64 commands as float64
        else:
            cmd = np.ascontiguousarray(action, dtype=np.float64).reshape(4)
        # One compiled call steps the vehicle, checks it and computes what follows
        # (distances, the float32 state); the arithmetic is the same as the numpy it replaces.
        state = np.empty(13, np.float32)
        total = 0.0
        for _ in range(self.action_repeat):  # stops at the period in which the episode ends
            if self._disturb is not None:
                dv = self._disturb.velocity_change(self.steps)
                if dv is not None:  # an external velocity change before the flight model's step
                    self.vehicle.state[0, 3:6] += dv
            try:
                code, moved, distance, gx, gy, gz, yaw = self.flight.step_observe(cmd, self._goal64, state)
            except ValueError:
                raise ValueError(f"action must be finite, got {np.asarray(cmd, dtype=np.float64).tolist()}") \
                    from None
            self.steps += 1
            if self._estimate is not None:
                self._estimate.step()
            self.path_length_m += moved
            self.trajectory.append(self.vehicle.state[0, 0:3].copy())
            if distance < self.min_distance_m:
                self.min_distance_m = distance
            reward = self._distance - distance if self._fields is None else 0.0
            self._distance = distance
            status = CODE_STATUS[code]
            if status is _RUNNING and distance <= self._success_radius_m:
                status = _SUCCESS
            if status is _RUNNING and self.steps * self._dt >= self.task.time_limit_s - 1e-9:
                status = _TIMEOUT
            self.status = status
            if self.reward_progress != 1.0:
                reward *= self.reward_progress
            if status is _SUCCESS:
                reward += self.reward_success
            elif status is _COLLISION or status is _OUT_OF_BOUNDS:
                reward += self.reward_collision
            total += reward
            if status is not _RUNNING:
                break
        if self._fields is not None:
            after = cost_to_go(self._fields, self._field, self.position)
            progress = float(geodesic_progress(np.array([self._cost_to_go]), after)[0])
            if self.reward_progress != 1.0:
                progress *= self.reward_progress
            total += progress
            self._cost_to_go = after[0]
        terminated = status is _SUCCESS or status is _COLLISION or status is _OUT_OF_BOUNDS
        truncated = status is _TIMEOUT
        if self.render_images:
            obs = self._observation()
        else:
            rgb, depth = self._blank_images()
            obs = {"rgb": rgb, "depth": depth, "state": state}
            self._last_rgb = rgb
            seen = None
            if self._estimate is not None:  # the policy sees the estimate (airplay.sim.estimate_error)
                seen = self.estimated_position
                state[0:3] = seen
            if self.setting == "pointgoal" and seen is None:  # goal_in_heading_frame, on the kernel's goal - position
                obs["goal"] = map_to_heading_xyz(gx, gy, gz, yaw).astype(np.float32)
            elif self.setting == "pointgoal":
                obs["goal"] = goal_in_heading_frame(seen, self.yaw, self.task.goal_position).astype(np.float32)
            elif self.setting == "imagegoal":
                obs["goal_image"] = self._goal_image_obs()
            if len(obs) != len(self.observation_keys):
                obs = {k: obs[k] for k in self.observation_keys}
        return obs, float(total), terminated, truncated, self._info()

    def render(self):
        """The last camera image (rgb_array mode)."""
        return None if self.render_mode is None else self._last_rgb

    # -- state -------------------------------------------------------------------------------
    @property
    def position(self) -> np.ndarray:
        return self.vehicle.position[0]

    @property
    def yaw(self) -> float:
        return float(self.vehicle.yaw[0])

    @property
    def time_s(self) -> float:
        return self.steps * self._dt

    @property
    def distance_to_goal_m(self) -> float:
        return float(np.linalg.norm(self.task.goal_position - self.position))

    @property
    def estimated_position(self) -> np.ndarray:
        """(3,) map m: the position the policy sees, the true one plus the vehicle's estimate error
        (``world.estimate_error``; without one, :attr:`position` itself)."""
        if self._estimate is None:
            return self.position
        return self.position + self._estimate.offset

    def state_vector(self) -> np.ndarray:
        """(13,) float32 observed state: position (the estimate's, :attr:`estimated_position`) m map,
        quaternion xyzw, velocity m/s map, body rates rad/s."""
        v = self.vehicle
        return np.concatenate([self.estimated_position, v.quat_xyzw[0], v.velocity[0],
                               v.angular_velocity_body[0]]).astype(np.float32)

    def _render_rgb_at(self, position: np.ndarray, yaw: float) -> np.ndarray:
        return self.world.camera_images(position, yaw, self.render_backend, depth=False, max_depth_m=MAX_DEPTH_M)[0]

    def _blank_images(self) -> tuple[np.ndarray, np.ndarray]:
        """Fresh zero RGB (H, W, 3) uint8 and depth (H, W, 1) float32 for ``render_images=False``
        (writable: a policy may normalise its observation in place)."""
        h, w = self.camera.height, self.camera.width
        return np.zeros((h, w, 3), np.uint8), np.zeros((h, w, 1), np.float32)

    def _goal_image_obs(self) -> np.ndarray:
        """A copy of the goal image for an observation."""
        return self._goal_image.copy()

    def _observation(self) -> dict:
        keys = self.observation_keys
        seen = self.estimated_position
        if self.render_images and (self._want_rgb or self._want_depth):
            rgb, depth = self.world.camera_images(seen, self.yaw, self.render_backend,
                                                  depth=self._want_depth, max_depth_m=MAX_DEPTH_M, rgb=self._want_rgb)
        else:
            rgb, depth = self._blank_images()
        self._last_rgb = rgb
        obs = {}
        if "rgb" in keys:
            obs["rgb"] = rgb
        if "depth" in keys:
            obs["depth"] = depth.astype(np.float32) if self.render_images else depth
        if "state" in keys:
            obs["state"] = self.state_vector()
        if "goal" in keys:
            obs["goal"] = goal_in_heading_frame(seen, self.yaw, self.task.goal_position).astype(np.float32)
        elif "goal_image" in keys:
            obs["goal_image"] = self._goal_image_obs()
        return obs

    def _info(self) -> dict:
        return {
            "status": self.status.value,
            "task_id": self.task.task_id,
            "steps": self.steps,
            "time_s": self.time_s,
            "distance_to_goal_m": self._distance,
            "min_distance_m": self.min_distance_m,
            "path_length_m": self.path_length_m,
        }
