"""EpisodeRecorder, the recorder node's core without rclpy: episodes cut by stamp whatever the
arrival order, late messages within the grace time, size splits inside a bag, one bag for the
run with split "none", offered QoS in metadata.yaml, finalization on close. (The node itself,
in the real graph with real signals, is test_recorder.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from airplay.data import messages as M
from airplay.data.bag import iter_episode_bags, read_bag_messages, read_episode
from airplay.data.bag_writer import QOS_SENSOR_DATA
from airplay.data.episode_recorder import (PENDING_HOLD_S, EpisodeRecorder, basic_metadata, cdr_stamp_ns,
                                           stamp_kind)
from helpers.scene_factory import scene_yaml_dict, write_tiny_scene

DT = M.CONTROL_DT_NS
H, W = 8, 10


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = write_tiny_scene(tmp_path_factory.mktemp("rec_scene") / "cube_r", seed=1)
    (folder / "scene.yaml").write_text(yaml.safe_dump(scene_yaml_dict(name="cube_r", split="seen"), sort_keys=False))
    return folder


def observation(k: int, start: int):
    s = start + k * DT
    rgb = np.full((H, W, 3), k % 256, np.uint8)
    state = np.full(13, float(k))
    return s, [("/camera/image_raw", M.image_rgb_cdr(rgb, s)), ("/odom", M.odometry_cdr(state, s)),
               ("/cmd_vel", M.twist_cdr(np.full(4, float(k)), s))]


def status(**fields) -> bytes:
    return M.json_cdr(fields)


def make(tmp_path, clock, **kw) -> EpisodeRecorder:
    topics = {t: M.TOPICS[t] for t in ("/camera/image_raw", "/odom", "/cmd_vel", "/goal_pose", "/episode/status")}
    return EpisodeRecorder(tmp_path / "bags", topics, seed=4, clock=clock, log=lambda msg: None,
                           metadata_fn=lambda seg: basic_metadata(seg, "pointgoal", 4), **kw)


def test_stamp_helpers():
    assert stamp_kind("nav_msgs/msg/Odometry") == "header" and stamp_kind("std_msgs/msg/String") == ""
    assert stamp_kind("rosgraph_msgs/msg/Clock") == "clock"
    assert cdr_stamp_ns(M.odometry_cdr(np.zeros(13), 12_345_678_901)) == 12_345_678_901


def test_episodes_cut_by_stamp_not_arrival(tmp_path, scene):
    clock = Clock()
    rec = make(tmp_path, clock, grace_s=1.0)
    starts = [0, 10 * DT]
    # Episode 0: its first odom arrives BEFORE its "started" status (held as pending).
    s0, msgs0 = observation(0, starts[0])
    rec.on_message("/odom", msgs0[1][1])
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=starts[0], scene_dir=str(scene),
                                             index=0))
    rec.on_message("/camera/image_raw", msgs0[0][1])
    rec.on_message("/cmd_vel", msgs0[2][1])
    for k in range(1, 5):
        for topic, cdr in observation(k, starts[0])[1]:
            rec.on_message(topic, cdr)
    # terminal status after 5 steps (observation 5 is the terminal one) ...
    rec.on_message("/episode/status", status(episode=0, status="success", steps=5))
    # ... then episode 1 starts, and only then the terminal image + odom of episode 0 arrive (late).
    rec.on_message("/episode/status", status(episode=1, status="started", stamp_ns=starts[1], scene_dir=str(scene),
                                             index=1))
    _, terminal = observation(5, starts[0])
    rec.on_message("/camera/image_raw", terminal[0][1])
    rec.on_message("/odom", terminal[1][1])
    for k in range(3):
        for topic, cdr in observation(k, starts[1])[1]:
            rec.on_message(topic, cdr)
    clock.now += 0.5
    rec.tick()
    assert rec.bags == []  # episode 0 still within its grace time
    clock.now += 0.6
    rec.tick()
    assert [p.name for p in rec.bags] == ["cube_r-pointgoal-4-0"]
    rec.close()  # episode 1 never ended: finalized as interrupted
    bags = iter_episode_bags(tmp_path / "bags")
    assert [b.name for b in bags] == ["cube_r-pointgoal-4-0", "cube_r-pointgoal-4-1"]
    e0, e1 = read_episode(bags[0]), read_episode(bags[1])
    assert e0.complete and len(e0) == 5 and np.array_equal(e0.state[:, 0], np.arange(5))
    assert np.array_equal(e0.stamps_ns, starts[0] + DT * np.arange(5))
    odom0 = [M.stamp_ns(M.decode(mt, c)) for t, mt, _, c in read_bag_messages(bags[0]).messages if t == "/odom"]
    assert odom0 == [starts[0] + k * DT for k in range(6)]  # the early first and the late terminal odom are in
    assert e0.metadata["status"] == "success" and e0.metadata["steps"] == 5
    assert e0.metadata["task_id"] == "cube_r-pointgoal-4-0" and e0.metadata["source"] == "recorder"
    assert e1.metadata["status"] == "interrupted" and len(e1) == 3
    assert np.array_equal(e1.stamps_ns, starts[1] + DT * np.arange(3))
    assert rec.written["/odom"] == 9 and rec.unassigned == 0


def _topic_stamps(bag, topic: str) -> list[int]:
    return [M.stamp_ns(M.decode(mt, c)) for t, mt, _, c in read_bag_messages(bag).messages if t == topic]


def test_next_episode_before_its_status_goes_to_its_bag(tmp_path, scene):
    """Lockstep: the next episode's goal and first observation arrive before the running episode's
    terminal status and the next episode's "started" status (DDS orders no two topics): they go
    to their own episode's bag, not to the running episode's."""
    clock = Clock()
    rec = make(tmp_path, clock, grace_s=1.0)
    starts, goals = [0, 7 * DT], [(1.0, 2.0, 3.0), (-4.0, 5.0, 1.5)]  # episode 1: two periods after step 5
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=starts[0], scene_dir=str(scene),
                                             index=0))
    rec.on_message("/goal_pose", M.pose_cdr(goals[0], 0.5, starts[0]))
    for k in range(6):  # observations 0..5; the terminal one (5) has a command too, as the graph's policy sends
        for topic, cdr in observation(k, starts[0])[1]:
            rec.on_message(topic, cdr)
    # episode 1's goal and first image and odom, before any status about it
    rec.on_message("/goal_pose", M.pose_cdr(goals[1], -0.25, starts[1]))
    first = observation(0, starts[1])[1]
    for topic, cdr in first[:2]:
        rec.on_message(topic, cdr)
    rec.on_message("/episode/status", status(episode=0, status="success", steps=5))
    rec.on_message("/episode/status", status(episode=1, status="started", stamp_ns=starts[1], scene_dir=str(scene),
                                             index=1))
    rec.on_message(*first[2])
    for k in range(1, 4):
        for topic, cdr in observation(k, starts[1])[1]:
            rec.on_message(topic, cdr)
    rec.on_message("/episode/status", status(episode=1, status="success", steps=3))
    clock.now += 1.1
    rec.tick()
    bags = iter_episode_bags(tmp_path / "bags")
    assert [b.name for b in bags] == ["cube_r-pointgoal-4-0", "cube_r-pointgoal-4-1"]
    assert rec.pending == [] and rec.unassigned == 0
    for bag, start, goal in zip(bags, starts, goals):
        assert _topic_stamps(bag, "/goal_pose") == [start]
        e = read_episode(bag)
        assert e.complete and np.allclose(e.goal_position, goal)
        assert np.array_equal(e.stamps_ns, start + DT * np.arange(len(e)))
    assert _topic_stamps(bags[0], "/odom") == [k * DT for k in range(6)]
    assert _topic_stamps(bags[1], "/odom") == [starts[1] + k * DT for k in range(4)]


def test_held_stamp_of_the_running_episode_is_written(tmp_path, scene):
    """Lockstep: a message stamped ahead of the running episode's latest step is held, and written
    once the episode's messages reach its stamp, or once the terminal status puts it inside the episode."""
    clock = Clock()
    rec = make(tmp_path, clock)
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=0, scene_dir=str(scene), index=0))
    for topic, cdr in observation(0, 0)[1]:
        rec.on_message(topic, cdr)
    rec.on_message("/odom", observation(2, 0)[1][1][1])  # two steps ahead
    assert len(rec.pending) == 1
    rec.on_message("/odom", observation(1, 0)[1][1][1])
    assert rec.pending == [] and rec.written["/odom"] == 3
    rec.on_message("/cmd_vel", observation(4, 0)[1][2][1])
    assert len(rec.pending) == 1
    rec.on_message("/episode/status", status(episode=0, status="success", steps=4))
    assert rec.pending == [] and rec.written["/cmd_vel"] == 2
    rec.close()
    assert _topic_stamps(iter_episode_bags(tmp_path / "bags")[0], "/cmd_vel") == [0, 4 * DT]


