"""Expert flight collection in-process (the fast path): scenes x sampled tasks -> one rosbag2
MCAP bag per episode, in the layout the ``recorder`` node writes (docs/data.md).

One flight (:func:`fly_task`, the unit of work of the process pool and of Ray):

1. the scene's :class:`~airplay.sim.world.World` and its tasks are built once per worker
   process (``sample_tasks(scene, grid, per_scene, seed, setting, protocol)``, exactly as
   :mod:`airplay.eval.runner` samples them, so task k of a scene is the same everywhere);
2. :class:`~airplay.sim.env.AirPlayEnv` flies the A* expert (or ``--expert field_expert``,
   optionally with DART noise on the executed command: ``--noise-std``) at 50 Hz; every observation k
   (sim time ``k * 20 ms`` from the episode start at 0) is rendered with
   :meth:`World.camera_images` - the function the environment itself renders with -, RGB
   always and the mesh depth only with ``depth=True`` (the environment runs with
   ``render_images=False`` so that no depth is computed when it is not recorded; the expert
   reads only the state); the command chosen for observation k is stamped k; the terminal
   observation has no command;
3. the episode's messages go to :func:`airplay.data.bag.write_episode_bag`, which writes
   ``OUT/<scene>/.<task_id>.partial/`` and renames it to ``OUT/<scene>/<task_id>/`` when
   finalized.

Failed flights (collision, out of bounds, timeout) are flown but not written, unless
``keep_failures``; they are counted with their reason.

A run (:func:`collect`) is resumable: a task whose bag folder is complete (``metadata.yaml``
present) or that the ledger ``OUT/collected.jsonl`` lists as rejected is skipped, and
leftover ``.partial`` folders of an interrupted run are removed first. ``OUT/summary.json``
holds per-scene counts, rejections by reason, frames, durations and flights per second.
``OUT/collection.json`` fixes what makes bags of one collection comparable (camera size,
depth, setting, protocol): a rerun with different values is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from airplay.episode_status import EpisodeStatus

LEDGER = "collected.jsonl"
SUMMARY = "summary.json"
COLLECTION = "collection.json"
LOCK = ".collect.lock"
PARTIAL_SUFFIX = ".partial"
START_NS = 0
"""Sim time of every episode's first observation (ns); step k is stamped START_NS + k * 20 ms."""
SOURCE = "airplay collect"


class CollectError(RuntimeError):
    """A collection that cannot start or continue; the message names the file and the field."""


@dataclass(frozen=True)
class CollectConfig:
    """What to collect.

    scenes: scene folders; per_scene: tasks per scene (task k = ``{scene}-{setting}-{seed}-{k}``);
    image_size: (width, height) pixels to render at (the scene camera's field of view),
    None = the scene's camera; depth: also record the mesh depth image (32FC1, metres);
    keep_failures: also write failed flights (their metadata says so); render_backend: the
    renderer ("cpu" is the fast path on CPUs); threads: numba threads per worker (1: flights
    run in parallel as processes, and numba's parallel stages stall badly when another
    process holds a core - 20x slower frames were measured on a busy 2-core machine); protocol: a protocol YAML (default config/protocol.yaml) for the
    task sampling settings, success radius and time limits; expert: the labelling pilot,
    "expert" (the A* expert) or "field_expert" (the state-only expert,
    :mod:`airplay.tasks.field_expert`); noise_std: DART-style noise, the standard deviation
    of Gaussian noise added to each executed command (m/s on vx, vy, vz and rad/s on the
    yaw rate; drawn per task from a generator seeded by the collection seed, the task index
    and the scene name): the vehicle flies label + noise, ``/cmd_vel`` records the clean label.
    """

    scenes: tuple[Path, ...]
    per_scene: int
    out: Path
    setting: str = "pointgoal"
    seed: int = 0
    depth: bool = False
    image_size: tuple[int, int] | None = None
    keep_failures: bool = False
    render_backend: str = "cpu"
    workers: int = 1
    ray_address: str | None = None
    threads: int = 1
    protocol: Path | None = None
    expert: str = "expert"
    noise_std: float = 0.0

    def fixed(self) -> dict:
        """The fields that must not change between runs into one OUT folder."""
        return {"image_size": list(self.image_size) if self.image_size else None, "depth": self.depth,
                "render_backend": self.render_backend,
                "protocol": str(Path(self.protocol).resolve()) if self.protocol else None,
                "expert": self.expert, "noise_std": float(self.noise_std)}


