"""Route a live stream of serialized messages into one bag per episode (the recorder node's core, no rclpy).

Messages come in as ``(topic, cdr_bytes)`` in arrival order, which over DDS is not stamp
order across topics: the renderer's image of the terminal observation arrives after the
sim's terminal ``/episode/status``, and the next episode's first odom may arrive before
its "started" status. So episodes are cut by STAMP (sim time, ns), not by arrival:

* ``/episode/status`` "started" {"episode", "stamp_ns", "scene_dir", "index"} opens the bag
  ``OUT/<scene name>/<task_id>/`` (task_id ``{scene}-{setting}-{seed}-{index}``) for stamps
  from ``stamp_ns`` on; messages that arrived before it with such stamps (held up to
  ``grace_s``) go in too;
* the terminal status {"episode", "status", "steps"} ends its stamp range at
  ``stamp_ns + steps * 20 ms`` (the terminal observation); the bag stays open ``grace_s``
  seconds of wall time for late messages of the range, then is finalized with its
  ``/episode/metadata``;
* a stamped message (header first, or rosgraph_msgs/Clock) goes to the bag whose range holds
  its stamp; an unstamped one (std_msgs/String...) is logged at the latest stamp seen.

While an episode runs its end is not known, and the next episode's first messages (its
``/goal_pose`` and ``/goal_image``, stamped with its start, and its first observation) may
arrive before this episode's terminal status and the next one's "started" status. With
``lockstep`` (the sim steps only once the latest observation is commanded) each topic's
stamps in an episode come one control period apart, in order, and the next episode starts
:data:`airplay.world.lockstep.RESET_GAP_PERIODS` periods after the last observation: so a
stamp more than one period past the latest one recorded in the running episode is held
(pending) until the statuses tell where it goes: written when the episode's messages reach
it, when the terminal status puts it inside the episode, or when its episode starts. (The
first message after the "started" status is taken whatever its stamp: a recorder that joins
the graph late records the running episode from there on.)
Without lockstep a stamp from the running episode's start on goes to the running episode.
Pending messages that find no episode within :data:`PENDING_HOLD_S` seconds are dropped.

``split="none"`` writes one bag ``OUT/recording-<UTC time>/`` for the whole run. Either way
``max_bytes`` splits files inside a bag. Counters: ``written`` per topic, ``unassigned``
(messages with no episode to go to, dropped), ``bags`` (finalized bag folders).
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from airplay.data.bag_writer import QOS_RELIABLE, BagWriter
from airplay.data.messages import CONTROL_DT_NS, typestore
from airplay.episode_status import EpisodeStatus

STATUS_TOPIC = "/episode/status"

PENDING_HOLD_S = 5.0
"""Wall seconds a message waits for its episode's status (longer when ``grace_s`` is): more than
Fast DDS's default heartbeat period (3 s), after which a reliable writer resends a lost status."""


def stamp_kind(msgtype: str) -> str:
    """"header" when the type starts with a std_msgs/Header, "clock" for rosgraph_msgs/Clock, else ""."""
    if msgtype == "rosgraph_msgs/msg/Clock":
        return "clock"
    fields = typestore().fielddefs[msgtype][1]
    first = fields[0] if fields else None
    if first is not None and first[0] == "header" and "std_msgs/msg/Header" in repr(first[1]):
        return "header"
    return ""


def cdr_stamp_ns(cdr: bytes) -> int:
    """The builtin_interfaces/Time at the start of a CDR message body (a Header's stamp; a Clock's clock)."""
    endian = "<" if cdr[1] == 1 else ">"
    sec, nanosec = struct.unpack_from(endian + "iI", cdr, 4)
    return sec * 1_000_000_000 + nanosec


def _string_data(cdr: bytes) -> str:
    return typestore().deserialize_cdr(cdr, "std_msgs/msg/String").data


@dataclass
class Segment:
    """One bag being written: the stamps [start_ns, end_ns] it takes (end None while the episode runs)."""

    writer: BagWriter
    start_ns: int
    end_ns: int | None = None
    started: dict = field(default_factory=dict)
    terminal: dict | None = None
    close_at: float | None = None  # wall (monotonic) time to finalize
    last_ns: int = 0  # the latest stamp written (ns)
    messages: int = 0  # messages written besides /episode/status


