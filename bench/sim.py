"""Benchmark the flight simulation: dynamics + collision steps per second, against pybullet.

Workload, per 50 Hz control step: advance the quadrotor model (config/vehicle.yaml: 5
inner steps at 250 Hz) under a velocity + yaw-rate command, then check the vehicle
sphere against the scene (signed distance field) and the navigable region (polygon and
height band), as the environment does; on collision or out of bounds the vehicle is put
back at its start, as a new episode would. The commands are a seeded random walk
(Ornstein-Uhlenbeck, within the vehicle's speed and yaw-rate limits), the same sequence
for every engine. Scene: the synthetic urban scene (seed 0); the SDF build is timed on
its own, outside the step rates.

Rows:

* ours, one vehicle: a Python loop of ``FlightSim.step`` (dynamics, SDF collision and
  bounds fused in one compiled call, as the environment steps), and, for reference, the
  cost of the unfused parts (``QuadrotorBatch.step``, ``CollisionChecker`` calls);
* ours, batched: one ``FlightSim`` of N vehicles (N = 1k, 10k, 100k), one parallel call
  per step (vehicle-steps per second; vehicles that end keep flying, which costs the
  same, since no kernel branches on the status);
* pybullet (DIRECT): a 1 kg sphere of the vehicle's radius, with gravity; each control
  step computes the force (and yaw torque) of the same first-order velocity response
  with the same limits and applies it over 5 ``stepSimulation`` calls at 250 Hz (applied
  at the current centre of mass every inner step, as pybullet clears external forces
  after each); the scene mesh is a static concave triangle mesh
  (GEOM_FORCE_CONCAVE_TRIMESH); collision is ``getClosestPoints(distance=0)`` each
  control step, and the bounds check is the same ``CollisionChecker.out_of_bounds``;
* pybullet, batched: 100 such bodies in one world (no body-body collisions), one
  ``stepSimulation`` per inner step for all of them.

Targets: ours >= 10x pybullet for one vehicle; >= 1e6 vehicle-steps/s batched (the best
of the N). Rates are medians over ``--repeats`` timed runs, after a warm-up.

    PYTHONPATH=src python bench/sim.py           # table
    PYTHONPATH=src python bench/sim.py --json    # one JSON object
    PYTHONPATH=src python bench/sim.py --quick   # a few seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import finish_meta, run_meta, threading_layer

TARGET_RATIO = 10.0
TARGET_BATCH_RATE = 1e6
PYBULLET_MASS_KG = 1.0
CMD_BUDGET_VALUES = 4_000_000  # float64 command values kept for a batched run (32 MB)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Workload: scene, starts, commands


def load_world(tmp: Path, resolution_m: float):
    from airplay.scene.scene import Scene
    from airplay.scene.synthetic import make_scene
    from airplay.sim.collision import CollisionChecker
    from airplay.sim.dynamics import load_vehicle_params
    from airplay.sim.sdf import SignedDistanceField

    log("[scene] generating the synthetic urban scene (seed 0) ...")
    t = time.perf_counter()
    make_scene("urban", 0, tmp / "urban", gaussians_per_m2=5)
    scene = Scene.load(tmp / "urban")
    gen_s = time.perf_counter() - t
    log("[scene] building the signed distance field ...")
    t = time.perf_counter()
    sdf = SignedDistanceField.for_scene(scene, resolution_m=resolution_m, cache_dir=tmp / "sdf-cache")
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    SignedDistanceField.for_scene(scene, resolution_m=resolution_m, cache_dir=tmp / "sdf-cache")
    cached_s = time.perf_counter() - t
    params = load_vehicle_params()
    checker = CollisionChecker(sdf, scene.spec.navigable, params.radius_m)
    info = {
        "scene": scene.name,
        "mesh_vertices": len(scene.mesh.vertices),
        "mesh_faces": len(scene.mesh.faces),
        "navigable_area_m2": round(scene.spec.navigable.area_m2, 1),
        "sdf_shape": list(sdf.shape),
        "sdf_resolution_m": sdf.resolution_m,
        "sdf_build_s": round(build_s, 3),
        "sdf_cache_load_s": round(cached_s, 4),
        "scene_generate_load_s": round(gen_s, 3),
    }
    log(f"[scene] {scene.name}: {info['mesh_faces']} faces, SDF {'x'.join(map(str, sdf.shape))} "
        f"built in {build_s:.2f} s (cache load {cached_s * 1e3:.1f} ms)")
    return scene, sdf, params, checker, info


def free_starts(checker, rng: np.random.Generator, count: int, clearance_m: float = 1.5) -> np.ndarray:
    """(count, 3) start positions inside the region with at least ``clearance_m`` to obstacles."""
    region = checker.region
    lo = np.array([*region.polygon.min(axis=0), region.z_min])
    hi = np.array([*region.polygon.max(axis=0), region.z_max])
    pool = np.empty((0, 3))
    for _ in range(50):
        p = rng.uniform(lo, hi, (8192, 3))
        ok = region.contains(p) & (checker.clearance(p) >= clearance_m)
        pool = np.concatenate([pool, p[ok]])
        if len(pool) >= min(count, 4096):
            break
    if len(pool) == 0:
        raise RuntimeError(f"no start with {clearance_m} m clearance found in the navigable region")
    return pool[rng.integers(0, len(pool), count)] if count > len(pool) else pool[:count]


def command_walk(rng: np.random.Generator, steps: int, n: int, params, theta: float = 0.5) -> np.ndarray:
    """(steps, n, 4) commands [vx, vy, vz, yaw_rate]: an Ornstein-Uhlenbeck walk about hover,
    stationary standard deviation half of each limit, clipped to the limits."""
    dt = params.control_dt_s
    lo = np.array([-params.max_speed_xy_m_s, -params.max_speed_xy_m_s, -params.max_speed_down_m_s,
                   -params.max_yaw_rate_rad_s])
    hi = np.array([params.max_speed_xy_m_s, params.max_speed_xy_m_s, params.max_speed_up_m_s,
                   params.max_yaw_rate_rad_s])
    sigma = 0.5 * np.maximum(-lo, hi) * math.sqrt(2.0 * theta)
    out = np.empty((steps, n, 4))
    c = np.zeros((n, 4))
    decay, scale = 1.0 - theta * dt, sigma * math.sqrt(dt)
    for k in range(steps):
        c = np.clip(c * decay + scale * rng.standard_normal((n, 4)), lo, hi)
        out[k] = c
    return out


# --------------------------------------------------------------------------------------
# Ours


def ours_single(params, checker, cmds: np.ndarray, start: np.ndarray, yaw0: float) -> dict:
    """The environment's loop for one vehicle (``FlightSim.step``: dynamics, SDF collision and
    bounds in one compiled call); returns elapsed seconds and the episode ends."""
    from airplay.sim.flight import CODE_STATUS, FlightSim

    sim = FlightSim(params, checker, 1)
    start, yaws = start.reshape(1, 3), np.array([yaw0])
    sim.reset(start, yaws)
    ends = {"collision": 0, "out_of_bounds": 0}
    step = sim.step
    t = time.perf_counter()
    for k in range(len(cmds)):
        code = step(cmds[k])[0]
        if code:
            ends[CODE_STATUS[int(code)].value] += 1
            sim.reset(start, yaws)
    return {"elapsed_s": time.perf_counter() - t, "ends": ends}


def ours_parts(params, checker, cmds: np.ndarray, start: np.ndarray) -> dict:
    """Microseconds per call of the two halves of the single-vehicle step, each on its own."""
    from airplay.sim.dynamics import QuadrotorBatch

    quad = QuadrotorBatch(params, 1)
    quad.reset(start.reshape(1, 3), np.zeros(1))
    t = time.perf_counter()
    for k in range(len(cmds)):
        quad.step(cmds[k])
    dyn = time.perf_counter() - t
    pos = start.reshape(1, 3).copy()
    out = {"dynamics_us": 1e6 * dyn / len(cmds)}
    for name in ("status", "collided", "out_of_bounds"):
        f = getattr(checker, name)
        t = time.perf_counter()
        for _ in range(len(cmds)):
            f(pos)
        out[f"{name}_us"] = 1e6 * (time.perf_counter() - t) / len(cmds)
    return out


def ours_batch(params, checker, cmds: np.ndarray, steps: int, starts: np.ndarray, yaws: np.ndarray) -> dict:
    """``steps`` control steps of N vehicles (commands cycled from ``cmds``) with ``FlightSim``:
    dynamics, collision and bounds in one compiled, parallel call per step."""
    from airplay.sim.flight import FlightSim

    sim = FlightSim(params, checker, len(starts))
    sim.reset(starts, yaws)
    frames = len(cmds)
    t = time.perf_counter()
    for k in range(steps):
        codes = sim.step(cmds[k % frames])
    elapsed = time.perf_counter() - t
    return {"elapsed_s": elapsed, "ended_fraction": float((codes != 0).mean())}


# --------------------------------------------------------------------------------------
# pybullet


class PybulletWorld:
    """A DIRECT-mode world with the scene's mesh and ``n`` vehicle spheres."""

    def __init__(self, scene, params, starts: np.ndarray, yaws: np.ndarray) -> None:
        import pybullet as pb

        self.pb = pb
        self.params = params
        self.cid = pb.connect(pb.DIRECT)
        cid = self.cid
        pb.setGravity(0.0, 0.0, -params.gravity_m_s2, physicsClientId=cid)
        pb.setTimeStep(1.0 / params.inner_rate_hz, physicsClientId=cid)
        mesh = scene.mesh
        t = time.perf_counter()
        shape = pb.createCollisionShape(pb.GEOM_MESH, vertices=np.asarray(mesh.vertices, dtype=float).tolist(),
                                        indices=np.asarray(mesh.faces, dtype=int).ravel().tolist(),
                                        flags=pb.GEOM_FORCE_CONCAVE_TRIMESH, physicsClientId=cid)
        self.scene_body = pb.createMultiBody(baseMass=0.0, baseCollisionShapeIndex=shape, physicsClientId=cid)
        self.mesh_load_s = time.perf_counter() - t
        pb.setCollisionFilterGroupMask(self.scene_body, -1, 1, 2, physicsClientId=cid)
        sphere = pb.createCollisionShape(pb.GEOM_SPHERE, radius=params.radius_m, physicsClientId=cid)
        self.starts, self.yaws = np.asarray(starts, dtype=float), np.asarray(yaws, dtype=float)
        self.bodies = []
        for p, yaw in zip(self.starts, self.yaws):
            b = pb.createMultiBody(baseMass=PYBULLET_MASS_KG, baseCollisionShapeIndex=sphere,
                                   basePosition=p.tolist(), baseOrientation=_quat_yaw(yaw), physicsClientId=cid)
            pb.changeDynamics(b, -1, linearDamping=0.0, angularDamping=0.0, physicsClientId=cid)
            pb.setCollisionFilterGroupMask(b, -1, 2, 1, physicsClientId=cid)  # the scene only, not each other
            self.bodies.append(b)
        # A solid sphere's moment of inertia (what pybullet derives from the shape and mass).
        self.inertia_z = 0.4 * PYBULLET_MASS_KG * params.radius_m ** 2

    def reset(self, i: int) -> None:
        pb, b = self.pb, self.bodies[i]
        pb.resetBasePositionAndOrientation(b, self.starts[i].tolist(), _quat_yaw(self.yaws[i]), physicsClientId=self.cid)
        pb.resetBaseVelocity(b, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], physicsClientId=self.cid)

    def close(self) -> None:
        self.pb.disconnect(self.cid)

    def run(self, cmds: np.ndarray, checker, reset_on_end: bool = True, record: bool = False) -> dict:
        """Fly all bodies through ``cmds`` (steps, n, 4); the same loop the bench times."""
        pb, cid, p = self.pb, self.cid, self.params
        get_vel, get_pose = pb.getBaseVelocity, pb.getBasePositionAndOrientation
        force, torque, stepsim, closest = pb.applyExternalForce, pb.applyExternalTorque, pb.stepSimulation, pb.getClosestPoints
        world = pb.WORLD_FRAME
        vmax_xy, vmax_up, vmax_dn = p.max_speed_xy_m_s, p.max_speed_up_m_s, p.max_speed_down_m_s
        amax_xy, amax_z, rmax = p.max_accel_xy_m_s2, p.max_accel_z_m_s2, p.max_yaw_rate_rad_s
        tau_v, tau_r, g, m, iz = p.velocity_time_constant_s, p.yaw_rate_time_constant_s, p.gravity_m_s2, PYBULLET_MASS_KG, self.inertia_z
        substeps, bodies, scene_body = p.substeps, self.bodies, self.scene_body
        n = len(bodies)
        ends = {"collision": 0, "out_of_bounds": 0}
        trace = np.empty((len(cmds), n, 6)) if record else None
        wrench = [None] * n
        positions = np.empty((n, 3))
        t = time.perf_counter()
        for k in range(len(cmds)):
            ck = cmds[k]
            for i in range(n):
                b = bodies[i]
                v, w = get_vel(b, physicsClientId=cid)
                qx, qy, qz, qw = get_pose(b, physicsClientId=cid)[1]
                yaw = math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))
                cx, cy, cz, cr = ck[i]
                c, s = math.cos(yaw), math.sin(yaw)
                vx, vy = c * cx - s * cy, s * cx + c * cy
                sp = math.hypot(vx, vy)
                if sp > vmax_xy:
                    vx, vy = vx * vmax_xy / sp, vy * vmax_xy / sp
                vz = min(max(cz, -vmax_dn), vmax_up)
                ax, ay, az = (vx - v[0]) / tau_v, (vy - v[1]) / tau_v, (vz - v[2]) / tau_v
                axy = math.hypot(ax, ay)
                if axy > amax_xy:
                    ax, ay = ax * amax_xy / axy, ay * amax_xy / axy
                az = min(max(az, -amax_z), amax_z)
                tz = iz * (min(max(cr, -rmax), rmax) - w[2]) / tau_r
                wrench[i] = ([m * ax, m * ay, m * (az + g)], [0.0, 0.0, tz])
            for _ in range(substeps):
                for i in range(n):
                    b = bodies[i]
                    f, tq = wrench[i]
                    force(b, -1, f, get_pose(b, physicsClientId=cid)[0], world, physicsClientId=cid)
                    torque(b, -1, tq, world, physicsClientId=cid)
                stepsim(physicsClientId=cid)
            hit = [False] * n
            for i in range(n):
                b = bodies[i]
                positions[i] = get_pose(b, physicsClientId=cid)[0]
                for cp in closest(b, scene_body, 0.0, physicsClientId=cid):
                    if cp[8] < 0.0:
                        hit[i] = True
                        break
            out = checker.out_of_bounds(positions)
            if record:
                trace[k, :, :3] = positions
                trace[k, :, 3:] = [get_vel(b, physicsClientId=cid)[0] for b in bodies]
            if reset_on_end:
                for i in range(n):
                    if hit[i] or out[i]:
                        ends["collision" if hit[i] else "out_of_bounds"] += 1
                        self.reset(i)
        return {"elapsed_s": time.perf_counter() - t, "ends": ends, "trace": trace}


