"""How far a REP-105 ``odom`` reads back from the sim's state, and whether a policy would see it.

Flies EPISODES (default 10) expert episodes of the synthetic indoor scene of seed 1 (4
Gaussians/m^2, the scene of the ROS graph tests) in process. At every observation it writes the
vehicle's float64 state as ``/odom`` (:func:`airplay.data.messages.odometry_cdr`: the velocity
rotated into base_link) and reads it back (:func:`airplay.data.messages.state_of`: rotated into
map again), and counts the observations whose float64 velocity differs from the sim's and those
whose float32 observation state (what a policy's ``obs["state"]`` holds) differs.

Run: ``PYTHONPATH=src python bench/odom_round_trip.py [EPISODES]`` (``--quick``: one episode, what
make test runs). The answer is why the policy node observes ``sim/state`` (the exact state) in the
sim rather than ``odom`` (docs/ros.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from airplay.data import messages as M
from airplay.policies import guard, make_policy
from airplay.scene.synthetic import make_scene
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv
from airplay.world.env_config import EnvConfig


def main(episodes: int) -> None:
    scene = Path(tempfile.mkdtemp()) / "indoor_1"
    make_scene("indoor", 1, scene, gaussians_per_m2=4, name="indoor_1")
    world = World.load(scene)
    tasks = sample_tasks(world.scene, world.grid, episodes, 0, "pointgoal", world.protocol)
    env = AirPlayEnv(world, EnvConfig(setting="pointgoal", render_images=False), tasks=tasks)
    policy = make_policy("expert", world)
    n = d64 = d32 = 0
    worst = 0.0
    for task in tasks:
        obs, info = env.reset(options={"task": task})
        guard.reset(policy, task)
        while True:
            v = env.vehicle
            state = np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0], v.angular_velocity_body[0]])
            back = M.state_of(M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, 0)))
            n += 1
            d64 += int(not np.array_equal(back, state))
            d32 += int(not np.array_equal(back.astype(np.float32), state.astype(np.float32)))
            worst = max(worst, float(np.max(np.abs(back - state))))
            if info["status"] != "running":
                break
            obs, _, _, _, info = env.step(guard.act(policy, obs, 0.0).command)
    print(f"{episodes} episodes, {n} observations: the float64 state read back from odom differs in {d64} "
          f"({100 * d64 / n:.1f} %), the float32 observation state in {d32} ({100 * d32 / n:.2f} %); "
          f"largest difference {worst:.2g}")


def cli(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("episodes", type=int, nargs="?", default=None, help="expert episodes (default 10, quick 1)")
    parser.add_argument("--quick", action="store_true", help="one episode (seconds; what make test runs)")
    args = parser.parse_args(argv)
    main(args.episodes or (1 if args.quick else 10))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
