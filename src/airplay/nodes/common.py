"""What the airplay nodes share: QoS profiles, message <-> numpy conversions, JSON helpers.

No node logic here; every function is a plain conversion (DESIGN.md section 1: ``nodes/``
holds no logic a test of the core would need).

Conventions on the wire (DESIGN.md sections 3 and 4):

* ``odom`` (nav_msgs/Odometry, REP-105): header.frame_id ``map``, child_frame_id ``base_link``;
  ``pose.pose`` = position (m, map) + orientation of base_link in map (x, y, z, w); the twist
  is in ``base_link`` (FLU): ``twist.twist.linear`` = velocity (m/s) rotated into the body
  frame by the full attitude, ``twist.twist.angular`` = body rates (rad/s). Reading it back
  into the 13-vector state (map velocity) rotates the velocity with
  :func:`airplay.frames.body_to_map_xyzw`: exact to a few ulp, not bit for bit.
* ``sim/state`` (nav_msgs/Odometry layout, published by the sim in lockstep): the simulator's exact
  13-vector state of :meth:`airplay.world.env.AirPlayEnv.state_vector` in float64, with the
  stamp of the odom it accompanies: pose as in ``odom``, ``twist.twist.linear`` = velocity in
  MAP (m/s; not REP-105), ``twist.twist.angular`` = body rates (rad/s). The policy node
  observes it in lockstep so that its observation is the in-process one bit for bit (lockstep
  equality of the two runtimes); every other reader, and the policy without lockstep, uses ``odom``.
* ``cmd_vel`` (geometry_msgs/TwistStamped): frame_id ``base_stabilized`` (the yaw-only heading
  frame: x forward along the heading, y left, z up, no roll or pitch); linear.x/y/z = vx, vy,
  vz (m/s), angular.z = yaw rate (rad/s); the (4,) command of AirPlayEnv. Readers take the
  values as heading-frame values whatever the frame_id.
* Stamps are sim time: integer nanoseconds, ``steps * control_dt`` (see the sim node).
"""

from __future__ import annotations

import json

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String

from airplay.frames import BASE_LINK, BASE_STABILIZED, MAP, body_to_map_xyzw, map_to_body_xyzw
from airplay.threads import set_compute_threads

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                      durability=DurabilityPolicy.VOLATILE)
"""Publishers of commands and odom, and episode control: reliable, depth 10."""

LATEST_ONLY = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.VOLATILE)
"""A real-time consumer that only wants the freshest message (without lockstep: the renderer's
and the policy's ``odom``, the bridge's ``cmd_vel``): reliable KEEP_LAST 1, so a consumer slower than the stream skips the backlog
instead of working through it ever later (a 10-deep queue of 50 Hz odoms is 0.2 s of lag
per frame behind, enough under load for the bridge's 0.5 s stale-command hold). No deadline QoS:
a subscription that requests a deadline does not match a publisher offering the default (none),
so a third party's ``cmd_vel`` or ``odom`` publisher would silently never connect; a stale stream
is timed by its consumer instead (the bridge's supervisor: STALE_COMMAND_HOLD, an intervention
published with its reason)."""

SENSOR_DATA = qos_profile_sensor_data
"""Camera streams without lockstep (best effort, depth 5), as on a vehicle."""

LATEST_SENSOR = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST,
                           durability=DurabilityPolicy.VOLATILE)
"""A real-time consumer of camera streams (the policy without lockstep): best effort, the
freshest frame only, so that a policy slower than the camera acts on the newest view rather
than a queue of older ones."""

LOCKSTEP_DEPTH = 100
"""History of the streams a recorder keeps in lockstep (2 s of 50 Hz control steps). The graph's
pace is the policy's, not the recorder's: a reliable writer repairs a sample for a slow reader
only while the sample is in its history. At depth 10 a recorder starved for more than 0.2 s of
graph time lost 6 consecutive camera frames (a fresh-clone ``make test`` beside a 2-worker
``airplay eval`` and a busy loop)."""

