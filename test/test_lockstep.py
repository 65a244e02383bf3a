"""Which episode an observation belongs to (airplay.world.lockstep), and the episode command that
carries the task: the rules alone, then the real policy node fed frames out of order over DDS."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import pytest

from airplay.tasks.sampler import Task
from airplay.world.lockstep import (CURRENT, DUPLICATE, ENDED, HELD, MAX_HELD_STAMPS, RESET_GAP_PERIODS, STALE,
                                  EpisodeCommand, EpisodeGate, next_start_ns)

DT = 20_000_000


# --- the rules -------------------------------------------------------------------------------------

def test_episode_starts_leave_a_gap_of_one_period():
    assert next_start_ns(None, DT) == 0
    assert next_start_ns(5 * DT, DT) == 5 * DT + RESET_GAP_PERIODS * DT == 7 * DT


def test_lockstep_frames_of_the_next_episode_are_held_until_it_starts():
    gate = EpisodeGate(DT)
    assert gate.classify(0) == HELD  # nothing started yet
    gate.hold(0, "odom 0")
    assert gate.start(0, 0) == [(0, "odom 0")]
    gate.handled(0)
    assert gate.classify(DT) == CURRENT  # the next step of episode 0
    gate.handled(DT)
    assert gate.classify(DT) == DUPLICATE  # the sim re-published it
    assert gate.classify(0) == STALE
    # Episode 0 ends at 2 DT; its terminal status is late. Episode 1 starts at 4 DT: its first frame
    # comes before either status and is not mistaken for episode 0's next step (3 DT).
    assert gate.classify(2 * DT) == CURRENT
    gate.handled(2 * DT)
    assert gate.classify(4 * DT) == HELD
    gate.hold(4 * DT, "odom 4")
    gate.end(0, steps=2)
    assert gate.classify(2 * DT) == DUPLICATE and gate.classify(DT) == ENDED
    assert not gate.live
    assert gate.start(1, 4 * DT) == [(4 * DT, "odom 4")]
    assert gate.live and gate.episode == 1
    assert gate.classify(2 * DT) == STALE  # a late frame of episode 0
    assert gate.start(1, 4 * DT) is None  # a repeated start
    assert gate.classify(4 * DT) == CURRENT  # not handled yet: more parts of the same observation
    assert gate.counts[HELD] >= 2 and gate.counts[STALE] >= 2


def test_a_start_drops_held_frames_older_than_it_and_keeps_later_ones():
    gate = EpisodeGate(DT)
    for stamp in (2 * DT, 7 * DT, 9 * DT):
        gate.hold(stamp, stamp)
    assert gate.start(3, 7 * DT) == [(7 * DT, 7 * DT)]  # 9 DT is not the first step: still held
    assert list(gate.held) == [9 * DT] and gate.counts[STALE] == 1


def test_held_frames_are_bounded():
    gate = EpisodeGate(DT)
    for k in range(MAX_HELD_STAMPS + 5):
        gate.hold(k * DT, k)
    assert len(gate.held) == MAX_HELD_STAMPS and min(gate.held) == 5 * DT and gate.counts[STALE] == 5


def test_without_lockstep_any_newer_frame_of_the_live_episode_is_current():
    gate = EpisodeGate(DT, lockstep=False)
    gate.start(0, 100 * DT)
    assert gate.classify(99 * DT) == STALE
    assert gate.classify(105 * DT) == CURRENT
    gate.handled(105 * DT)
    assert gate.classify(103 * DT) == STALE and gate.classify(105 * DT) == DUPLICATE
    gate.end(0)  # ended at the latest handled stamp
    assert gate.classify(106 * DT) == HELD


def test_gate_refuses_a_bad_period():
    with pytest.raises(ValueError, match="dt_ns"):
        EpisodeGate(0)


def _task(path: bool = True) -> Task:
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(7, 3)) * 3.3
    return Task(task_id="indoor_1-pointgoal-0-4", scene="indoor_1", setting="pointgoal",
                start_position=pts[0].copy(), start_yaw=float(rng.uniform(-math.pi, math.pi)),
                goal_position=pts[-1].copy(), goal_yaw=0.1 + 1e-12, path_m=pts if path else np.zeros((0, 3)),
                astar_length_m=float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum()),
                euclidean_distance_m=float(np.linalg.norm(pts[-1] - pts[0])), time_limit_s=31.25)


def test_episode_command_carries_the_task_bit_for_bit_through_json():
    task = _task()
    cmd = EpisodeCommand(7, "/scenes/indoor_1", 4, task, 1.0, "")
    back = EpisodeCommand.from_payload(json.loads(json.dumps(cmd.to_payload())))
    assert (back.episode, back.scene_dir, back.index, back.success_radius_m) == (7, "/scenes/indoor_1", 4, 1.0)
    t = back.task
    for name in ("start_position", "goal_position", "path_m"):
        assert np.array_equal(getattr(t, name), getattr(task, name)), name
    for name in ("task_id", "scene", "setting", "start_yaw", "goal_yaw", "astar_length_m", "euclidean_distance_m",
                 "time_limit_s"):
        assert getattr(t, name) == getattr(task, name), name
    assert "path_m" not in task.to_dict() and task.to_dict(path=True)["path_m"][0] == task.path_m[0].tolist()


@pytest.mark.parametrize("change,words", [
    (lambda d: d.pop("task"), "'task' is missing"),
    (lambda d: d.update(episode=-1), "'episode' must be an integer >= 0"),
    (lambda d: d.update(success_radius_m="1"), "'success_radius_m'"),
    (lambda d: d["task"].pop("goal_position"), "'goal_position' is missing"),
    (lambda d: d["task"].update(start_position=[0, 0]), "'start_position' must be 3 finite numbers"),
    (lambda d: d["task"].update(time_limit_s=0), "'time_limit_s' must be > 0"),
    (lambda d: d.update(instruction=3), "'instruction' must be a string"),
])
def test_bad_episode_commands_name_the_field(change, words):
    payload = EpisodeCommand(0, "s", 0, _task(), 1.0).to_payload()
    change(payload)
    with pytest.raises(ValueError, match=words):
        EpisodeCommand.from_payload(payload)


# --- the real policy node, fed out of order ---------------------------------------------------------

class FakeSimAndCamera:
    """This process plays the sim and the renderer for a real policy node: it publishes
    episode/status, sim/state (the exact state the node observes in the sim) and (blank) images
    in whatever order a test wants, and collects the
    node's cmd_vel and episode/policy messages (own rclpy context, spun in a thread)."""

    def __init__(self) -> None:
        from geometry_msgs.msg import TwistStamped
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import EPISODE_STATUS, LOCKSTEP_STREAM, RELIABLE, SIM_STATE_TOPIC

        self.background = BackgroundNode("fake_sim_and_camera")
        node = self.background.node
        self.lock = self.background.lock
        self.commands: list[tuple[int, np.ndarray]] = []
        self.reports: list[dict] = []
        self.status = node.create_publisher(String, "episode/status", EPISODE_STATUS)
        self.state = node.create_publisher(Odometry, SIM_STATE_TOPIC, RELIABLE)
        self.rgb = node.create_publisher(Image, "camera/image_raw", LOCKSTEP_STREAM)
        self.depth = node.create_publisher(Image, "camera/depth/image_raw", LOCKSTEP_STREAM)
        self.command_pub = node.create_publisher(String, "episode/command", RELIABLE)
        node.create_subscription(TwistStamped, "cmd_vel", self._on_cmd, RELIABLE)
        node.create_subscription(String, "episode/policy", self._on_report, RELIABLE)
        self.background.start()

    def _on_cmd(self, msg) -> None:
        from airplay.nodes.common import command_from_twist, ns_from_stamp

        with self.lock:
            self.commands.append((ns_from_stamp(msg.header.stamp), command_from_twist(msg)))

    def _on_report(self, msg) -> None:
        with self.lock:
            self.reports.append(json.loads(msg.data))

    def ready(self) -> bool:
        """The policy node has subscribed to episode/command and matched what we publish."""
        return (self.command_pub.get_subscription_count() >= 1 and self.state.get_subscription_count() >= 1
                and self.rgb.get_subscription_count() >= 1 and self.depth.get_subscription_count() >= 1
                and self.status.get_subscription_count() >= 1)

    def started(self, cmd: EpisodeCommand, stamp_ns: int) -> None:
        from airplay.nodes.common import json_message

        self.status.publish(json_message({**cmd.to_payload(), "status": "started", "stamp_ns": stamp_ns}))

    def ended(self, episode: int, status: str, steps: int) -> None:
        from airplay.nodes.common import json_message

        self.status.publish(json_message({"episode": episode, "status": status, "steps": steps, "trajectory": []}))

    def frame(self, state: np.ndarray, stamp_ns: int, parts=("state", "rgb", "depth"), camera=(8, 6)) -> None:
        from airplay.nodes.common import image_from_depth, image_from_rgb, sim_state_from_state

        w, h = camera
        for part in parts:
            if part == "state":
                self.state.publish(sim_state_from_state(state, stamp_ns))
            elif part == "rgb":
                self.rgb.publish(image_from_rgb(np.zeros((h, w, 3), np.uint8), stamp_ns))
            else:
                self.depth.publish(image_from_depth(np.zeros((h, w, 1), np.float32), stamp_ns))

    def command_for(self, stamp_ns: int, timeout_s: float = 60.0) -> np.ndarray:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for stamp, cmd in self.commands:
                    if stamp == stamp_ns:
                        return cmd
            time.sleep(0.002)
        raise AssertionError(f"no cmd_vel stamped {stamp_ns}")

    def commands_at(self, stamp_ns: int) -> list[np.ndarray]:
        with self.lock:
            return [cmd for stamp, cmd in self.commands if stamp == stamp_ns]

    def close(self) -> None:
        self.background.close()


