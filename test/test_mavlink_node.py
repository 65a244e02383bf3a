"""The ``mavlink_bridge`` node and the ``fly`` graph over real DDS and real MAVLink/UDP on loopback.

Every node and the vehicle (`airplay vehicle`) run as separate processes; the test listens and
commands through a BackgroundNode in its own ROS domain. Every process is stopped in a
``finally`` (SIGINT, then SIGKILL).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import descendants, stop_process_trees
from helpers.ports import free_udp_port
from helpers.vehicle import Operator, expect_landed_exit, logs, spawn, stop_all, vehicle_command

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("pymavlink")

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("own_ros_domain")  # test/conftest.py


def bridge_spec(port: int, **params):
    from airplay.graph import NodeSpec

    base = {"connection": f"udpin:127.0.0.1:{port}", "takeoff_height_m": 0.6, "command_timeout_s": 0.3, "arm": True}
    base.update(params)
    return NodeSpec("mavlink_bridge", "airplay.nodes.mavlink_bridge_node", "mavlink_bridge_node", base)


def test_bridge_node_flies_reports_and_lands_on_estop(tmp_path):
    from airplay.launcher import node_command

    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(node_command(bridge_spec(port)), tmp_path / "bridge.log"))
        procs.append(spawn(vehicle_command(port, "--start", "2,3,0,90"), tmp_path / "vehicle.log"))
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        assert operator.latest(operator.armed) is True and operator.latest(operator.modes) == "OFFBOARD"
        start = operator.latest(operator.odom)
        assert start[0:3] == pytest.approx([2.0, 3.0, 0.6], abs=0.15)   # map ENU, as the vehicle was placed
        # forward at yaw 90 deg (north): +y in map
        # (until it has gone 0.8 m: the direction and the straightness are judged, not the speed,
        # which test_mavlink_link judges on the vehicle's clock)
        deadline = time.monotonic() + 60
        while (operator.latest(operator.odom)[1] - start[1] < 0.8) and time.monotonic() < deadline:
            operator.send([1.0, 0.0, 0.0, 0.0])
            time.sleep(0.02)
        moved = operator.latest(operator.odom)[0:3] - start[0:3]
        assert moved[1] > 0.8 and abs(moved[0]) < 0.1, moved
        # NaN: refused, published with its reason; then silence: hover
        operator.send([math.nan, 0.0, 0.0, 0.0])
        operator.wait(lambda: any(i["kind"] == "stale_command_hold" for i in operator.interventions[1:]), 5,
                      "stale_command_hold", tmp_path)
        kinds = [i["kind"] for i in operator.interventions]
        assert "refused_non_finite" in kinds
        refusal = next(i for i in operator.interventions if i["kind"] == "refused_non_finite")
        assert "non-finite" in refusal["reason"] and refusal["command_out"] == [1.0, 0.0, 0.0, 0.0]
        # holding position (a position setpoint where the hold began): back there and still
        operator.wait(lambda: np.linalg.norm(operator.latest(operator.odom)[7:10]) < 0.1, 5, "hovering", tmp_path)
        # operator stop -> land -> disarmed; the bridge exits 0 after touchdown
        operator.estop_pub.publish(operator._empty())
        expect_landed_exit(procs[0], tmp_path)
        time.sleep(0.2)
        assert "operator_stop_land" in [i["kind"] for i in operator.interventions]
        assert operator.latest(operator.armed) is False and operator.latest(operator.phases) == "landed"
        assert operator.latest(operator.odom)[2] == pytest.approx(0.0, abs=0.05)
        assert operator.battery and 14.0 < operator.battery[-1] < 16.9
    finally:
        stop_all(procs)
        operator.close()


def test_bridge_node_arms_only_on_request_and_lands_on_sigint(tmp_path):
    """A lifecycle node: configured at start (connects, checks: phase ready), nothing armed until the
    activate transition; SIGINT while airborne lands the vehicle before the bridge exits."""
    from airplay.launcher import node_command

    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(node_command(bridge_spec(port, arm=False)), tmp_path / "bridge.log"))
        procs.append(spawn(vehicle_command(port, "--start", "1,1,0,0"), tmp_path / "vehicle.log"))
        operator.wait(lambda: operator.latest(operator.phases) == "ready", 40, "the bridge ready", tmp_path)
        time.sleep(1.5)  # waits: no arming without the request
        assert operator.latest(operator.phases) == "ready" and operator.latest(operator.armed) is False
        assert operator.lifecycle_state() == "inactive"
        state = subprocess.run([sys.executable, "-m", "airplay.cli", "bridge", "state"], capture_output=True,
                               text=True, timeout=60)
        assert state.returncode == 0 and "lifecycle inactive, phase ready, disarmed" in state.stdout, state
        arm = subprocess.run([sys.executable, "-m", "airplay.cli", "bridge", "arm"], capture_output=True,
                             text=True, timeout=60)           # the lifecycle's activate: the request to arm
        assert arm.returncode == 0 and "activated" in arm.stdout, arm
        assert operator.lifecycle_state() == "active"
        assert not operator.transition("activate")             # once
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        assert operator.latest(operator.armed) is True
        procs[0].send_signal(signal.SIGINT)
        expect_landed_exit(procs[0], tmp_path, timeout_s=30.0)
        assert operator.latest(operator.phases) == "landed" and operator.latest(operator.armed) is False
        vehicle_log = (tmp_path / "vehicle.log").read_text()
        assert "disarmed" in vehicle_log.split("taking off")[-1], logs(tmp_path)
        assert "shutdown while airborne" in (tmp_path / "bridge.log").read_text()
    finally:
        stop_all(procs)
        operator.close()


def test_bridge_node_bad_parameters_named(tmp_path):
    from airplay.launcher import node_command

    for params, name in (({"connection": "pigeon:1"}, "connection"), ({"fence_box": "1,2,3"}, "fence_box"),
                         ({"autopilot_fence": True}, "autopilot_fence"),
                         ({"fence_z_max": 3.0, "autopilot_fence_action": "loiter"}, "autopilot_fence_action")):
        res = subprocess.run(node_command(bridge_spec(free_udp_port(), **params)), capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 2 and name in res.stderr, res.stderr


def test_policy_node_vehicle_parameters_named(indoor_1):
    """The vehicle-only VLN parameters are refused in sim_eval (vehicle:=false), naming them, before any model loads."""
    base = [sys.executable, "-m", "airplay.nodes.policy_node", "--ros-args", "-p", f"scenes:={indoor_1}",
            "-p", "setting:=vln", "-p", "policy:=airvln_r1"]
    for extra, name in ((["-p", "instruction:=go"], "'instruction'"), (["-p", "vehicle:=maybe"], "'vehicle'")):
        res = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and name in res.stderr, res.stderr


def test_fly_launch_file_reads_the_shared_graph(tmp_path):
    import ast
    import py_compile

    path = REPO / "launch" / "fly.launch.py"
    py_compile.compile(str(path), cfile=str(tmp_path / "fly.pyc"), doraise=True)
    tree = ast.parse(path.read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("airplay.ros2_launch", "graph_launch_description") in imported
    calls = [n for n in ast.walk(tree)
             if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "graph_launch_description"]
    assert [[a.value for a in c.args] for c in calls] == [["fly"]]
    from airplay.graph import GRAPHS, GraphArgumentError, fly_graph

    assert GRAPHS["fly"][0] is fly_graph
    nodes = fly_graph({"scene": "scenes/indoor_0"})
    assert [n.name for n in nodes] == ["renderer", "policy", "mavlink_bridge"] and nodes[-1].required
    assert nodes[1].parameters["lockstep"] is False
    real = fly_graph({"camera_topic": "/cam/color", "depth_topic": "/cam/depth", "policy": "expert", "scene": "s"})
    assert [n.name for n in real] == ["policy", "mavlink_bridge"]
    assert real[0].remappings == (("camera/image_raw", "/cam/color"), ("camera/depth/image_raw", "/cam/depth"))
    with pytest.raises(GraphArgumentError, match="scene"):
        fly_graph({})
    # viewer:=true: the viewer node on the vehicle's topics (the real camera's too), outside the flight
    viewed = fly_graph({"camera_topic": "/cam/color", "scene": "s", "viewer": "true", "viewer_out": "f.rrd"})
    assert [n.name for n in viewed] == ["policy", "viewer", "mavlink_bridge"]
    viewer = viewed[1].parameters
    assert viewer["vehicle"] is True and viewer["lockstep"] is False and viewer["render_images"] is True
    assert viewer["out"] == "f.rrd" and viewer["scenes"] == "s"
    assert viewed[1].remappings == viewed[0].remappings == (("camera/image_raw", "/cam/color"),)
    with pytest.raises(GraphArgumentError, match="viewer_web_port"):
        fly_graph({"scene": "s", "viewer": "true", "viewer_web_port": "0"})
    # AirVLN-R1 on the vehicle: setting vln implied, the backend's arguments checked (errors name them)
    model = tmp_path / "model"
    model.mkdir()
    vln = fly_graph({"scene": "s", "policy": "airvln_r1", "model": str(model), "image_size": "56,56"})
    policy = vln[1].parameters
    assert vln[0].parameters["setting"] == policy["setting"] == "vln" and vln[0].parameters["render_images"] is True
    assert policy["vehicle"] is True and policy["episode_instruction"] is True and policy["instruction"] == ""
    assert policy["model"] == str(model) and policy["image_size"] == "56,56"
    assert vln[2].parameters["land_on_policy_stop"] is True
    real = fly_graph({"scene": "s", "policy": "airvln_r1", "vln_backend": "openai", "endpoint": "http://127.0.0.1:8000/v1",
                      "camera_topic": "/cam", "instruction": "land on the roof"})[0].parameters
    assert real["episode_instruction"] is False and real["instruction"] == "land on the roof"
    assert "vehicle" not in fly_graph({"scene": "s"})[1].parameters
    for bad, name in (({"policy": "airvln_r1"}, "'model'"), ({"policy": "airvln_r1", "model": str(model), "setting":
                       "pointgoal"}, "setting:=vln"), ({"setting": "vln"}, "policy:=airvln_r1"),
                      ({"policy": "airvln_r1", "model": str(model), "render_images": "false"}, "render_images"),
                      ({"policy": "airvln_r1", "vln_backend": "openai", "endpoint": "ftp://x"}, "'endpoint'"),
                      ({"policy": "airvln_r1", "model": str(model), "max_new_tokens": "0"}, "'max_new_tokens'"),
                      ({"instruction": "go"}, "instruction:="), ({"policy": "airvln_r1", "vln_backend": "llama"},
                                                                 "'vln_backend'")):
        with pytest.raises(GraphArgumentError, match=name):
            fly_graph({"scene": "s", **bad})
    with pytest.raises(GraphArgumentError, match="scene:=FOLDER is needed with policy:=airvln_r1"):
        fly_graph({"camera_topic": "/cam", "policy": "airvln_r1", "model": str(model)})


def test_rehearsal_vehicle_and_fly_graph_fly_the_expert_to_the_goal(indoor_1, tmp_path):
    """`airplay vehicle --scene --task` + the fly graph (renderer as camera, expert policy, bridge), with
    ``viewer:=true``: the bridge ties the map at the task's start (the vehicle stands there: the tie is
    the identity), flies to the start pose, the expert flies to the goal, the bridge ends the mission
    there by itself (success), holds and lands; the viewer node's recording holds the flight (path to
    the goal, commands, phases, the episode's start, its end and the landing)."""
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    from helpers.rrd import column, read_rrd

    from airplay.graph import FLY_ARGUMENTS, fly_graph, parse_launch_arguments
    from airplay.launcher import node_command
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World

    world = World.load(indoor_1)
    tasks = sample_tasks(world.scene, world.grid, 10, 0, "pointgoal", world.protocol)
    index = min(range(len(tasks)), key=lambda k: tasks[k].astar_length_m)   # the shortest: a quick flight
    task = tasks[index]
    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(vehicle_command(port, "--scene", str(indoor_1), "--task", str(index), "--episodes", "10"),
                           tmp_path / "vehicle.log"))
        arguments = [f"scene:={indoor_1}", f"index:={index}", "episodes:=10", "seed:=0", "render_images:=false",
                     f"connection:=udpin:127.0.0.1:{port}", "arm:=true", "viewer:=true",
                     f"viewer_out:={tmp_path / 'fly.rrd'}"]
        specs = fly_graph(parse_launch_arguments(arguments, FLY_ARGUMENTS))
        for spec in specs:
            procs.append(spawn(node_command(spec), tmp_path / f"{spec.name}.log"))
        bridge, viewer = procs[-1], procs[[s.name for s in specs].index("viewer")]
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        operator.wait(lambda: operator.episodes, 5, "episode/status started", tmp_path)
        assert operator.episodes[0]["scene_dir"] == str(indoor_1) and operator.episodes[0]["index"] == index

        def near_goal() -> bool:
            s = operator.latest(operator.odom)
            return s is not None and np.linalg.norm(s[0:3] - task.goal_position) < world.protocol.success_radius_m

        operator.wait(near_goal, 2.0 * task.astar_length_m + 10.0, "the vehicle at the goal", tmp_path)
        path = np.array([s[0:3] for s in list(operator.odom)])
        assert np.linalg.norm(path[-1] - task.goal_position) < world.protocol.success_radius_m
        # it flew the expert's way: away from the start, never outside the scene's navigable region much
        assert np.linalg.norm(path[0, :2] - task.start_position[:2]) < 0.3
        assert not [i for i in operator.interventions if i["kind"] in ("geofence_hold", "heartbeat_lost")]
        expect_landed_exit(bridge, tmp_path)   # nobody asked it to land: the mission's end did
        assert operator.latest(operator.armed) is False
        [result] = operator.results
        assert result["status"] == "success" and result["task_id"] == task.task_id, result
        assert result["goal_distance_m"] <= world.protocol.success_radius_m
        [tie] = operator.ties
        assert tie["source"] == "task_start" and abs(tie["yaw_rad"]) < 0.02, tie
        np.testing.assert_allclose(tie["origin_enu"], [0.0, 0.0, 0.0], atol=0.05)
        assert operator.phases.index("positioning") < operator.phases.index("flying")
        stop_all([viewer])  # SIGINT: the viewer closes its recording
        assert viewer.returncode == 0, logs(tmp_path)
    finally:
        stop_all(procs)
        operator.close()
    rows, static, batches = read_rrd(tmp_path / "fly.rrd")
    assert static["/world/scene/indoor_1/mesh"] == 1 and static["/world/vehicle/camera"] == 1
    np.testing.assert_allclose(column(batches, "/world/goal", "Points3D:positions")[0][0], task.goal_position,
                               atol=1e-5)  # the task the viewer derived from the bridge's (scene, index)
    # The flight from "flying" to touchdown: its path reaches the goal, with the policy's commands.
    flown = np.array(column(batches, f"/world/indoor_1/{task.task_id}", "LineStrips3D:strips")[0][0])
    # the episode's path is the one the bridge's mission judged (its end status carries it)
    assert rows["/world/vehicle"] > 10 and len(flown) > 10 and rows["/command/vx"] > 10
    assert np.linalg.norm(flown[-1] - task.goal_position) <= world.protocol.success_radius_m + 1e-4   # ends inside
    status = [json.loads(t[0]) for t in column(batches, "/status", "TextLog:text")]
    phases = [s["phase"] for s in status if "phase" in s]
    assert {"flying", "landed"} <= set(phases) and phases.index("flying") < phases.index("landed")
    ends = [s["status"] for s in status if "status" in s]
    assert ends == ["started", "success", "landed"]



