"""Learned policies reach goals in the closed loop (offline errors can look tiny while
every policy crashed). A small policy trained on a few tasks' demonstrations must fly those
tasks to their goals through the simulator from its own camera images and the goal vector,
and its checkpoint must fly one of them on the rehearsal vehicle through the ``fly`` graph.

Demonstrations: the state-only field expert flies each of 5 tasks 3 times with DART noise
(0.3 m/s, rad/s on the executed command; the recorded action is the clean label), so the data
shows how to come back to the path, and with its commands executed 0, 2 and 4 control periods
late (0-80 ms), so that it also shows the states a real-time loop's latency leads to (on the
rehearsal vehicle the camera -> policy -> bridge path takes ~50 ms at the median, ~250 ms at
the 95th percentile under load). The policy is flown in process with a 2-period delay.
Rendered at 64x64 on a sparse synthetic indoor scene.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numba
import numpy as np
import pytest
import torch
from helpers.small_policy import scene_with_camera

from airplay.policies import make_policy
from airplay.policies.dagger import fly_episode
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import TrainConfig, build_policy, train
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv

TASKS, NOISE, IMAGE = 5, 0.3, 64
DELAYS = (0, 2, 4)
"""Control periods between observation and execution, one demonstration per task each."""
EVAL_DELAY = 2
SMALL = {"image_size": IMAGE, "backbone": "small", "backbone_width": 16}
MODELS = {
    "cnn_bc": ({**SMALL, "image_features": 64, "hidden_dim": 128}, 2000, 64, 1e-3),
}
"""kind -> (config, updates, batch size, peak learning rate)."""


# the module's fixtures fly and train (minutes on 2 loaded cores)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """numba and torch on one thread for this module, restored after it: on a loaded 2-core machine
    their 2-thread pools spin against each other (the demonstrations flew 1.8x, training ran 3.5x
    slower than on one thread, measured with the other jobs of a test run beside them)."""
    numba_before, torch_before = numba.get_num_threads(), torch.get_num_threads()
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    yield
    numba.set_num_threads(numba_before)
    torch.set_num_threads(torch_before)


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    """(scene folder, world, env, field expert, tasks, demonstrations)."""
    root = tmp_path_factory.mktemp("closed_loop")
    scene = scene_with_camera(root / "indoor", 2, IMAGE)
    world = World.load(scene)
    env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend="cpu", render_images=False)
    expert = make_policy("field_expert", world)
    tasks = sample_tasks(world.scene, world.grid, TASKS, 0, "pointgoal", world.protocol)
    rng = np.random.default_rng(0)
    demos = []
    for task in tasks:
        for delay in DELAYS:
            ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, rng, noise_std=NOISE, delay_steps=delay)
            assert ep["status"] == "success", (task.task_id, ep["status"])
            demos.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    return scene, world, env, expert, tasks, demos


@pytest.fixture(scope="module")
def trained(flights, tmp_path_factory):
    """kind -> (checkpoint folder, closed-loop statuses on the 5 training tasks)."""
    cache = {}

    def get(kind: str):
        if kind not in cache:
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
            statuses = [fly_episode(world, env, policy, expert, t, "cpu", 0.0, np.random.default_rng(0),
                                    delay_steps=EVAL_DELAY)["status"] for t in tasks]
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
    time (not lockstep), the bridge flies it over MAVLink. The task is the shortest of the five,
    whatever its in-process result. The bridge ties the map at the task's start, hands over at the
    start pose (as the simulator's first step), and ends the mission by itself: the vehicle reaches
    the goal (``mission/result`` success; the rehearsal vehicle's position is exact), holds, lands,
    and the bridge exits 0. With ``record:=`` the flight is one bag, and replaying it through the
    checkpoint (``airplay replay``) gives back the commands the flight sent, bit for bit."""
    pytest.importorskip("rclpy")
    pytest.importorskip("pymavlink")
    from helpers.ports import free_udp_port
    from helpers.vehicle import Operator, expect_landed_exit, logs, spawn, stop_all, vehicle_command

    from airplay.graph import FLY_ARGUMENTS, fly_graph, parse_launch_arguments
    from airplay.launcher import node_command

    scene, world, _, _, tasks, _ = flights
    ckpt, statuses = trained("cnn_bc")
    index = min(range(len(tasks)), key=lambda k: tasks[k].astar_length_m)
    task = tasks[index]
    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(vehicle_command(port, "--scene", str(scene), "--task", str(index), "--episodes", str(TASKS)),
                           tmp_path / "vehicle.log"))
        arguments = [f"scene:={scene}", f"index:={index}", f"episodes:={TASKS}", "seed:=0", "policy:=cnn_bc",
                     f"checkpoint:={ckpt}", "render_backend:=cpu", f"connection:=udpin:127.0.0.1:{port}", "arm:=true",
                     f"record:={tmp_path / 'bags'}"]
        for spec in fly_graph(parse_launch_arguments(arguments, FLY_ARGUMENTS)):
            procs.append(spawn(node_command(spec), tmp_path / f"{spec.name}.log"))
        bridge = procs[-1]
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 60, "the bridge flying", tmp_path)
        expect_landed_exit(bridge, tmp_path, timeout_s=task.time_limit_s + 40.0)
        [result] = operator.results
        print(f"\nrehearsal of task {index} (in process: {statuses[index]}): {result['status']} after "
              f"{result['flown_s']:.1f} s, closest {result['closest_goal_distance_m']} m")
        assert result["status"] == "success", f"{result}\n" + logs(tmp_path)
    finally:
        stop_all(procs)   # SIGINT: the recorder finalizes its bag
        operator.close()
    done = subprocess.run([sys.executable, "-m", "airplay.cli", "replay", str(tmp_path / "bags"), "--policy", "cnn_bc",
                           "--checkpoint", str(ckpt), "--json"], check=False, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + logs(tmp_path)
    [replay] = json.loads(done.stdout)["replays"]
    assert replay["task_id"] == task.task_id and replay["steps"] > 20 and replay["equal"] == replay["steps"], replay
    from airplay.data.bag_reader import read_episode

    episode = read_episode(replay["bag"])
    assert episode.metadata["status"] == "success" and episode.metadata["task"]["task_id"] == task.task_id
    assert episode.complete and episode.depth is not None
