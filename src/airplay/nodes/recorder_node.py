"""``recorder``: serialized messages of the configured topics -> rosbag2 MCAP bags, one per episode.

Subscribes with ``raw=True`` (the CDR bytes as published, never deserialized) and hands them
to :class:`airplay.data.episode_recorder.EpisodeRecorder`, which cuts episodes by stamp on
``/episode/status`` and writes with :class:`airplay.data.bag.BagWriter` under ``out``
(``OUT/<scene>/<task_id>/``; ``split:=none``: one ``OUT/recording-<UTC>/`` for the run).

Parameters: ``out`` (bags), ``topics`` (comma-separated absolute names; default the bag
topics of :data:`airplay.data.messages.TOPICS` that the graph publishes, depth only with
``record_depth:=true``), ``split`` (episode | none), ``max_bytes`` (0: no size split),
``lockstep`` (the graph steps in lockstep: the camera QoS to expect, reliable keep-last 100,
else sensor data; and how messages that come before their episode's status are told apart,
see :mod:`airplay.data.episode_recorder`),
``flush_interval_s`` (0.5: a SIGKILL loses at most about this much), ``grace_s`` (1.0 wall
seconds for late messages of an ended episode), plus scenes/episodes/seed/setting (task ids
and the metadata's task, derived as the sim does).

Types: from TOPICS, or from the graph for other topics (subscribed once a publisher is
seen). QoS metadata: the publishers' offered profiles, once discovered. SIGINT/SIGTERM
finalize every bag (metadata.yaml; an unfinished episode gets status "interrupted").
"""

from __future__ import annotations

import importlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from airplay.data.bag_writer import QOS_RELIABLE, QOS_SENSOR_DATA, qos_profile
from airplay.data.episode_recorder import (EpisodeRecorder, basic_metadata, ignore_interrupts,
                                            scene_task_metadata, started_task_metadata)
from airplay.data.messages import TOPICS
from airplay.node_schemas import RECORDER
from airplay.nodes.common import LOCKSTEP_DEPTH, ParameterError, episode_parameters, run_node
from airplay.nodes.params import declare_schema

CAMERA_TOPICS = ("/camera/image_raw", "/camera/depth/image_raw", "/camera/camera_info")
LOCKSTEP_TOPICS = (*CAMERA_TOPICS, "/odom", "/cmd_vel")
"""Published in lockstep with the history of :data:`airplay.nodes.common.LOCKSTEP_DEPTH`."""
DEFAULT_TOPICS = ("/camera/image_raw", "/camera/camera_info", "/odom", "/cmd_vel", "/goal_pose", "/goal_image",
                  "/episode/status")


def message_class(msgtype: str):
    """The rclpy message class of "pkg/msg/Name"."""
    pkg, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def offered_qos(profile, depth: int) -> dict:
    """rosbag2 v9 QoS dict of a publisher's offered rclpy QoSProfile; ``depth`` where discovery
    does not tell it (DDS does not announce history depth: rclpy reports 0)."""
    reliability = "best_effort" if profile.reliability == ReliabilityPolicy.BEST_EFFORT else "reliable"
    durability = "transient_local" if profile.durability == DurabilityPolicy.TRANSIENT_LOCAL else "volatile"
    return qos_profile(reliability, int(profile.depth) or depth, durability)


