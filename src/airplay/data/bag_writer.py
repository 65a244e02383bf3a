"""Write rosbag2 bags in MCAP storage: ``metadata.yaml`` + ``<name>_0.mcap`` (``_1``... on a size split).

The MCAP files are written by :class:`airplay.data.mcap_writer.McapWriter` (byte for byte
the records of the ``mcap`` library's Writer, at a tenth of its cost per message) the way
rosbag2's MCAP storage plugin writes them (profile ``ros2``; schemas ``ros2msg`` = the
message definitions of rosbags' Jazzy typestore; channels ``cdr`` with the
``offered_qos_profiles`` YAML and the ``topic_type_hash`` RIHS01; a ``rosbag2`` metadata
record with ``ROS_DISTRO`` at the start and ``serialized_metadata`` at the end of each
file), and ``metadata.yaml`` in rosbag2 format version 9, so a bag opens with ``ros2 bag
info/play``, Foxglove, the ``mcap`` CLI and rosbags' Reader. Why not rosbags' own Writer
(MCAP storage): it writes the whole file's chunks only as they fill and nothing in between,
so a SIGKILL loses an unbounded tail;
``test_bag.py`` checks that both writers produce the same schemas, channels and
metadata.yaml fields for the same messages.

Crash safety: the chunk in progress is closed and handed to the OS at least every
``flush_interval_s`` (1 s) of wall time on :meth:`BagWriter.write` and :meth:`BagWriter.flush`
(the recorder node also calls ``flush`` from a timer), so a process killed with SIGKILL
leaves an MCAP file without summary or footer whose complete chunks
:func:`airplay.data.bag_reader.iter_bag_messages` recovers: at most the last second is
lost. Each file is fsync'ed when finished; ``metadata.yaml`` is written last (atomically, by
rename) on :meth:`BagWriter.close`: its presence means the bag was finalized.

The airplay bag format (:data:`airplay.data.messages.BAG_FORMAT`: what the messages mean, e.g.
``/odom``'s twist in base_link) is written twice: as ``bag_format`` in the episode metadata and
as an ``airplay`` metadata record {"bag_format": "2"} at the start of each MCAP file, so that a
bag whose writer was killed before its episode metadata still says how to read it.

Chunks are zstd-compressed by default at level :data:`ZSTD_LEVEL` through one reused zstd
context, 1 MiB (uncompressed) per chunk. Compression alone, on one core, for a recorded
64x64 flight (1000 steps of image + camera_info + odom + cmd_vel, 13.6 MB of CDR): zstd
level 3 (the zstd and mcap libraries' default) 0.14 ms per step for 5.76 MB; level 2
0.09 ms per step for 5.92 MB (+2.8 %); level 1 0.07 ms per step for 6.20 MB (+7.7 %); lz4
0.04 ms per step for 8.47 MB. Writing itself costs about 0.025 ms of CPU per step (4
messages) plus about 10 ms per bag (YAML) and the fsync.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from functools import lru_cache
from pathlib import Path

import yaml

from airplay.data.mcap_writer import McapWriter
from airplay.data.messages import BAG_FORMAT, TOPICS, check_bag_format, typestore

BAG_VERSION = 9
"""rosbag2 metadata version written (Jazzy's)."""
ROS_DISTRO = "jazzy"
"""The distribution whose message definitions (rosbags' typestore) and bag format are written."""

EPISODE_METADATA_TOPIC = "/episode/metadata"
CUSTOM_DATA_KEY = "airplay.episode"
"""metadata.yaml custom_data key holding the episode metadata JSON."""
AIRPLAY_RECORD = "airplay"
"""Name of the MCAP metadata record, at the start of each file, holding {"bag_format": "<n>"}."""

ZSTD_LEVEL = 2
"""zstd level of the chunks: 2, not zstd's default 3, as it costs a third less CPU time (about
0.09 instead of 0.14 ms per 64x64 step) for bags about 3 % larger (see the module docstring)."""

_INFINITE = {"sec": 9223372036, "nsec": 854775807}  # rmw's "infinite" duration, as rosbag2 writes it

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when present: the same YAML, ~4x faster


def _yaml(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


@lru_cache(maxsize=64)
def _msgdef(msgtype: str) -> bytes:
    """The ros2msg definition (with its dependencies) of ``msgtype``, as rosbag2 stores the schema."""
    return typestore().generate_msgdef(msgtype, ros_version=2)[0].encode()


@lru_cache(maxsize=64)
def _type_hash(msgtype: str) -> str:
    """RIHS01 type hash of ``msgtype`` (the channel's ``topic_type_hash``)."""
    return typestore().hash_rihs01(msgtype)


@lru_cache(maxsize=64)
def _qos_yaml(profile_json: str) -> str:
    """The channel metadata ``offered_qos_profiles`` YAML of one profile (given as its JSON)."""
    return yaml.safe_dump([json.loads(profile_json)], sort_keys=False).strip()


def qos_profile(reliability: str = "reliable", depth: int = 10, durability: str = "volatile") -> dict:
    """One offered QoS profile in rosbag2 v9 form (``reliability`` reliable|best_effort, keep_last ``depth``)."""
    if reliability not in ("reliable", "best_effort"):
        raise ValueError(f"QoS reliability must be reliable or best_effort, got {reliability!r}")
    if durability not in ("volatile", "transient_local"):
        raise ValueError(f"QoS durability must be volatile or transient_local, got {durability!r}")
    return {"history": "keep_last", "depth": int(depth), "reliability": reliability, "durability": durability,
            "deadline": dict(_INFINITE), "lifespan": dict(_INFINITE), "liveliness": "automatic",
            "liveliness_lease_duration": dict(_INFINITE), "avoid_ros_namespace_conventions": False}


QOS_RELIABLE = qos_profile("reliable", 10)
"""Commands, odom in lockstep, episode topics, and images recorded in-process or in lockstep."""
QOS_SENSOR_DATA = qos_profile("best_effort", 5)
"""Camera topics recorded from the graph without lockstep (rclpy's qos_profile_sensor_data)."""


class BagWriter:
    """A rosbag2 MCAP bag being written to the folder ``path`` (which must not exist).

    ``topics``: topic -> message type (default :data:`airplay.data.messages.TOPICS`); more can
    be added with :meth:`add_topic` before their first message. ``qos``: topic -> offered QoS
    profile dict (:func:`qos_profile`; default :data:`QOS_RELIABLE`). ``name``: the file stem
    (default the folder's name; ``write_episode_bag`` writes under a temporary folder name).
    ``max_bytes``: start the next file ``<name>_<k>.mcap`` once this many message bytes
    (serialized, before compression) went into the current one. ``compression``: "zstd",
    "lz4" or "" per chunk; ``zstd_level`` (None: :data:`ZSTD_LEVEL`); ``chunk_size``:
    uncompressed bytes per chunk (1 MiB). ``flush_interval_s``: the longest wall time (s)
    between two flushes while writing (see the module docstring). ``bag_format``: the airplay bag
    format the messages follow, recorded in each file and the episode metadata (module
    docstring); None records none (what airplay wrote before format 2: read as format 1).

    Log time of every MCAP message = the ``stamp_ns`` given to :meth:`write` (sim time, ns).
    """

    def __init__(self, path, *, name: str | None = None, max_bytes: int | None = None,
                 topics: dict[str, str] | None = None, qos: dict[str, dict] | None = None,
                 flush_interval_s: float = 1.0, compression: str = "zstd", chunk_size: int = 1 << 20,
                 zstd_level: int | None = None, bag_format: int | None = BAG_FORMAT) -> None:
        self.path = Path(path)
        self.bag_format = None if bag_format is None else check_bag_format(bag_format, "BagWriter")
        self.name = name or self.path.name
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if compression not in ("zstd", "lz4", ""):
            raise ValueError(f"compression must be zstd, lz4 or empty, got {compression!r}")
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0 bytes, got {chunk_size}")
        if self.path.exists():
            raise FileExistsError(f"bag folder {self.path} exists already; not overwriting")
        self.max_bytes = max_bytes
        self.flush_interval_s = float(flush_interval_s)
        self.compression = compression
        self.zstd_level = ZSTD_LEVEL if zstd_level is None else int(zstd_level)
        self.chunk_size = int(chunk_size)
        self.qos = dict(qos or {})
        self.topics: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.files: list[dict] = []  # per finished file: path, start, end, count, bytes
        self.custom_data: dict[str, str] = {}
        self.metadata: dict | None = None
        self.closed = False
        self._mcap: McapWriter | None = None  # the current file's
        self._stream = None
        self._channels: dict[str, int] = {}  # topic -> channel id in the current file
        self._schemas: dict[str, int] = {}
        self._file: dict | None = None  # the current file's path (name); its stats are the attributes below
        self._count = self._bytes = self._end = 0
        self._start: int | None = None
        self._last_flush = time.monotonic()
        self.path.mkdir(parents=True)
        for topic, msgtype in (TOPICS if topics is None else topics).items():
            self.add_topic(topic, msgtype)

    # -- topics ----------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str, qos: dict | None = None) -> None:
        """Declare ``topic`` (absolute name) of ``msgtype`` (e.g. "sensor_msgs/msg/Image")."""
        if not topic.startswith("/"):
            raise ValueError(f"topic {topic!r} must be an absolute name (start with /)")
        if topic in self.topics:
            if self.topics[topic] != msgtype:
                raise ValueError(f"topic {topic} declared as {self.topics[topic]}, not {msgtype}")
            return
        if msgtype not in typestore().types:
            raise ValueError(f"topic {topic}: unknown message type {msgtype!r} (not in the Jazzy typestore)")
        self.topics[topic] = msgtype
        self.counts[topic] = 0
        if qos is not None:
            self.qos[topic] = qos

    def _qos(self, topic: str) -> list[dict]:
        return [copy.deepcopy(self.qos.get(topic, QOS_RELIABLE))]  # a copy each: no YAML anchors

    def _channel(self, topic: str) -> int:
        channel = self._channels.get(topic)
        if channel is None:
            msgtype = self.topics[topic]
            schema = self._schemas.get(msgtype)
            if schema is None:
                schema = self._mcap.register_schema(msgtype, "ros2msg", _msgdef(msgtype))
                self._schemas[msgtype] = schema
            channel = self._mcap.register_channel(topic, "cdr", schema, {
                "offered_qos_profiles": _qos_yaml(json.dumps(self.qos.get(topic, QOS_RELIABLE))),
                "topic_type_hash": _type_hash(msgtype)})
            self._channels[topic] = channel
        return channel

    # -- files -----------------------------------------------------------------------------
    def _open_file(self) -> None:
        path = self.path / f"{self.name}_{len(self.files)}.mcap"
        self._stream = open(path, "xb")
        self._mcap = McapWriter(self._stream, chunk_size=self.chunk_size, compression=self.compression,
                                zstd_level=self.zstd_level)
        self._mcap.start(profile="ros2", library="airplay")
        self._mcap.add_metadata("rosbag2", {"ROS_DISTRO": ROS_DISTRO})  # as rosbag2's MCAP plugin on open
        if self.bag_format is not None:
            self._mcap.add_metadata(AIRPLAY_RECORD, {"bag_format": str(self.bag_format)})
        self._channels, self._schemas = {}, {}
        self._file = {"path": path.name}
        self._count = self._bytes = self._end = 0
        self._start = None
        for topic in self.topics:  # every declared topic has a channel, as with ros2 bag record
            self._channel(topic)
        self.flush()

    def _current_file(self) -> dict:
        """The current file's entry (path, start, end, count, bytes) as it stands."""
        return {**self._file, "start": self._start, "end": self._end, "count": self._count, "bytes": self._bytes}

    def _close_file(self) -> None:
        if self._mcap is None:
            return
        current = self._current_file()
        # As rosbag2's MCAP plugin on closing a file: the bag's metadata as it stands, in the file itself
        # (what `ros2 bag reindex` and readers of a lone .mcap file fall back on).
        info = self._metadata_yaml(self.files + [current])["rosbag2_bagfile_information"]
        self._mcap.add_metadata("rosbag2", {"serialized_metadata": _yaml(info)})
        self._mcap.finish()
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()
        self.files.append(current)
        self._mcap = self._stream = self._file = None
        self._channels = {}

    # -- writing ---------------------------------------------------------------------------
    def write(self, topic: str, stamp_ns: int, cdr: bytes) -> None:
        """Append one serialized (CDR) message of a declared topic, logged at ``stamp_ns`` (ns)."""
        channel = self._channels.get(topic)  # empty unless a file is open and the bag is not closed
        if channel is None:
            if self.closed:
                raise RuntimeError(f"bag {self.path} is closed")
            if topic not in self.topics:
                raise KeyError(f"topic {topic!r} is not declared in bag {self.path}; "
                               f"declared: {', '.join(self.topics)}")
        stamp_ns = int(stamp_ns)
        if stamp_ns < 0:
            raise ValueError(f"{topic}: stamp must be >= 0 ns, got {stamp_ns}")
        if channel is None:
            if self._mcap is None:
                self._open_file()
            channel = self._channel(topic)
        if type(cdr) is not bytes:
            cdr = bytes(cdr)
        sequence = self.counts[topic]
        self._mcap.add_message(channel, stamp_ns, cdr, stamp_ns, sequence)
        self.counts[topic] = sequence + 1
        self._count += 1
        self._bytes += len(cdr)
        if self._start is None or stamp_ns < self._start:
            self._start = stamp_ns
        if stamp_ns > self._end:
            self._end = stamp_ns
        if self.max_bytes is not None and self._bytes >= self.max_bytes:
            self._close_file()  # the next message opens <name>_<k+1>.mcap
        else:
            self.flush_if_due()

    def flush(self) -> None:
        """Close the chunk in progress and hand everything to the OS (survives a SIGKILL of this process)."""
        if self._mcap is not None:
            self._mcap.flush()
        self._last_flush = time.monotonic()

    def flush_if_due(self) -> None:
        """:meth:`flush` when the last flush is ``flush_interval_s`` old or more (call it from a timer)."""
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def set_metadata(self, metadata: dict) -> None:
        """The episode metadata: written on :meth:`close` as one ``/episode/metadata`` JSON message at
        the last stamp, and into metadata.yaml custom_data["airplay.episode"], with ``bag_format``
        set to the writer's (unless that is None)."""
        json.dumps(metadata)  # fail now, naming nothing half-written, if it is not JSON
        self.metadata = dict(metadata)
        if self.bag_format is not None:
            self.metadata["bag_format"] = self.bag_format

    def set_custom_data(self, key: str, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"custom_data {key!r} must be a string, got {type(value).__name__}")
        self.custom_data[key] = value

    @property
    def message_count(self) -> int:
        return sum(self.counts.values())

    @property
    def last_stamp_ns(self) -> int | None:
        files = self.files + ([self._current_file()] if self._file else [])
        ends = [f["end"] for f in files if f["start"] is not None]
        return max(ends) if ends else None

    def close(self) -> Path:
        """Write the episode metadata (if set), finish the MCAP file(s), then metadata.yaml. Idempotent."""
        if self.closed:
            return self.path
        if self.metadata is not None:
            from airplay.data.messages import json_cdr

            self.add_topic(EPISODE_METADATA_TOPIC, "std_msgs/msg/String")
            last = self.last_stamp_ns
            self.write(EPISODE_METADATA_TOPIC, 0 if last is None else last, json_cdr(self.metadata))
            self.custom_data[CUSTOM_DATA_KEY] = json.dumps(self.metadata)
        if self._mcap is None and not self.files:
            self._open_file()  # an empty bag still gets its (empty) file
        self._close_file()
        self.closed = True
        tmp = self.path / "metadata.yaml.tmp"
        tmp.write_text(_yaml(self._metadata_yaml()), "utf8")
        tmp.replace(self.path / "metadata.yaml")
        return self.path

    def abort(self) -> None:
        """Stop writing and delete the bag folder (nothing half-written stays)."""
        if self._stream is not None:
            self._stream.close()
        self._mcap = self._stream = None
        self._channels = {}
        self.closed = True
        shutil.rmtree(self.path, ignore_errors=True)

    def _metadata_yaml(self, files: list[dict] | None = None) -> dict:
        files = self.files if files is None else files
        starts = [f["start"] for f in files if f["start"] is not None]
        start = min(starts) if starts else 0
        end = max((f["end"] for f in files if f["start"] is not None), default=0)

        def file_entry(f):
            return {"path": f["path"], "starting_time": {"nanoseconds_since_epoch": f["start"] or 0},
                    "duration": {"nanoseconds": max(0, f["end"] - (f["start"] or 0))}, "message_count": f["count"]}

        hashes = {t: _type_hash(m) for t, m in self.topics.items()}
        return {"rosbag2_bagfile_information": {
            "version": BAG_VERSION,
            "storage_identifier": "mcap",
            "duration": {"nanoseconds": end - start},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": sum(f["count"] for f in files),
            "topics_with_message_count": [
                {"topic_metadata": {"name": t, "type": m, "serialization_format": "cdr",
                                    "offered_qos_profiles": self._qos(t), "type_description_hash": hashes[t]},
                 "message_count": self.counts[t]}
                for t, m in self.topics.items()],
            "compression_format": "",
            "compression_mode": "",
            "relative_file_paths": [f["path"] for f in files],
            "files": [file_entry(f) for f in files],
            "custom_data": dict(self.custom_data) or None,
            "ros_distro": ROS_DISTRO,
        }}

    def __enter__(self) -> "BagWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()  # an error while recording still leaves a finalized, readable bag
        return False


def episode_bag_path(out_root, scene_name: str, task_id: str) -> Path:
    """``OUT/<scene_name>/<task_id>``: where the episode's bag is published."""
    return Path(out_root) / scene_name / task_id


def write_episode_bag(out_root, scene_name: str, task_id: str, records, *, metadata: dict | None = None,
                      topics: dict[str, str] | None = None, qos: dict[str, dict] | None = None,
                      max_bytes: int | None = None) -> Path:
    """Write one episode's bag atomically and return ``OUT/<scene_name>/<task_id>``.

    ``records``: iterable of ``(topic, stamp_ns, cdr_bytes)`` (see :mod:`airplay.data.messages`).
    The bag is written under ``OUT/<scene_name>/.<task_id>.partial/`` (a stale one from a killed
    run is removed first) and renamed when finalized; on any error the partial folder is
    deleted and the error re-raised, so ``OUT/<scene>/<task_id>/`` exists only complete.
    FileExistsError if the episode's bag exists already.
    """
    final = episode_bag_path(out_root, scene_name, task_id)
    if final.exists():
        raise FileExistsError(f"episode bag {final} exists already")
    partial = final.parent / f".{task_id}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    writer = BagWriter(partial, name=task_id, topics=topics, qos=qos, max_bytes=max_bytes)
    try:
        for topic, stamp_ns, cdr in records:
            writer.write(topic, stamp_ns, cdr)
        if metadata is not None:
            writer.set_metadata(metadata)
        writer.close()
        os.rename(partial, final)
    except BaseException:
        writer.abort()
        raise
    return final
