"""Learned policies reach goals in the closed loop (offline errors can look tiny while
every policy crashed). A small policy trained on a few tasks' demonstrations must fly those
tasks to their goals through the simulator from its own camera images and the goal vector,
and its checkpoint must fly one of them on the rehearsal vehicle through the ``fly`` graph.

Demonstrations: the state-only field expert flies each of 5 tasks 3 times with DART noise
(0.3 m/s, rad/s on the executed command; the recorded action is the clean label), so the data
shows how to come back to the path. Rendered at 64x64 on a sparse synthetic indoor scene.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from airplay.policies import make_policy
from airplay.policies.dagger import fly_episode
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import TrainConfig, build_policy, train
from airplay.scene.synthetic import make_scene
from airplay.world.env import AirPlayEnv
from airplay.world import World
from airplay.tasks.sampler import sample_tasks

TASKS, REPEATS, NOISE, IMAGE = 5, 3, 0.3, 64
SMALL = {"image_size": IMAGE, "backbone": "small", "backbone_width": 16}
MODELS = {
    "cnn_bc": ({**SMALL, "image_features": 64, "hidden_dim": 128}, 2000, 64, 1e-3),
}
"""kind -> (config, updates, batch size, peak learning rate)."""


# the module's fixtures fly and train (minutes on 2 loaded cores)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def scene_with_camera(folder, size: int):
    """A sparse synthetic indoor scene whose camera renders size x size pixels (same field of view)."""
    make_scene("indoor", 2, folder, gaussians_per_m2=4)
    spec = yaml.safe_load((folder / "scene.yaml").read_text())
    cam = spec["camera"]
    scale = size / cam["width"]
    cam.update(width=size, height=size, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=size / 2, cy=size / 2)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    """(scene folder, world, env, field expert, tasks, demonstrations)."""
    root = tmp_path_factory.mktemp("closed_loop")
    scene = scene_with_camera(root / "indoor", IMAGE)
    world = World.load(scene)
    env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend="cpu", render_images=False)
    expert = make_policy("field_expert", world)
    tasks = sample_tasks(world.scene, world.grid, TASKS, 0, "pointgoal", world.protocol)
    rng = np.random.default_rng(0)
    demos = []
    for task in tasks:
        for _ in range(REPEATS):
            ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, rng, noise_std=NOISE)
            assert ep["status"] == "success", (task.task_id, ep["status"])
            demos.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    return scene, world, env, expert, tasks, demos


@pytest.fixture(scope="module")
def trained(flights, tmp_path_factory):
    """kind -> (checkpoint folder, closed-loop statuses on the 5 training tasks)."""
    cache = {}

    def get(kind: str):
        if kind not in cache:
            torch.set_num_threads(2)
            _, world, env, expert, tasks, demos = flights
            fields, steps, batch, lr = MODELS[kind]
            cfg = build_policy(kind, **fields).config
            assert cfg.state_features == "none"  # the default: nothing of the vehicle's own motion to copy
            ds = ChunkDataset(demos, cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, "point")
            torch.manual_seed(0)
            policy = build_policy(kind, ds, **fields)
            out = tmp_path_factory.mktemp(f"ckpt-{kind}")
            train(policy, ds, TrainConfig.for_policy(kind, steps=steps, batch_size=batch, lr=lr, save_every=0,
                                                     log_every=0), out, progress=False)
            policy.eval()
            statuses = [fly_episode(world, env, policy, expert, t, "cpu", 0.0, np.random.default_rng(0))["status"]
                        for t in tasks]
            cache[kind] = (out, statuses)
        return cache[kind]

    return get


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_policy_flies_its_training_tasks_to_the_goal(kind, trained):
    _, statuses = trained(kind)
    print(f"\n{kind}: {statuses}")
    assert statuses.count("success") >= 3, statuses


@pytest.mark.usefixtures("own_ros_domain")
def test_checkpoint_flies_a_task_on_the_rehearsal_vehicle(flights, trained, tmp_path):
    """``airplay vehicle --scene --task`` + the fly graph with ``policy:=cnn_bc checkpoint:=``: the
    renderer is the camera at the vehicle's odom, the policy node runs the checkpoint in real
    time (not lockstep), the bridge flies it over MAVLink; the vehicle reaches the goal."""
    pytest.importorskip("rclpy")
    pytest.importorskip("pymavlink")
    from test_mavlink_node import Operator, expect_landed_exit, free_udp_port, spawn, stop_all, vehicle_command

    from airplay.graph import FLY_ARGUMENTS, fly_graph, parse_launch_arguments
    from airplay.launcher import node_command

    scene, world, _, _, tasks, _ = flights
    ckpt, statuses = trained("cnn_bc")
    done = [k for k, s in enumerate(statuses) if s == "success"]
    index = min(done, key=lambda k: tasks[k].astar_length_m)  # the shortest task it flew in process
    task = tasks[index]
    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(vehicle_command(port, "--scene", str(scene), "--task", str(index), "--episodes", str(TASKS)),
                           tmp_path / "vehicle.log"))
        arguments = [f"scene:={scene}", f"index:={index}", f"episodes:={TASKS}", "seed:=0", "policy:=cnn_bc",
                     f"checkpoint:={ckpt}", "render_backend:=cpu", f"connection:=udpin:127.0.0.1:{port}",
                     "arm:=true", f"takeoff_height_m:={task.start_position[2]:.3f}"]
        for spec in fly_graph(parse_launch_arguments(arguments, FLY_ARGUMENTS)):
            procs.append(spawn(node_command(spec), tmp_path / f"{spec.name}.log"))
        bridge = procs[-1]
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 60, "the bridge flying", tmp_path)

        def near_goal() -> bool:
            s = operator.latest(operator.odom)
            return s is not None and np.linalg.norm(s[0:3] - task.goal_position) < world.protocol.success_radius_m

        operator.wait(near_goal, 3.0 * task.astar_length_m + 20.0, "the vehicle at the goal", tmp_path)
        operator.land_pub.publish(operator._empty())
        expect_landed_exit(bridge, tmp_path)
    finally:
        stop_all(procs)
        operator.close()