class RecorderNode(Node):
    def __init__(self) -> None:
        super().__init__("recorder")
        values = declare_schema(self, RECORDER)
        p = episode_parameters(values)
        out, topics, record_depth, split = values["out"], values["topics"], values["record_depth"], values["split"]
        max_bytes, flush_interval_s, grace_s = values["max_bytes"], values["flush_interval_s"], values["grace_s"]
        self.lockstep = values["lockstep"]
        wanted = [t.strip() for t in topics.split(",") if t.strip()] if topics.strip() else list(DEFAULT_TOPICS)
        if record_depth and "/camera/depth/image_raw" not in wanted:
            wanted.append("/camera/depth/image_raw")
        for t in wanted:
            if not t.startswith("/"):
                raise ParameterError(f"parameter 'topics': {t!r} must be an absolute topic name (start with /)")
        if "/episode/status" not in wanted and split == "episode":
            raise ParameterError("parameter 'topics' must include /episode/status to split by episode")
        self.setting, self.seed = p["setting"], p["seed"]
        self.task_args = (p["episodes"], p["seed"], p["setting"])
        self.metadata_pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=ignore_interrupts)
        self.closer = ThreadPoolExecutor(1, thread_name_prefix="bag-close")
        self.recorder = EpisodeRecorder(
            out, {}, setting=self.setting, seed=self.seed, split=split, max_bytes=max_bytes or None,
            grace_s=float(grace_s), flush_interval_s=float(flush_interval_s), metadata_fn=self.episode_metadata,
            finalize=self.closer.submit, log=self.get_logger().info, on_start=self.on_episode_start,
            lockstep=self.lockstep)
        self.waiting = [t for t in wanted if t not in TOPICS]  # types come from the graph
        self.qos_known: set[str] = set()
        for t in wanted:
            if t in TOPICS:
                self.subscribe(t, TOPICS[t])
        wall = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(0.1, self.recorder.tick, clock=wall)
        self.create_timer(0.5, self.discover, clock=wall)
        self.get_logger().info(f"recording {', '.join(wanted)} to {out} (split {split})")

    def expected_qos(self, topic: str) -> dict:
        if self.lockstep and topic in LOCKSTEP_TOPICS:
            return qos_profile("reliable", LOCKSTEP_DEPTH)
        return QOS_SENSOR_DATA if topic in CAMERA_TOPICS and not self.lockstep else QOS_RELIABLE

    def subscribe(self, topic: str, msgtype: str) -> None:
        self.recorder.add_topic(topic, msgtype, self.expected_qos(topic))
        q = self.expected_qos(topic)
        # Best effort on the camera without lockstep matches any publisher; depth 100 keeps up with bursts.
        # /episode/status is transient-local (airplay.nodes.common.EPISODE_STATUS): a recorder matched late
        # still gets the statuses sent before.
        durability = DurabilityPolicy.TRANSIENT_LOCAL if topic == "/episode/status" else DurabilityPolicy.VOLATILE
        qos = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, durability=durability,
                         reliability=ReliabilityPolicy.BEST_EFFORT if q["reliability"] == "best_effort"
                         else ReliabilityPolicy.RELIABLE)
        self.create_subscription(message_class(msgtype), topic, lambda data, t=topic: self.recorder.on_message(t, data),
                                 qos, raw=True)

    def discover(self) -> None:
        """Subscribe to configured topics whose type the graph now tells; record publishers' offered QoS."""
        types = dict(self.get_topic_names_and_types())
        for topic in list(self.waiting):
            if types.get(topic):
                self.waiting.remove(topic)
                self.subscribe(topic, types[topic][0])
        for topic in self.recorder.topics:
            if topic in self.qos_known:
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if publishers:
                depth = self.expected_qos(topic)["depth"]
                self.recorder.set_qos(topic, offered_qos(publishers[0].qos_profile, depth))
                self.qos_known.add(topic)

    # -- episode metadata: from the task the "started" status carries; else (a status that names only
    # the scene and index) the scene's tasks are loaded in a worker process (see scene_task_metadata)
    def on_episode_start(self, seg) -> None:
        if "task" not in seg.started:
            self.metadata_pool.submit(scene_task_metadata, seg.started.get("scene_dir", ""), None, *self.task_args)

    def episode_metadata(self, seg) -> dict:  # in the closer thread, which waits for the worker
        meta = basic_metadata(seg, self.setting, self.seed)
        known = started_task_metadata(seg.started)
        meta.update(known if known is not None else self.metadata_pool.submit(
            scene_task_metadata, seg.started["scene_dir"], seg.started["index"], *self.task_args).result(timeout=120))
        return meta

    def destroy_node(self) -> None:
        self.recorder.close()  # SIGINT/SIGTERM or the end of the run: finalize every bag
        self.closer.shutdown(wait=True)
        self.metadata_pool.shutdown(wait=False, cancel_futures=True)
        log = self.get_logger()
        log.info(f"finalized {len(self.recorder.bags)} bag(s); messages written: "
                 + ", ".join(f"{t} {n}" for t, n in self.recorder.written.items())
                 + f"; unassigned {self.recorder.unassigned}")
        super().destroy_node()


def main(args=None) -> int:
    return run_node(RecorderNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
