"""Many vehicles as one batch: :class:`AirPlayVectorEnv`, and the factories behind the Gymnasium ids.

``AirPlayVectorEnv`` is Gymnasium's ``VectorEnv`` over N vehicles in one scene, or in several
(``scene`` a list: sub-environment i flies in ``scene[i % len(scene)]``). Each step is, per
scene, one compiled flight-model call for its vehicles (:meth:`airplay.sim.flight.FlightSim.move`)
and one compiled collision and bounds call against its SDF and region
(:meth:`~airplay.sim.flight.FlightSim.check`), then the episode bookkeeping for all N in numpy,
and each scene's camera views rendered in one call (:class:`airplay.world.camera_batch.CameraBatch`:
threads across cameras, pose-cell cuts shared).

Sub-environment i behaves as the single environment :func:`make_env` gives for its scene, step
for step: the same tasks (one pool per scene, setting and ``task_seed``), the same draw of a
task per episode (the sub-environment's generator, seeded ``seed + i`` by ``reset(seed=seed)``
as Gymnasium seeds a ``SyncVectorEnv``), the same observations bit for bit, rewards,
terminations and infos. So the same seeds give the same observations whatever N, the grouping
of sub-environments into scenes or the number of render threads.

Setting "vln" (``airplay/VLN-v0``): goal-free tasks whose observations also hold the instruction
(:mod:`airplay.world.vln_env`); batched, ``obs["instruction"]`` is a tuple of N strings (the
batch of a Text space is a Tuple).

Action repeat: with ``action_repeat`` R (default 1) a step applies each sub-environment's action
for R control periods, as :class:`AirPlayEnv` does: the moves, checks and bookkeeping of every
period; a sub-environment whose episode ends in a period is held where it ended (its vehicle's
state put back after each later move of the batch) while the others fly on, and the step stops
early once none is flying. Rewards are summed over the periods each ran; the views are
rendered once, after the last period.

Autoreset: ``AutoresetMode.NEXT_STEP`` (Gymnasium's default): the step after a sub-environment
terminates or truncates resets it, ignoring its action, and returns the new episode's first
observation with reward 0, not terminated, not truncated.

Episodes of given tasks: :meth:`start` begins episodes of given tasks in given sub-environments
now (an evaluation's task list, flown N at a time: :mod:`airplay.eval.batched`), and :meth:`park`
stops sub-environments that have nothing left to fly: a parked one neither moves, nor renders
(its images are zeros), nor resets, until :meth:`start`, :meth:`restart` or :meth:`reset`.

Timings: ``timings`` accumulates seconds per part (``dynamics``, ``collision``, ``render``,
``other``) and ``steps``; :meth:`reset_timings` zeroes them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from threading import Lock

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from airplay.episode_status import EpisodeStatus
from airplay.frames import map_to_heading_xyz
from airplay.render.api import Backend
from airplay.sim.flight import FlightSim
from airplay.tasks.sampler import SETTINGS, Task, sample_tasks
from airplay.world.camera_batch import CameraBatch
from airplay.world.env import (FAILURE_REWARD, MAX_DEPTH_M, SUCCESS_REWARD, AirPlayEnv, check_action_repeat,
                               check_reward_weights, observation_keys, repeated_metadata)
from airplay.world.geodesic import (check_progress, cost_to_go, cost_to_go_rows, field_cache, geodesic_progress,
                                    goal_field)
from airplay.world.vln_env import INSTRUCTION_KEY, AirPlayVLNEnv, split_observations, vln_tasks
from airplay.world.world import World

GYM_SETTINGS = SETTINGS + ("vln",)
"""The settings of the registered ids: the protocol's three and VLN."""
DEFAULT_OBSERVATIONS = ("rgb", "depth", "goal")
"""The registered environments' default keys ("goal" left out for goal-free tasks; the state
only where asked for)."""

# status codes of the batch: FlightSim's 0-2, then the two the episode adds
_RUNNING, _COLLISION, _OUT_OF_BOUNDS, _SUCCESS, _TIMEOUT = 0, 1, 2, 3, 4
_STATUS_NAMES = np.array([EpisodeStatus.RUNNING.value, EpisodeStatus.COLLISION.value,
                          EpisodeStatus.OUT_OF_BOUNDS.value, EpisodeStatus.SUCCESS.value,
                          EpisodeStatus.TIMEOUT.value], dtype=object)

_WORLDS: dict = {}
_TASKS: dict = {}
_CACHE_LOCK = Lock()


def gym_observations(observations: Sequence[str] | None, setting: str) -> tuple[str, ...]:
    """``observations`` for the registered environments: None gives :data:`DEFAULT_OBSERVATIONS`
    (without "goal" for goal-free tasks; rgb, depth and the instruction for "vln")."""
    if observations is None:
        if setting == "vln":
            return ("rgb", "depth", INSTRUCTION_KEY)
        return tuple(k for k in DEFAULT_OBSERVATIONS if k != "goal" or setting != "goalfree")
    return observations


