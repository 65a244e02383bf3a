"""Episode bags (rosbag2, MCAP storage): written by BagWriter / write_episode_bag, read back by
the mcap library's readers, by rosbags' Reader and by read_episode, bit-exact (but the velocity,
which REP-105 /odom carries in base_link: to a few ulp); bag format 2 in the metadata and in each
file, bags of format 1 (map-frame twist, no bag_format) read to the same state; size splits;
atomic publication; a writer killed with SIGKILL loses at most the last second.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import yaml
from helpers.episodes import META, H, Intrinsics, W, synthetic_episode, unit_quaternions

from airplay.data import messages as M
from airplay.data.bag import BagError, BagWriter, iter_episode_bags, read_bag_messages, read_episode, write_episode_bag


def assert_same_state(got: np.ndarray, want: np.ndarray) -> None:
    """Position, quaternion and body rates bit for bit; the velocity (REP-105 /odom carries it in
    base_link, read back into map) to 1e-14 of the speed (a few ulp: at most 16 ulp of |v| over
    200,000 random attitudes and velocities)."""
    got, want = np.atleast_2d(got), np.atleast_2d(want)
    assert got.dtype == np.float64 and got.shape == want.shape
    assert np.array_equal(got[:, :7], want[:, :7]) and np.array_equal(got[:, 10:], want[:, 10:])
    speed = np.linalg.norm(want[:, 7:10], axis=1, keepdims=True)
    assert np.all(np.abs(got[:, 7:10] - want[:, 7:10]) <= 1e-14 * speed)


def format1_odometry_cdr(state, stamp_ns: int) -> bytes:
    """/odom as airplay wrote it before bag format 2: the twist's linear part the MAP velocity."""
    odom = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, stamp_ns))
    v = odom.twist.twist.linear
    v.x, v.y, v.z = (float(c) for c in state[7:10])
    return bytes(M.typestore().serialize_cdr(odom, "nav_msgs/msg/Odometry"))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("bags")
    ep, records = synthetic_episode(30)
    path = write_episode_bag(out, "sc", "sc-imagegoal-0-3", records, metadata=META)
    return out, path, ep, records


def test_round_trip(written):
    out, path, ep, _ = written
    assert path == out / "sc" / "sc-imagegoal-0-3"
    assert sorted(p.name for p in path.iterdir()) == ["metadata.yaml", "sc-imagegoal-0-3_0.mcap"]
    e = read_episode(path)
    assert e.complete and e.dropped == 0 and len(e) == 30
    np.testing.assert_array_equal(e.stamps_ns, ep["stamps"][:30])
    assert e.rgb.dtype == np.uint8 and np.array_equal(e.rgb, ep["rgb"][:30])
    assert e.depth.dtype == np.float32 and np.array_equal(e.depth, ep["depth"][:30])
    assert_same_state(e.state, ep["state"][:30])
    assert e.bag_format == M.BAG_FORMAT == 2
    assert e.action.dtype == np.float32 and np.array_equal(e.action, ep["action"])
    assert np.array_equal(e.goal_position, ep["goal"]) and e.goal_yaw == pytest.approx(1.234, abs=1e-12)
    assert np.array_equal(e.goal_image, ep["goal_image"])
    assert np.array_equal(e.camera_k, Intrinsics.K)
    assert e.metadata == {**META, "bag_format": 2}


def test_format_1_bag_reads_to_the_same_state(tmp_path):
    """A bag as airplay wrote it before bag format 2 (/odom's twist in map, no bag_format anywhere)
    reads to the state that was written, bit for bit, and exports as a format 2 bag of the same
    flight does (to a few ulp)."""
    ep, records = synthetic_episode(20, odometry=format1_odometry_cdr)
    writer = BagWriter(tmp_path / "old", bag_format=None)
    for topic, stamp, cdr in records:
        writer.write(topic, stamp, cdr)
    writer.set_metadata(META)
    writer.close()
    old = read_episode(tmp_path / "old")
    assert old.bag_format == 1 and "bag_format" not in old.metadata
    assert np.array_equal(old.state, ep["state"][:20])  # format 1: the map velocity as written
    new = read_episode(write_episode_bag(tmp_path, "sc", "new", synthetic_episode(20)[1], metadata=META))
    assert new.bag_format == 2
    assert_same_state(new.state, old.state)


