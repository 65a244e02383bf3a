"""A checkpoint on the rehearsal vehicle: ``airplay vehicle`` + ``airplay launch fly``, task by task.

For each task index the vehicle stands under the start of that task (sampled as ``airplay eval
--episodes N --seed S`` samples them), the fly graph arms, takes off to the start height and flies
the policy in real time (the renderer is the camera at the vehicle's odom, MAVLink over UDP on
127.0.0.1). The script watches ``odom``; when the vehicle comes within the task's success radius
of the goal, when it collides or leaves the navigable region (the simulator's sphere-vs-SDF and
region checks on each odom position: the rehearsal vehicle itself flies through walls), or at the
task's time limit (wall time from take-off), it asks the bridge to land and waits for
the graph to end. It prints a table: in-process status of the same task (from ``--eval-dir``'s
episodes.jsonl, when given), the rehearsal's status named as the simulator names them, closest
distance, time from take-off to the goal, and the commands' age on arrival at the bridge (p50 /
p95, ms).

    .venv/bin/python bench/rehearsal.py --policy cnn_bc --checkpoint CKPT --scene SCENE \\
        --tasks 0 1 2 3 4 --episodes 40 --seed 100 --eval-dir OUT/eval/train_scenes_new_tasks/cnn_bc
    .venv/bin/python bench/rehearsal.py --quick     # seconds: the expert, the shortest of 10 tasks (make test)

``--quick`` flies one task, the shortest (A* length) of ``--episodes`` (default 10 then), with the
expert unless ``--policy`` is given, in ``--scene`` or else in the sparse synthetic ``indoor_1``
(4 Gaussians/m^2, a 64x64 camera) made in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process_statuses(eval_dir: Path | None, scene_name: str) -> dict[int, str]:
    """task index -> status of an ``airplay eval`` in that scene (task ids end in "-INDEX")."""
    if eval_dir is None:
        return {}
    episodes = [json.loads(line) for line in (eval_dir / "episodes.jsonl").read_text().splitlines()]
    return {int(ep["task_id"].rsplit("-", 1)[1]): ep["status"] for ep in episodes if ep["scene"] == scene_name}


class Watcher:
    """odom and the bridge's phase, from a background rclpy node; ``land()`` asks the bridge to land."""

    def __init__(self) -> None:
        from nav_msgs.msg import Odometry
        from std_msgs.msg import Empty, String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE, state_from_odometry

        self.bg = BackgroundNode("rehearsal_watcher")
        self.lock = threading.Lock()
        self.position: np.ndarray | None = None
        self.phase = ""
        node = self.bg.node
        node.create_subscription(Odometry, "odom", lambda m: self._set("position", state_from_odometry(m)[:3]),
                                 RELIABLE)
        node.create_subscription(String, "vehicle/phase", lambda m: self._set("phase", m.data), RELIABLE)
        self.land_pub = node.create_publisher(Empty, "land", RELIABLE)
        self._empty = Empty
        self.bg.start()

    def _set(self, name: str, value) -> None:
        with self.lock:
            setattr(self, name, value)

    def get(self) -> tuple[np.ndarray | None, str]:
        with self.lock:
            return self.position, self.phase

    def land(self) -> None:
        self.land_pub.publish(self._empty())

    def close(self) -> None:
        self.bg.close()


