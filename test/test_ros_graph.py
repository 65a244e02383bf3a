"""The ROS graph (sim, renderer, policy, evaluator as separate processes over real DDS on
loopback) gives the same episodes as the in-process runtime; a dead policy node ends its
episodes as ``no_command`` and the run finishes; bad parameters exit non-zero naming them.

Every process gets a deadline; every process is killed in a ``finally``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import busy_loops
from helpers.ros_nodes import logs, start_node, stop_all

rclpy = pytest.importorskip("rclpy")

EPISODES = 10
RENDER_IMAGES = os.environ.get("AIRPLAY_TEST_GRAPH_RENDER", "false") == "true"
"""The renderer publishes every frame either way; with false they are zeros (the expert does
not look at them). Rendering 224x224 RGB + depth on the CPU costs ~15 ms a frame, ~65 s for
the ~4,400 frames of these episodes on 2 cores: over this file's budget. Set
AIRPLAY_TEST_GRAPH_RENDER=true to render real images."""

pytestmark = pytest.mark.usefixtures("own_ros_domain")  # test/conftest.py


class StatusListener:
    """Collects ``episode/status`` JSON and ``/clock`` in the test process (own context, spun in a thread)."""

    def __init__(self) -> None:
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE

        self.background = BackgroundNode("status_listener")
        self.lock = self.background.lock
        self.messages: list[dict] = []
        self.clock_ns: list[int] = []
        self.background.node.create_subscription(String, "episode/status", self._on, RELIABLE)
        # Every /clock message is checked: keep them all when this process falls behind for a moment
        # (a faster graph publishes more of them per wall second than a history of 10 covers).
        self.background.node.create_subscription(Clock, "/clock", self._on_clock, 10_000)
        self.background.start()

    def _on(self, msg) -> None:
        with self.lock:
            self.messages.append(json.loads(msg.data))

    def _on_clock(self, msg) -> None:
        with self.lock:
            self.clock_ns.append(msg.clock.sec * 1_000_000_000 + msg.clock.nanosec)

    def terminal(self) -> dict[int, dict]:
        with self.lock:
            return {m["episode"]: m for m in self.messages if m["status"] != "started"}

    def started(self) -> set[int]:
        with self.lock:
            return {m["episode"] for m in self.messages if m["status"] == "started"}

    def close(self) -> None:
        self.background.close()


def start_graph(arguments: list[str], log_dir: Path) -> dict[str, subprocess.Popen]:
    """The sim_eval graph as ``airplay launch`` starts it: from the one graph description."""
    from airplay.graph import SIM_EVAL_ARGUMENTS, parse_launch_arguments, sim_eval_graph
    from airplay.launcher import node_command

    procs = {}
    for spec in sim_eval_graph(parse_launch_arguments(arguments, SIM_EVAL_ARGUMENTS)):
        log = open(log_dir / f"{spec.name}.log", "w")
        procs[spec.name] = subprocess.Popen(node_command(spec), stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
    return procs


def evaluator_exit(procs: dict, log_dir: Path, timeout_s: float,
                   failure: str = "the evaluator did not finish in time\n") -> int:
    """The evaluator's exit code; the test fails with ``failure`` and the logs after ``timeout_s``
    (a hang guard, not a speed check)."""
    try:
        return procs["evaluator"].wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(failure + logs(log_dir))


def _graph_params(scene_dir: Path, episodes: int) -> dict:
    return {"scenes": str(scene_dir), "episodes": episodes, "seed": 0, "setting": "pointgoal"}


@pytest.mark.slow
def test_graph_equals_inprocess(indoor_1, tmp_path):
    from airplay.eval.runner import EvalConfig, evaluate_inprocess, run_episode
    from airplay.policies import make_policy
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    world = World.load(indoor_1)
    tasks = sample_tasks(world.scene, world.grid, EPISODES, 0, "pointgoal", world.protocol)
    env = AirPlayEnv(world, "pointgoal", tasks=tasks, render_images=False)
    policy = make_policy("expert", world)
    expected = [run_episode(env, policy, task) for task in tasks]
    expected = [(f.trajectory, f.status, f.steps) for f in expected]

    out = tmp_path / "out"
    # The live view (viewer:=true) watches the graph; the in-process run below is watched the same way.
    view = importlib.util.find_spec("rerun") is not None
    viewer = ["viewer:=true", f"viewer_out:={tmp_path / 'graph.rrd'}"] if view else []
    listener = StatusListener()
    procs = {}
    try:
        procs.update(start_graph([f"scenes:={indoor_1}", f"episodes:={EPISODES}", "seed:=0", "policy:=expert",
                                  "setting:=pointgoal", "lockstep:=true", *viewer,
                                  f"out:={out}", f"render_images:={str(RENDER_IMAGES).lower()}"], tmp_path))
        # A hang guard, not a speed check: ~25 s idle, several times that on a loaded 2-core machine.
        code = evaluator_exit(procs, tmp_path, 600 if RENDER_IMAGES else 240)
        assert code == 0, logs(tmp_path)
        deadline = time.monotonic() + 30  # the last statuses may still be on their way to this listener
        while len(listener.terminal()) < EPISODES and time.monotonic() < deadline:
            time.sleep(0.05)
        statuses = listener.terminal()
        clock_ns = list(listener.clock_ns)
    finally:
        stop_all(procs)
        listener.close()

    # Sim time: one 20 ms period per step, two from an episode's end to the next start
    # (airplay.world.lockstep.next_start_ns), never backwards.
    assert clock_ns and clock_ns == sorted(clock_ns)
    total_steps = sum(steps for _, _, steps in expected)
    assert clock_ns[-1] == (total_steps + 2 * (EPISODES - 1)) * 20_000_000
    # /clock at the default 10 Hz of sim time: at most 100 ms apart, far fewer than the steps,
    # and exact at every episode's first observation.
    assert max(np.diff(clock_ns)) <= 100_000_000
    assert len(clock_ns) < (total_steps + EPISODES) / 3
    with listener.lock:
        starts = [m["stamp_ns"] for m in listener.messages if m["status"] == "started"]
    assert len(starts) == EPISODES and set(starts) <= set(clock_ns)
    assert sorted(statuses) == list(range(EPISODES)), logs(tmp_path)
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == EPISODES
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["runtime"] == "ros"
    # The same files as `airplay eval --runtime inprocess`, to the last digit (but for meta).
    inproc = tmp_path / "inproc"
    observer = None
    if view:
        from airplay.view.live import EnvObserver, LiveView

        observer = EnvObserver(LiveView(out=tmp_path / "inproc.rrd", images=False))
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=EPISODES, render_images=False), inproc,
                       progress=False, observer=observer)
    if view:
        observer.live.close()
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()
    reference = json.loads((inproc / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if k != "meta"} == {k: v for k, v in reference.items() if k != "meta"}
    assert (out / "indoor_1_trajectories.png").is_file()
    for k, (trajectory, status, steps) in enumerate(expected):
        got = statuses[k]
        assert (got["status"], got["steps"]) == (status, steps), f"episode {k}"
        assert (lines[k]["status"], lines[k]["steps"]) == (status, steps), f"episode {k}"
        got_traj = np.asarray(got["trajectory"], np.float64)
        assert got_traj.shape == trajectory.shape
        assert np.abs(got_traj[-1] - trajectory[-1]).max() <= 1e-6, f"episode {k}: final position"
    if view:  # the graph's live view and the in-process one: the same entities, rows and sim times
        _assert_same_views(tmp_path / "graph.rrd", tmp_path / "inproc.rrd", total_steps)


def _assert_same_views(graph_rrd: Path, inproc_rrd: Path, total_steps: int) -> None:
    """Both recordings, read with rerun's own reader (test_view.read_rrd): the same entities, each
    episode's start and end status, goal and path. Observations and commands at the same sim times,
    the graph's a subset: the viewer is outside lockstep (it must not change the episodes), and
    where it falls more than the publishers' history (10 messages) behind the graph on a loaded
    machine it misses some, which its log counts."""
    import pyarrow as pa
    from helpers.rrd import read_rrd

    def times(batches, entity):
        return sorted(t for b in batches[entity] if "sim_time" in b.schema.names
                      for t in b.column("sim_time").cast(pa.int64()).to_pylist())

    (g_rows, g_static, g_batches), (rows, static, batches) = read_rrd(graph_rrd), read_rrd(inproc_rrd)
    camera = {"/world/vehicle/camera/rgb", "/world/vehicle/camera/depth", "/goal_image"}
    assert set(g_rows) - camera == set(rows) and g_static == static
    assert rows["/world/vehicle"] == total_steps + EPISODES and rows["/command/vx"] == total_steps
    assert g_rows["/status"] == rows["/status"] == 2 * EPISODES and g_rows["/world/goal"] == rows["/world/goal"]
    assert times(g_batches, "/status") == times(batches, "/status")
    for entity in ("/world/vehicle", "/command/vx"):
        got, want = times(g_batches, entity), times(batches, entity)
        assert set(got) <= set(want) and len(got) >= 0.9 * len(want), (entity, len(got), len(want))
    assert static["/world/scene/indoor_1/mesh"] == 1


@pytest.mark.slow
def test_graph_equals_inprocess_with_wind(indoor_1, tmp_path):
    """wind:= (a sim parameter) gives the in-process episodes of --wind: the same gusts, seeded by
    the seed and each task, and the same impulse."""
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    wind, episodes = "wind=0.8:-0.4,gust=0.5,gust_tau=1,impulse=0.5:0.5@30", 3
    out, procs = tmp_path / "out", {}
    try:
        procs.update(start_graph([f"scenes:={indoor_1}", f"episodes:={episodes}", "seed:=2", "policy:=expert",
                                  f"wind:={wind}", f"out:={out}", "render_images:=false"], tmp_path))
        assert evaluator_exit(procs, tmp_path, 240) == 0, logs(tmp_path)
    finally:
        stop_all(procs)
    inproc, calm = tmp_path / "inproc", tmp_path / "calm"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=episodes, seed=2, render_images=False, wind=wind),
                       inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()
    assert json.loads((out / "summary.json").read_text())["meta"]["wind"] == \
        json.loads((inproc / "summary.json").read_text())["meta"]["wind"]
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=episodes, seed=2, render_images=False), calm,
                       progress=False)
    assert (calm / "episodes.jsonl").read_text() != (inproc / "episodes.jsonl").read_text()


@pytest.fixture
def busy_machine():
    """Twice as many busy processes as cores for the length of a test (a loaded machine)."""
    with busy_loops(2 * (os.cpu_count() or 1)) as n:
        yield n


@pytest.mark.slow
def test_graph_equals_inprocess_on_a_busy_machine_with_a_cold_numba_cache(busy_machine, indoor_1, tmp_path,
                                                                           monkeypatch):
    """Machine load and a cold compiler cache change how long the run takes, never its result:
    the nodes compile their kernels before they report ready, and no wall-clock limit ends an
    episode of a slow node. episodes.jsonl is byte-identical to the in-process runtime's."""
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    episodes = 6
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-cache"))  # empty: every node compiles
    out = tmp_path / "out"
    procs = {}
    try:
        procs.update(start_graph([f"scenes:={indoor_1}", f"episodes:={episodes}", "render_images:=false",
                                  f"out:={out}"], tmp_path))
        code = evaluator_exit(procs, tmp_path, 900)  # a hang guard: ~1 min idle with a warm cache
    finally:
        stop_all(procs)
    assert code == 0, logs(tmp_path)
    assert any((tmp_path / "numba-cache").rglob("*.nbi")), "the nodes did not use the empty numba cache"
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=episodes, render_images=False), inproc,
                       progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()
    assert "warmed up" in (tmp_path / "sim.log").read_text() and "ready in" in (tmp_path / "policy.log").read_text()