def _interrupted(seg: Segment) -> dict:
    """The terminal status of an episode cut short: ``interrupted`` after the steps recorded so far."""
    return {"status": EpisodeStatus.INTERRUPTED.value, "steps": max(0, (seg.last_ns - seg.start_ns) // CONTROL_DT_NS)}


class EpisodeRecorder:
    """Bags per episode (or one for the run) from serialized messages; see the module docstring.

    ``topics``: topic -> msgtype (more via :meth:`add_topic`). ``qos``: topic -> offered QoS
    (rosbag2 v9 dict) written to the bag. ``setting``, ``seed``: for task ids.
    ``metadata_fn(segment) -> dict``: the /episode/metadata of a finished episode (may be slow:
    it runs in ``finalize``'s caller, which may be a worker thread). ``finalize(fn)``: how a
    finished segment's closing is run (default: now); the node passes a thread pool's submit.
    ``on_start(segment)``: called when an episode's bag opens (the node preloads the scene's tasks).
    ``lockstep``: the graph steps in lockstep (stamps one control period apart; see the module
    docstring). ``dt_ns``: the control period (ns).
    """

    def __init__(self, out, topics: dict[str, str], *, setting: str = "pointgoal", seed: int = 0,
                 split: str = "episode", max_bytes: int | None = None, grace_s: float = 1.0,
                 flush_interval_s: float = 0.5, qos: dict[str, dict] | None = None, metadata_fn=None,
                 finalize=None, on_start=None, lockstep: bool = True, dt_ns: int = CONTROL_DT_NS, log=print,
                 clock=time.monotonic) -> None:
        if split not in ("episode", "none"):
            raise ValueError(f"split must be episode or none, got {split!r}")
        self.out = Path(out)
        self.setting, self.seed, self.split = setting, seed, split
        self.max_bytes, self.grace_s, self.flush_interval_s = max_bytes, grace_s, flush_interval_s
        self.lockstep, self.dt_ns = bool(lockstep), int(dt_ns)
        self.topics: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.qos: dict[str, dict] = dict(qos or {})
        self.metadata_fn = metadata_fn
        self.finalize = finalize or (lambda fn: fn())
        self.on_start = on_start
        self.log, self.clock = log, clock
        self.segments: list[Segment] = []
        self.pending: list[tuple[float, str, int, bytes]] = []  # (arrival, topic, stamp, cdr) with no bag yet
        self.latest_ns = 0
        self.written: dict[str, int] = {}
        self.unassigned = 0
        self.bags: list[Path] = []
        for topic, msgtype in topics.items():
            self.add_topic(topic, msgtype)
        if split == "none":
            name = "recording-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
            self.segments.append(Segment(self._writer(self._unique(self.out / name)), 0))

    # -- set-up ----------------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str, qos: dict | None = None) -> None:
        self.topics[topic] = msgtype
        self.kinds[topic] = stamp_kind(msgtype)
        self.written.setdefault(topic, 0)
        if qos is not None:
            self.qos[topic] = qos
        for seg in self.segments:
            seg.writer.add_topic(topic, msgtype, self.qos.get(topic))

    def set_qos(self, topic: str, qos: dict) -> None:
        """The offered QoS of ``topic``'s publishers, once known (bags opened later record it)."""
        self.qos[topic] = qos
        for seg in self.segments:
            seg.writer.qos[topic] = qos

    def _writer(self, path: Path) -> BagWriter:
        return BagWriter(path, topics=dict(self.topics), qos={t: self.qos.get(t, QOS_RELIABLE) for t in self.topics},
                         max_bytes=self.max_bytes, flush_interval_s=self.flush_interval_s)

    @staticmethod
    def _unique(path: Path) -> Path:
        k, candidate = 1, path
        while candidate.exists():
            candidate = path.with_name(f"{path.name}-r{k}")
            k += 1
        return candidate

    # -- messages --------------------------------------------------------------------------
    def on_message(self, topic: str, cdr: bytes) -> None:
        """Record one serialized message of a declared topic (arrival order)."""
        now = self.clock()
        kind = self.kinds[topic]
        if topic == STATUS_TOPIC:
            self._on_status(cdr, now)
            return
        if kind:
            stamp = cdr_stamp_ns(cdr)
            self.latest_ns = max(self.latest_ns, stamp)
        else:
            stamp = self.latest_ns
        seg = self._segment_for(stamp, stamped=bool(kind))
        if seg is None:
            self.pending.append((now, topic, stamp, cdr))
            return
        self._write(seg, topic, stamp, cdr)
        if self.pending and seg.end_ns is None:
            self._place_pending()  # the running episode's messages may have reached a held stamp

    def _segment_for(self, stamp: int, stamped: bool) -> Segment | None:
        for seg in reversed(self.segments):
            if stamp >= seg.start_ns and (seg.end_ns is None or stamp <= seg.end_ns):
                if (seg.end_ns is None and stamped and self.lockstep and self.split == "episode" and seg.messages
                        and stamp > seg.last_ns + self.dt_ns):
                    return None  # past the running episode's next step: maybe the next episode's
                return seg
            if not stamped and seg.close_at is None:
                return seg
        return None

    def _place_pending(self) -> None:
        """Write the pending messages whose bag is now known, in stamp order (arrival order within a stamp)."""
        keep = []
        for item in sorted(self.pending, key=lambda p: p[2]):
            seg = self._segment_for(item[2], stamped=True)
            if seg is None:
                keep.append(item)
            else:
                self._write(seg, item[1], item[2], item[3])
        self.pending = keep

    def _write(self, seg: Segment, topic: str, stamp: int, cdr: bytes) -> None:
        seg.writer.write(topic, stamp, cdr)
        seg.last_ns = max(seg.last_ns, stamp)
        seg.messages += topic != STATUS_TOPIC
        self.written[topic] += 1

    def _on_status(self, cdr: bytes, now: float) -> None:
        try:
            status = json.loads(_string_data(cdr))
            kind = status["status"]
        except (ValueError, KeyError, TypeError) as exc:
            self.log(f"ignoring a bad {STATUS_TOPIC} message: {exc}")
            return
        if self.split == "none":
            stamp = int(status.get("stamp_ns", self.latest_ns))
            self._write(self.segments[0], STATUS_TOPIC, stamp, cdr)
            return
        if kind == "started":
            self._start(status, cdr, now)
        else:
            self._end(status, cdr, now)

    def _start(self, status: dict, cdr: bytes, now: float) -> None:
        start = int(status["stamp_ns"])
        if any(seg.start_ns == start for seg in self.segments):
            return  # the same start again (a vehicle's bridge repeats it): already recording
        self.latest_ns = max(self.latest_ns, start)
        for seg in self.segments:  # an episode that never ended: cut it here
            if seg.end_ns is None:
                seg.end_ns, seg.close_at = start - 1, now + self.grace_s
                seg.terminal = _interrupted(seg)
        scene_dir = str(status.get("scene_dir", ""))
        name = _scene_name(scene_dir)
        task_id = f"{name}-{self.setting}-{self.seed}-{int(status.get('index', 0))}"
        path = self._unique(self.out / name / task_id)
        seg = Segment(self._writer(path), start, started=dict(status, scene=name, task_id=task_id))
        self.segments.append(seg)
        self._write(seg, STATUS_TOPIC, start, cdr)
        self._place_pending()
        if self.on_start is not None:
            self.on_start(seg)
        self.log(f"episode {status.get('episode')}: recording {path}")

    def _end(self, status: dict, cdr: bytes, now: float) -> None:
        open_segs = [s for s in self.segments if s.end_ns is None]
        if not open_segs:
            self.log(f"terminal status {status.get('status')!r} without a started episode; not recorded")
            self.unassigned += 1
            return
        seg = open_segs[-1]
        steps = int(status.get("steps", 0))
        seg.end_ns = seg.start_ns + steps * CONTROL_DT_NS
        seg.terminal = {k: v for k, v in status.items() if k != "trajectory"}
        seg.close_at = now + self.grace_s
        self._write(seg, STATUS_TOPIC, seg.end_ns, cdr)
        self._place_pending()  # messages held past the running episode's latest step: its own, or the next one's

    # -- time ------------------------------------------------------------------------------
    def tick(self) -> None:
        """Call a few times a second: finalize episodes past their grace, flush, drop stale pending messages."""
        now = self.clock()
        for seg in [s for s in self.segments if s.close_at is not None and now >= s.close_at]:
            self._finish(seg)
        for seg in self.segments:
            seg.writer.flush_if_due()
        hold_s = max(self.grace_s, PENDING_HOLD_S)
        stale = [p for p in self.pending if now - p[0] > hold_s]
        if stale:
            self.unassigned += len(stale)
            self.pending = [p for p in self.pending if now - p[0] <= hold_s]

    def _finish(self, seg: Segment) -> None:
        self.segments.remove(seg)
        if seg.terminal is None:
            seg.terminal = _interrupted(seg)

        def close():
            try:
                if self.metadata_fn is not None and seg.started:
                    seg.writer.set_metadata(self.metadata_fn(seg))
            except Exception as exc:  # the bag is still finalized, with what is known
                self.log(f"{seg.writer.path}: episode metadata failed: {exc}")
                seg.writer.set_metadata(basic_metadata(seg, self.setting, self.seed))
            seg.writer.close()
            self.bags.append(seg.writer.path)
            self.log(f"finalized {seg.writer.path} ({seg.terminal.get('status')}, {seg.writer.message_count} messages)")

        self.finalize(close)

    def close(self) -> None:
        """Finalize every bag now (SIGINT/SIGTERM, end of the run); unfinished episodes are 'interrupted'."""
        self.unassigned += len(self.pending)
        self.pending = []
        for seg in list(self.segments):
            self._finish(seg)


def _scene_name(scene_dir: str) -> str:
    from airplay.scene.spec import parse_scene_yaml

    try:
        return parse_scene_yaml(scene_dir).name
    except Exception:  # SceneError: name the bag after the folder
        return Path(scene_dir).name or "scene"


_SCENE_TASKS: dict = {}


def ignore_interrupts() -> None:
    """Initializer of the metadata worker: Ctrl-C to the process group is the recorder's to handle,
    and the worker ends with the recorder (also when the recorder is SIGKILLed)."""
    import signal

    from airplay.parent_watch import exit_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()


def scene_task_metadata(scene_dir: str, index: int, episodes: int, seed: int, setting: str) -> dict:
    """``split``, ``task`` (Task.to_dict()) and ``fps`` of the scene's task ``index``, derived as the sim
    derives it (``sample_tasks(scene, grid, episodes, seed, setting)[index]``); the scene's tasks are
    cached. The recorder node runs this in a worker process: loading a scene holds the GIL for
    seconds, and a recorder that stops reading loses camera frames (reliable KEEP_LAST 10)."""
    key = (scene_dir, episodes, seed, setting)
    if key not in _SCENE_TASKS:
        from airplay.world import World
        from airplay.tasks.sampler import sample_tasks

        world = World.load(scene_dir)
        tasks = sample_tasks(world.scene, world.grid, episodes, seed, setting, world.protocol)
        _SCENE_TASKS.clear()
        _SCENE_TASKS[key] = (world.scene.spec.split, round(1.0 / world.vehicle.control_dt_s), tasks)
    split, fps, tasks = _SCENE_TASKS[key]
    return {"split": split, "task": tasks[int(index)].to_dict(), "fps": fps} if index is not None else {}


def started_task_metadata(started: dict) -> dict | None:
    """``split``, ``task`` (Task.to_dict(), without the path) and ``fps`` from a "started" status
    that carries its task (the evaluator's episode command, echoed by the sim): only scene.yaml
    and the vehicle parameters are read. None where the status names no task (a vehicle's bridge)."""
    task = started.get("task")
    if not isinstance(task, dict):
        return None
    from airplay.scene.spec import parse_scene_yaml
    from airplay.sim.dynamics import load_vehicle_params

    return {"split": parse_scene_yaml(started["scene_dir"]).split,
            "task": {k: v for k, v in task.items() if k != "path_m"},
            "fps": round(1.0 / load_vehicle_params().control_dt_s)}


def basic_metadata(seg: Segment, setting: str, seed: int) -> dict:
    """The /episode/metadata fields known without loading the scene (``task`` needs the task list)."""
    import airplay

    t = seg.terminal or {}
    status = str(t.get("status", EpisodeStatus.INTERRUPTED.value))
    return {"scene": seg.started.get("scene"), "scene_dir": seg.started.get("scene_dir"), "split": None,
            "setting": setting, "seed": seed, "index": seg.started.get("index"), "task_id": seg.started.get("task_id"),
            "task": None, "status": status, "success": status == EpisodeStatus.SUCCESS,
            "steps": int(t.get("steps", 0)),
            "fps": round(1e9 / CONTROL_DT_NS), "source": "recorder", "airplay_version": airplay.__version__}
