"""One expert flight of a collection, in a worker: fly a task, record it, publish its bag.

One flight (:func:`fly_task`, the unit of work of the process pool and of Ray):

1. the scene's :class:`~airplay.world.World` and its tasks are built once per worker
   process (``sample_tasks(scene, grid, per_scene, seed, setting, protocol)``, exactly as
   :mod:`airplay.eval.runner` samples them, so task k of a scene is the same everywhere);
2. :class:`~airplay.world.env.AirPlayEnv` flies the A* expert (or ``--expert field_expert``,
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
"""

from __future__ import annotations

import time
from dataclasses import replace

from airplay.data.collect_plan import SOURCE, START_NS, CollectError, FlightJob
from airplay.episode_status import EpisodeStatus

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
    key = (job.scene_dir, job.per_scene, job.seed, job.setting, job.image_size, job.protocol, job.expert, job.vehicle)
    if key in _CACHE:
        _CACHE[key] = _CACHE.pop(key)  # most recent last
        return _CACHE[key]
    from airplay.world import World
    from airplay.world.env import AirPlayEnv
    from airplay.tasks.protocol import load_protocol
    from airplay.tasks.sampler import sample_tasks

    from airplay.sim.estimate_error import load_vehicle_file

    protocol = load_protocol(job.protocol) if job.protocol else None
    vehicle, estimate_error = load_vehicle_file(job.vehicle)
    world = world_with_camera(World.load(job.scene_dir, vehicle=vehicle, protocol=protocol,
                                         estimate_error=estimate_error), job.image_size)
    if world.protocol.render_lod_px > 0:
        world.lod_hierarchy()  # with the scene load, once per worker: every flight renders
    tasks = sample_tasks(world.scene, world.grid, job.per_scene, job.seed, job.setting, world.protocol)
    env = AirPlayEnv(world, job.setting, tasks=tasks, render_backend=job.render_backend, render_images=False)
    state = (world, tasks, env, job.make_expert(job.expert, world))
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
    from airplay.threads import set_compute_threads

    set_compute_threads(int(threads))


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
    if job.noise_std > 0:  # DART: fly label + noise, record the label
        import zlib

        rng = np.random.default_rng([int(job.seed), int(job.index), zlib.crc32(job.scene.encode())])
    kept = []  # per step [stamp, rgb, depth or None, state, command or None (the terminal step)]
    k = 0
    while True:
        stamp = START_NS + k * dt_ns
        t = time.perf_counter()
        rgb, depth = world.camera_images(env.estimated_position, env.yaw, job.render_backend, depth=job.depth)
        t1 = time.perf_counter()
        render_s += t1 - t
        step = [stamp, np.array(rgb), None if depth is None else np.array(depth), _observed_state64(env), None]
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


def _observed_state64(env):
    """(13,) float64 state of ``env``'s vehicle as the policy sees it: position (the estimate,
    :attr:`AirPlayEnv.estimated_position`), quaternion xyzw, map velocity, body rates."""
    import numpy as np

    state = np.array(env.vehicle.odometry(0))  # one compiled call; equal to concatenating the properties' rows
    state[0:3] = env.estimated_position        # the true position itself without an estimate error
    return state