def _quat_yaw(yaw: float) -> list[float]:
    return [0.0, 0.0, math.sin(0.5 * yaw), math.cos(0.5 * yaw)]


def agreement(scene, params, checker, cmds: np.ndarray, start: np.ndarray, yaw0: float) -> dict:
    """Fly ours and pybullet open-loop (no collision handling) through the same commands:
    the largest velocity and position differences say the two run the same response."""
    from airplay.sim.dynamics import QuadrotorBatch

    quad = QuadrotorBatch(params, 1)
    quad.reset(start.reshape(1, 3), np.array([yaw0]))
    ours = np.empty((len(cmds), 6))
    for k in range(len(cmds)):
        quad.step(cmds[k])
        ours[k, :3], ours[k, 3:] = quad.position[0], quad.velocity[0]
    world = PybulletWorld(scene, params, start.reshape(1, 3), np.array([yaw0]))
    try:
        theirs = world.run(cmds, checker, reset_on_end=False, record=True)["trace"][:, 0]
    finally:
        world.close()
    # Up to the first collision or exit of either: past it pybullet bounces and ours flies on.
    bad = (checker.collided(ours[:, :3]) | checker.out_of_bounds(ours[:, :3])
           | checker.collided(theirs[:, :3]) | checker.out_of_bounds(theirs[:, :3]))
    n = int(np.argmax(bad)) if bad.any() else len(cmds)
    ours, theirs = ours[:n], theirs[:n]
    if n == 0:
        return {"steps": 0}
    return {
        "steps": n,
        "max_velocity_diff_m_s": round(float(np.abs(ours[:, 3:] - theirs[:, 3:]).max()), 4),
        "max_position_diff_m": round(float(np.abs(ours[:, :3] - theirs[:, :3]).max()), 4),
        "max_speed_m_s": round(float(np.linalg.norm(ours[:, 3:], axis=1).max()), 3),
    }