def _yaw(state) -> float:
    from airplay.frames import heading_of_state

    return heading_of_state(state)


def test_rehearsal_flies_airvln_r1_stops_and_lands(indoor_1, tiny_vl_model, tmp_path):
    """`airplay vehicle --setting vln` + `airplay launch fly policy:=airvln_r1` (transformers backend, the
    tiny model answering ["MOVE_FORWARD", "TURN_LEFT", "STOP"]): the operator's instruction on
    `instruction`, one forward step along the heading, a left turn, STOP -> the bridge ends the mission
    (holds, lands) -> the graph ends."""
    from airplay.vln.actions import load_vln_config
    from airplay.vln.evaluate import vln_scene
    from airplay.world import World

    world = World.load(indoor_1)
    vs = vln_scene(world, 10, 0, load_vln_config())
    index = min(range(len(vs.episodes)), key=lambda k: vs.episodes[k].start_position[2])  # the lowest: quick take-off
    episode = vs.episodes[index]
    height = float(episode.start_position[2])
    port = free_udp_port()
    instruction = "Operator test: fly forward one step, turn left, then stop."
    operator = Operator()
    launch = vehicle = None
    nodes: set[int] = set()
    t0 = time.monotonic()
    try:
        args = [f"scene:={indoor_1}", f"index:={index}", "episodes:=10", "seed:=0", "policy:=airvln_r1",
                "vln_backend:=transformers", f"model:={tiny_vl_model}", "image_size:=56,56",
                f"connection:=udpin:127.0.0.1:{port}", "arm:=true", f"takeoff_height_m:={height:.3f}"]
        launch = spawn([sys.executable, "-m", "airplay.cli", "launch", "fly", *args], tmp_path / "launch.log")

        def policy_listens() -> bool:
            nodes.update(descendants(launch.pid))
            assert launch.poll() is None, "airplay launch fly ended early\n" + logs(tmp_path)
            return operator.instruction_pub.get_subscription_count() >= 1

        operator.wait(policy_listens, 60, "the policy node (model loaded) on 'instruction'", tmp_path)
        for _ in range(3):  # reliable, matched: the operator's instruction before the vehicle flies
            operator.instruction_pub.publish(operator._string(data=instruction))
            time.sleep(0.1)
        vehicle = spawn(vehicle_command(port, "--scene", str(indoor_1), "--task", str(index), "--episodes", "10",
                                        "--setting", "vln"), tmp_path / "vehicle.log")
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        assert "OFFBOARD" in operator.modes and operator.latest(operator.armed) is True
        try:
            code = launch.wait(timeout=max(5.0, 110 - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            pytest.fail("the fly graph did not end (STOP -> land -> bridge exits)\n" + logs(tmp_path))
        assert code == 0, logs(tmp_path)
        elapsed = time.monotonic() - t0
        time.sleep(0.3)
        with operator.bg.lock:
            timeline, reports = list(operator.timeline), list(operator.reports)
            interventions = list(operator.interventions)
    finally:
        stop_process_trees((launch, vehicle), nodes, signal.SIGINT, wait_s=10)
        operator.close()
    print(f"the rehearsal took {elapsed:.1f} s")
    log = (tmp_path / "launch.log").read_text()
    # The policy flew the operator's instruction and stopped on the model's STOP.
    stops = [r for r in reports if r["stop"]]
    assert len(stops) == 1, reports
    assert stops[0]["instruction"] == instruction and stops[0]["stop_reason"] == "stop"
    assert stops[0]["actions"] == ["MOVE_FORWARD", "TURN_LEFT", "STOP"] and stops[0]["queries"] == 1
    assert "instruction from the operator" in log and "policy stop (stop, 3 steps): the mission ends" in log
    assert "mission result: stopped" in log or "mission result: success" in log
    # The moves, in map ENU: MOVE_FORWARD along the start heading, TURN_LEFT in place (+30 deg, CCW).
    phase_t = {value: t for t, kind, value in reversed(timeline) if kind == "phase"}
    odoms = [(t, s) for t, kind, s in timeline if kind == "odom"]
    flying = next(s for t, s in odoms if t >= phase_t["flying"])
    stopped = next(s for t, s in odoms if t >= phase_t["landing"])
    assert flying[0:2] == pytest.approx(episode.start_position[0:2], abs=0.15)
    yaw0 = _yaw(flying)
    assert math.remainder(yaw0 - episode.start_yaw, 2 * math.pi) == pytest.approx(0.0, abs=math.radians(3))
    actions = vs.actions
    moved = stopped[0:3] - flying[0:3]
    along = moved[0] * math.cos(yaw0) + moved[1] * math.sin(yaw0)
    across = -moved[0] * math.sin(yaw0) + moved[1] * math.cos(yaw0)
    print(f"moved {along:.3f} m along the heading, {across:.3f} m across, {moved[2]:.3f} m up; "
          f"turned {math.degrees(math.remainder(_yaw(stopped) - yaw0, 2 * math.pi)):.1f} deg")
    assert along == pytest.approx(actions.forward_m, abs=0.15), moved
    assert abs(across) < 0.15 and abs(moved[2]) < 0.15, moved
    turned = math.remainder(_yaw(stopped) - yaw0, 2 * math.pi)
    assert turned == pytest.approx(actions.turn_rad, abs=math.radians(5))
    # ... and landed: disarmed on the ground, the bridge (required) exited, so the graph ended.
    final = next(s for t, kind, s in reversed(timeline) if kind == "odom")
    assert final[2] == pytest.approx(0.0, abs=0.05) and operator.latest(operator.armed) is False
    assert operator.latest(operator.phases) == "landed"
    assert not [i for i in interventions if i["kind"] in ("geofence_hold", "heartbeat_lost", "refused_non_finite")]
    assert elapsed < 120