EXPERTS = ("expert", "field_expert")
"""The policies ``airplay collect --expert`` flies (and labels with)."""
FIXED_DEFAULTS = {"expert": "expert", "noise_std": 0.0}
"""Fixed fields that collections made before they existed hold implicitly."""


@dataclass(frozen=True)
class FlightJob:
    """One task to fly: scene folder, its name, the task index; plus the shared settings."""

    scene_dir: str
    scene: str
    split: str
    index: int
    task_id: str
    per_scene: int
    setting: str
    seed: int
    out: str
    depth: bool
    image_size: tuple[int, int] | None
    keep_failures: bool
    render_backend: str
    threads: int
    protocol: str | None
    expert: str = "expert"
    noise_std: float = 0.0


@dataclass
class Plan:
    """The tasks of a run: those to fly and those already done (skipped), per scene."""

    jobs: list[FlightJob] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)
    removed_partials: int = 0


def task_id(scene: str, setting: str, seed: int, k: int) -> str:
    """The id of task k (as :class:`airplay.tasks.sampler.Task` names it)."""
    return f"{scene}-{setting}-{seed}-{k}"


def bag_complete(bag_dir: Path) -> bool:
    """A published (renamed, finalized) bag folder: ``metadata.yaml`` and an MCAP file."""
    return (bag_dir / "metadata.yaml").is_file() and any(bag_dir.glob("*.mcap"))