LOCKSTEP_STREAM = QoSProfile(depth=LOCKSTEP_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                             history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
"""The streams that step the graph in lockstep (camera images and info, ``odom``, ``cmd_vel``):
reliable KEEP_LAST :data:`LOCKSTEP_DEPTH`, so a recorder that falls behind the graph still gets
every step. Every frame gates a control step, so a dropped frame costs a bounded-wait retry;
best effort drops large frames under load on loopback (fragmented UDP), reliable does not. A
best-effort subscriber still matches this publisher."""

EPISODE_STATUS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                            durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""``episode/status``: reliable and transient-local (the last 10 kept for late joiners), on the
publisher and on every airplay subscriber. A subscription that DDS matches only after a status
was sent (discovery is pairwise and not instantaneous) still receives it, so no node waits for
ever on an episode start it never heard. Volatile subscribers (``ros2 topic echo``) match too."""

def one_compute_thread(torch_too: bool = False) -> None:
    """Real time: numba's (and torch's) parallel kernels on one thread. The nodes of a real-time
    loop (renderer, policy, bridge, the vehicle) share the machine's cores; a 64x64 frame or a
    small network gains nothing from a second thread, and pool threads that spin waiting for work
    take CPU time the other nodes of the loop need (with 2 threads each, the renderer and a
    CNN-BC policy used ~65 % and ~70 % of a core on the rehearsal vehicle, at 2 cores;
    :mod:`airplay.threads`)."""
    set_compute_threads(1, torch_too)


CONTROL_DT_NS = 20_000_000  # 50 Hz; checked against the vehicle's control_dt_s by the sim


# -- time ------------------------------------------------------------------------------------
def stamp_from_ns(ns: int) -> Time:
    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def ns_from_stamp(stamp: Time) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# -- odometry --------------------------------------------------------------------------------
SIM_STATE_TOPIC = "sim/state"
"""The sim's exact state (module docstring): what the policy node observes in the sim."""


def _odometry(s: np.ndarray, linear, stamp_ns: int) -> Odometry:
    msg = Odometry()
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = MAP
    msg.child_frame_id = BASE_LINK
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = float(s[0]), float(s[1]), float(s[2])
    q.x, q.y, q.z, q.w = float(s[3]), float(s[4]), float(s[5]), float(s[6])
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    v.x, v.y, v.z = (float(c) for c in linear)
    w.x, w.y, w.z = float(s[10]), float(s[11]), float(s[12])
    return msg


def _values(msg: Odometry) -> np.ndarray:
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z, w.x, w.y, w.z], np.float64)


def odometry_from_state(state: np.ndarray, stamp_ns: int) -> Odometry:
    """REP-105 ``odom`` from a 13-vector (position m map, quaternion xyzw of base_link in map,
    velocity m/s MAP, body rates rad/s): the twist in ``base_link``, its linear part the velocity
    rotated by :func:`airplay.frames.map_to_body_xyzw`; the same values as
    :func:`airplay.data.messages.odometry_cdr`."""
    s = np.asarray(state, dtype=np.float64).reshape(13)
    return _odometry(s, map_to_body_xyzw(s[3:7], s[7:10]), stamp_ns)


def state_from_odometry(msg: Odometry) -> np.ndarray:
    """(13,) float64 state (velocity in MAP) from a REP-105 ``odom`` (:func:`odometry_from_state`):
    the twist's linear part rotated into map by :func:`airplay.frames.body_to_map_xyzw` (a few
    ulp from the velocity that was sent); pose and body rates as they are."""
    s = _values(msg)
    s[7:10] = body_to_map_xyzw(s[3:7], s[7:10])
    return s


def sim_state_from_state(state: np.ndarray, stamp_ns: int) -> Odometry:
    """The ``sim/state`` message of a 13-vector (module docstring): every value float64 exact,
    velocity in MAP. Give it the float64 state (the vehicle's arrays)."""
    s = np.asarray(state, dtype=np.float64).reshape(13)
    return _odometry(s, s[7:10], stamp_ns)


def state_from_sim_state(msg: Odometry) -> np.ndarray:
    """(13,) float64 state from a ``sim/state`` message, bit for bit (velocity in MAP)."""
    return _values(msg)