# --------------------------------------------------------------------------------------


def timed(label: str, repeats: int, fn) -> tuple[float, list[float], dict]:
    """Median and all elapsed times of ``repeats`` runs of ``fn`` (returning a dict with elapsed_s)."""
    times, last = [], {}
    for r in range(repeats):
        last = fn()
        times.append(last["elapsed_s"])
        log(f"  {label}: run {r + 1}/{repeats}, {last['elapsed_s']:.3f} s")
    return float(np.median(times)), times, last


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true",
                        help="short runs, the SDF at 0.20 m (a few seconds in all; what make test runs)")
    parser.add_argument("--steps", type=int, default=None, help="control steps of the one-vehicle runs (default 20000, quick 3000)")
    parser.add_argument("--batch-sizes", default="1000,10000,100000", help="comma-separated N of the batched runs")
    parser.add_argument("--vehicle-steps", type=float, default=None,
                        help="vehicle-steps per batched run (default 2e6, quick 2e5)")
    parser.add_argument("--pybullet-bodies", type=int, default=100, help="bodies in the batched pybullet world (0: skip)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per row, median reported (default 3, quick 1)")
    parser.add_argument("--resolution", type=float, default=None, help="SDF voxel size, m (default 0.10, quick 0.20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the starts and the command walk")
    args = parser.parse_args(argv)
    meta = run_meta("sim")
    steps = args.steps or (3000 if args.quick else 20000)
    vehicle_steps = int(args.vehicle_steps or (2e5 if args.quick else 2e6))
    repeats = args.repeats or (1 if args.quick else 3)
    sizes = [int(s) for s in args.batch_sizes.split(",") if s.strip()]

    import numba

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    rng = np.random.default_rng(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="airplay-bench-sim-") as tmp:
        scene, _sdf, params, checker, info = load_world(Path(tmp), args.resolution or (0.20 if args.quick else 0.10))
        start = free_starts(checker, rng, 1)[0]
        yaw0 = float(rng.uniform(-math.pi, math.pi))
        cmds = command_walk(rng, steps, 1, params)

        log("[ours] warm-up (numba compilation on first use, cached afterwards) ...")
        ours_single(params, checker, cmds[:50], start, yaw0)
        ours_batch(params, checker, command_walk(rng, 3, 4096, params), 3, free_starts(checker, rng, 4096), np.zeros(4096))
        med, times, last = timed("ours, 1 vehicle", repeats, lambda: ours_single(params, checker, cmds, start, yaw0))
        parts = ours_parts(params, checker, cmds[: min(steps, 5000)], start)
        rows.append({"engine": "ours", "vehicles": 1, "steps": steps, "elapsed_s": times,
                     "rate": steps / med, "us_per_vehicle_step": 1e6 * med / steps, "ends": last["ends"],
                     "parts_us": {k: round(v, 3) for k, v in parts.items()}})

        pyb_single = None
        try:
            import pybullet  # noqa: F401
        except ImportError as exc:
            log(f"[pybullet] not available ({exc}); skipping the anchor")
            pyb_error = f"pybullet not importable: {exc}"
        else:
            pyb_error = None
            pb_steps = max(200, steps // 4)
            world = PybulletWorld(scene, params, start.reshape(1, 3), np.array([yaw0]))
            try:
                world.run(cmds[:50], checker)  # warm-up
                world.reset(0)
                med, times, last = timed("pybullet, 1 vehicle", repeats, lambda: _fresh(world, cmds[:pb_steps], checker))
            finally:
                world.close()
            pyb_single = {"engine": "pybullet", "vehicles": 1, "steps": pb_steps, "elapsed_s": times,
                          "rate": pb_steps / med, "us_per_vehicle_step": 1e6 * med / pb_steps, "ends": last["ends"],
                          "mesh_load_s": round(world.mesh_load_s, 4)}
            rows.append(pyb_single)
            log("[agreement] ours vs pybullet open-loop over the first 500 steps ...")
            agree = agreement(scene, params, checker, cmds[:500], start, yaw0)

        for n in sizes:
            k = max(3, vehicle_steps // n)
            log(f"[ours] batch of {n}: {k} steps ...")
            # At most ~32 MB of commands, cycled over the steps.
            bcmds = command_walk(rng, max(1, min(k, CMD_BUDGET_VALUES // (4 * n))), n, params)
            bstarts = free_starts(checker, rng, n)
            byaws = rng.uniform(-math.pi, math.pi, n)
            ours_batch(params, checker, bcmds, 2, bstarts, byaws)  # warm-up at this size
            med, times, last = timed(f"ours, batch {n}", repeats,
                                     lambda c=bcmds, k=k, s=bstarts, y=byaws: ours_batch(params, checker, c, k, s, y))
            rows.append({"engine": "ours", "vehicles": n, "steps": k, "elapsed_s": times, "rate": n * k / med,
                         "us_per_vehicle_step": 1e6 * med / (n * k),
                         "ended_fraction": round(last["ended_fraction"], 4)})
            del bcmds

        if pyb_error is None and args.pybullet_bodies > 0:
            n = args.pybullet_bodies
            k = max(20, (200 if not args.quick else 50))
            log(f"[pybullet] {n} bodies in one world: {k} steps ...")
            bcmds = command_walk(rng, k, n, params)
            bstarts = free_starts(checker, rng, n)
            byaws = rng.uniform(-math.pi, math.pi, n)
            world = PybulletWorld(scene, params, bstarts, byaws)
            try:
                world.run(bcmds[:5], checker)
                med, times, last = timed(f"pybullet, {n} bodies", repeats, lambda: _fresh(world, bcmds, checker))
            finally:
                world.close()
            rows.append({"engine": "pybullet", "vehicles": n, "steps": k, "elapsed_s": times, "rate": n * k / med,
                         "us_per_vehicle_step": 1e6 * med / (n * k), "ends": last["ends"]})

    for r in rows:
        r["rate_best"] = round(r["rate"] * float(np.median(r["elapsed_s"])) / min(r["elapsed_s"]), 1)
        r["elapsed_s"] = [round(t, 4) for t in r["elapsed_s"]]
        r["rate"] = round(r["rate"], 1)
        r["us_per_vehicle_step"] = round(r["us_per_vehicle_step"], 4)
    ours1 = rows[0]
    batched = [r for r in rows if r["engine"] == "ours" and r["vehicles"] > 1]
    best = max(batched, key=lambda r: r["rate"]) if batched else None
    result = {
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "threads": numba.get_num_threads(),
        "threading_layer": threading_layer(),
        "scene": info,
        "vehicle": {"control_rate_hz": params.control_rate_hz, "inner_rate_hz": params.inner_rate_hz,
                    "radius_m": params.radius_m},
        "rows": rows,
        "target_ratio": TARGET_RATIO,
        "target_batch_rate": TARGET_BATCH_RATE,
        "ratio_single": round(ours1["rate"] / pyb_single["rate"], 2) if pyb_single else None,
        "pass_ratio": bool(ours1["rate"] / pyb_single["rate"] >= TARGET_RATIO) if pyb_single else None,
        "best_batch_rate": best["rate"] if best else None,
        "best_batch_vehicles": best["vehicles"] if best else None,
        "pass_batch": bool(best["rate"] >= TARGET_BATCH_RATE) if best else None,
        "agreement": agree if pyb_error is None else None,
        "pybullet_error": pyb_error,
        "quick": args.quick,
    }
    result["meta"] = finish_meta(meta)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


def _fresh(world: PybulletWorld, cmds, checker) -> dict:
    for i in range(len(world.bodies)):
        world.reset(i)
    return world.run(cmds, checker)


def print_table(res: dict) -> None:
    s = res["scene"]
    print(f"Scene {s['scene']}: {s['mesh_faces']} faces, navigable {s['navigable_area_m2']} m^2; SDF "
          f"{'x'.join(map(str, s['sdf_shape']))} at {s['sdf_resolution_m']:.2f} m built in {s['sdf_build_s']:.2f} s "
          f"(cache load {1e3 * s['sdf_cache_load_s']:.1f} ms). {res['threads']} numba threads ({res['threading_layer']}); "
          f"{res['vehicle']['control_rate_hz']:g} Hz control, {res['vehicle']['inner_rate_hz']:g} Hz inner; "
          f"load average {res['load_average_at_start'][0]:.2f} on {res['cpu_count']} CPUs at start.")
    print("Rates: median over the timed runs (best in brackets).")
    head = f"{'engine':<10}{'vehicles':>9}{'steps':>8}{'vehicle-steps/s':>17}{'(best)':>12}{'us/veh-step':>13}  notes"
    print(head)
    print("-" * (len(head) + 30))
    for r in res["rows"]:
        if "ends" in r:
            note = f"ends: {r['ends']['collision']} collision, {r['ends']['out_of_bounds']} out of bounds (reset)"
        else:
            note = f"{100 * r['ended_fraction']:.1f}% ended by the last step"
            note += f"; {'PASS' if r['rate'] >= res['target_batch_rate'] else 'FAIL'} >= {res['target_batch_rate']:.0e}"
        print(f"{r['engine']:<10}{r['vehicles']:>9}{r['steps']:>8}{r['rate']:>17,.0f}{'(' + format(r['rate_best'], ',.0f') + ')':>12}"
              f"{r['us_per_vehicle_step']:>13.3f}  {note}")
        if "parts_us" in r:
            p = r["parts_us"]
            print(f"{'':<10}  per call: dynamics step {p['dynamics_us']:.2f} us, status {p['status_us']:.2f} us "
                  f"(collided {p['collided_us']:.2f}, out_of_bounds {p['out_of_bounds_us']:.2f})")
    if res["agreement"] and res["agreement"]["steps"] == 0:
        print("same response: not compared (the vehicle ended at the first step)")
    elif res["agreement"]:
        a = res["agreement"]
        print(f"same response: ours vs pybullet open-loop over {a['steps']} steps before the first end (speeds up to {a['max_speed_m_s']} m/s): "
              f"max |dv| {a['max_velocity_diff_m_s']} m/s, max |dp| {a['max_position_diff_m']} m")
    if res["pybullet_error"]:
        print(f"pybullet skipped: {res['pybullet_error']}")
    print("Targets")
    if res["ratio_single"] is not None:
        print(f"  one vehicle: ours / pybullet = {res['ratio_single']:.1f}x (>= {res['target_ratio']:g}x)  "
              f"{'PASS' if res['pass_ratio'] else 'FAIL'}")
    else:
        print("  one vehicle: no pybullet figure  n/a")
    if res["best_batch_rate"] is not None:
        print(f"  batched: {res['best_batch_rate']:,.0f} vehicle-steps/s at N={res['best_batch_vehicles']} "
              f"(>= {res['target_batch_rate']:.0e})  {'PASS' if res['pass_batch'] else 'FAIL'}")


if __name__ == "__main__":
    sys.exit(main())