# -- the ledger ---------------------------------------------------------------------------------
def read_ledger(out: Path) -> dict[str, dict]:
    """task_id -> last record of ``OUT/collected.jsonl``; a torn last line (killed run) is ignored."""
    path = Path(out) / LEDGER
    records: dict[str, dict] = {}
    if not path.is_file():
        return records
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "task_id" in rec:
            records[rec["task_id"]] = rec
    return records


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _append_ledger(out: Path, record: dict) -> None:
    with open(Path(out) / LEDGER, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def _episode_metadata(bag_dir: Path) -> dict | None:
    """The episode metadata a bag carries in metadata.yaml custom_data (None when absent)."""
    from airplay.data.bag import CUSTOM_DATA_KEY, BagError, read_metadata_yaml

    try:
        return json.loads(((read_metadata_yaml(bag_dir) or {}).get("custom_data") or {})[CUSTOM_DATA_KEY])
    except (BagError, KeyError, TypeError, ValueError):
        return None


# -- planning -----------------------------------------------------------------------------------
def check_collection(cfg: CollectConfig) -> None:
    """Write ``OUT/collection.json`` on the first run; refuse a rerun with other fixed fields."""
    out = Path(cfg.out)
    path = out / COLLECTION
    fixed = cfg.fixed()
    if path.is_file():
        try:
            before = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise CollectError(f"{path}: not valid JSON ({err}); remove it to start a new collection") from None
        for key, value in fixed.items():
            if before.get(key, FIXED_DEFAULTS.get(key)) != value:
                raise CollectError(f"{path}: field {key!r} was {before.get(key)!r} in the earlier run of this "
                                   f"collection, now {value!r}; use another output folder or the same option")
    else:
        _write_atomically(path, json.dumps({**fixed, "created_unix_s": time.time()}, indent=2) + "\n")


def plan(cfg: CollectConfig) -> Plan:
    """The jobs left to do; removes ``.partial`` leftovers and rewrites the ledger without
    duplicates (keeping only records whose bag is complete, or rejections)."""
    from airplay.scene.spec import parse_scene_yaml

    out = Path(cfg.out)
    result = Plan()
    ledger = read_ledger(out)
    kept: dict[str, dict] = {}
    for scene_dir in cfg.scenes:
        spec = parse_scene_yaml(scene_dir)
        name = spec.name
        if name in result.splits:
            raise CollectError(f"{scene_dir}: scene name {name!r} given twice (scene.yaml field 'name')")
        result.splits[name] = spec.split
        scene_out = out / name
        if scene_out.is_dir():
            for partial in scene_out.glob(f".*{PARTIAL_SUFFIX}"):
                shutil.rmtree(partial)
                result.removed_partials += 1
        result.skipped[name] = 0
        for k in range(cfg.per_scene):
            tid = task_id(name, cfg.setting, cfg.seed, k)
            bag_dir = scene_out / tid
            rec = ledger.get(tid)
            if bag_complete(bag_dir):
                if rec is None or not rec.get("written"):  # killed between publishing and the ledger line
                    rec = _record_from_bag(bag_dir, name, spec.split, k, tid)
                kept[tid] = rec
                result.skipped[name] += 1
            elif rec is not None and not rec.get("written") and not cfg.keep_failures:
                kept[tid] = rec  # a rejected flight: deterministic, not flown again (unless now kept)
                result.skipped[name] += 1
            else:
                if bag_dir.exists():  # a folder without metadata.yaml is not ours to publish over
                    raise CollectError(f"{bag_dir}: exists but is not a complete bag (no metadata.yaml); "
                                       "remove it to collect this task again")
                result.jobs.append(FlightJob(
                    scene_dir=str(scene_dir), scene=name, split=spec.split, index=k, task_id=tid,
                    per_scene=cfg.per_scene, setting=cfg.setting, seed=cfg.seed, out=str(out), depth=cfg.depth,
                    image_size=tuple(cfg.image_size) if cfg.image_size else None, keep_failures=cfg.keep_failures,
                    render_backend=cfg.render_backend, threads=cfg.threads,
                    protocol=str(cfg.protocol) if cfg.protocol else None, expert=cfg.expert,
                    noise_std=float(cfg.noise_std)))
    # Records of tasks this run does not cover (other seeds, settings, scenes, a larger
    # per_scene earlier) stay as they were.
    covered = {task_id(n, cfg.setting, cfg.seed, k) for n in result.splits for k in range(cfg.per_scene)}
    for tid, rec in ledger.items():
        if tid not in covered:
            kept[tid] = rec
    _write_atomically(out / LEDGER, "".join(json.dumps(r) + "\n" for r in kept.values()))
    return result


def _record_from_bag(bag_dir: Path, scene: str, split: str, k: int, tid: str) -> dict:
    """The ledger record of a published bag whose line was lost (the run was killed in between)."""
    from airplay.data.messages import CONTROL_DT_NS

    meta = _episode_metadata(bag_dir) or {}
    steps = int(meta.get("steps", 0))
    return {"task_id": tid, "scene": scene, "split": split, "index": k, "status": meta.get("status", "unknown"),
            "success": bool(meta.get("success", False)), "written": True, "steps": steps, "frames": steps + 1,
            "duration_s": round(steps * CONTROL_DT_NS * 1e-9, 3), "path": str(bag_dir), "recovered": True}


# -- one flight (runs in workers) --------------------------------------------------------------------
_CACHE: dict[tuple, tuple] = {}
_CACHE_SIZE = 2


def world_with_camera(world, size: tuple[int, int] | None):
    """``world`` whose scene camera renders ``size`` = (width, height) pixels, same field of view."""
    if size is None:
        return world
    spec = world.scene.spec
    cam = spec.camera.intrinsics
    if (cam.width, cam.height) == tuple(size):
        return world
    camera = replace(spec.camera, intrinsics=cam.scaled(int(size[0]), int(size[1])))
    return replace(world, scene=replace(world.scene, spec=replace(spec, camera=camera)))


def _scene_state(job: FlightJob):
    """(world, tasks, env, policy) for the job's scene, built once per process (small LRU)."""
    key = (job.scene_dir, job.per_scene, job.seed, job.setting, job.image_size, job.protocol, job.expert)
    if key in _CACHE:
        _CACHE[key] = _CACHE.pop(key)  # most recent last
        return _CACHE[key]
    from airplay.policies import make_policy
    from airplay.sim.env import AirPlayEnv
    from airplay.sim.world import World
    from airplay.tasks.protocol import load_protocol
    from airplay.tasks.sampler import sample_tasks

    protocol = load_protocol(job.protocol) if job.protocol else None
    world = world_with_camera(World.load(job.scene_dir, protocol=protocol), job.image_size)
    if world.protocol.render_lod_px > 0:
        world.lod_hierarchy()  # with the scene load, once per worker: every flight renders
    tasks = sample_tasks(world.scene, world.grid, job.per_scene, job.seed, job.setting, world.protocol)
    env = AirPlayEnv(world, job.setting, tasks=tasks, render_backend=job.render_backend, render_images=False)
    state = (world, tasks, env, make_policy(job.expert, world))
    _warm_up(world, tasks, state[3], job)
    from airplay.data.messages import typestore

    typestore()  # the bag writer's message definitions (about 0.2 s), once per worker with the scene load
    while len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = state
    return state


def _warm_up(world, tasks, policy, job: FlightJob) -> None:
    """Once per worker with the scene load, what the first flight would otherwise pay for alone:
    loading the renderer's compiled kernels from numba's cache (one frame rendered at the first
    task's start, then the pose-cell cache emptied, so that no flight starts with a cell it did
    not make itself: images are functions of the pose either way) and the expert's wall-penalty
    grid (about 0.3-0.8 s together on a 1,000 m^2 scene: 7 % of ten flights' CPU time)."""
    from airplay.render.lod import clear_cell_cache

    if tasks:
        world.camera_images(tasks[0].start_position, tasks[0].start_yaw, job.render_backend, depth=job.depth)
        clear_cell_cache()
    policy.warm_up()  # the expert's precomputation (the A* expert's wall-penalty grid)


def _set_threads(threads: int) -> None:
    import numba

    numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))