def test_bag_format_of_a_killed_writer_and_a_bad_one(tmp_path):
    """A bag whose writer died before its episode metadata still reads as format 2 (the ``airplay``
    record at the start of its file); an unknown bag_format is refused, naming the bag."""
    ep, records = synthetic_episode(5)
    writer = BagWriter(tmp_path / "killed")
    for topic, stamp, cdr in records:
        writer.write(topic, stamp, cdr)
    writer.flush()  # no close: no metadata.yaml, no /episode/metadata, no MCAP summary
    e = read_episode(tmp_path / "killed")
    assert not e.complete and "bag_format" not in e.metadata and e.bag_format == 2
    assert_same_state(e.state, ep["state"][:5])
    writer.abort()
    bad = BagWriter(tmp_path / "bad", bag_format=None)
    for topic, stamp, cdr in records:
        bad.write(topic, stamp, cdr)
    bad.set_metadata({**META, "bag_format": 3})
    bad.close()
    with pytest.raises(BagError, match=r"bad: episode metadata: bag_format 3 is not one this airplay reads \(1, 2\)"):
        read_episode(tmp_path / "bad")
    with pytest.raises(ValueError, match="bag_format 0"):
        BagWriter(tmp_path / "zero", bag_format=0)


def test_messages_match_rclpy():
    """The typestore builders and the graph's rclpy messages read each other (same conventions, same CDR
    layout; only alignment padding may differ, fastcdr leaves it uninitialized)."""
    serialization = pytest.importorskip("rclpy.serialization")
    from geometry_msgs.msg import TwistStamped
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import CameraInfo, Image

    from airplay.nodes import common as C

    rng = np.random.default_rng(1)
    state, cmd, rgb = rng.standard_normal(13), rng.standard_normal(4), rng.integers(0, 256, (5, 7, 3), np.uint8)
    state = unit_quaternions(state)
    depth = rng.uniform(0, 9, (5, 7)).astype(np.float32)
    s = 123 * 1_000_000_000 + 456
    ser, de = serialization.serialize_message, serialization.deserialize_message
    odom = M.decode("nav_msgs/msg/Odometry", ser(C.odometry_from_state(state, s)))
    ours = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, s))
    assert odom.twist.twist == ours.twist.twist  # the same REP-105 body-frame values, bit for bit
    assert_same_state(M.state_of(odom), state)
    assert M.stamp_ns(odom) == s
    assert odom.header.frame_id == "map" and odom.child_frame_id == "base_link"
    assert np.array_equal(C.state_from_odometry(de(M.odometry_cdr(state, s), Odometry)), M.state_of(ours))
    sim_state = de(ser(C.sim_state_from_state(state, s)), Odometry)  # the sim's exact state: bit for bit
    assert np.array_equal(C.state_from_sim_state(sim_state), state)
    assert np.array_equal(C.command_from_twist(de(M.twist_cdr(cmd, s), TwistStamped)), cmd)
    assert np.array_equal(M.command_of(M.decode("geometry_msgs/msg/TwistStamped", ser(C.twist_from_command(cmd, s)))),
                          cmd)
    assert np.array_equal(C.rgb_from_image(de(M.image_rgb_cdr(rgb, s), Image)), rgb)
    assert np.array_equal(M.rgb_of(M.decode("sensor_msgs/msg/Image", ser(C.image_from_rgb(rgb, s)))), rgb)
    assert np.array_equal(C.depth_from_image(de(M.image_depth_cdr(depth, s), Image))[:, :, 0], depth)
    assert de(M.camera_info_cdr(Intrinsics, s), CameraInfo) == C.camera_info(Intrinsics, s)
    for built, ours in ((C.odometry_from_state(state, s), M.odometry_cdr(state, s)),
                        (C.image_from_rgb(rgb, s), M.image_rgb_cdr(rgb, s))):
        assert len(ser(built)) == len(ours)


