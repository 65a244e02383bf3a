"""The recorder node in the real collect graph (separate processes over DDS on loopback).

One run of ``collect`` (sim, renderer, expert policy, evaluator, recorder) for 2 episodes
(seed 1: two short tasks; a 64x64 camera to keep rendering cheap), with two more recorders
on the same topics: one gets SIGINT and one SIGKILL 1.5 s after the 50th odom of the first
episode. Checked: the bags of the recorder that ran to the end hold both
episodes (steps as the sim's statuses, states equal to the sim's trajectory to the bit,
images, a command for every observation but the terminal one, stamped as its odom); the
SIGINT'ed one finalized its bags (metadata.yaml counts = the MCAP's); the SIGKILL'ed one is
readable by read_episode and the mcap stream reader and lost at most ~1 s of odometry.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import descendants

rclpy = pytest.importorskip("rclpy")

from airplay.data import messages as M  # noqa: E402
from airplay.data.bag import iter_episode_bags, read_bag_messages, read_episode  # noqa: E402
from airplay.nodes.common import LOCKSTEP_DEPTH  # noqa: E402

EPISODES = 2
SEED = 1  # tasks of 11.1 m and 2.4 m on this scene: ~30 s of graph time

pytestmark = pytest.mark.slow  # the module's fixture flies the collect graph (~45 s)


@pytest.fixture(scope="module", autouse=True)
def own_ros_domain():
    """A ROS domain of our own for the whole module (its graph runs in a module fixture)."""
    import os

    from conftest import random_ros_domain

    before = os.environ.get("ROS_DOMAIN_ID")
    os.environ["ROS_DOMAIN_ID"] = random_ros_domain()
    yield
    if before is None:
        os.environ.pop("ROS_DOMAIN_ID")
    else:
        os.environ["ROS_DOMAIN_ID"] = before


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory) -> Path:
    from airplay.scene.synthetic import make_scene
    from airplay.world import World

    path = tmp_path_factory.mktemp("scenes") / "indoor_1"
    make_scene("indoor", 1, path, gaussians_per_m2=4, name="indoor_1")
    spec = yaml.safe_load((path / "scene.yaml").read_text())
    spec["camera"].update(width=64, height=64, fx=32.0, fy=32.0, cx=32.0, cy=32.0)
    (path / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    World.load(path).sdf  # the disk-cached SDF, once, before the processes want it
    return path


class Listener:
    """Episode statuses, and the wall time each odom stamp reached this process."""

    def __init__(self) -> None:
        from nav_msgs.msg import Odometry
        from std_msgs.msg import String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE

        self.background = BackgroundNode("recorder_test_listener")
        self.statuses: list[dict] = []
        self.odom: dict[int, float] = {}
        node = self.background.node
        node.create_subscription(String, "episode/status", self._status, RELIABLE)
        node.create_subscription(Odometry, "odom", self._odom, RELIABLE)
        self.background.start()

    def _status(self, msg) -> None:
        with self.background.lock:
            self.statuses.append(json.loads(msg.data))

    def _odom(self, msg) -> None:
        with self.background.lock:
            self.odom.setdefault(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec, time.monotonic())

    def snapshot(self):
        with self.background.lock:
            return list(self.statuses), dict(self.odom)


def _logs(log_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(log_dir.glob("*.log")))


@pytest.fixture(scope="module")
def recorded(scene_dir, tmp_path_factory):
    from airplay.graph import COLLECT_ARGUMENTS, collect_graph, parse_launch_arguments
    from airplay.launcher import graph_environment, node_command

    tmp = tmp_path_factory.mktemp("collect")
    nodes = collect_graph(parse_launch_arguments(
        [f"scenes:={scene_dir}", f"episodes:={EPISODES}", f"seed:={SEED}", f"out:={tmp / 'bags'}", f"results:={tmp / 'results'}",
         "render_images:=true"], COLLECT_ARGUMENTS))
    recorder = nodes[-1]
    assert recorder.name == "recorder" and recorder.parameters["out"] == str(tmp / "bags")
    for name in ("sigint", "sigkill"):
        nodes.append(dataclasses.replace(recorder, name=f"recorder_{name}",
                                         parameters={**recorder.parameters, "out": str(tmp / name)}))
    listener = Listener()
    procs: dict[str, subprocess.Popen] = {}
    killed_at = {}
    try:
        for spec in nodes:
            log = open(tmp / f"{spec.name}.log", "w")
            procs[spec.name] = subprocess.Popen(node_command(spec), stdout=log, stderr=subprocess.STDOUT,
                                                env=graph_environment(), start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not listener.snapshot()[0]:
            time.sleep(0.05)
        if not listener.snapshot()[0]:
            pytest.fail("the first episode did not start\n" + _logs(tmp))
        while time.monotonic() < deadline and len(listener.snapshot()[1]) < 50:
            time.sleep(0.005)  # 1 s of sim time into the first episode
        # The sim is paused, so the first episode is still on when the recorders are signalled
        # however fast the graph flies; in lockstep a paused node makes the run slower, never
        # different (and 3 s is far inside the DDS lease that would count it gone). Every odom the
        # listener saw then came >= 3 s before the SIGKILL, 1 s more than the recorder needs to
        # flush it (flush_interval_s 0.5 s) with 1.5 s to spare for a loaded machine.
        procs["sim"].send_signal(signal.SIGSTOP)
        try:
            time.sleep(3.0)
            procs["recorder_sigint"].send_signal(signal.SIGINT)
            workers = descendants(procs["recorder_sigkill"].pid)  # its metadata worker
            killed_at["sigkill"] = time.monotonic()
            procs["recorder_sigkill"].send_signal(signal.SIGKILL)
            assert procs["recorder_sigint"].wait(timeout=20) == 0, _logs(tmp)
        finally:
            procs["sim"].send_signal(signal.SIGCONT)
        assert procs["evaluator"].wait(timeout=120) == 0, _logs(tmp)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for name, proc in procs.items():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        statuses, odom = listener.snapshot()
        listener.background.close()
    assert procs["recorder"].returncode == 0, _logs(tmp)
    return tmp, statuses, odom, killed_at["sigkill"], workers


def test_sigkill_leaves_no_worker_behind(recorded):
    """The recorder's metadata worker (a process pool) ends with the SIGKILLed recorder."""
    workers = recorded[4]
    assert workers, "the recorder had no worker process when it was killed"
    deadline = time.monotonic() + 10
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [p for p in workers if Path(f"/proc/{p}").exists() and
                 Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[0] != "Z"]
        time.sleep(0.1)
    assert not alive, f"worker processes {alive} outlived the SIGKILLed recorder"