def transform_from_odometry(msg: Odometry):
    """geometry_msgs/TransformStamped map -> base_link with the odometry's stamp and pose (for /tf)."""
    from geometry_msgs.msg import TransformStamped

    t = TransformStamped()
    t.header = msg.header
    t.child_frame_id = msg.child_frame_id
    p = msg.pose.pose.position
    t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = p.x, p.y, p.z
    t.transform.rotation = msg.pose.pose.orientation
    return t


# -- commands --------------------------------------------------------------------------------
def twist_from_command(cmd: np.ndarray, stamp_ns: int, frame_id: str = BASE_STABILIZED) -> TwistStamped:
    """TwistStamped from a (4,) [vx, vy, vz (m/s), yaw_rate (rad/s)] heading-frame command, stamped
    with the heading frame's name ``base_stabilized``."""
    c = np.asarray(cmd, dtype=np.float64).reshape(4)
    msg = TwistStamped()
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = float(c[0]), float(c[1]), float(c[2])
    msg.twist.angular.z = float(c[3])
    return msg


def command_from_twist(msg: TwistStamped) -> np.ndarray:
    """(4,) float64 [vx, vy, vz, yaw_rate] from a TwistStamped (exact for float32 commands)."""
    t = msg.twist
    return np.array([t.linear.x, t.linear.y, t.linear.z, t.angular.z], np.float64)


# -- images ----------------------------------------------------------------------------------
def image_from_rgb(rgb: np.ndarray, stamp_ns: int, frame_id: str = "camera_optical") -> Image:
    a = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = a.shape[:2]
    msg = Image(height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.data = a.tobytes()
    return msg


def image_from_depth(depth: np.ndarray, stamp_ns: int, frame_id: str = "camera_optical") -> Image:
    a = np.ascontiguousarray(np.asarray(depth, dtype=np.float32).reshape(depth.shape[0], depth.shape[1]))
    h, w = a.shape
    msg = Image(height=h, width=w, encoding="32FC1", is_bigendian=0, step=w * 4)
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.data = a.astype("<f4").tobytes()
    return msg


def rgb_from_image(msg: Image) -> np.ndarray:
    if msg.encoding != "rgb8":
        raise ValueError(f"expected an rgb8 image, got {msg.encoding!r}")
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3).copy()


def depth_from_image(msg: Image) -> np.ndarray:
    """(H, W, 1) float32 metres from a 32FC1 image."""
    if msg.encoding != "32FC1":
        raise ValueError(f"expected a 32FC1 image, got {msg.encoding!r}")
    dtype = ">f4" if msg.is_bigendian else "<f4"
    return np.frombuffer(bytes(msg.data), dtype).astype(np.float32).reshape(msg.height, msg.width, 1)


def camera_info(intrinsics, stamp_ns: int, frame_id: str = "camera_optical") -> CameraInfo:
    """CameraInfo of a pinhole camera (``.K`` 3x3, ``.width``, ``.height``), no distortion."""
    K = np.asarray(intrinsics.K, np.float64).reshape(3, 3)
    msg = CameraInfo(width=int(intrinsics.width), height=int(intrinsics.height), distortion_model="plumb_bob")
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.header.frame_id = frame_id
    msg.k = [float(v) for v in K.ravel()]
    msg.d = [0.0] * 5
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    P = np.zeros((3, 4))
    P[:, :3] = K
    msg.p = [float(v) for v in P.ravel()]
    return msg


# -- JSON on std_msgs/String -----------------------------------------------------------------
def json_message(payload: dict) -> String:
    return String(data=json.dumps(payload))


def json_payload(msg: String) -> dict:
    data = json.loads(msg.data)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {msg.data[:80]!r}")
    return data


# -- parameters ------------------------------------------------------------------------------
class ParameterError(ValueError):
    """A ROS parameter with a value the node cannot use; the message names the parameter."""