def test_mcap_reader_sees_rosbag2_layout(written):
    """The mcap library's indexed reader: profile ros2, ros2msg schemas, cdr channels with QoS, counts, log times."""
    from mcap.reader import make_reader

    _, path, ep, records = written
    with open(path / "sc-imagegoal-0-3_0.mcap", "rb") as f:
        reader = make_reader(f)
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        assert {s.name: s.encoding for s in summary.schemas.values()} == {
            t: "ros2msg" for t in set(M.TOPICS.values())}
        for schema in summary.schemas.values():
            assert schema.data.decode() == M.typestore().generate_msgdef(schema.name, ros_version=2)[0]
        channels = {c.topic: c for c in summary.channels.values()}
        assert set(channels) == set(M.TOPICS)
        assert all(c.message_encoding == "cdr" for c in channels.values())
        qos = yaml.safe_load(channels["/odom"].metadata["offered_qos_profiles"])
        assert qos[0]["reliability"] == "reliable" and qos[0]["depth"] == 10
        expected = {t: sum(1 for r in records if r[0] == t) for t in M.TOPICS}
        expected["/episode/metadata"] = 1
        stats = summary.statistics.channel_message_counts
        assert {c.topic: stats.get(c.id, 0) for c in summary.channels.values()} == expected
        assert summary.statistics.message_start_time == ep["stamps"][0]
        n = 0
        for schema, channel, message in reader.iter_messages():
            if channel.topic in ("/episode/status", "/episode/metadata"):
                continue
            msg = M.typestore().deserialize_cdr(message.data, schema.name)
            assert message.log_time == M.stamp_ns(msg) == message.publish_time
            n += 1
        assert n == sum(v for t, v in expected.items() if not t.startswith("/episode"))


def test_rosbags_reader_and_metadata_yaml(written):
    from rosbags.rosbag2 import Reader

    _, path, ep, records = written
    info = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["version"] == 9 and info["storage_identifier"] == "mcap"
    assert info["relative_file_paths"] == ["sc-imagegoal-0-3_0.mcap"]
    assert info["message_count"] == len(records) + 1
    assert info["starting_time"]["nanoseconds_since_epoch"] == ep["stamps"][0]
    assert info["duration"]["nanoseconds"] == ep["stamps"][-1] - ep["stamps"][0]
    assert json.loads(info["custom_data"]["airplay.episode"]) == {**META, "bag_format": 2}
    with Reader(path) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == M.TOPICS
        assert reader.message_count == len(records) + 1
        odom = [c for c in reader.connections if c.topic == "/odom"]
        states = [M.state_of(M.decode(c.msgtype, raw)) for c, _, raw in reader.messages(connections=odom)]
        assert_same_state(np.stack(states), ep["state"])


def test_size_split(tmp_path):
    ep, records = synthetic_episode(40, depth=False, imagegoal=False)
    max_bytes = 20 * (H * W * 3 + 300)  # ~20 observations a file
    path = write_episode_bag(tmp_path, "sc", "t", records, metadata=META, max_bytes=max_bytes)
    info = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    names = info["relative_file_paths"]
    assert names == [f"t_{k}.mcap" for k in range(len(names))] and len(names) >= 2
    assert sorted(p.name for p in path.glob("*.mcap")) == sorted(names)
    assert sum(f["message_count"] for f in info["files"]) == info["message_count"] == len(records) + 1
    e = read_episode(path)
    assert np.array_equal(e.rgb, ep["rgb"][:40])
    assert_same_state(e.state, ep["state"][:40])
    from rosbags.rosbag2 import Reader

    with Reader(path) as reader:
        assert sum(1 for _ in reader.messages()) == len(records) + 1