def fly_task(job: FlightJob) -> dict:
    """Fly ``job``'s task with the expert, record it, publish the bag (unless rejected).

    Returns the ledger record: task_id, scene, split, index, status, success, written,
    steps, frames, duration_s (sim), path (bag folder or None), reason (rejections) and
    timings (s): load, render, sim (environment + expert), write (CDR + MCAP + rename), encode
    (the CDR part of write), wall;
    and cpu, the process's CPU time for the flight without the load (what one core spends on
    it, whatever else the machine runs).
    """
    t0 = time.perf_counter()
    _set_threads(job.threads)
    world, tasks, env, policy = _scene_state(job)
    t_load = time.perf_counter() - t0
    cpu0 = time.process_time()
    task = tasks[job.index]
    if task.task_id != job.task_id:
        raise CollectError(f"{job.scene_dir}: task {job.index} is {task.task_id}, expected {job.task_id}")
    episode = fly_and_record(world, env, policy, task, job)
    rec = {"task_id": task.task_id, "scene": job.scene, "split": job.split, "index": job.index,
           "status": episode["status"], "success": episode["status"] == EpisodeStatus.SUCCESS,
           "steps": episode["steps"],
           "frames": episode["steps"] + 1, "duration_s": round(episode["steps"] * world.vehicle.control_dt_s, 3)}
    t = time.perf_counter()
    keep = rec["success"] or job.keep_failures
    if keep:
        from airplay.data.bag import write_episode_bag

        path = write_episode_bag(job.out, job.scene, task.task_id, episode["records"], metadata=episode["metadata"])
        rec.update(written=True, path=str(path))
    else:
        rec.update(written=False, path=None, reason=episode["status"])
    t_write = episode["encode_s"] + time.perf_counter() - t
    rec["timings"] = {"load": round(t_load, 4), "render": round(episode["render_s"], 4),
                      "sim": round(episode["sim_s"], 4), "write": round(t_write, 4),
                      "encode": round(episode["encode_s"], 4),
                      "wall": round(time.perf_counter() - t0, 4), "cpu": round(time.process_time() - cpu0, 4)}
    return rec