def test_recorder_joining_late_records_the_running_episode(tmp_path, scene):
    """Lockstep: the first message after the "started" status is the running episode's, whatever
    its stamp (a recorder matched late to the topics); the next ones follow it step by step."""
    clock = Clock()
    rec = make(tmp_path, clock)
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=0, scene_dir=str(scene), index=0))
    for k in range(20, 23):
        for topic, cdr in observation(k, 0)[1]:
            rec.on_message(topic, cdr)
    assert rec.pending == [] and rec.written["/odom"] == 3
    rec.close()


def test_without_lockstep_the_running_episode_takes_later_stamps(tmp_path, scene):
    """Without lockstep (the sim on a wall-clock timer) steps may be lost on the way: a stamp from
    the running episode's start on is written to it at once."""
    clock = Clock()
    rec = make(tmp_path, clock, lockstep=False)
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=0, scene_dir=str(scene), index=0))
    rec.on_message("/odom", observation(3, 0)[1][1][1])
    assert rec.pending == [] and rec.written["/odom"] == 1
    rec.close()


def test_messages_of_no_episode_are_counted_and_dropped(tmp_path):
    clock = Clock()
    rec = make(tmp_path, clock)
    for topic, cdr in observation(0, 0)[1]:
        rec.on_message(topic, cdr)
    rec.on_message("/episode/status", status(episode=0, status="success", steps=1))  # no start: not recorded
    clock.now += PENDING_HOLD_S + 0.1
    rec.tick()
    assert rec.unassigned == 4 and rec.pending == [] and rec.bags == []
    rec.close()
    assert not (tmp_path / "bags").exists() or iter_episode_bags(tmp_path / "bags") == []


