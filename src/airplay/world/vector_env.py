"""Many vehicles as one batch: :class:`AirPlayVectorEnv`, the ``vector_entry_point`` of the Gymnasium ids.

``AirPlayVectorEnv`` is Gymnasium's ``VectorEnv`` over N vehicles in one scene, or in several
(``scene`` a list: sub-environment i flies in ``scene[i % len(scene)]``). Each step is, per
scene, one compiled flight-model call for its vehicles (:meth:`airplay.sim.flight.FlightSim.move`)
and one compiled collision and bounds call against its SDF and region
(:meth:`~airplay.sim.flight.FlightSim.check`), then the episode bookkeeping for all N in numpy,
and each scene's camera views rendered in one call (:class:`airplay.world.camera_batch.CameraBatch`:
threads across cameras, pose-cell cuts shared).

Configuration: one :class:`~airplay.world.env_config.EnvConfig` (or its keywords), as
:func:`~airplay.world.env_factory.make_env` takes. The parts: :mod:`airplay.world.vector_scenes` (the
vehicles of each scene), :mod:`airplay.world.vector_episodes` (the rows' episodes and their batched
start), :mod:`airplay.world.vector_reward` (reward and termination) and
:mod:`airplay.world.vector_observe` (the observations).

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
from collections.abc import Mapping, Sequence

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from airplay.tasks.sampler import Task
from airplay.world.env import repeated_metadata
from airplay.world.env_config import INSTRUCTION_KEY, EnvConfig, env_config, observation_keys, split_observations
from airplay.world.env_factory import gym_config, load_world, scene_tasks, single_env
# the names this module held before env_factory.py and env_config.py (vln/gym_env.py, examples and benches use them)
from airplay.world.env_config import GYM_SETTINGS, image_size_of  # noqa: F401, I001
from airplay.world.env_factory import DEFAULT_OBSERVATIONS, gym_observations, make_env, task_pool  # noqa: F401
from airplay.world.vector_episodes import RUNNING, EpisodeRows
from airplay.world.vector_observe import BatchObserver
from airplay.world.vector_reward import add_geodesic_progress, outcome, period
from airplay.world.vector_scenes import Fleet, SceneBatch, merge_spaces, scene_entries


def make_vector_env(num_envs: int = 1, scene=None, config: EnvConfig | str | None = None, *,
                    tasks: list | None = None, **options) -> AirPlayVectorEnv:
    """The ``vector_entry_point`` of the registered ids: ``gymnasium.make_vec(id, num_envs=N, scene=...)``."""
    return AirPlayVectorEnv(num_envs, scene, config, tasks=tasks, **options)


class AirPlayVectorEnv(VectorEnv):
    """N vehicles in one scene or several, stepped, checked and rendered as one batch (module docstring).

    Args:
        num_envs: N, the number of sub-environments (>= 1).
        scene: a scene (folder or :class:`World`) for every sub-environment, or a list of scenes:
            sub-environment i flies in ``scene[i % len(scene)]`` (at most N scenes).
        config: an :class:`~airplay.world.env_config.EnvConfig` (or a setting's name) for every
            sub-environment, as :func:`make_env` takes it; ``options`` (its field names, or the flat
            reward keywords) change it. ``threads``: render threads (default: the CPUs this process
            may use; the images do not depend on it); ``render_mode`` "rgb_array": ``render()`` gives
            the N last camera images. A disturbance, ``render_images=False`` and ``task_order="cycle"``
            are the single environment's only.
        tasks: as :func:`make_env`'s for one scene; with a list of scenes, a list of task lists
            (one per scene, None entries sampled).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, scene, config: EnvConfig | Mapping | str | None = None, *,
                 tasks: list | None = None, **options) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        config = self.config = gym_config(env_config(config, **options))
        if config.disturbance is not None:
            raise ValueError(f"disturbance: {config.disturbance.to_text()!r} acts on the single environment only "
                             "(AirPlayEnv)")
        if not config.render_images:
            raise ValueError("render_images: False is the single environment's only (AirPlayEnv); the vector "
                             "environment renders every row")
        setting = config.setting
        if setting == "vln":
            keys, with_instruction = split_observations(config.observations)
            keys = observation_keys(keys, "goalfree") + ((INSTRUCTION_KEY,) if with_instruction else ())
        else:
            keys = observation_keys(config.observations, setting)
        self.action_repeat = config.action_repeat
        self.metadata = repeated_metadata(self.metadata, self.action_repeat)
        self.progress = config.reward.progress
        n = self.num_envs = int(num_envs)
        entries = scene_entries(scene, n)
        several = isinstance(scene, (list, tuple))
        if several and tasks is not None and (len(tasks) != len(entries) or any(
                t is not None and not isinstance(t, (list, tuple)) for t in tasks)):
            raise ValueError(f"tasks: with a list of {len(entries)} scenes, give a list of {len(entries)} task lists "
                             "(one per scene; None samples that scene's)")
        per_scene_tasks = list(tasks) if several and tasks is not None else [tasks] * len(entries)
        worlds = []
        for j, entry in enumerate(entries):
            try:
                worlds.append(load_world(entry, config.image_size, config.cache_dir))
            except ValueError as e:
                raise ValueError(f"scene[{j}]: {e}" if several else str(e)) from e
        sizes = [(w.scene.spec.camera.intrinsics.width, w.scene.spec.camera.intrinsics.height) for w in worlds]
        if len(set(sizes)) > 1:
            raise ValueError("image_size: the scenes' cameras differ in size ("
                             + ", ".join(f"scene[{j}] {w}x{h}" for j, (w, h) in enumerate(sizes))
                             + "); pass image_size to render every scene at one size")
        self.setting, self.render_mode = setting, config.render_mode
        self.observation_keys = keys
        assignment = np.arange(n) % len(entries)  # sub-environment i -> scene entry
        proto_config = config.replace(render_images=False)
        self.scenes: list[SceneBatch] = []
        obs_spaces, act_spaces = [], []
        for j, world in enumerate(worlds):
            scene_tasks_j, texts = scene_tasks(world, config, per_scene_tasks[j])
            if not scene_tasks_j:
                raise ValueError(f"tasks{f'[{j}]' if several else ''} must hold at least one task")
            # One single environment gives the spaces (exactly those of make_env's).
            proto = single_env(world, proto_config, scene_tasks_j, texts)
            obs_spaces.append(proto.observation_space)
            act_spaces.append(proto.action_space)
            self.scenes.append(SceneBatch(j, world, np.flatnonzero(assignment == j), scene_tasks_j, texts,
                                          config.render_backend, config.threads))
        if any(a != act_spaces[0] for a in act_spaces[1:]):
            raise ValueError("scene: the scenes' vehicles take different command limits ("
                             + ", ".join(f"scene[{j}] {a}" for j, a in enumerate(act_spaces))
                             + "); one batch needs one action space")
        self.single_observation_space = merge_spaces(obs_spaces, "observations")
        self.single_action_space = act_spaces[0]
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.world, self.worlds = self.scenes[0].world, worlds
        self.scene_of = assignment
        self.reward = config.reward
        self.reward_progress, self.reward_success, self.reward_collision = \
            config.reward.progress_weight, config.reward.success, config.reward.collision
        cam = self.world.scene.spec.camera.intrinsics
        hw = (cam.height, cam.width)
        self.fleet = Fleet(self.scenes, assignment)
        self._episodes = EpisodeRows(self.fleet, self.progress == "geodesic", "goal_image" in keys, hw)
        self._observer = BatchObserver(self.fleet, self._episodes, keys,
                                       "rgb" in keys or config.render_mode == "rgb_array", hw)
        self._rngs = [seeding.np_random(None)[0] for _ in range(n)]
        self._autoreset = np.zeros(n, dtype=bool)
        self._parked = np.zeros(n, dtype=bool)
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
        self._episodes.start(np.arange(n), self._rngs)
        self._autoreset[:] = False
        obs = self._observe()
        return obs, self._episodes.infos()

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
        ep = self._episodes
        reward = np.zeros(n)
        status = ep.status.copy()
        # flying this step (the rows to reset move under a zero command, then restart)
        live = ~self._autoreset & ~parked
        ended = parked.copy()  # parked, or ended in an earlier period of this step: held where they are
        pos = self.fleet.gather("position")
        t_dyn = t_col = 0.0
        for _ in range(self.action_repeat):
            before = pos
            ta = time.perf_counter()
            held = self.fleet.hold(np.flatnonzero(ended)) if ended.any() else None
            self.fleet.move(cmd)
            if held is not None:
                self.fleet.put_back(held)
            tb = time.perf_counter()
            codes = self.fleet.check()
            tc = time.perf_counter()
            t_dyn += tb - ta
            t_col += tc - tb
            pos = self.fleet.gather("position")
            period(ep, self.reward, codes, before, pos, live, reward, status)
            stopped = live & (status != RUNNING)
            ended |= stopped
            live &= ~stopped
            if not live.any():
                break
        if ep.geodesic:
            add_geodesic_progress(ep, self.reward, reward, np.flatnonzero(~self._autoreset & ~parked), pos)
        t3 = time.perf_counter()
        terminated, truncated = outcome(status, parked)
        ep.status = status
        if len(resets):
            self._episodes.start(resets, self._rngs)
            reward[resets] = 0.0
            terminated[resets] = False
            truncated[resets] = False
        self._autoreset = terminated | truncated
        t4 = time.perf_counter()
        obs = self._observe()
        infos = self._episodes.infos()
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
        self._episodes.start(rows, self._rngs)
        self._autoreset[rows] = False
        self._parked[rows] = False
        return self._observe(), self._episodes.infos()

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
        self._episodes.start(rows, self._rngs, tasks)
        self._autoreset[rows] = False
        self._parked[rows] = False
        info = self._episodes.infos()
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
        return self.fleet.gather("position"), self.fleet.gather("quat_xyzw")

    @property
    def goals(self) -> np.ndarray:
        """The N running episodes' goal positions (N, 3), map ENU m (a copy)."""
        return self._episodes.goals.copy()

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
        last = self._observer.last_rgb
        if self.render_mode is None or last is None:
            return None
        return tuple(last)

    def close_extras(self, **kwargs) -> None:
        for s in self.scenes:
            s.camera.close()

    def reset_timings(self) -> None:
        """Zero :attr:`timings` (seconds per part, and steps)."""
        self.timings = {"dynamics": 0.0, "collision": 0.0, "render": 0.0, "other": 0.0, "steps": 0}
        self._last_render_s = 0.0

    def _observe(self, rows: np.ndarray | None = None) -> dict:
        """The observations of all rows, or of ``rows`` only (:class:`BatchObserver`), timed."""
        obs = self._observer.observe(self._parked, rows)
        self._last_render_s = self._observer.last_render_s
        self.timings["render"] += self._last_render_s
        return obs

