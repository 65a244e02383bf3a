"""Read the episode bags of :mod:`airplay.data.bag_writer` (and of ``ros2 bag record`` in MCAP storage).

The MCAP files are read as streams (the ``mcap`` library's StreamReader), in split order,
so a file without summary or footer - its writer was killed - yields every message of its
complete chunks; a truncated record at the tail ends the file quietly (counted in
:attr:`BagMessages.truncated_files`). ``metadata.yaml`` is not needed to read a bag.

The airplay bag format (:data:`airplay.data.messages.BAG_FORMAT`) says how ``/odom`` reads
back into the state: :func:`bag_format_of` takes the episode metadata's ``bag_format``, else the
``airplay`` metadata record of the first MCAP file (a bag whose writer was killed), else 1 (an
airplay bag from before the field, whose ``/odom`` twist is in map; also any bag that another
tool, e.g. ``ros2 bag record``, wrote without that record).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from airplay.data import messages as m
from airplay.data.bag_writer import AIRPLAY_RECORD, CUSTOM_DATA_KEY, EPISODE_METADATA_TOPIC


class BagError(ValueError):
    """A bag folder that cannot be read as an episode; the message names the folder and the problem."""


def _split_index(path: Path) -> tuple[int, str]:
    match = re.search(r"_(\d+)\.mcap$", path.name)
    return (int(match.group(1)) if match else -1, path.name)


def mcap_files(bag_dir) -> list[Path]:
    """The bag's MCAP files in split order (metadata.yaml's list when present, else ``*_<k>.mcap`` by k)."""
    bag_dir = Path(bag_dir)
    meta = read_metadata_yaml(bag_dir)
    if meta is not None and meta.get("relative_file_paths"):
        return [bag_dir / p for p in meta["relative_file_paths"]]
    return sorted(bag_dir.glob("*.mcap"), key=_split_index)


def read_metadata_yaml(bag_dir) -> dict | None:
    """``rosbag2_bagfile_information`` of the bag's metadata.yaml, or None when the bag was never finalized."""
    path = Path(bag_dir) / "metadata.yaml"
    if not path.is_file():
        return None
    try:
        info = yaml.safe_load(path.read_text("utf8"))["rosbag2_bagfile_information"]
    except (yaml.YAMLError, KeyError, TypeError) as exc:
        raise BagError(f"{path}: not a rosbag2 metadata file ({exc})") from None
    return info


@dataclass
class BagMessages:
    """Every message of a bag: ``(topic, msgtype, log_time_ns, cdr)`` in file order."""

    messages: list = field(default_factory=list)
    truncated_files: list = field(default_factory=list)


def iter_bag_messages(bag_dir, topics=None):
    """Yield ``(topic, msgtype, log_time_ns, cdr_bytes)`` of every message in the bag's MCAP files.

    ``topics``: only these (absolute names). Tolerates a truncated tail (a killed writer).
    """
    for path in mcap_files(bag_dir):
        yield from _file_messages(path, topics, None)


def read_bag_messages(bag_dir, topics=None) -> BagMessages:
    """All messages (see :func:`iter_bag_messages`) plus which files ended in a truncated record."""
    out = BagMessages()
    for path in mcap_files(bag_dir):
        out.messages.extend(_file_messages(path, topics, out.truncated_files))
    return out


def _file_messages(path: Path, topics, truncated: list | None):
    from mcap.exceptions import McapError
    from mcap.records import Channel, Footer, Message, Schema
    from mcap.stream_reader import StreamReader

    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    wanted = None if topics is None else set(topics)
    with open(path, "rb") as f:
        reader = StreamReader(f, validate_crcs=True)
        try:
            for record in reader.records:
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    channels[record.id] = (record.topic, schemas.get(record.schema_id, ""))
                elif isinstance(record, Message):
                    topic, msgtype = channels[record.channel_id]
                    if wanted is None or topic in wanted:
                        yield topic, msgtype, int(record.log_time), bytes(record.data)
                elif isinstance(record, Footer):
                    return
        except (McapError, struct.error, EOFError, ValueError, *_codec_errors()) as exc:  # a killed writer's tail
            if truncated is not None:
                truncated.append((path.name, type(exc).__name__))


def _codec_errors() -> tuple:
    """What zstd / lz4 raise on a torn chunk."""
    errors = []
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    errors.append(RuntimeError)  # lz4.frame
    return tuple(errors)