def fly_and_record(world, env, policy, task, job: FlightJob) -> dict:
    """Fly one task; return its bag records [(topic, stamp_ns, cdr)], episode metadata (the
    bag writer adds it as ``/episode/metadata`` at the last stamp and to metadata.yaml), status,
    steps and the time spent rendering, simulating (env + expert) and encoding (s)."""
    import numpy as np

    import airplay
    from airplay.data import messages as m

    dt_ns = int(round(world.vehicle.control_dt_s * 1e9))
    cam = world.scene.spec.camera.intrinsics
    render_s = sim_s = encode_s = 0.0
    records: list[tuple[str, int, bytes]] = []

    t = time.perf_counter()
    obs, info = env.reset(options={"task": task})
    policy.reset(task)
    sim_s += time.perf_counter() - t
    t = time.perf_counter()
    goal_image = None
    if job.setting == "imagegoal":
        goal_image = world.camera_images(task.goal_position, task.goal_yaw, job.render_backend, depth=False)[0]
    render_s += time.perf_counter() - t

    t = time.perf_counter()
    records.append(("/episode/status", START_NS, m.json_cdr(
        {"episode": task.task_id, "status": "started", "stamp_ns": START_NS, "scene_dir": job.scene_dir,
         "index": job.index})))
    if job.setting in ("pointgoal", "imagegoal"):
        records.append(("/goal_pose", START_NS, m.pose_cdr(task.goal_position, task.goal_yaw, START_NS)))
    if goal_image is not None:
        records.append(("/goal_image", START_NS, m.image_rgb_cdr(goal_image, START_NS)))
    encode_s += time.perf_counter() - t

    # The flight keeps each step's arrays (copies: nothing a renderer or policy may reuse) and
    # encodes them after landing in one tight loop, the same records in the same order: about
    # a third of the CPU time of encoding each step between rendering and simulating, whose
    # work evicts the encoders' code and data from the caches.
    vehicle = env.vehicle
    if job.noise_std > 0:  # DART: fly label + noise, record the label
        import zlib

        rng = np.random.default_rng([int(job.seed), int(job.index), zlib.crc32(job.scene.encode())])
    kept = []  # per step [stamp, rgb, depth or None, state, command or None (the terminal step)]
    k = 0
    while True:
        stamp = START_NS + k * dt_ns
        t = time.perf_counter()
        rgb, depth = world.camera_images(env.position, env.yaw, job.render_backend, depth=job.depth)
        t1 = time.perf_counter()
        render_s += t1 - t
        step = [stamp, np.array(rgb), None if depth is None else np.array(depth), np.array(_state64(vehicle)), None]
        kept.append(step)
        t2 = time.perf_counter()
        encode_s += t2 - t1
        if info["status"] != EpisodeStatus.RUNNING:
            break
        action = policy.select_action(obs)
        step[4] = np.array(action, dtype=np.float64)
        if job.noise_std > 0:
            action = with_dart_noise(step[4], rng, job.noise_std, env.action_space)
        obs, _, _, _, info = env.step(action)
        sim_s += time.perf_counter() - t2
        k += 1

    t = time.perf_counter()
    for i, (stamp, rgb, depth, state, action) in enumerate(kept):
        records.append(("/camera/image_raw", stamp, m.image_rgb_cdr(rgb, stamp)))
        if depth is not None:
            records.append(("/camera/depth/image_raw", stamp, m.image_depth_cdr(depth, stamp)))
        records.append(("/camera/camera_info", stamp, m.camera_info_cdr(cam, stamp)))
        records.append(("/odom", stamp, m.odometry_cdr(state, stamp)))
        if action is not None:
            records.append(("/cmd_vel", stamp, m.twist_cdr(action, stamp)))
        kept[i] = None  # each step's arrays go as its CDR comes: about the memory the CDR took before
    encode_s += time.perf_counter() - t

    t = time.perf_counter()
    status, steps = info["status"], int(info["steps"])
    last = START_NS + steps * dt_ns
    trajectory = [[float(x) for x in p] for p in env.trajectory]
    records.append(("/episode/status", last, m.json_cdr(
        {"episode": task.task_id, "status": status, "steps": steps, "trajectory": trajectory})))
    metadata = {"scene": job.scene, "scene_dir": job.scene_dir, "split": job.split, "setting": job.setting,
                "seed": job.seed, "index": job.index, "task_id": task.task_id, "task": task.to_dict(),
                "status": status, "success": status == EpisodeStatus.SUCCESS, "steps": steps,
                "fps": round(1.0 / world.vehicle.control_dt_s), "source": SOURCE,
                "render_lod_px": world.protocol.render_lod_px,
                "render_lod_cell": [world.protocol.render_lod_cell_m, world.protocol.render_lod_cell_deg],
                "expert": job.expert, "noise_std": float(job.noise_std),
                "airplay_version": airplay.__version__}
    encode_s += time.perf_counter() - t
    return {"records": records, "metadata": metadata, "status": status, "steps": steps, "render_s": render_s,
            "sim_s": sim_s, "encode_s": encode_s}