def image_size_of(image_size) -> tuple[int, int] | None:
    """(width, height) from an int (square) or a (width, height) pair; None stays None.
    ValueError naming ``image_size`` otherwise."""
    if image_size is None:
        return None
    size = (image_size, image_size) if isinstance(image_size, (int, np.integer)) else image_size
    try:
        w, h = size
    except (TypeError, ValueError):
        raise ValueError(f"image_size must be an int or a (width, height) pair, got {image_size!r}") from None
    for v in (w, h):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"image_size must be >= 1 pixel (an int or a (width, height) pair), got {image_size!r}")
    return int(w), int(h)


def load_world(scene, image_size=None, cache_dir: str | Path | None = None) -> World:
    """A :class:`World` from ``scene`` (a World, or a scene folder: loaded once per process and
    kept, with its caches under ``cache_dir``), its camera at ``image_size``. ValueError naming
    ``scene`` when it does not load."""
    size = image_size_of(image_size)
    if isinstance(scene, World):
        world = scene
    elif isinstance(scene, (str, Path)):
        key = (str(Path(scene).resolve()), None if cache_dir is None else str(Path(cache_dir).resolve()))
        with _CACHE_LOCK:
            world = _WORLDS.get(key)
            if world is None:
                try:
                    world = World.load(scene, cache_dir=cache_dir)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"scene {str(scene)!r} does not load: {e}") from e
                _WORLDS[key] = world
    else:
        raise ValueError(f"scene must be a scene folder or a World, got {scene!r}")
    return world if size is None else world.with_camera_size(*size)