@dataclass
class Episode:
    """One episode's synchronized samples, aligned by stamp (sim time, ns).

    T = the observations that have a command (the terminal observation has none):
    ``rgb (T, H, W, 3) uint8``; ``depth (T, H, W) float32`` metres or None; ``state (T, 13)
    float64`` [x y z qx qy qz qw vx vy vz wx wy wz] (map ENU; quat xyzw; velocity map, whatever
    the bag format: a REP-105 ``/odom`` twist is rotated back into map; body rates FLU);
    ``action (T, 4) float32`` [vx vy vz (heading frame, m/s) yaw_rate (rad/s)]; ``stamps_ns
    (T,) int64``. Goal: ``goal_position (3,)`` m map and ``goal_yaw``
    rad (None when no /goal_pose), ``goal_image (H, W, 3)`` or None. ``camera_k (3, 3)`` the
    intrinsics (pixels) or None. ``metadata``: /episode/metadata (or custom_data, or what the
    /episode/status messages tell when the bag was never finalized). ``complete``: the bag
    was finalized (metadata.yaml present). ``dropped``: commanded stamps left out because
    their image or state was missing. ``bag_format``: the airplay bag format it was read as
    (:func:`bag_format_of`).
    """

    path: Path
    rgb: np.ndarray
    depth: np.ndarray | None
    state: np.ndarray
    action: np.ndarray
    stamps_ns: np.ndarray
    goal_position: np.ndarray | None
    goal_yaw: float | None
    goal_image: np.ndarray | None
    camera_k: np.ndarray | None
    metadata: dict
    complete: bool
    dropped: int = 0
    bag_format: int = m.BAG_FORMAT

    def __len__(self) -> int:
        return len(self.stamps_ns)


def _by_stamp(msgtype: str, items: list) -> dict[int, object]:
    """stamp_ns -> decoded message; the first one per stamp (the sim re-publishes while it waits)."""
    out = {}
    for _, cdr in items:
        msg = m.decode(msgtype, cdr)
        out.setdefault(m.stamp_ns(msg), msg)
    return out


def read_episode(bag_dir) -> Episode:
    """Decode an episode bag into numpy arrays aligned by stamp (see :class:`Episode`).

    Works on a bag whose writer was killed (no metadata.yaml, no MCAP summary): what was
    flushed is returned and ``complete`` is False. BagError when the folder has no MCAP file
    or no observation with a command.
    """
    bag_dir = Path(bag_dir)
    files = mcap_files(bag_dir)
    if not files:
        raise BagError(f"{bag_dir}: no .mcap file (not a bag folder)")
    meta_yaml = read_metadata_yaml(bag_dir)
    per_topic: dict[str, list] = {}
    for topic, _, log_time, cdr in iter_bag_messages(bag_dir):
        per_topic.setdefault(topic, []).append((log_time, cdr))
    T = m.TOPICS
    odom = _by_stamp(T["/odom"], per_topic.get("/odom", []))
    cmds = _by_stamp(T["/cmd_vel"], per_topic.get("/cmd_vel", []))
    images = _by_stamp(T["/camera/image_raw"], per_topic.get("/camera/image_raw", []))
    depths = _by_stamp(T["/camera/depth/image_raw"], per_topic.get("/camera/depth/image_raw", []))
    infos = per_topic.get("/camera/camera_info", [])
    end = _terminal_stamp(per_topic.get("/episode/status", []))
    commanded = sorted(s for s in cmds if end is None or s < end)  # the graph's policy commands the end too
    stamps = [s for s in commanded if s in odom and s in images and (not depths or s in depths)]
    if not stamps:
        raise BagError(f"{bag_dir}: no observation with a command (messages: "
                       + ", ".join(f"{t} {len(v)}" for t, v in sorted(per_topic.items())) + ")")
    goal_position = goal_yaw = goal_image = camera_k = None
    if per_topic.get("/goal_pose"):
        goal_position, goal_yaw = m.position_yaw_of(m.decode(T["/goal_pose"], per_topic["/goal_pose"][0][1]))
    if per_topic.get("/goal_image"):
        goal_image = m.rgb_of(m.decode(T["/goal_image"], per_topic["/goal_image"][0][1]))
    if infos:
        camera_k = np.asarray(m.decode(T["/camera/camera_info"], infos[0][1]).k, np.float64).reshape(3, 3)
    metadata = _episode_metadata(per_topic, meta_yaml)
    fmt = bag_format_of(bag_dir, metadata)
    return Episode(
        path=bag_dir,
        rgb=np.stack([m.rgb_of(images[s]) for s in stamps]),
        depth=np.stack([m.depth_of(depths[s]) for s in stamps]) if depths else None,
        state=np.stack([m.state_of(odom[s], fmt) for s in stamps]),
        action=np.stack([m.command_of(cmds[s]) for s in stamps]).astype(np.float32),
        stamps_ns=np.asarray(stamps, np.int64),
        goal_position=goal_position, goal_yaw=goal_yaw, goal_image=goal_image, camera_k=camera_k,
        metadata=metadata,
        complete=meta_yaml is not None,
        dropped=len(commanded) - len(stamps),
        bag_format=fmt,
    )