def with_dart_noise(command, rng, noise_std: float, action_space):
    """DART: the (4,) command plus Gaussian noise of standard deviation ``noise_std`` (m/s on
    vx, vy, vz, rad/s on the yaw rate) drawn from ``rng``, clipped to the environment's action
    space; float32. The vehicle flies this; the clean command stays the label."""
    import numpy as np

    noisy = np.asarray(command, np.float64) + rng.normal(0.0, float(noise_std), 4)
    return np.clip(noisy, action_space.low, action_space.high).astype(np.float32)


def _state64(vehicle):
    """(13,) float64 state of vehicle 0: position, quaternion xyzw, map velocity, body rates."""
    return vehicle.odometry(0)  # one compiled call; equal to concatenating the properties' rows


# -- running a collection ----------------------------------------------------------------------------
def _init_worker(threads: int) -> None:
    """Pool worker start: numba threads per worker (set before numba's first parallel run); the
    worker ends with the collector, also when the collector is SIGKILLed."""
    from airplay.parent_watch import exit_with_parent

    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    exit_with_parent()


def _run_local(jobs: list[FlightJob], workers: int, fn=None):
    """Results of ``jobs`` (in completion order) from a spawn process pool, or in-process for 1 worker.

    A worker that dies (killed, out of memory) raises ``BrokenProcessPool`` here instead of
    hanging the run. When the run stops early (an error, Ctrl-C, the caller closing this
    generator) the workers are terminated at once; a bag they were writing stays a hidden
    ``.partial`` folder, which the next run removes.
    """
    if workers <= 1:
        import numba

        threads = numba.get_num_threads()
        try:
            for job in jobs:
                yield (fn or fly_task)(job)
        finally:
            numba.set_num_threads(threads)  # this process's own setting, as it was
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn, not fork: numba's GNU OpenMP layer is not fork-safe.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(getattr(jobs[0], "threads", 1),))
    try:
        futures = [pool.submit(fn or fly_task, job) for job in jobs]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        for process in list((pool._processes or {}).values()):  # the executor has no public terminate
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


RAY_LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Set before importing ray for ``--ray local``: no usage reports, node address = loopback."""


def _run_ray(jobs: list[FlightJob], address: str, workers: int, info: dict, fn=None):
    """The same :func:`fly_task` as Ray tasks (one CPU each); ``address="local"`` starts a
    private single-node instance with ``workers`` CPUs bound to 127.0.0.1. ``info["ray_nodes"]``
    gets the addresses of the cluster's live nodes."""
    import logging
    import sys

    if address == "local":
        for key, value in RAY_LOCAL_ENV.items():
            os.environ.setdefault(key, value)
        if "ray" in sys.modules and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0":
            raise CollectError("--ray local: ray was imported before loopback-only settings could apply")
    import ray

    started = not ray.is_initialized()
    if started:
        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                  "configure_logging": True}
        if address == "local":
            ray.init(num_cpus=max(1, workers), _node_ip_address="127.0.0.1",
                     runtime_env={"env_vars": dict(RAY_LOCAL_ENV)}, **common)
        else:
            ray.init(address=address, **common)
    info["ray_nodes"] = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive"))
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn or fly_task)
        pending = [remote.remote(job) for job in jobs]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def run_jobs(fn, jobs: list, workers: int, ray: str | None = None):
    """Results of ``fn(job)`` for every job, in completion order: in this process (1 worker),
    a spawn process pool of ``workers``, or Ray tasks at address ``ray`` ("local": a private
    instance bound to 127.0.0.1). ``fn`` must be importable (a module-level function)."""
    if not jobs:
        return iter(())
    if ray:
        return _run_ray(jobs, ray, workers, {}, fn=fn)
    return _run_local(jobs, workers, fn=fn)