def test_atomic_publish(tmp_path):
    _, records = synthetic_episode(10, depth=False)

    def failing():
        yield from records[:20]
        raise RuntimeError("renderer died")

    with pytest.raises(RuntimeError, match="renderer died"):
        write_episode_bag(tmp_path, "sc", "t0", failing(), metadata=META)
    assert list((tmp_path / "sc").iterdir()) == []  # neither the bag nor its .partial folder
    with pytest.raises(KeyError, match="/not_declared"):
        write_episode_bag(tmp_path, "sc", "t0", records[:5] + [("/not_declared", 0, b"")])
    assert list((tmp_path / "sc").iterdir()) == []
    stale = tmp_path / "sc" / ".t0.partial"  # what a killed writer leaves
    stale.mkdir()
    (stale / "t0_0.mcap").write_bytes(b"\x89MCAP0\r\n")
    assert iter_episode_bags(tmp_path) == []
    path = write_episode_bag(tmp_path, "sc", "t0", records, metadata=META)
    assert [p.name for p in (tmp_path / "sc").iterdir()] == ["t0"] and iter_episode_bags(tmp_path) == [path]
    with pytest.raises(FileExistsError, match="t0"):
        write_episode_bag(tmp_path, "sc", "t0", records)
    assert read_episode(path).metadata == {**META, "bag_format": 2}


def test_bad_input_named(tmp_path):
    with pytest.raises(ValueError, match="absolute"):
        BagWriter(tmp_path / "a", topics={"odom": "nav_msgs/msg/Odometry"})
    with pytest.raises(ValueError, match="/x.*unknown message type"):
        BagWriter(tmp_path / "b", topics={"/x": "nope_msgs/msg/Nope"})
    with pytest.raises(ValueError, match="uint8"):
        M.image_rgb_cdr(np.zeros((2, 2, 3), np.float32), 0)
    with pytest.raises(ValueError, match="not finite"):
        M.odometry_cdr(np.full(13, np.nan), 0)
    with BagWriter(tmp_path / "c") as w:
        w.write("/episode/status", 0, M.json_cdr({"status": "started"}))
    with pytest.raises(FileExistsError, match="exists already"):
        BagWriter(tmp_path / "c")
    with pytest.raises(BagError, match="no observation with a command"):
        read_episode(tmp_path / "c")
    (tmp_path / "d").mkdir()
    with pytest.raises(BagError, match="no .mcap"):
        read_episode(tmp_path / "d")


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from airplay.data import messages as M
    from airplay.data.bag import BagWriter
    w = BagWriter(sys.argv[1], flush_interval_s=1.0)
    rgb = np.zeros((24, 32, 3), np.uint8)
    t0 = time.monotonic()
    for k in range(100000):  # 50 Hz in real time, as the recorder sees it
        s = k * 20_000_000
        rgb[:] = k % 256
        w.write("/camera/image_raw", s, M.image_rgb_cdr(rgb, s))
        w.write("/odom", s, M.odometry_cdr(np.full(13, float(k)), s))
        w.write("/cmd_vel", s, M.twist_cdr(np.full(4, float(k)), s))
        print(k, repr(time.monotonic()), flush=True)  # the step and when its writes were done
        time.sleep(max(0.0, t0 + (k + 1) * 0.02 - time.monotonic()))