def fly(args, index: int, task, world, folder: Path) -> dict:
    """One rehearsal of task ``index``: the row of the table."""
    from airplay.launcher import graph_environment

    env = graph_environment()
    port = free_udp_port()
    launch_log = folder / f"fly-{index}.log"
    # The children write their own copies of the log files' descriptors; ours close at once.
    with open(folder / f"vehicle-{index}.log", "w") as vehicle_log, open(launch_log, "w") as fly_log:
        vehicle = subprocess.Popen([sys.executable, "-m", "airplay.cli", "vehicle", "--mavlink",
                                    f"udp:127.0.0.1:{port}", "--scene", str(args.scene), "--task", str(index),
                                    "--episodes", str(args.episodes), "--seed", str(args.seed)], stdout=vehicle_log,
                                   stderr=subprocess.STDOUT, start_new_session=True, env=env)
        graph = subprocess.Popen([sys.executable, "-m", "airplay.cli", "launch", "fly", f"scene:={args.scene}",
                                  f"index:={index}", f"episodes:={args.episodes}", f"seed:={args.seed}",
                                  f"policy:={args.policy}", f"checkpoint:={args.checkpoint or ''}",
                                  "render_backend:=cpu", f"connection:=udpin:127.0.0.1:{port}", "arm:=true",
                                  f"takeoff_height_m:={task.start_position[2]:.3f}"],
                                 stdout=fly_log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    watcher = Watcher()
    from airplay.episode_status import EpisodeStatus

    radius = world.protocol.success_radius_m
    row = {"task": index, "status": "timeout", "closest_m": float("inf"), "to_goal_s": None}
    try:
        t0 = time.monotonic()
        while watcher.get()[1] != "flying":
            if time.monotonic() - t0 > 90 or graph.poll() is not None:
                raise RuntimeError(f"task {index}: the bridge never reached 'flying'; see {launch_log}")
            time.sleep(0.05)
        t_fly = time.monotonic()
        deadline = t_fly + task.time_limit_s
        while time.monotonic() < deadline and graph.poll() is None:
            position, _ = watcher.get()
            if position is not None:
                row["closest_m"] = min(row["closest_m"], float(np.linalg.norm(position - task.goal_position)))
                if row["closest_m"] <= radius:
                    row["status"], row["to_goal_s"] = "success", time.monotonic() - t_fly
                    break
                hit = world.checker.status(np.asarray(position, np.float64)[None])[0]
                if hit is not EpisodeStatus.RUNNING:
                    row["status"] = hit.value
                    break
            time.sleep(0.02)
        watcher.land()
        graph.wait(timeout=120)
    finally:
        watcher.close()
        for proc in (graph, vehicle):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    ages = re.findall(r"cmd_vel age on arrival .*?p50 ([\d.]+) ms, p95 ([\d.]+) ms", launch_log.read_text())
    row["age_ms"] = tuple(float(x) for x in ages[-1]) if ages else None
    return row


def quick_scene(folder: Path) -> Path:
    """``--quick``'s scene: the synthetic indoor scene of seed 1 at 4 Gaussians/m^2 (the ROS graph
    tests' sparse ``indoor_1``), its camera 64x64 (the same field of view), its SDF cached."""
    import yaml

    from airplay.scene.synthetic import make_scene
    from airplay.world import World

    scene = folder / "indoor_1"
    make_scene("indoor", 1, scene, gaussians_per_m2=4, name="indoor_1")
    spec = yaml.safe_load((scene / "scene.yaml").read_text())
    cam, scale = spec["camera"], 64 / spec["camera"]["width"]
    cam.update(width=64, height=64, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=cam["cx"] * scale,
               cy=cam["cy"] * scale)
    (scene / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    World.load(scene).sdf  # noqa: B018 - the disk-cached SDF, built once before the graph's nodes want it
    return scene


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default=None, help="the policy flown (quick: expert by default)")
    ap.add_argument("--checkpoint", type=Path, default=None, help="the learned policy's checkpoint (not for experts)")
    ap.add_argument("--scene", type=Path, default=None, help="the scene folder (quick: a sparse one made here)")
    ap.add_argument("--tasks", type=int, nargs="+", default=None, help="task indices (default 0 1 2 3 4; quick: "
                    "the one with the shortest A* path)")
    ap.add_argument("--episodes", type=int, default=None, help="tasks sampled, as airplay eval --episodes "
                    "(default 40, quick 10)")
    ap.add_argument("--seed", type=int, default=100, help="task seed, as airplay eval --seed")
    ap.add_argument("--eval-dir", type=Path, default=None, help="an airplay eval of the same tasks, to compare")
    ap.add_argument("--logs", type=Path, default=None, help="folder for the graphs' logs (default: a temporary one)")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, not minutes (what make test runs): one short task, the expert, a sparse scene")
    args = ap.parse_args()
    args.policy = args.policy or ("expert" if args.quick else None)
    args.episodes = args.episodes or (10 if args.quick else 40)
    if args.policy is None:
        ap.error("--policy is required (without --quick)")
    if args.scene is None:
        if not args.quick:
            ap.error("--scene is required (without --quick)")
        args.scene = quick_scene(Path(tempfile.mkdtemp(prefix="rehearsal-scene-")))
    if args.policy in ("act", "dp", "cnn_bc") and args.checkpoint is None:
        ap.error(f"--policy {args.policy} needs --checkpoint")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(20, 99)))  # not the default domain's other graphs
    from airplay.launcher import graph_environment

    os.environ.update(graph_environment())  # the loopback DDS profile, for the watcher too
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World

    world = World.load(args.scene)
    tasks = sample_tasks(world.scene, world.grid, args.episodes, args.seed, "pointgoal", world.protocol)
    if args.tasks is None:
        args.tasks = ([min(range(len(tasks)), key=lambda k: tasks[k].astar_length_m)] if args.quick
                      else [0, 1, 2, 3, 4])
    inproc = in_process_statuses(args.eval_dir, world.name)
    folder = args.logs or Path(tempfile.mkdtemp(prefix="rehearsal-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{args.policy}{(' ' + str(args.checkpoint)) if args.checkpoint else ''} on {world.name}, success radius "
          f"{world.protocol.success_radius_m} m; logs in {folder}", flush=True)
    lines = ["| task | A* m | in process | rehearsal | closest m | to goal s | cmd_vel age p50 / p95 ms |",
             "|---|---|---|---|---|---|---|"]
    results = []
    for k in args.tasks:
        r = fly(args, k, tasks[k], world, folder)
        results.append((k, r))
        age = f"{r['age_ms'][0]:.0f} / {r['age_ms'][1]:.0f}" if r["age_ms"] else "-"
        to_goal = "-" if r["to_goal_s"] is None else f"{r['to_goal_s']:.1f}"
        lines.append(f"| {k} | {tasks[k].astar_length_m:.1f} | {inproc.get(k, '-')} | "
                     f"{r['status']} | {r['closest_m']:.2f} | "
                     f"{to_goal} | {age} |")
        print(lines[-1], flush=True)
    reached = sum(r["status"] == "success" for _, r in results)
    same = sum(inproc.get(k) == r["status"] for k, r in results)
    print("\n" + "\n".join(lines) + f"\n\nrehearsal: {reached} of {len(args.tasks)} reached"
          + (f"; the same status as in process in {same}" if inproc else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