class _Lock:
    """An exclusive advisory lock on ``OUT/.collect.lock``: one collector per output folder."""

    def __init__(self, out: Path) -> None:
        self.path = Path(out) / LOCK
        self.file = None

    def __enter__(self):
        import fcntl

        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise CollectError(f"{self.path}: another `airplay collect` is writing into {self.path.parent}") from None
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def summarize(out: Path, splits: dict[str, str], run: dict) -> dict:
    """``summary.json``: per-scene and total counts over the whole collection (the ledger),
    rejections by reason, frames, flown duration (s of sim time); ``run`` = this run's figures."""
    ledger = read_ledger(out)
    scenes: dict[str, dict] = {}
    for name, split in splits.items():
        scenes[name] = {"split": split, "written": 0, "successes": 0, "kept_failures": 0, "rejected": 0,
                        "rejected_by_reason": {}, "frames": 0, "duration_s": 0.0}
    for rec in ledger.values():
        s = scenes.get(rec.get("scene"))
        if s is None:
            continue
        if rec.get("written"):
            s["written"] += 1
            s["successes" if rec.get("success") else "kept_failures"] += 1
            s["frames"] += int(rec.get("frames", 0))
            s["duration_s"] = round(s["duration_s"] + float(rec.get("duration_s", 0.0)), 3)
        else:
            s["rejected"] += 1
            reason = rec.get("reason", rec.get("status", "unknown"))
            s["rejected_by_reason"][reason] = s["rejected_by_reason"].get(reason, 0) + 1
    total = {key: sum(s[key] for s in scenes.values())
             for key in ("written", "successes", "kept_failures", "rejected", "frames")}
    total["duration_s"] = round(sum(s["duration_s"] for s in scenes.values()), 3)
    reasons: dict[str, int] = {}
    for s in scenes.values():
        for r, n in s["rejected_by_reason"].items():
            reasons[r] = reasons.get(r, 0) + n
    total["rejected_by_reason"] = reasons
    by_split = {split: sorted(n for n, s in scenes.items() if s["split"] == split) for split in ("seen", "unseen")}
    return {"scenes": scenes, "total": total, "splits": by_split, "run": run}