def _state64(env) -> np.ndarray:
    v = env.vehicle
    return np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0], v.angular_velocity_body[0]])


@pytest.mark.usefixtures("own_ros_domain")
@pytest.mark.slow
def test_policy_node_survives_frames_out_of_order_and_flies_as_in_process(indoor_1, tmp_path):
    """Two episodes through the real policy node (the expert), driven by this process as sim and
    camera, with every ordering DDS may produce: the next episode's first frames (state and
    images, images first) before its start and before the previous episode's end, a repeated
    state, frames of the ended episode after the next one started, a frame far in the future.
    The node never acts with the wrong task, answers a repeat with the same command, drops the
    rest, stays up, and its commands fly both episodes exactly as the in-process runtime does."""
    from airplay.eval.runner import run_episode
    from airplay.policies import make_policy
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    world = World.load(indoor_1)
    tasks = sample_tasks(world.scene, world.grid, 2, 0, "pointgoal", world.protocol)
    reference = AirPlayEnv(world, "pointgoal", render_images=False)
    expected = [run_episode(reference, make_policy("expert", world), task) for task in tasks]
    cam = world.scene.spec.camera.intrinsics

    log = open(tmp_path / "policy.log", "w")
    node = subprocess.Popen([sys.executable, "-m", "airplay.nodes.policy_node", "--ros-args", "-p",
                             f"scenes:={indoor_1}", "-p", "setting:=pointgoal", "-p", "policy:=expert"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    fake = FakeSimAndCamera()
    try:
        deadline = time.monotonic() + 120
        while not fake.ready():
            assert node.poll() is None and time.monotonic() < deadline, (tmp_path / "policy.log").read_text()
            time.sleep(0.05)
        env = AirPlayEnv(world, "pointgoal", render_images=False)
        frame = lambda stamp, parts=("state", "rgb", "depth"): fake.frame(_state64(env), stamp, parts,  # noqa: E731
                                                                          (cam.width, cam.height))
        flown, last = [], None
        far = 10**6 * DT
        for k, task in enumerate(tasks):
            cmd = EpisodeCommand(k, str(indoor_1), k, task, world.protocol.success_radius_m)
            _, info = env.reset(options={"task": task})
            start = stamp = next_start_ns(last, DT)
            if k == 1:  # the first frames of episode 1 come before episode 0's end and episode 1's start
                frame(stamp, ("rgb", "depth", "state"))
                time.sleep(0.3)
                assert not fake.commands_at(stamp), "acted on a frame of an episode that had not started"
                fake.ended(0, expected[0].status, expected[0].steps)
                late = last - DT  # episode 0's last acted-on stamp
                fake.frame(np.zeros(13), late)  # a late frame of the ended episode
                fake.frame(np.zeros(13), far)  # a frame far ahead: held, never acted on
                fake.started(cmd, start)
            else:
                fake.started(cmd, start)
                frame(stamp)
            while True:
                command = fake.command_for(stamp)
                if k == 0 and stamp == start + 5 * DT:  # the sim repeats a state: the same answer again
                    frame(stamp, ("state",))
                    deadline = time.monotonic() + 30
                    while len(fake.commands_at(stamp)) < 2 and time.monotonic() < deadline:
                        time.sleep(0.005)
                    repeated = fake.commands_at(stamp)
                    assert len(repeated) == 2 and np.array_equal(repeated[0], repeated[1])
                if k == 1 and stamp == start + 2 * DT:  # a stale frame of episode 1 itself
                    frame(start + DT)
                _, _, _, _, info = env.step(command.astype(np.float32))
                stamp += DT
                frame(stamp)  # the observation after the step, the terminal one included (as the sim)
                if info["status"] != "running":
                    break
            flown.append((np.asarray(env.trajectory), info["status"], info["steps"]))
            last = stamp
        time.sleep(0.5)
        assert node.poll() is None, "the policy node died\n" + (tmp_path / "policy.log").read_text()
        assert not fake.commands_at(far), "acted on a frame of no episode"
        assert len(fake.commands_at(late)) == 1, "acted again on a late frame of the ended episode"
    finally:
        fake.close()
        node.terminate()
        try:
            node.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(timeout=5)
        log.close()
    for (trajectory, status, steps), want in zip(flown, expected):
        assert (status, steps) == (want.status, want.steps)
        assert np.array_equal(trajectory, want.trajectory)
    text = (tmp_path / "policy.log").read_text()
    for words in ("held until its start", "answered again", "older than the live episode's latest observation"):
        assert text.count(words) == 1, f"{words!r} not logged exactly once:\n{text}"
    # DDS orders messages per topic, not across topics: the late frame of episode 0 is dropped as
    # "of an ended episode" when the end notice came first, else as stale (older than the latest)
    assert text.count("of an episode that has ended are dropped") <= 1, text


def test_apply_reads_statuses_and_refuses_malformed_ones_unchanged():
    gate = EpisodeGate(DT)
    assert gate.apply({"status": "started", "episode": 0, "stamp_ns": 0, "scene_dir": "s"}) == []
    gate.handled(0)
    assert gate.apply({"status": "success", "episode": 0, "steps": 3}) is None
    assert gate.end_ns == 3 * DT and not gate.live
    with pytest.raises(ValueError, match="stamp_ns"):
        gate.apply({"status": "started", "episode": 1})
    assert gate.episode == 0 and gate.end_ns == 3 * DT  # nothing changed