""")


def test_sigkill_loses_at_most_the_last_second(tmp_path):
    bag = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(bag)], stdout=subprocess.PIPE, text=True)
    try:
        written, done_s = -1, {}  # the newest step seen; when each step's writes were done (monotonic s)
        deadline = time.monotonic() + 120
        while written < 125 and time.monotonic() < deadline:  # 2.5 s of messages
            k, t = proc.stdout.readline().split()
            written, done_s[int(k)] = int(k), float(t)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (bag / "metadata.yaml").exists()
    got = read_bag_messages(bag)
    odom = [M.decode("nav_msgs/msg/Odometry", cdr) for t, _, _, cdr in got.messages if t == "/odom"]
    ks = [int(M.state_of(o)[0]) for o in odom]
    assert ks == list(range(len(ks)))  # a prefix, in order, nothing corrupt
    print(f"written {written + 1} steps, recovered {len(ks)} after SIGKILL")
    # At most the last second is lost, on the writer's clock (however fast it ran): a write
    # flushes everything before it once the last flush is 1 s old, so every write after the first
    # lost step's (done by done_s[lost]) came less than 1 s after it, step `written`'s included
    # (begun after done_s[written - 1]).
    lost = len(ks)
    if lost < written:
        span_s = done_s[written - 1] - done_s[lost]
        assert span_s < 1.0, f"steps {lost}..{written} lost, though step {written} began {span_s:.3f} s after"
    from mcap.records import Message
    from mcap.stream_reader import StreamReader  # the library's stream reader agrees up to the torn tail

    n = 0
    with open(bag / "killed_0.mcap", "rb") as f:
        try:
            for record in StreamReader(f).records:
                n += isinstance(record, Message)
        except Exception:
            pass
    assert n == len(got.messages)
    e = read_episode(bag)
    assert not e.complete and e.metadata == {"status": "unfinished"}
    assert np.array_equal(e.state[:, 0], np.arange(len(e))) and len(e) >= len(ks) - 1
    assert np.array_equal(e.rgb[:, 0, 0, 0], np.arange(len(e)) % 256)


def test_same_layout_as_rosbags_own_mcap_writer(written, tmp_path):
    """rosbags' rosbag2 Writer (MCAP storage) as the reference: for the same messages it writes the
    same schemas (names, encodings, definitions), channels (topics, encodings, type hashes) and
    metadata.yaml fields; ours adds the offered QoS profiles it leaves empty. rosbags' Reader reads
    both to the same messages."""
    from mcap.reader import make_reader
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer

    _, path, _, records = written
    ref = tmp_path / "ref"
    with Writer(ref, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conns = {t: w.add_connection(t, mt, typestore=M.typestore()) for t, mt in M.TOPICS.items()}
        for topic, stamp, cdr in records:
            w.write(conns[topic], int(stamp), cdr)

    def layout(mcap_path):
        with open(mcap_path, "rb") as f:
            reader = make_reader(f)
            summary = reader.get_summary()
            schemas = {s.name: (s.encoding, s.data.decode()) for s in summary.schemas.values()}
            channels = {c.topic: (c.message_encoding, summary.schemas[c.schema_id].name, dict(c.metadata))
                        for c in summary.channels.values()}
            meta = [(m.name, dict(m.metadata)) for m in reader.iter_metadata()]
            return reader.get_header().profile, schemas, channels, meta

    ours, theirs = layout(path / "sc-imagegoal-0-3_0.mcap"), layout(ref / "ref.mcap")
    assert ours[0] == theirs[0] == "ros2"
    assert ours[1] == theirs[1]  # the same ros2msg definitions, byte for byte
    for topic, (encoding, msgtype, meta) in theirs[2].items():
        mine = ours[2][topic]
        assert (mine[0], mine[1]) == (encoding, msgtype) == ("cdr", M.TOPICS[topic])
        assert mine[2]["topic_type_hash"] == M.typestore().hash_rihs01(msgtype)
        assert yaml.safe_load(mine[2]["offered_qos_profiles"])[0]["reliability"] == "reliable"
        assert set(meta) <= set(mine[2])
    # rosbag2's MCAP plugin: ROS_DISTRO on opening, the serialized bag metadata on closing the file;
    # between them airplay's bag format
    assert [name for name, _ in ours[3]] == ["rosbag2", "airplay", "rosbag2"]
    assert ours[3][0][1] == {"ROS_DISTRO": "jazzy"} and ours[3][1][1] == {"bag_format": "2"}
    assert [name for name, meta in theirs[3] if "serialized_metadata" in meta] == ["rosbag2"]
    embedded = yaml.safe_load(ours[3][2][1]["serialized_metadata"])
    info = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert embedded["message_count"] == info["message_count"]
    assert embedded["relative_file_paths"] == info["relative_file_paths"]

    ref_info = yaml.safe_load((ref / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert set(ref_info) <= set(info) and info["version"] == ref_info["version"] == 9
    topic_keys = {k for t in ref_info["topics_with_message_count"] for k in t["topic_metadata"]}
    assert all(topic_keys <= set(t["topic_metadata"]) for t in info["topics_with_message_count"])
    ref_counts = {t["topic_metadata"]["name"]: t["message_count"] for t in ref_info["topics_with_message_count"]}
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"]}
    assert counts == {**ref_counts, "/episode/metadata": 1}
    assert info["starting_time"] == ref_info["starting_time"] and info["duration"] == ref_info["duration"]

    def messages(bag):
        with Reader(bag) as reader:
            return [(c.topic, c.msgtype, t, bytes(raw)) for c, t, raw in reader.messages()
                    if c.topic != "/episode/metadata"]

    assert messages(path) == messages(ref)


@pytest.mark.parametrize("compression", ["", "lz4", "zstd"])
def test_mcap_writer_byte_identical_to_the_mcap_library(compression):
    """airplay.data.mcap_writer.McapWriter writes, for the same calls (metadata, schemas, channels,
    messages of every size, flushes, chunks split by size), the very bytes of the mcap library's
    Writer with its default options (zstd at its level 3)."""
    import io
    import random

    from mcap.writer import CompressionType, Writer

    from airplay.data.mcap_writer import McapWriter

    def calls(w, seed):
        rng = random.Random(seed)
        w.start(profile="ros2", library="test")
        w.add_metadata("rosbag2", {"ROS_DISTRO": "jazzy"})
        schemas = [w.register_schema(n, "ros2msg", d) for n, d in (("a/msg/A", b"int32 x"), ("b/msg/B", b""))]
        channels = [w.register_channel(f"/t{i}", "cdr", schemas[i % 2], {"k": "v" * i, "é": "ü"}) for i in range(4)]
        t = 10**9
        for k in range(1500):
            t = max(0, t + rng.randint(-3, 50_000_000))  # not always increasing
            data = rng.randbytes(rng.randint(0, 3000)) if k % 3 else bytes(rng.randint(0, 6000))
            w.add_message(channels[rng.randrange(1, 4) if k > 3 else 2], t, data, t + 1, k)
            if k % 400 == 7:
                w.flush()
        w.add_metadata("rosbag2", {"serialized_metadata": "version: 9\n"})
        w.finish()

    kind = {"": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}[compression]
    for chunk_size in (1 << 20, 40_000):
        theirs, ours = io.BytesIO(), io.BytesIO()
        calls(Writer(theirs, chunk_size=chunk_size, compression=kind), 5)
        calls(McapWriter(ours, chunk_size=chunk_size, compression=compression, zstd_level=3), 5)
        assert ours.getvalue() == theirs.getvalue()
    empty_theirs, empty_ours = io.BytesIO(), io.BytesIO()
    for w in (Writer(empty_theirs, compression=kind), McapWriter(empty_ours, compression=compression)):
        w.start(profile="ros2", library="test")
        w.register_channel("/a", "cdr", w.register_schema("a/msg/A", "ros2msg", b"int32 x"), {})
        w.flush()
        w.finish()
    assert empty_ours.getvalue() == empty_theirs.getvalue()


@pytest.mark.parametrize("compression,level", [("zstd", 1), ("zstd", 3), ("lz4", 0), ("", 0)])
def test_every_compression_reads_back(tmp_path, compression, level):
    from mcap.reader import make_reader

    _, records = synthetic_episode(12, seed=4)
    with BagWriter(tmp_path / "b", compression=compression, zstd_level=level, chunk_size=30_000) as w:
        for record in records:
            w.write(*record)
    with open(tmp_path / "b" / "b_0.mcap", "rb") as f:
        summary = make_reader(f).get_summary()
        assert len(summary.chunk_indexes) > 3
        assert {c.compression for c in summary.chunk_indexes} == {compression}
    got = [(t, s, c) for t, _, s, c in read_bag_messages(tmp_path / "b").messages]
    assert got == [(t, int(s), c) for t, s, c in records]


def test_cmd_vel_is_stamped_in_the_heading_frame():
    """cmd_vel's frame_id names the yaw-only heading frame its values are in, on the wire and in bags."""
    from airplay.nodes import common as C

    cmd = np.array([1.0, -0.5, 0.25, 0.3])
    assert C.twist_from_command(cmd, 0).header.frame_id == "base_stabilized"
    msg = M.decode("geometry_msgs/msg/TwistStamped", M.twist_cdr(cmd, 0))
    assert msg.header.frame_id == "base_stabilized" and np.array_equal(M.command_of(msg), cmd)
    old = M.decode("geometry_msgs/msg/TwistStamped", M.twist_cdr(cmd, 0, frame_id="base_link"))
    assert np.array_equal(M.command_of(old), cmd)  # older bags: the same values