def collect(cfg: CollectConfig, progress: bool = True) -> dict:
    """Run (or resume) a collection into ``cfg.out``; write the ledger and ``summary.json``;
    return the summary. Raises :class:`CollectError` for bad input, and re-raises a worker's
    error after recording every flight finished before it (a rerun resumes from there)."""
    from tqdm import tqdm

    import airplay

    if cfg.expert not in EXPERTS:
        raise CollectError(f"--expert must be one of {', '.join(EXPERTS)}, got {cfg.expert!r}")
    if not cfg.noise_std >= 0:
        raise CollectError(f"--noise-std must be >= 0, got {cfg.noise_std}")
    if cfg.per_scene < 0:
        raise CollectError(f"--per-scene must be >= 0, got {cfg.per_scene}")
    if cfg.workers < 1:
        raise CollectError(f"--workers must be >= 1, got {cfg.workers}")
    if cfg.protocol is not None:
        from airplay.tasks.protocol import load_protocol

        load_protocol(cfg.protocol)  # ProtocolError naming the file and field, before any work
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads < 1:
        raise CollectError(f"--threads must be >= 1, got {cfg.threads}")
    with _Lock(out):
        check_collection(cfg)
        work = plan(cfg)
        engine = f"ray ({cfg.ray_address})" if cfg.ray_address else (
            f"process pool ({cfg.workers} workers)" if cfg.workers > 1 else "in-process")
        run = {"engine": engine, "workers": cfg.workers, "setting": cfg.setting, "seed": cfg.seed,
               "per_scene": cfg.per_scene, "depth": cfg.depth, "image_size": cfg.fixed()["image_size"],
               "keep_failures": cfg.keep_failures, "expert": cfg.expert, "noise_std": float(cfg.noise_std),
               "planned": len(work.jobs),
               "skipped_done": sum(work.skipped.values()), "removed_partials": work.removed_partials,
               "flown": 0, "written": 0, "rejected": 0, "frames": 0, "airplay_version": airplay.__version__}
        timings = {"load": 0.0, "render": 0.0, "sim": 0.0, "write": 0.0, "wall": 0.0, "cpu": 0.0}
        t0 = time.perf_counter()
        bar = tqdm(total=len(work.jobs), unit="flight", disable=not progress, dynamic_ncols=True,
                   desc="collect")
        results = (_run_ray(work.jobs, cfg.ray_address, cfg.workers, run) if cfg.ray_address
                   else _run_local(work.jobs, cfg.workers)) if work.jobs else iter(())
        error: BaseException | None = None
        try:
            for rec in results:
                _append_ledger(out, rec)
                run["flown"] += 1
                run["written" if rec["written"] else "rejected"] += 1
                run["frames"] += rec["frames"]
                for key in timings:
                    timings[key] += rec["timings"][key]
                elapsed = time.perf_counter() - t0
                bar.update(1)
                bar.set_postfix_str(f"{run['flown'] / max(elapsed, 1e-9):.2f} flights/s, "
                                    f"{run['rejected']} rejected, last {rec['scene']} {rec['status']}")
        except BaseException as exc:  # record what finished, then report
            error = exc
        finally:
            bar.close()
            if hasattr(results, "close"):
                results.close()
        wall = time.perf_counter() - t0
        run["wall_s"] = round(wall, 3)
        run["flights_per_s"] = round(run["flown"] / wall, 4) if wall > 0 and run["flown"] else 0.0
        run["frames_per_s"] = round(run["frames"] / wall, 1) if wall > 0 and run["flown"] else 0.0
        run["worker_time_s"] = {k: round(v, 3) for k, v in timings.items()}
        run["flights_per_cpu_s"] = round(run["flown"] / timings["cpu"], 4) if timings["cpu"] > 0 else 0.0
        run["interrupted"] = error is not None
        if error is not None:
            run["error"] = f"{type(error).__name__}: {error}"
        summary = summarize(out, work.splits, run)
        _write_atomically(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
        if error is not None:
            raise error
        return summary


def format_summary(summary: dict) -> str:
    """The readable table of a summary: one row per scene, then the total and this run's rate."""
    head = (f"{'scene':<22}{'split':<8}{'written':>8}{'success':>8}{'rejected':>9}{'frames':>9}{'flown s':>9}"
            "  rejections")
    lines = [head, "-" * len(head)]

    def row(name, split, s):
        why = ", ".join(f"{r} {n}" for r, n in sorted(s["rejected_by_reason"].items())) or "-"
        return (f"{name:<22}{split:<8}{s['written']:>8}{s['successes']:>8}{s['rejected']:>9}{s['frames']:>9}"
                f"{s['duration_s']:>9.1f}  {why}")

    for name, s in summary["scenes"].items():
        lines.append(row(name, s["split"], s))
    lines.append("-" * len(head))
    lines.append(row("all", "", summary["total"]))
    r = summary["run"]
    lines.append(f"\nthis run: {r['flown']} flights ({r['written']} written, {r['rejected']} rejected), "
                 f"{r['skipped_done']} already done, {r['removed_partials']} partial bags removed; "
                 f"{r['wall_s']:.1f} s = {r['flights_per_s']:.2f} flights/s, {r['frames_per_s']:.0f} frames/s "
                 f"({r['engine']}); {r['flights_per_cpu_s']:.2f} flights per CPU-second")
    t = r["worker_time_s"]
    busy = sum(t[k] for k in ("load", "render", "sim", "write"))
    if busy > 0:
        lines.append("worker time: " + ", ".join(f"{k} {100 * t[k] / busy:.0f} %"
                                                  for k in ("load", "render", "sim", "write")))
    return "\n".join(lines)