def _bag_counts(bag: Path) -> dict[str, int]:
    from mcap.reader import make_reader

    counts: dict[str, int] = {}
    for path in sorted(bag.glob("*.mcap")):
        with open(path, "rb") as f:
            for _, channel, _ in make_reader(f).iter_messages():
                counts[channel.topic] = counts.get(channel.topic, 0) + 1
    return counts


def test_collect_graph_bags_hold_the_episodes(recorded):
    tmp, statuses, _, _, _ = recorded
    terminal = {s["episode"]: s for s in statuses if s["status"] != "started"}
    started = {s["episode"]: s for s in statuses if s["status"] == "started"}
    bags = iter_episode_bags(tmp / "bags")
    assert [b.relative_to(tmp / "bags").as_posix() for b in bags] == [
        f"indoor_1/indoor_1-pointgoal-{SEED}-{k}" for k in range(EPISODES)], _logs(tmp)
    for k, bag in enumerate(bags):
        e = read_episode(bag)
        status = terminal[k]
        assert e.complete and e.dropped == 0
        assert len(e) == status["steps"] > 10
        start = started[k]["stamp_ns"]
        assert np.array_equal(e.stamps_ns, start + M.CONTROL_DT_NS * np.arange(len(e)))
        assert np.array_equal(e.state[:, :3], np.asarray(status["trajectory"], np.float64)[:-1])  # bit-exact
        assert e.rgb.shape[1:] == (64, 64, 3) and e.rgb.std() > 1.0  # rendered frames
        assert np.isfinite(e.action).all() and np.abs(e.action).max() > 0.1
        assert e.goal_position is not None and e.camera_k is not None
        meta = e.metadata
        assert (meta["status"], meta["steps"], meta["source"]) == (status["status"], status["steps"], "recorder")
        assert meta["task_id"] == bag.name and meta["task"]["task_id"] == bag.name and meta["split"] in ("seen",
                                                                                                          "unseen")
        assert np.allclose(meta["task"]["goal_position"], e.goal_position)
        messages = read_bag_messages(bag).messages
        odom = sorted({M.stamp_ns(M.decode(mt, c)) for t, mt, _, c in messages if t == "/odom"})
        cmds = [M.stamp_ns(M.decode(mt, c)) for t, mt, _, c in messages if t == "/cmd_vel"]
        # every command is stamped as an odom; every observation but the terminal one has its command (the
        # graph's policy commands the terminal one too: read_episode leaves it out)
        assert set(odom[:-1]) <= set(cmds) <= set(odom)
        info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        counts = {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"]}
        assert {t: n for t, n in counts.items() if n} == _bag_counts(bag)
        qos = {t["topic_metadata"]["name"]: t["topic_metadata"]["offered_qos_profiles"][0]
               for t in info["topics_with_message_count"]}
        assert qos["/camera/image_raw"]["reliability"] == "reliable" and qos["/cmd_vel"]["depth"] == LOCKSTEP_DEPTH


def test_sigint_finalizes_the_open_bag(recorded):
    tmp, statuses, _, _, _ = recorded
    bags = iter_episode_bags(tmp / "sigint")
    assert len(bags) == 1, _logs(tmp)
    e = read_episode(bags[0])
    assert e.complete and e.metadata["status"] == "interrupted" and len(e) > 10
    assert e.metadata["task"]["task_id"] == bags[0].name  # the metadata is complete all the same
    started = next(s for s in statuses if s["status"] == "started")
    assert np.array_equal(e.stamps_ns, started["stamp_ns"] + M.CONTROL_DT_NS * np.arange(len(e)))
    # finalized: metadata.yaml agrees with the MCAP summary, topic by topic
    info = yaml.safe_load((bags[0] / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"]}
    assert {t: n for t, n in counts.items() if n} == _bag_counts(bags[0])


def test_sigkill_loses_at_most_a_second(recorded):
    from mcap.records import Message
    from mcap.stream_reader import StreamReader

    tmp, statuses, odom_arrivals, killed_at, _ = recorded
    bags = iter_episode_bags(tmp / "sigkill")
    assert len(bags) == 1, _logs(tmp)
    killed = bags[0]
    assert not (killed / "metadata.yaml").exists()
    e = read_episode(killed)
    assert not e.complete and len(e) > 0
    got = read_bag_messages(killed)
    stamps = {M.stamp_ns(M.decode(mt, c)) for t, mt, _, c in got.messages if t == "/odom"}
    start = min(s["stamp_ns"] for s in statuses if s["status"] == "started")
    # every odom of this episode that reached a subscriber >= 1 s before the SIGKILL is in the bag
    due = {s for s, t in odom_arrivals.items() if s >= start and t <= killed_at - 1.0}
    print(f"SIGKILL: {len(stamps)} odom stamps in the bag, {len(due)} published >= 1 s before the kill")
    assert due and due <= stamps, f"lost {len(due - stamps)} of {len(due)}"
    n = 0
    with open(killed / f"{killed.name}_0.mcap", "rb") as f:
        try:
            for record in StreamReader(f).records:
                n += isinstance(record, Message)
        except Exception:  # the torn tail
            pass
    assert n == len(got.messages)