def parse_wind(text: str):
    """The ``wind`` parameter as a :class:`airplay.sim.disturbance.Disturbance` (None: empty);
    ParameterError naming the parameter."""
    from airplay.sim.disturbance import Disturbance, DisturbanceError

    try:
        return Disturbance.parse(text)
    except DisturbanceError as exc:
        raise ParameterError(f"parameter 'wind': {exc}") from None


def episode_parameters(values: dict) -> dict:
    """The episode parameters of a node's declared values (scenes, episodes, seed, setting, and
    vln_config, vln_episodes: what decides the episodes; airplay.node_schemas.EPISODE), with the
    VLN episode options checked in the vln setting (their files exist; None where unset)."""
    from airplay.node_schemas import EPISODE

    p = {name: values[name] for name in EPISODE.names()}
    if p["setting"] == "vln":
        from airplay.vln.options import EPISODE_OPTIONS, VLNOptionError, parse_vln_options

        try:  # only the episode options: the backend is the policy node's business
            checked = parse_vln_options({**{k: p[k] for k in EPISODE_OPTIONS}, "vln_backend": "openai",
                                         "endpoint": "http://unused"})
        except VLNOptionError as exc:
            raise ParameterError(str(exc)) from None
        p.update({name: checked[name] for name in EPISODE_OPTIONS})
    else:
        p.update(vln_config=None, vln_episodes=None)
    return p


def scene_dirs(scenes: str) -> list:
    """Scene folders of the ``scenes`` parameter (comma-separated), as ``airplay eval`` finds them."""
    from airplay.scene.scene import scene_dirs

    try:
        return scene_dirs([s.strip() for s in scenes.split(",") if s.strip()])
    except Exception as exc:  # SceneError and friends
        raise ParameterError(f"parameter 'scenes': {exc}") from None


def first_scene(scenes: str) -> str | None:
    """The first scene folder of the ``scenes`` parameter, or None where it names none (a
    vehicle run that gets its scene later): the scene a node warms up on before it reports ready."""
    try:
        dirs = scene_dirs(scenes)
    except ParameterError:
        return None
    return str(dirs[0]) if dirs else None


class WorldCache:
    """The :class:`~airplay.world.World` of the latest scene folder asked for (one at a time).

    A World loads its parts on first use, so each node reads only what it touches: the sim the
    collision model, the renderer the splat and mesh, the expert its planning grid."""

    def __init__(self) -> None:
        self.scene_dir: str | None = None
        self.world = None

    def get(self, scene_dir: str):
        if scene_dir != self.scene_dir:
            from airplay.world import World

            self.world, self.scene_dir = World.load(scene_dir), scene_dir
        return self.world


class GateLog:
    """Logs each kind of out-of-order frame once (the first, with the rule that handles it);
    :meth:`summary` gives the counts of an :class:`~airplay.world.lockstep.EpisodeGate`."""

    def __init__(self, node, what: str) -> None:
        self.node, self.what, self.logged = node, what, set()

    def note(self, verdict: str, stamp: int) -> None:
        from airplay.world.lockstep import VERDICT_REASONS

        if verdict in VERDICT_REASONS and verdict not in self.logged:
            self.logged.add(verdict)
            self.node.get_logger().info(f"{self.what} at {stamp * 1e-9:.2f} s sim time: {VERDICT_REASONS[verdict]} "
                                        "(counted; logged once)")

    @staticmethod
    def summary(gate) -> str:
        counts = {k: v for k, v in gate.counts.items() if v}
        return ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"