FAILING_POLICY = '''
"""A policy of the user's own (module:factory) that fails: the expert, raising on the 4th call of
task 1 and in reset() of task 2."""
from airplay.policies.expert import ExpertNavigator


class Failing(ExpertNavigator):
    def reset(self, task=None):
        if task.task_id.endswith("-2"):
            raise RuntimeError(f"cannot plan {task.task_id}")
        super().reset(task)
        self.calls, self.fail = 0, task.task_id.endswith("-1")

    def select_action(self, obs):
        self.calls += 1
        if self.fail and self.calls == 4:
            raise ValueError(f"boom at call {self.calls}")
        return super().select_action(obs)


def make(world):
    return Failing(world)
'''


def _graph_with_plugin_policy(module: str, source: str, scene_dir, tmp_path, monkeypatch) -> Path:
    """Run the graph over 4 episodes with the user's policy ``module:make`` (written from
    ``source`` into a plugins folder on both this process's and the nodes' import path); the
    evaluator must exit 0. Returns the results folder."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "plugins"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "out"
    procs = {}
    try:
        procs.update(start_graph([f"scenes:={scene_dir}", "episodes:=4", "render_images:=false",
                                  f"policy:={module}:make", f"out:={out}"], tmp_path))
        code = evaluator_exit(procs, tmp_path, 240)
    finally:
        stop_all(procs)
    assert code == 0, logs(tmp_path)
    return out


@pytest.mark.slow
def test_a_failing_policy_fails_its_episodes_and_the_run_goes_on(indoor_1, tmp_path, monkeypatch):
    """A policy that raises on one observation (or in reset) ends that episode as policy_error,
    with the exception in episodes.jsonl; the other episodes fly, the run completes, and both
    runtimes write the same file."""
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    out = _graph_with_plugin_policy("failing_policy", FAILING_POLICY, indoor_1, tmp_path, monkeypatch)
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == ["success", "policy_error", "policy_error", "success"]
    assert lines[1]["error"] == "ValueError: boom at call 4" and lines[1]["steps"] == 3
    assert lines[2]["error"] == "RuntimeError: cannot plan indoor_1-pointgoal-0-2" and lines[2]["steps"] == 0
    assert "error" not in lines[0]
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=4, policy="failing_policy:make",
                                  render_images=False), inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()


VELOCITY_POLICY = '''
"""A policy of the user's own that reads the velocity: the expert, its vx nudged (by at most
1 mm/s) by a checksum of the bits of the float32 velocity it observes, so that any bit of the
observed velocity that differs between the runtimes changes the flight."""
import zlib

import numpy as np

from airplay.policies.expert import ExpertNavigator


class VelocityBits(ExpertNavigator):
    def select_action(self, obs):
        cmd = np.array(super().select_action(obs), np.float32)
        bits = np.ascontiguousarray(obs["state"][7:10], np.float32).tobytes()
        cmd.flat[0] += np.float32((zlib.crc32(bits) % 2001 - 1000) * 1e-6)  # vx
        return cmd


def make(world):
    return VelocityBits(world)
'''


@pytest.mark.slow
def test_a_policy_reading_the_velocity_flies_as_in_process(indoor_1, tmp_path, monkeypatch):
    """The policy node observes the sim's exact state (sim/state), not the REP-105 odom whose
    body-frame velocity reads back a few ulp off (in 0.5 % of observations a different float32,
    bench/odom_round_trip.py): a policy that depends on every bit of the velocity gives
    byte-identical episodes in both runtimes."""
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    out = _graph_with_plugin_policy("velocity_policy", VELOCITY_POLICY, indoor_1, tmp_path, monkeypatch)
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=4, policy="velocity_policy:make",
                                  render_images=False), inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()


SLOW_POLICY = '''
"""The expert, stalling longer than the sim's republish_s (0.5 s) at the first observation of
each episode and at every STALL_EVERY-th: the sim re-publishes the observation it waits on, the
renderer and the policy answer the repeats, and late copies reach the policy after it moved on."""
import time

from airplay.policies.expert import ExpertNavigator

STALL_S, STALL_EVERY = 1.2, 150


class Stalling(ExpertNavigator):
    def reset(self, task=None):
        super().reset(task)
        self.calls = 0

    def select_action(self, obs):
        self.calls += 1
        if self.calls == 1 or self.calls % STALL_EVERY == 0:
            time.sleep(STALL_S)
        return super().select_action(obs)


def make(world):
    return Stalling(world)
'''


@pytest.mark.slow
def test_a_stalling_policy_changes_the_duration_not_the_episodes(indoor_1, tmp_path, monkeypatch):
    """A policy that stalls for more than the sim's republish_s, on purpose and at fixed steps:
    the sim waits and re-publishes, the repeats are answered and late copies dropped, and the
    episodes are byte-identical to the in-process runtime's. The slow step is made, not hoped
    for from a loaded machine."""
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    episodes = 3
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "stalling_policy.py").write_text(SLOW_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "plugins"), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "out"
    procs = {}
    try:
        procs.update(start_graph([f"scenes:={indoor_1}", f"episodes:={episodes}", "render_images:=false",
                                  "policy:=stalling_policy:make", f"out:={out}"], tmp_path))
        code = evaluator_exit(procs, tmp_path, 300)
    finally:
        stop_all(procs)
    assert code == 0, logs(tmp_path)
    policy_log = (tmp_path / "policy.log").read_text()
    assert "re-publishes while it waits" in policy_log, logs(tmp_path)  # the repeats came and were answered
    assert "not for the latest observation" in (tmp_path / "sim.log").read_text(), logs(tmp_path)
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=episodes, policy="stalling_policy:make",
                                  render_images=False), inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()


@pytest.mark.slow
def test_dead_policy_ends_episodes_as_no_command(indoor_1, tmp_path):
    """The policy is killed once episode 1 has started: when DDS notices (the participant lease
    of config/fastdds_localhost.xml, 10 s) that episode (or, when this loaded test process
    notices the start late, a later one) and every one after it end as no_command, the ones
    before as success, and the evaluator still finishes the run."""
    episodes = 4
    common = _graph_params(indoor_1, episodes)
    out = tmp_path / "out"
    listener = StatusListener()
    procs = {}
    try:
        procs["sim"] = start_node("sim", common, tmp_path)
        procs["renderer"] = start_node("renderer", {**common, "render_images": False}, tmp_path)
        procs["policy"] = start_node("policy", {**common, "policy": "expert"}, tmp_path)
        procs["evaluator"] = start_node("evaluator", {**common, "out": str(out)}, tmp_path)
        deadline = time.monotonic() + 240  # a hang guard: the nodes warm their kernels first
        while 1 not in listener.started() and time.monotonic() < deadline:
            assert procs["evaluator"].poll() is None, logs(tmp_path)
            time.sleep(0.01)
        assert 1 in listener.started(), "episode 1 never started\n" + logs(tmp_path)
        procs["policy"].kill()  # dies mid-run
        procs["policy"].wait(timeout=5)
        # the 10 s lease, then the episodes left
        code = evaluator_exit(procs, tmp_path, 120, "the evaluator hung after the policy died\n")
        statuses = listener.terminal()
    finally:
        stop_all(procs)
        listener.close()
    assert code == 0, logs(tmp_path)
    got = [statuses[k]["status"] for k in range(episodes)]
    assert "no_command" in got, f"the policy died but no episode ended as no_command: {got}\n" + logs(tmp_path)
    first_dead = got.index("no_command")
    assert first_dead >= 1 and got == ["success"] * first_dead + ["no_command"] * (episodes - first_dead), \
        f"{got}\n" + logs(tmp_path)
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == got
    assert "no command" in (tmp_path / "sim.log").read_text()


@pytest.mark.slow
def test_another_graph_in_the_domain_stops_the_run_loudly(indoor_1, tmp_path):
    """A process of another graph publishing cmd_vel in this ROS domain (it would answer the
    sim's observations with commands stamped like this graph's: every graph's sim time starts at
    0): the evaluator stops the run with exit code 1 and says why, rather than write episodes
    that the other graph flew in part."""
    from geometry_msgs.msg import TwistStamped

    from airplay.nodes.background import BackgroundNode
    from airplay.nodes.common import RELIABLE

    other = BackgroundNode("policy_of_another_graph")
    other.node.create_publisher(TwistStamped, "cmd_vel", RELIABLE)
    other.start()
    procs = {}
    try:
        procs.update(start_graph([f"scenes:={indoor_1}", "episodes:=2", "render_images:=false",
                                  f"out:={tmp_path / 'out'}"], tmp_path))
        code = evaluator_exit(procs, tmp_path, 240, "the evaluator did not stop\n")
    finally:
        stop_all(procs)
        other.close()
    text = (tmp_path / "evaluator.log").read_text()
    assert code == 1, logs(tmp_path)
    assert "2 publishers of cmd_vel" in text and "ROS_DOMAIN_ID of its own" in text, text
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


@pytest.mark.parametrize("node,param,value", [
    ("sim", "episodes", -1),
    ("sim", "republish_s", 0.0),
    ("sim", "clock_rate_hz", -1.0),
    ("policy", "policy", "nonsense"),
    ("policy", "policy", "no_such_module:Policy"),
    ("policy", "policy_budget_ms", -1.0),
    ("evaluator", "setting", "flying"),
])
def test_bad_parameter_exits_nonzero_naming_it(node, param, value, indoor_1, tmp_path):
    params = {**_graph_params(indoor_1, 2), param: value}
    proc = start_node(node, params, tmp_path)
    try:
        code = proc.wait(timeout=30)
    finally:
        stop_all({node: proc})
    text = (tmp_path / f"{node}.log").read_text()
    assert code != 0
    assert f"'{param}'" in text, text


def test_a_running_node_checks_parameter_sets(indoor_1, tmp_path):
    """SetParameters on the evaluator (what ``ros2 param set`` calls): a dynamic parameter is
    changed, a wrong value and a read-only parameter are refused with reasons naming them."""
    import rclpy
    from rcl_interfaces.srv import SetParameters
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    proc = start_node("evaluator", {**_graph_params(indoor_1, 2), "out": str(tmp_path / "out")}, tmp_path)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("param_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        client = node.create_client(SetParameters, "/evaluator/set_parameters")
        assert client.wait_for_service(timeout_sec=60.0), logs(tmp_path)

        def set_one(name, value):
            request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
            future = client.call_async(request)
            executor.spin_until_future_complete(future, timeout_sec=20.0)
            assert future.done(), "no answer from /evaluator/set_parameters"
            return future.result().results[0]

        assert set_one("startup_timeout_s", 600.0).successful
        bad = set_one("startup_timeout_s", -1.0)
        assert not bad.successful and "startup_timeout_s" in bad.reason
        frozen = set_one("episodes", 5)
        assert not frozen.successful and "episodes" in frozen.reason
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        stop_all({"evaluator": proc})


@pytest.mark.slow
def test_evaluator_gives_up_when_the_graph_does_not_come_up(indoor_1, tmp_path):
    params = {**_graph_params(indoor_1, 2), "startup_timeout_s": 1.5, "out": str(tmp_path / "out")}
    proc = start_node("evaluator", params, tmp_path)
    try:
        code = proc.wait(timeout=30)
    finally:
        stop_all({"evaluator": proc})
    text = (tmp_path / "evaluator.log").read_text()
    assert code == 1, text
    assert "did not come up" in text and "episode/command has 0 subscribers" in text, text
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("victim,words", [("sim", "the sim left the graph"),
                                          ("renderer", "the node (renderer) left the graph")])
def test_dead_sim_or_renderer_stops_the_run(victim, words, indoor_1, tmp_path):
    """A killed sim or renderer leaves the graph when its DDS participant lease (10 s in
    config/fastdds_localhost.xml) runs out: the evaluator stops the run then (no episode can end
    without them), writes the finished episodes and exits 1."""
    common = _graph_params(indoor_1, 3)
    listener = StatusListener()
    procs = {}
    try:
        for name in ("sim", "renderer", "policy", "evaluator"):
            extra = {"evaluator": {"out": str(tmp_path / "out")},
                     "renderer": {"render_images": False}}.get(name, {})
            procs[name] = start_node(name, {**common, **extra}, tmp_path)
        deadline = time.monotonic() + 240  # a hang guard: the nodes warm their kernels first
        while 1 not in listener.started() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 1 in listener.started(), logs(tmp_path)
        procs[victim].kill()
        ended = set(listener.terminal())  # episodes this listener saw end before the kill
        # the 10 s lease, on a loaded machine
        code = evaluator_exit(procs, tmp_path, 120, f"the evaluator hung after the {victim} died\n")
    finally:
        stop_all(procs)
        listener.close()
    assert code == 1, logs(tmp_path)
    assert words in (tmp_path / "evaluator.log").read_text(), logs(tmp_path)
    # The episodes that ended before the kill (episode 0; a later one too when this loaded test
    # process noticed episode 1's start late), all successes, and not the third: the run stopped.
    lines = (tmp_path / "out" / "episodes.jsonl").read_text().splitlines()
    statuses = [json.loads(line)["status"] for line in lines]
    assert 1 <= len(statuses) < 3 and len(statuses) >= len(ended) and set(statuses) == {"success"}, statuses


def test_tf_transform_matches_odometry():
    """What the sim publishes on /tf (where tf2_msgs exists) is the odometry's pose."""
    from airplay.nodes.common import odometry_from_state, transform_from_odometry

    state = np.array([1.0, -2.0, 3.5, 0.0, 0.0, 0.38268343, 0.92387953, 0.1, 0.2, 0.3, 0.0, 0.0, 0.5])
    odom = odometry_from_state(state, 1_234_000_000)
    tf = transform_from_odometry(odom)
    assert (tf.header.frame_id, tf.child_frame_id) == ("map", "base_link")
    assert (tf.header.stamp.sec, tf.header.stamp.nanosec) == (1, 234_000_000)
    t, q = tf.transform.translation, tf.transform.rotation
    assert (t.x, t.y, t.z) == (1.0, -2.0, 3.5)
    assert (q.x, q.y, q.z, q.w) == (0.0, 0.0, 0.38268343, 0.92387953)