def bag_format_of(bag_dir, metadata: dict | None = None) -> int:
    """The airplay bag format of a bag (module docstring): ``metadata["bag_format"]`` (the episode
    metadata), else the first MCAP file's ``airplay`` record, else 1. BagError, naming the bag and
    where the value came from, for a format this airplay does not read."""
    bag_dir = Path(bag_dir)
    where, value = f"{bag_dir}: episode metadata", (metadata or {}).get("bag_format")
    if value is None:
        files = mcap_files(bag_dir)
        if files:
            where, value = f"{files[0]}: MCAP metadata record {AIRPLAY_RECORD!r}", _file_bag_format(files[0])
    if value is None:
        return 1
    try:
        return m.check_bag_format(value, where)
    except ValueError as exc:
        raise BagError(str(exc)) from None


def _file_bag_format(path: Path) -> str | None:
    """``bag_format`` of the ``airplay`` metadata record before the file's first chunk, or None."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Metadata, Schema
    from mcap.stream_reader import StreamReader

    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, validate_crcs=True).records:
                if isinstance(record, Metadata) and record.name == AIRPLAY_RECORD:
                    return record.metadata.get("bag_format")
                if isinstance(record, (Schema, Channel, Message)):
                    return None  # the writer puts the record before its first chunk
        except (McapError, struct.error, EOFError, ValueError, *_codec_errors()):
            return None
    return None


def _terminal_stamp(statuses: list) -> int | None:
    """Stamp of the terminal observation: "started" stamp_ns + steps * 20 ms, when both statuses are there."""
    start = steps = None
    for _, cdr in statuses:
        try:
            status = json.loads(m.decode("std_msgs/msg/String", cdr).data)
        except json.JSONDecodeError:
            continue
        if status.get("status") == "started" and "stamp_ns" in status:
            start = int(status["stamp_ns"])
        elif "steps" in status:
            steps = int(status["steps"])
    return None if start is None or steps is None else start + steps * m.CONTROL_DT_NS


def _episode_metadata(per_topic: dict, meta_yaml: dict | None) -> dict:
    if per_topic.get(EPISODE_METADATA_TOPIC):
        return json.loads(m.decode("std_msgs/msg/String", per_topic[EPISODE_METADATA_TOPIC][-1][1]).data)
    custom = (meta_yaml or {}).get("custom_data") or {}
    if CUSTOM_DATA_KEY in custom:
        return json.loads(custom[CUSTOM_DATA_KEY])
    out: dict = {}  # never finalized: what the episode statuses say
    for _, cdr in per_topic.get("/episode/status", []):
        try:
            status = json.loads(m.decode("std_msgs/msg/String", cdr).data)
        except json.JSONDecodeError:
            continue
        out.update({k: v for k, v in status.items() if k != "trajectory"})
    out.setdefault("status", "unfinished")
    if out["status"] == "started":
        out["status"] = "unfinished"
    return out


def iter_episode_bags(roots) -> list[Path]:
    """Bag folders (holding metadata.yaml or a .mcap file) under ``roots`` (folders or bag folders), sorted.

    Hidden folders (``.<task_id>.partial``: being written) are skipped.
    """
    if isinstance(roots, (str, Path)):
        roots = [roots]
    found: set[Path] = set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"no such bag folder or folder of bags: {root}")
        candidates = [root] + [p for p in root.rglob("*") if p.is_dir()]
        for d in candidates:
            if any(part.startswith(".") for part in d.relative_to(root).parts):
                continue
            if (d / "metadata.yaml").is_file() or any(d.glob("*.mcap")):
                found.add(d)
    return sorted(found)