def test_size_split_and_offered_qos(tmp_path, scene):
    clock = Clock()
    rec = make(tmp_path, clock, max_bytes=10 * (H * W * 3 + 400), grace_s=0.0)
    rec.set_qos("/camera/image_raw", QOS_SENSOR_DATA)
    rec.on_message("/episode/status", status(episode=0, status="started", stamp_ns=0, scene_dir=str(scene), index=2))
    for k in range(41):
        for topic, cdr in observation(k, 0)[1]:
            if k < 40 or topic != "/cmd_vel":
                rec.on_message(topic, cdr)
    rec.on_message("/episode/status", status(episode=0, status="success", steps=40))
    rec.tick()
    assert len(rec.bags) == 1
    bag = rec.bags[0]
    info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    names = info["relative_file_paths"]
    assert len(names) >= 3 and names == [f"{bag.name}_{k}.mcap" for k in range(len(names))]
    qos = {t["topic_metadata"]["name"]: t["topic_metadata"]["offered_qos_profiles"][0]
           for t in info["topics_with_message_count"]}
    assert qos["/camera/image_raw"]["reliability"] == "best_effort" and qos["/odom"]["reliability"] == "reliable"
    e = read_episode(bag)
    assert e.complete and len(e) == 40 and np.array_equal(e.rgb[:, 0, 0, 0], np.arange(40))


def test_split_none_one_bag_for_the_run(tmp_path, scene):
    clock = Clock()
    rec = make(tmp_path, clock, split="none")
    for episode, start in enumerate((0, 10 * DT)):
        rec.on_message("/episode/status", status(episode=episode, status="started", stamp_ns=start,
                                                 scene_dir=str(scene), index=episode))
        for k in range(4):
            for topic, cdr in observation(k, start)[1]:
                rec.on_message(topic, cdr)
        rec.on_message("/episode/status", status(episode=episode, status="success", steps=3,
                                                 stamp_ns=start + 3 * DT))
    rec.close()
    bags = sorted((tmp_path / "bags").iterdir())
    assert len(bags) == 1 and bags[0].name.startswith("recording-") and (bags[0] / "metadata.yaml").is_file()
    got = read_bag_messages(bags[0]).messages
    assert sum(t == "/odom" for t, *_ in got) == 8 and sum(t == "/episode/status" for t, *_ in got) == 4


def test_bad_split_named(tmp_path):
    with pytest.raises(ValueError, match="split must be episode or none"):
        EpisodeRecorder(tmp_path, {}, split="scene")