def task_pool(world: World, setting: str, num_tasks: int = 16, task_seed: int = 0) -> list[Task]:
    """The protocol's tasks for ``world`` (``num_tasks`` sampled with ``task_seed``), sampled once
    per process for each scene, setting, count and seed (the sampler plans A* paths: ~0.1 s a task)."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; choose one of {', '.join(SETTINGS)}")
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise ValueError(f"num_tasks must be an integer >= 1, got {num_tasks!r}")
    key = (id(world.scene.spec), world.scene.name, id(world.protocol), setting, int(num_tasks), int(task_seed))
    with _CACHE_LOCK:
        entry = _TASKS.get(key)
        if entry is None or entry[0] is not world.scene.spec:
            tasks = sample_tasks(world.scene, world.grid, int(num_tasks), int(task_seed), setting, world.protocol)
            entry = _TASKS[key] = (world.scene.spec, tasks)
    return list(entry[1])


def scene_tasks(world: World, setting: str, tasks=None, num_tasks: int = 16,
                task_seed: int = 0) -> tuple[list[Task], list[str] | None]:
    """The tasks of one scene and, for "vln", their instructions (else None): ``tasks`` as given
    (for "vln": :class:`~airplay.vln.episodes.VLNEpisode` s, which ``airplay/VLN-v0``'s entry
    points in :mod:`airplay.vln.gym_env` make when none are given), or the protocol's
    ``num_tasks`` sampled with ``task_seed``."""
    if setting != "vln":
        return (task_pool(world, setting, num_tasks, task_seed) if tasks is None else list(tasks)), None
    if tasks is None:
        raise ValueError("tasks: the vln setting flies given VLN episodes; gymnasium.make('airplay/VLN-v0') "
                         "(airplay.vln.gym_env) makes the default ones")
    return vln_tasks(list(tasks), world.protocol)


def _check_setting(setting: str) -> None:
    if setting not in GYM_SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; choose one of {', '.join(GYM_SETTINGS)}")


def _single_env(world: World, setting: str, tasks: list[Task], texts: list[str] | None, observations,
                **kwargs) -> AirPlayEnv:
    """The one-vehicle environment of ``setting`` over ``tasks`` (drawn at random per episode)."""
    if setting == "vln":
        keys, with_instruction = split_observations(observations)
        return AirPlayVLNEnv(world, tasks, texts, with_instruction, observations=keys, **kwargs)
    return AirPlayEnv(world, setting, tasks=tasks, observations=gym_observations(observations, setting),
                      task_order="random", **kwargs)


def make_env(scene, setting: str = "pointgoal", *, image_size=None, observations: Sequence[str] | None = None,
             tasks: list | None = None, num_tasks: int = 16, task_seed: int = 0,
             reward_progress: float = 1.0, reward_success: float = SUCCESS_REWARD,
             reward_collision: float = FAILURE_REWARD, render_backend: Backend = "auto",
             render_mode: str | None = None, cache_dir: str | Path | None = None,
             action_repeat: int = 1, progress: str = "euclidean") -> AirPlayEnv:
    """One vehicle: the environment ``gymnasium.make("airplay/PointGoal-v0", scene=...)`` builds.

    Args:
        scene: a scene folder (kept per process: many environments share its World) or a
            :class:`World` (``gymnasium.make`` cannot copy one into the spec: a checker that
            remakes the environment from its spec needs the folder).
        setting: "pointgoal", "imagegoal", "goalfree" or "vln" (:class:`AirPlayVLNEnv`).
        image_size: the camera's size, an int (square) or (width, height), the scene camera's
            field of view (None: the scene camera's size).
        observations: keys from "rgb", "depth", "goal", "state" ("instruction" for "vln"; default:
            rgb, depth and the goal, or the instruction).
        tasks: the episodes' tasks (for "vln": VLNEpisode s; default: ``num_tasks`` sampled by the
            protocol with ``task_seed``); each ``reset`` draws one with the environment's seeded generator.
        reward_progress, reward_success, reward_collision: the reward's weights
            (:mod:`airplay.world.env`; collision also covers leaving the region).
        render_backend: "auto", "cpu" or "gsplat".
        cache_dir: where a scene folder's caches (SDF, level-of-detail tree) go (None: airplay's).
        action_repeat: control periods (50 Hz) each step applies its action for, an integer >= 1
            (:class:`AirPlayEnv`: the episode ends at the period it ends in, the reward is the
            periods' sum, one observation per step).
        progress: "euclidean" (straight-line) or "geodesic" (cost-to-go around obstacles,
            :mod:`airplay.world.geodesic`): how the reward measures progress to the goal.

    Episodes end as the protocol says (success radius, collision, bounds, the task's time limit).
    """
    if isinstance(scene, (list, tuple)):
        raise ValueError("scene: gymnasium.make builds one environment from one scene; a list of scenes is for "
                         "gymnasium.make_vec / AirPlayVectorEnv")
    _check_setting(setting)
    check_action_repeat(action_repeat)
    check_progress(progress)
    world = load_world(scene, image_size, cache_dir)
    tasks, texts = scene_tasks(world, setting, tasks, num_tasks, task_seed)
    return _single_env(world, setting, tasks, texts, observations, render_backend=render_backend,
                       render_mode=render_mode, reward_progress=reward_progress, reward_success=reward_success,
                       reward_collision=reward_collision, action_repeat=action_repeat, progress=progress)


def make_vector_env(num_envs: int = 1, scene=None, setting: str = "pointgoal", **kwargs) -> "AirPlayVectorEnv":
    """The ``vector_entry_point`` of the registered ids: ``gymnasium.make_vec(id, num_envs=N, scene=...)``."""
    return AirPlayVectorEnv(num_envs, scene, setting, **kwargs)


def _merge_spaces(spaces: list, what: str):
    """One space holding every scene's observations: Boxes of one shape and dtype widened to
    the union of their bounds, Text spaces to the union of their characters and lengths.
    ValueError naming ``what`` where the shapes differ."""
    first = spaces[0]
    if all(s == first for s in spaces[1:]):
        return first
    if isinstance(first, gymnasium.spaces.Dict):
        return gymnasium.spaces.Dict({k: _merge_spaces([s[k] for s in spaces], f"{what}[{k!r}]") for k in first})
    if isinstance(first, gymnasium.spaces.Text):
        return gymnasium.spaces.Text(max(s.max_length for s in spaces), min_length=min(s.min_length for s in spaces),
                                     charset="".join(sorted(set().union(*(s.character_set for s in spaces)))))
    if isinstance(first, gymnasium.spaces.Box) and all(s.shape == first.shape and s.dtype == first.dtype
                                                        for s in spaces):
        return gymnasium.spaces.Box(np.min([s.low for s in spaces], axis=0), np.max([s.high for s in spaces], axis=0),
                                    first.shape, first.dtype)
    raise ValueError(f"{what}: the scenes' spaces differ ({', '.join(map(str, spaces))})")


class _Scene:
    """One scene of the batch: its World, the sub-environments in it (``rows``), their flight
    model and collision kernels, their cameras, tasks and (VLN) instructions."""

    def __init__(self, index: int, world: World, rows: np.ndarray, tasks: list[Task], texts: list[str] | None,
                 render_backend: Backend, threads: int | None) -> None:
        self.index, self.world, self.rows = index, world, rows
        self.tasks, self.texts = tasks, texts
        self.flight = FlightSim(world.vehicle, world.checker, len(rows))
        self.camera = CameraBatch(world, len(rows), render_backend, threads, MAX_DEPTH_M)
        self.local = np.full(int(rows.max()) + 1, -1, dtype=np.int64)
        self.local[rows] = np.arange(len(rows))  # sub-environment -> row of this scene's batch


def _scene_entries(scene, num_envs: int) -> list:
    """The scene argument as a list of entries (one scene: a list of one)."""
    if not isinstance(scene, (list, tuple)):
        return [scene]
    if not scene:
        raise ValueError("scene: an empty list; give a scene, or a list of scenes (one per sub-environment, "
                         "or cycled)")
    if len(scene) > num_envs:
        raise ValueError(f"scene: {len(scene)} scenes for num_envs={num_envs}; give at most one per "
                         "sub-environment")
    return list(scene)


class AirPlayVectorEnv(VectorEnv):
    """N vehicles in one scene or several, stepped, checked and rendered as one batch (module docstring).

    Args:
        num_envs: N, the number of sub-environments (>= 1).
        scene: a scene (folder or :class:`World`) for every sub-environment, or a list of scenes:
            sub-environment i flies in ``scene[i % len(scene)]`` (at most N scenes).
        setting, image_size, observations, num_tasks, task_seed, reward_progress, reward_success,
            reward_collision, render_backend, cache_dir, action_repeat: as :func:`make_env`, for every
            sub-environment.
        tasks: as :func:`make_env`'s for one scene; with a list of scenes, a list of task lists
            (one per scene, None entries sampled).
        threads: render threads (default: the CPUs this process may use); the images do not
            depend on it.
        render_mode: None or "rgb_array" (``render()`` gives the N last camera images).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, scene, setting: str = "pointgoal", *, image_size=None,
                 observations: Sequence[str] | None = None, tasks: list | None = None, num_tasks: int = 16,
                 task_seed: int = 0, reward_progress: float = 1.0, reward_success: float = SUCCESS_REWARD,
                 reward_collision: float = FAILURE_REWARD, render_backend: Backend = "auto",
                 threads: int | None = None, render_mode: str | None = None,
                 cache_dir: str | Path | None = None, action_repeat: int = 1,
                 progress: str = "euclidean") -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        _check_setting(setting)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if setting == "vln":
            keys, with_instruction = split_observations(observations)
            keys = observation_keys(keys, "goalfree") + ((INSTRUCTION_KEY,) if with_instruction else ())
        else:
            keys = observation_keys(gym_observations(observations, setting), setting)
        check_reward_weights(reward_progress, reward_success, reward_collision)
        self.action_repeat = check_action_repeat(action_repeat)
        self.metadata = repeated_metadata(self.metadata, self.action_repeat)
        self.progress = check_progress(progress)
        image_size_of(image_size)
        n = self.num_envs = int(num_envs)
        entries = _scene_entries(scene, n)
        several = isinstance(scene, (list, tuple))
        if several and tasks is not None and (len(tasks) != len(entries) or any(
                t is not None and not isinstance(t, (list, tuple)) for t in tasks)):
            raise ValueError(f"tasks: with a list of {len(entries)} scenes, give a list of {len(entries)} task lists "
                             "(one per scene; None samples that scene's)")
        per_scene_tasks = list(tasks) if several and tasks is not None else [tasks] * len(entries)
        worlds = []
        for j, entry in enumerate(entries):
            try:
                worlds.append(load_world(entry, image_size, cache_dir))
            except ValueError as e:
                raise ValueError(f"scene[{j}]: {e}" if several else str(e)) from e
        sizes = [(w.scene.spec.camera.intrinsics.width, w.scene.spec.camera.intrinsics.height) for w in worlds]
        if len(set(sizes)) > 1:
            raise ValueError("image_size: the scenes' cameras differ in size ("
                             + ", ".join(f"scene[{j}] {w}x{h}" for j, (w, h) in enumerate(sizes))
                             + "); pass image_size to render every scene at one size")
        self.setting, self.render_mode = setting, render_mode
        self.observation_keys = keys
        assignment = np.arange(n) % len(entries)  # sub-environment i -> scene entry
        kwargs = dict(render_backend=render_backend, reward_progress=reward_progress,
                      reward_success=reward_success, reward_collision=reward_collision, progress=progress)
        self.scenes: list[_Scene] = []
        obs_spaces, act_spaces = [], []
        for j, world in enumerate(worlds):
            scene_tasks_j, texts = scene_tasks(world, setting, per_scene_tasks[j], num_tasks, task_seed)
            if not scene_tasks_j:
                raise ValueError(f"tasks{f'[{j}]' if several else ''} must hold at least one task")
            # One single environment gives the spaces (exactly those of make_env's).
            proto = _single_env(world, setting, scene_tasks_j, texts, observations, render_images=False, **kwargs)
            obs_spaces.append(proto.observation_space)
            act_spaces.append(proto.action_space)
            self.scenes.append(_Scene(j, world, np.flatnonzero(assignment == j), scene_tasks_j, texts,
                                      render_backend, threads))
        if any(a != act_spaces[0] for a in act_spaces[1:]):
            raise ValueError("scene: the scenes' vehicles take different command limits ("
                             + ", ".join(f"scene[{j}] {a}" for j, a in enumerate(act_spaces))
                             + "); one batch needs one action space")
        self.single_observation_space = _merge_spaces(obs_spaces, "observations")
        self.single_action_space = act_spaces[0]
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        first = self.scenes[0]
        self.world, self.worlds = first.world, worlds
        self.scene_of = assignment
        self.reward_progress = float(reward_progress)
        self.reward_success, self.reward_collision = float(reward_success), float(reward_collision)
        cam = first.world.scene.spec.camera.intrinsics
        self._hw = (cam.height, cam.width)
        self._want_rgb = "rgb" in keys or render_mode == "rgb_array"
        self._want_depth = "depth" in keys
        self._dt = np.empty(n)
        self._radius = np.empty(n)
        for s in self.scenes:
            self._dt[s.rows] = s.world.vehicle.control_dt_s
            self._radius[s.rows] = s.world.protocol.success_radius_m
        self._rngs = [seeding.np_random(None)[0] for _ in range(n)]
        self._goals = np.zeros((n, 3))
        self._time_limits = np.zeros(n)
        self._steps = np.zeros(n, dtype=np.int64)
        self._distance = np.zeros(n)
        self._min_distance = np.zeros(n)
        self._geodesic = self.progress == "geodesic"
        self._goal_fields: list = [None] * n  # each row's cost-to-go field (geodesic progress)
        self._cost_to_go = np.full(n, np.inf)  # its value at the vehicle after the last step, m
        self._path_length = np.zeros(n)
        self._status = np.zeros(n, dtype=np.int64)
        self._task_ids = np.full(n, None, dtype=object)
        self._instructions = [""] * n
        self._autoreset = np.zeros(n, dtype=bool)
        self._parked = np.zeros(n, dtype=bool)
        self._goal_images = np.zeros((n, *self._hw, 3), np.uint8) if setting == "imagegoal" else None
        self._last_rgb: np.ndarray | None = None
        self._started = False
        self.closed = False
        self.reset_timings()

    # -- API -------------------------------------------------------------------------------------
    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Start a new episode in every sub-environment; ``seed`` (int: sub-environment i gets
        ``seed + i``; or one per sub-environment) seeds their task draws."""
        if options:
            raise ValueError(f"options: AirPlayVectorEnv.reset takes none, got {sorted(options)}")
        n = self.num_envs
        if seed is None:
            seeds = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed: {len(seeds)} seeds for {n} sub-environments")
        if seed is not None or not self._started:
            self._rngs = [seeding.np_random(s)[0] for s in seeds]
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seeds[0])
        self._started = True
        self._parked[:] = False
        self._reset_rows(np.arange(n))
        self._autoreset[:] = False
        obs = self._observe()
        return obs, self._infos()

    def step(self, actions):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        n = self.num_envs
        t0 = time.perf_counter()
        a = np.asarray(actions)
        if a.shape != (n, 4):
            raise ValueError(f"actions must have shape ({n}, 4), got {a.shape}")
        cmd = np.array(a, dtype=np.float64)
        parked = self._parked
        resets = np.flatnonzero(self._autoreset & ~parked)
        cmd[resets] = 0.0  # ignored: these sub-environments start a new episode instead
        cmd[parked] = 0.0  # ignored: parked
        finite = np.isfinite(cmd).all(axis=1)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"actions must be finite; sub-environment {i} got {cmd[i].tolist()}")
        t1 = time.perf_counter()
        reward = np.zeros(n)
        status = self._status.copy()
        live = ~self._autoreset & ~parked  # flying this step (the rows to reset move under a zero command, then restart)
        ended = parked.copy()  # parked, or ended in an earlier period of this step: held where they are
        pos = self._gather("position")
        t_dyn = t_col = 0.0
        for _ in range(self.action_repeat):
            before = pos
            ta = time.perf_counter()
            held = self._hold(np.flatnonzero(ended)) if ended.any() else None
            if len(self.scenes) == 1:
                self.scenes[0].flight.move(cmd)
            else:
                for s in self.scenes:
                    s.flight.move(cmd[s.rows])
            if held is not None:
                self._put_back(held)
            tb = time.perf_counter()
            if len(self.scenes) == 1:
                codes = self.scenes[0].flight.check()
            else:
                codes = np.empty(n, dtype=np.int8)
                for s in self.scenes:
                    codes[s.rows] = s.flight.check()
            tc = time.perf_counter()
            t_dyn += tb - ta
            t_col += tc - tb
            pos = self._gather("position")
            dx, dy, dz = pos[:, 0] - before[:, 0], pos[:, 1] - before[:, 1], pos[:, 2] - before[:, 2]
            moved = np.sqrt(dx * dx + dy * dy + dz * dz)  # the single environment's kernel's sums
            gx, gy, gz = self._goals[:, 0] - pos[:, 0], self._goals[:, 1] - pos[:, 1], self._goals[:, 2] - pos[:, 2]
            distance = np.sqrt(gx * gx + gy * gy + gz * gz)
            self._steps[live] += 1
            self._path_length[live] += moved[live]
            self._min_distance[live] = np.minimum(self._min_distance[live], distance[live])
            r = self._distance - distance if not self._geodesic else np.zeros(n)
            if self.reward_progress != 1.0:
                r *= self.reward_progress
            self._distance[live] = distance[live]
            st = codes.astype(np.int64)
            running = st == _RUNNING
            st[running & (distance <= self._radius)] = _SUCCESS
            running = st == _RUNNING
            st[running & (self._steps * self._dt >= self._time_limits - 1e-9)] = _TIMEOUT
            r[st == _SUCCESS] += self.reward_success
            r[(st == _COLLISION) | (st == _OUT_OF_BOUNDS)] += self.reward_collision
            reward[live] += r[live]
            status[live] = st[live]
            stopped = live & (st != _RUNNING)
            ended |= stopped
            live &= ~stopped
            if not live.any():
                break
        if self._geodesic:
            self._add_geodesic_progress(reward, np.flatnonzero(~self._autoreset & ~parked), pos)
        t3 = time.perf_counter()
        terminated = (status == _SUCCESS) | (status == _COLLISION) | (status == _OUT_OF_BOUNDS)
        truncated = status == _TIMEOUT
        terminated[parked] = False
        truncated[parked] = False
        self._status = status
        if len(resets):
            self._reset_rows(resets)
            reward[resets] = 0.0
            terminated[resets] = False
            truncated[resets] = False
        self._autoreset = terminated | truncated
        t4 = time.perf_counter()
        obs = self._observe()
        infos = self._infos()
        tm = self.timings
        tm["dynamics"] += t_dyn
        tm["collision"] += t_col
        tm["other"] += (t1 - t0) + (t3 - t1 - t_dyn - t_col) + (t4 - t3) \
            + (time.perf_counter() - t4 - self._last_render_s)
        tm["steps"] += 1
        return obs, reward, terminated, truncated, infos

    def restart(self, rows) -> tuple[dict, dict]:
        """Start new episodes now in sub-environments ``rows`` (each draws its task with its own
        generator, as an autoreset does) and return the batch's observations and infos; the next
        step does not reset them again. For wrappers that reset in the step where an episode
        ends (Stable-Baselines3's ``VecEnv``: :mod:`airplay.rl.sb3`)."""
        if not self._started:
            raise RuntimeError("call reset() before restart()")
        rows = np.unique(np.asarray(rows, dtype=np.int64).reshape(-1))
        if len(rows) and (rows.min() < 0 or rows.max() >= self.num_envs):
            raise ValueError(f"rows must be sub-environment indices in 0..{self.num_envs - 1}, got {rows.tolist()}")
        self._reset_rows(rows)
        self._autoreset[rows] = False
        self._parked[rows] = False
        return self._observe(), self._infos()

    def start(self, rows, tasks: Sequence[Task]) -> tuple[dict, dict]:
        """Start an episode of ``tasks[k]`` now in sub-environment ``rows[k]`` (a task of that
        row's scene and of this setting; not for "vln"), unparking it; the next step does not reset
        these rows. Returns the observations and infos of ``rows`` only (arrays of len(rows), in
        that order); only they are rendered. Resets the environment first if it has not been.
        Row i then flies as :class:`AirPlayEnv` flies ``reset(options={"task": task})``."""
        if self.setting == "vln":
            raise ValueError("start: vln tasks carry instructions; use reset/restart")
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        tasks = list(tasks)
        if len(rows) != len(tasks) or len(np.unique(rows)) != len(rows):
            raise ValueError(f"start: {len(rows)} rows (each once) for {len(tasks)} tasks")
        if len(rows) and (rows.min() < 0 or rows.max() >= self.num_envs):
            raise ValueError(f"rows must be sub-environment indices in 0..{self.num_envs - 1}, got {rows.tolist()}")
        for i, task in zip(rows.tolist(), tasks):
            world = self.scenes[int(self.scene_of[i])].world
            if not isinstance(task, Task) or task.setting != self.setting or task.scene != world.name:
                raise ValueError(f"start: row {i} flies {self.setting} tasks of scene {world.name!r}, got {task!r}")
        if not self._started:
            self._started = True
            self._parked[:] = True  # the rows not started wait
        self._reset_rows(rows, tasks)
        self._autoreset[rows] = False
        self._parked[rows] = False
        info = self._infos()
        return self._observe(rows), {k: v[rows] for k, v in info.items()}

    def park(self, rows) -> None:
        """Stop sub-environments ``rows`` until :meth:`start`, :meth:`restart` or :meth:`reset`: they
        are not moved, rendered (zero images) or reset, and report neither termination nor truncation."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self._parked[rows] = True
        self._autoreset[rows] = False

    @property
    def parked(self) -> np.ndarray:
        """(N,) bool: the parked sub-environments (a copy)."""
        return self._parked.copy()

    def vehicle_poses(self) -> tuple[np.ndarray, np.ndarray]:
        """The N vehicles' map positions (N, 3) m (ENU) and orientations (N, 4), base_link in map
        as quaternions (x, y, z, w) (float64 copies, sub-environment order): the pose part of the
        ``state`` observation, unrounded."""
        return self._gather("position"), self._gather("quat_xyzw")

    @property
    def goals(self) -> np.ndarray:
        """The N running episodes' goal positions (N, 3), map ENU m (a copy)."""
        return self._goals.copy()

    @property
    def tasks(self) -> list:
        """The first scene's task pool (:meth:`set_tasks` replaces it)."""
        return self.scenes[0].tasks

    def set_tasks(self, tasks: Sequence[Task], scene: int = 0) -> None:
        """Replace the task pool of scene ``scene`` (its index in the ``scene`` argument) for the
        episodes that start after this call (resets, autoresets, :meth:`restart`); running episodes
        fly on. For a curriculum (``examples/ppo_pointgoal.py --curriculum``). The tasks must be of
        this environment's setting and of that scene; not for "vln" (its tasks carry instructions)."""
        if self.setting == "vln":
            raise ValueError("set_tasks: vln tasks carry instructions; make a new environment for other episodes")
        if isinstance(scene, bool) or not isinstance(scene, (int, np.integer)) or not 0 <= scene < len(self.scenes):
            raise ValueError(f"scene must be a scene index in 0..{len(self.scenes) - 1}, got {scene!r}")
        s = self.scenes[int(scene)]
        tasks = list(tasks)
        if not tasks:
            raise ValueError("tasks must hold at least one task")
        for k, task in enumerate(tasks):
            if not isinstance(task, Task):
                raise ValueError(f"tasks[{k}] is not a Task, got {type(task).__name__}")
            if task.setting != self.setting or task.scene != s.world.name:
                raise ValueError(f"tasks[{k}] ({task.task_id}) is a {task.setting} task of scene {task.scene!r}; "
                                 f"scene {scene} is {s.world.name!r} with {self.setting} tasks")
        s.tasks = tasks

    def render(self):
        """The N last camera images (rgb_array mode), a tuple of (H, W, 3) uint8."""
        if self.render_mode is None or self._last_rgb is None:
            return None
        return tuple(self._last_rgb)

    def close_extras(self, **kwargs) -> None:
        for s in self.scenes:
            s.camera.close()

    def reset_timings(self) -> None:
        """Zero :attr:`timings` (seconds per part, and steps)."""
        self.timings = {"dynamics": 0.0, "collision": 0.0, "render": 0.0, "other": 0.0, "steps": 0}
        self._last_render_s = 0.0

    # -- internals -------------------------------------------------------------------------------
    def _gather(self, name: str) -> np.ndarray:
        """The vehicles' ``name`` (a :class:`~airplay.sim.dynamics.QuadrotorBatch` property) for
        all N sub-environments, in sub-environment order (a copy)."""
        if len(self.scenes) == 1:
            return np.array(getattr(self.scenes[0].flight.vehicles, name))
        first = getattr(self.scenes[0].flight.vehicles, name)
        out = np.empty((self.num_envs, *first.shape[1:]), first.dtype)
        for s in self.scenes:
            out[s.rows] = getattr(s.flight.vehicles, name)
        return out

    def _hold(self, rows: np.ndarray) -> list:
        """Copies of the vehicle state of sub-environments ``rows``, for :meth:`_put_back`."""
        held = []
        for s in self.scenes:
            mine = s.local[rows[self.scene_of[rows] == s.index]]
            if len(mine):
                v = s.flight.vehicles
                held.append((v, mine, v.state[mine], v.rotation[mine], v.angular_velocity_body[mine]))
        return held

    def _put_back(self, held: list) -> None:
        """Restore the vehicle state :meth:`_hold` copied (undoing a move of the batch for those rows)."""
        for v, mine, state, rotation, omega in held:
            v.state[mine] = state
            v.rotation[mine] = rotation
            v.angular_velocity_body[mine] = omega

    def _reset_rows(self, rows: np.ndarray, given: Sequence[Task] | None = None) -> None:
        """New episodes for sub-environments ``rows``: each draws a task of its scene with its
        generator, as :meth:`AirPlayEnv.reset` does with ``task_order="random"``, or flies
        ``given[k]`` in row ``rows[k]``."""
        rows = np.asarray(rows, dtype=np.int64)
        for s in self.scenes:
            in_scene = self.scene_of[rows] == s.index
            mine = rows[in_scene]
            if len(mine) == 0:
                continue
            if given is None:
                draws = [int(self._rngs[i].integers(len(s.tasks))) for i in mine]
                tasks = [s.tasks[k] for k in draws]
            else:
                draws, tasks = None, [t for t, here in zip(given, in_scene) if here]
            starts = np.array([t.start_position for t in tasks], dtype=np.float64).reshape(-1, 3)
            s.flight.reset_rows(s.local[mine], starts, np.array([t.start_yaw for t in tasks], dtype=np.float64))
            pos = s.flight.vehicles.position
            for i, task in zip(mine, tasks):
                self._goals[i] = np.ascontiguousarray(task.goal_position, dtype=np.float64).reshape(3)
                self._time_limits[i] = task.time_limit_s
                self._distance[i] = self._min_distance[i] = float(np.linalg.norm(task.goal_position
                                                                                 - pos[s.local[i]]))
                if self._geodesic:
                    fields = field_cache(s.world)
                    self._goal_fields[i] = goal_field(fields, self._goals[i])
                    self._cost_to_go[i] = cost_to_go(fields, self._goal_fields[i], pos[s.local[i]])[0]
            self._task_ids[mine] = [t.task_id for t in tasks]
            if s.texts is not None and draws is not None:
                for i, k in zip(mine, draws):
                    self._instructions[i] = s.texts[k]
            if self._goal_images is not None and "goal_image" in self.observation_keys:
                goals = np.array([t.goal_position for t in tasks], dtype=np.float64).reshape(-1, 3)
                yaws = np.array([t.goal_yaw for t in tasks], dtype=np.float64)
                imgs = np.empty((len(mine), *self._hw, 3), np.uint8)
                s.camera.render(goals, yaws, imgs, None)
                self._goal_images[mine] = imgs
        self._steps[rows] = 0
        self._path_length[rows] = 0.0
        self._status[rows] = np.where(self._distance[rows] <= self._radius[rows], _SUCCESS, _RUNNING)

    def _add_geodesic_progress(self, reward: np.ndarray, rows: np.ndarray, pos: np.ndarray) -> None:
        """Add ``reward_progress`` x the drop of each row's cost-to-go over this step (rows flown
        this step; ``pos`` the batch's map positions after it) to ``reward``, as
        :class:`AirPlayEnv` does after a step's periods."""
        for s in self.scenes:
            mine = rows[self.scene_of[rows] == s.index]
            if len(mine) == 0:
                continue
            after = cost_to_go_rows(field_cache(s.world), [self._goal_fields[i] for i in mine], pos[mine])
            progress = geodesic_progress(self._cost_to_go[mine], after)
            if self.reward_progress != 1.0:
                progress = progress * self.reward_progress
            reward[mine] += progress
            self._cost_to_go[mine] = after

    def _observe(self, rows: np.ndarray | None = None) -> dict:
        """The observations of all rows, or of ``rows`` only (rendering only those); parked rows'
        images are zeros."""
        n, (h, w) = self.num_envs, self._hw
        t = time.perf_counter()
        every = rows is None and not self._parked.any()
        shown = None if every else (np.arange(n) if rows is None else rows)
        if shown is not None:
            shown = shown[~self._parked[shown]]
        blank = np.zeros if not every else np.empty
        rgb = blank((n, h, w, 3), np.uint8) if self._want_rgb else None
        depth = blank((n, h, w, 1), np.float32) if self._want_depth else None
        if rgb is not None or depth is not None:
            if len(self.scenes) == 1:
                v = self.scenes[0].flight.vehicles
                self.scenes[0].camera.render(v.position, v.yaw, rgb, depth, which=shown)
            else:  # each scene's cameras as one batch, into the rows of its sub-environments
                pos, yaw = self._gather("position"), self._gather("yaw")
                for s in self.scenes:
                    which = s.rows if shown is None else shown[self.scene_of[shown] == s.index]
                    s.camera.render(pos, yaw, rgb, depth, which=which)
        self._last_render_s = time.perf_counter() - t
        self.timings["render"] += self._last_render_s
        if rows is None:
            self._last_rgb = rgb
        obs = self._observation_dict(rgb, depth)
        return obs if rows is None else {k: (tuple(v[i] for i in rows) if isinstance(v, tuple) else v[rows])
                                         for k, v in obs.items()}

    def _observation_dict(self, rgb, depth) -> dict:
        n, keys = self.num_envs, self.observation_keys
        obs = {}
        if "rgb" in keys:
            obs["rgb"] = rgb
        if "depth" in keys:
            obs["depth"] = depth
        if "state" in keys:
            obs["state"] = np.concatenate([self._gather(k) for k in ("position", "quat_xyzw", "velocity",
                                                                     "angular_velocity_body")],
                                          axis=1).astype(np.float32)
        if "goal" in keys:
            pos, yaw = self._gather("position"), self._gather("yaw")
            goal = np.empty((n, 3), np.float32)
            for i in range(n):  # the single environment's arithmetic, one vehicle at a time
                d = self._goals[i] - pos[i]
                goal[i] = map_to_heading_xyz(d[0], d[1], d[2], float(yaw[i]))
            obs["goal"] = goal
        elif "goal_image" in keys:
            obs["goal_image"] = self._goal_images.copy()
        if INSTRUCTION_KEY in keys:
            obs[INSTRUCTION_KEY] = tuple(self._instructions)
        return obs

    def _infos(self) -> dict:
        n, ones = self.num_envs, np.ones(self.num_envs, dtype=bool)
        info = {
            "status": _STATUS_NAMES[self._status],
            "task_id": self._task_ids.copy(),
            "steps": self._steps.copy(),
            "time_s": self._steps * self._dt,
            "distance_to_goal_m": self._distance.copy(),
            "min_distance_m": self._min_distance.copy(),
            "path_length_m": self._path_length.copy(),
        }
        for key in list(info):
            info["_" + key] = ones.copy()
        assert len(info["status"]) == n
        return info
