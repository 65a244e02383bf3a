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
    vehicle = subprocess.Popen([sys.executable, "-m", "airplay.cli", "vehicle", "--mavlink", f"udp:127.0.0.1:{port}",
                                "--scene", str(args.scene), "--task", str(index), "--episodes", str(args.episodes),
                                "--seed", str(args.seed)], stdout=open(folder / f"vehicle-{index}.log", "w"),
                               stderr=subprocess.STDOUT, start_new_session=True, env=env)
    launch_log = folder / f"fly-{index}.log"
    graph = subprocess.Popen([sys.executable, "-m", "airplay.cli", "launch", "fly", f"scene:={args.scene}",
                              f"index:={index}", f"episodes:={args.episodes}", f"seed:={args.seed}",
                              f"policy:={args.policy}", f"checkpoint:={args.checkpoint}", "render_backend:=cpu",
                              f"connection:=udpin:127.0.0.1:{port}", "arm:=true",
                              f"takeoff_height_m:={task.start_position[2]:.3f}"],
                             stdout=open(launch_log, "w"), stderr=subprocess.STDOUT, start_new_session=True, env=env)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", required=True)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--scene", type=Path, required=True)
    ap.add_argument("--tasks", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="task indices")
    ap.add_argument("--episodes", type=int, default=40, help="tasks sampled, as airplay eval --episodes")
    ap.add_argument("--seed", type=int, default=100, help="task seed, as airplay eval --seed")
    ap.add_argument("--eval-dir", type=Path, default=None, help="an airplay eval of the same tasks, to compare")
    ap.add_argument("--logs", type=Path, default=None, help="folder for the graphs' logs (default: a temporary one)")
    args = ap.parse_args()
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(20, 99)))  # not the default domain's other graphs
    from airplay.launcher import graph_environment

    os.environ.update(graph_environment())  # the loopback DDS profile, for the watcher too
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World

    world = World.load(args.scene)
    tasks = sample_tasks(world.scene, world.grid, args.episodes, args.seed, "pointgoal", world.protocol)
    inproc = in_process_statuses(args.eval_dir, world.name)
    folder = args.logs or Path(tempfile.mkdtemp(prefix="rehearsal-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{args.policy} {args.checkpoint} on {world.name}, success radius {world.protocol.success_radius_m} m; "
          f"logs in {folder}", flush=True)
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