class EpisodeTasks:
    """World and task list per scene folder, loaded once (the SDF is disk-cached).

    Setting vln: the tasks are the VLN episodes' (:func:`airplay.vln.evaluate.vln_scene`, as the
    in-process VLN runner makes them, from ``vln_config`` and ``vln_episodes``); ``vln`` is then
    that :class:`~airplay.vln.evaluate.VLNScene` (episodes with instructions, radius, actions).
    """

    def __init__(self, episodes: int, seed: int, setting: str, vln_config: str | None = None,
                 vln_episodes: str | None = None) -> None:
        self.episodes, self.seed, self.setting = episodes, seed, setting
        self.vln_config, self.vln_episodes = vln_config, vln_episodes
        self.scene_dir = None
        self.world = None
        self.tasks = None
        self.vln = None
        self._vln_options = None

    @classmethod
    def from_parameters(cls, p: dict) -> "EpisodeTasks":
        """From :func:`episode_parameters`' dict."""
        return cls(p["episodes"], p["seed"], p["setting"], p.get("vln_config"), p.get("vln_episodes"))

    def load(self, scene_dir: str):
        """(world, tasks) for ``scene_dir``; reloads only when the scene changes."""
        if scene_dir != self.scene_dir:
            from airplay.world import World
            from airplay.tasks.sampler import sample_tasks

            self.world = World.load(scene_dir)
            if self.setting == "vln":
                from airplay.vln.evaluate import vln_scene
                from airplay.vln.options import load_episode_options

                if self._vln_options is None:
                    self._vln_options = load_episode_options(self.vln_config, self.vln_episodes)
                vcfg, imported = self._vln_options
                self.vln = vln_scene(self.world, self.episodes, self.seed, vcfg, imported)
                self.tasks = self.vln.tasks
            else:
                self.tasks = sample_tasks(self.world.scene, self.world.grid, self.episodes, self.seed, self.setting,
                                          self.world.protocol)
            self.scene_dir = scene_dir
        return self.world, self.tasks

    def task(self, scene_dir: str, index):
        """Task ``index`` of ``scene_dir``'s list, as sim_eval samples it (a vehicle's flight names only
        the scene and the index)."""
        return self.load(scene_dir)[1][int(index)]


def run_node(make_node, args=None) -> int:
    """Init rclpy, build the node, spin until it stops; return the process's exit code.

    It stops when the node shuts its context down (then ``node.exit_code``, default 0, is the
    code), or on the first SIGINT or SIGTERM (:mod:`airplay.nodes.shutdown`: the running
    callback finishes, or is ended 2 s later; then ``node.exit_code``, default 0). Then the node
    is destroyed and the context shut down, with SIGINT and SIGTERM ignored: a launcher's second
    signal prints no KeyboardInterrupt traceback and no callback publishes on a dead context.
    A :class:`ParameterError` while building the node prints ``error: ...`` and returns 2.
    Other exceptions propagate (a traceback and exit code 1).
    """
    import gc
    import sys

    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    from airplay.nodes.executor import ExecutorChoiceError, executor_from_environment
    from airplay.nodes.shutdown import StopRequested, StopSignals

    stop = StopSignals()
    stop.install()  # before rclpy.init, which installs no handlers of its own
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    code = 0
    try:
        with stop.abortable():
            executor = executor_from_environment()
            node = make_node()
            # What the node built and warmed up (scene, policy, compiled kernels) lives as long as
            # the process: out of the garbage collector's passes, which would otherwise walk it
            # (0.6-1.4 s for a node's heap under load) in the middle of episodes.
            gc.freeze()
            _spin_until_stopped(node, executor, stop)
        code = getattr(node, "exit_code", 0)
    except (ParameterError, ExecutorChoiceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except (StopRequested, ExternalShutdownException):
        code = getattr(node, "exit_code", 0) if node is not None else 0
    finally:
        stop.ignore_from_now()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        # The interpreter's exit runs full garbage collections over everything still alive: with
        # a node's heap (a World, torch) that took 0.6-3 s per pass on the 2-core machine under
        # load, so nodes outlived launch's 5 s to SIGTERM. Frozen objects are not collected again;
        # they are freed by reference counting as modules are torn down (cycles by the OS).
        gc.freeze()
    return code


SPIN_POLL_S = 0.1
"""run_node's spin loop looks at the stop request at least this often (seconds of wall time)."""


def _spin_until_stopped(node, executor, stop) -> None:
    """Spin ``node`` until a stop signal came or its context was shut down (rclpy.spin's loop,
    with the stop request checked between callbacks)."""
    executor.add_node(node)
    try:
        while not stop.requested and executor.context.ok():
            executor.spin_once(timeout_sec=SPIN_POLL_S)
    finally:
        executor.remove_node(node)
