"""``viewer``: the running graph streamed to rerun (``viewer:=true``; :mod:`airplay.view.live`).

Subscribes to ``odom``, ``camera/image_raw`` and ``camera/depth/image_raw`` (with
``render_images:=true``), ``cmd_vel``, ``goal_image``, ``episode/status`` and, last (its sign
that it is ready: the evaluator's start-up waits for it with ``viewer:=true``),
``episode/progress``; it publishes nothing, so the episodes are the same with or without it.
What it logs, at which entity paths and times, is :class:`airplay.view.live.LiveView`'s: the
same entities as ``airplay view`` writes for a bag, the same as ``airplay eval --view`` logs in
process. Each episode's scene (collision mesh and splat points) and goal come from its "started"
status (scene_dir, task); its path at the end from the terminal status's trajectory.

Which episode a message belongs to is decided by its stamp (the episodes' first stamps; see
:mod:`airplay.world.lockstep`): odoms go through an :class:`airplay.world.lockstep.EpisodeGate` (its
rule without lockstep: the viewer may lag behind the graph), so that those of an episode whose start
has not arrived are held until it does; late ones of an earlier episode are still drawn, at their
own times. A camera image is logged once the odom of its stamp has been, a command once the
odom that follows it has (they may come first: other topics, other publishers), and no command
for an episode's last observation (nothing flies it). Repeats (the sim re-publishes its latest
odom while it waits, the renderer and the policy answer it again) are logged once.

On a vehicle (``vehicle:=true``, the fly graph's ``viewer:=true``) the episode is the bridge's
flight: its "started" status names the scene and task index (the task, hence the goal, is derived
as the policy node derives it, from the episode parameters), its "landed" status ends it, and the
odoms, camera images and commands are on the wall clock. It also logs ``vehicle/phase`` (each
change) and ``supervisor/interventions`` (as warnings) to ``status``, at the time they come.

Sinks (parameters): ``out`` an .rrd file, ``connect`` a rerun gRPC server (e.g. the one
``airplay eval --runtime ros --view`` starts); with neither, the node starts rerun's web viewer on
``127.0.0.1:web_port`` (gRPC on ``127.0.0.1:grpc_port``), which ends with the node.
The .rrd is complete once the node has stopped (SIGINT/SIGTERM, or the graph's end).
"""

from __future__ import annotations

import sys

from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.frames import heading_of_state
from airplay.node_schemas import VIEWER
from airplay.nodes.common import (CONTROL_DT_NS, EPISODE_STATUS, RELIABLE, ParameterError, command_from_twist,
                                  depth_from_image, episode_parameters, first_scene, json_payload, ns_from_stamp,
                                  rgb_from_image, run_node, state_from_odometry)
from airplay.nodes.params import declare_schema

MAX_PENDING = 1000
"""Images and commands kept until the odom of their stamp has come (the oldest logged beyond)."""


class ViewerNode(Node):
    def __init__(self) -> None:
        from airplay.view.live import LiveView, LiveViewError, RerunServer
        from airplay.world.lockstep import EpisodeGate

        super().__init__("viewer")
        values = declare_schema(self, VIEWER)
        p = episode_parameters(values)
        self.lockstep, self.render_images, self.vehicle = values["lockstep"], values["render_images"], values["vehicle"]
        self.params = p
        self.tasks = None  # on a vehicle: the tasks of the flight's scene (airplay.nodes.common.EpisodeTasks)
        self.phase = None
        # By stamp, not by lockstep's one-observation-at-a-time rule: the viewer gates nothing, it may
        # fall behind the graph and take several observations of an episode before the episode's start.
        self.gate = EpisodeGate(CONTROL_DT_NS, lockstep=False)
        self.server = None
        connect = values["connect"]
        try:
            if not values["out"] and not connect:
                self.server = RerunServer(values["web_port"], values["grpc_port"])
                connect = self.server.url
            self.live = LiveView(out=values["out"] or None, connect=connect or None, images=self.render_images,
                                 points=values["points"],
                                 name="airplay fly (ROS graph)" if self.vehicle else "airplay sim_eval (ROS graph)")
        except LiveViewError as exc:
            if self.server is not None:
                self.server.stop()
            raise ParameterError(f"viewer: {exc}") from None
        self.scenes: dict[str, object] = {}  # scene folder -> loaded Scene
        self.pending: list[tuple[int, object]] = []  # (stamp, callable) waiting for the odom of their stamp
        self.newest = -1  # the newest odom stamp logged
        self.final_stamps: set[int] = set()  # each ended episode's last observation
        self.spans: list[tuple[int, int]] = []  # (first, last stamp) of each ended episode
        self.logged: dict[str, set[int]] = {"odom": set(), "rgb": set(), "depth": set(), "cmd_vel": set()}
        self.counts = {"odom": 0, "rgb": 0, "depth": 0, "cmd_vel": 0, "episodes": 0}
        scene = first_scene(p["scenes"])
        if scene is not None:
            self._scene(scene)  # the first scene is drawn before the run starts
        # episode/status first: where both have a message waiting, the executor takes the status first
        # (an episode's end comes before the next episode's first odom)
        self.create_subscription(String, "episode/status", self.on_status, EPISODE_STATUS)
        self.create_subscription(Odometry, "odom", self.on_odom, QoSProfile(
            depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE))
        if self.render_images:
            # reliable in lockstep (the renderer's LOCKSTEP_STREAM), best effort otherwise (matches any publisher)
            qos = QoSProfile(depth=20, history=HistoryPolicy.KEEP_LAST,
                             reliability=ReliabilityPolicy.RELIABLE if self.lockstep else ReliabilityPolicy.BEST_EFFORT)
            self.create_subscription(Image, "camera/image_raw", lambda m: self.on_image(m, "rgb"), qos)
            self.create_subscription(Image, "camera/depth/image_raw", lambda m: self.on_image(m, "depth"), qos)
            self.create_subscription(Image, "goal_image", self.on_goal_image, RELIABLE)
        self.create_subscription(TwistStamped, "cmd_vel", self.on_cmd_vel, QoSProfile(
            depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE))
        if self.vehicle:
            self.create_subscription(String, "vehicle/phase", self.on_phase, RELIABLE)
            self.create_subscription(String, "supervisor/interventions", self.on_intervention, RELIABLE)
        self.create_subscription(String, "episode/progress", lambda m: None, RELIABLE)  # last: ready
        where = ([f"web viewer {self.server.web_url}"] if self.server else
                 [f"rerun at {connect}"] if connect else []) + ([f"recording {values['out']}"] if values["out"] else [])
        self.get_logger().info("live view: " + "; ".join(where))

    def _scene(self, scene_dir: str):
        """The Scene of ``scene_dir``, loaded and drawn once (None where it fails: logged)."""
        from airplay.scene.scene import Scene

        if scene_dir not in self.scenes:
            try:
                scene = Scene.load(scene_dir)
                self.live.show_scene(scene.spec.name, scene)
            except Exception as exc:  # a bad scene folder must not end the view
                self.get_logger().error(f"cannot draw {scene_dir}: {exc}")
                scene = None
            self.scenes[scene_dir] = scene
        return self.scenes[scene_dir]

    # -- episodes --------------------------------------------------------------------------
    def on_status(self, msg: String) -> None:
        from airplay.tasks.sampler import Task

        try:
            status = json_payload(msg)
            started = status.get("status") == "started"
            task = Task.from_dict(status["task"]) if started and "task" in status else None
            released = self.gate.apply(status)
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/status {msg.data[:200]!r}: {exc}")
            return
        if not started:
            if self.gate.end_ns is not None and status.get("episode") == self.gate.episode:
                self.final_stamps.add(self.gate.end_ns)
                self.spans.append((self.gate.start_ns, self.gate.end_ns))
                self.live.end_episode(self.gate.end_ns, str(status.get("status")), status.get("trajectory"), status)
            return
        if released is None:
            return  # a repeated start
        scene_dir = str(status.get("scene_dir", ""))
        if task is None and self.vehicle and scene_dir and "index" in status:
            task = self._vehicle_task(scene_dir, status["index"])
        scene = self._scene(scene_dir) if scene_dir else None
        name = scene.spec.name if scene is not None else (scene_dir or "scene")
        camera = scene.spec.camera if scene is not None else None
        self.counts["episodes"] += 1
        self.live.start_episode(self.gate.start_ns, int(status.get("episode", 0)), name,
                                task.task_id if task is not None else str(status.get("index", "")),
                                task.goal_position if task is not None else None, None,
                                camera.intrinsics if camera is not None else None,
                                camera.mount if camera is not None else None,
                                status)
        for _, odom in released:
            self.on_odom(odom)

    def _vehicle_task(self, scene_dir: str, index):
        """The task (scene_dir, index) of a vehicle's flight, as the policy node derives it (None where it
        cannot: logged)."""
        from airplay.nodes.common import EpisodeTasks

        try:
            if self.tasks is None:
                self.tasks = EpisodeTasks.from_parameters(self.params)
            return self.tasks.task(scene_dir, index)
        except Exception as exc:  # the view goes on without the goal
            self.get_logger().error(f"no task {index} in {scene_dir}: {exc}")
            return None

    def _now_ns(self) -> int:
        """The time of a message without a stamp: the graph's clock (a vehicle's: the wall clock, as its odoms)."""
        return max(self.get_clock().now().nanoseconds, self.newest)

    def on_phase(self, msg: String) -> None:
        if msg.data != self.phase:  # the bridge repeats its phase twice a second
            self.phase = msg.data
            self.live.note(self._now_ns(), {"phase": msg.data})

    def on_intervention(self, msg: String) -> None:
        try:
            report = json_payload(msg)
        except ValueError:
            report = {"intervention": msg.data[:500]}
        self.live.note(self._now_ns(), {"intervention": report}, warn=True)

    def _once(self, kind: str, stamp: int) -> bool:
        """True the first time a ``kind`` message stamped ``stamp`` comes (then it is logged)."""
        if stamp in self.logged[kind]:
            return False
        self.logged[kind].add(stamp)
        self.counts[kind] += 1
        return True

    def _later(self, stamp: int, log) -> None:
        """Run ``log`` now when the odom of ``stamp`` has been logged, else once it has (module docstring)."""
        if stamp <= self.newest:
            log()
            return
        self.pending.append((stamp, log))
        if len(self.pending) > MAX_PENDING:
            self.pending.sort(key=lambda p: p[0])
            _, oldest = self.pending.pop(0)
            oldest()

    def on_odom(self, msg: Odometry) -> None:
        from airplay.world.lockstep import CURRENT, HELD

        stamp = ns_from_stamp(msg.header.stamp)
        verdict = self.gate.classify(stamp)
        if verdict == HELD:
            self.gate.hold(stamp, msg)
            return
        if verdict == CURRENT:
            self.gate.handled(stamp)
        if not self._once("odom", stamp):
            return  # a repeat
        state = state_from_odometry(msg)
        self.live.observe(stamp, state[0:3], heading_of_state(state))
        if stamp > self.newest:
            self.newest = stamp
            ready = [p for p in self.pending if p[0] <= stamp]
            if ready:
                self.pending = [p for p in self.pending if p[0] > stamp]
                for _, log in sorted(ready, key=lambda p: p[0]):
                    log()

    def on_image(self, msg: Image, kind: str) -> None:
        stamp = ns_from_stamp(msg.header.stamp)

        def log():
            try:
                image = rgb_from_image(msg) if kind == "rgb" else depth_from_image(msg)
            except ValueError as exc:
                self.get_logger().error(f"camera {kind}: {exc}", once=True)
                return
            if self._once(kind, stamp):
                self.live.camera_images(stamp, **{kind: image})

        self._later(stamp, log)

    def on_goal_image(self, msg: Image) -> None:
        stamp = ns_from_stamp(msg.header.stamp)
        try:
            image = rgb_from_image(msg)
        except ValueError as exc:
            self.get_logger().error(f"goal_image: {exc}", once=True)
            return
        self._later(stamp, lambda: self.live.goal_image(stamp, image))

    def on_cmd_vel(self, msg: TwistStamped) -> None:
        """A command is drawn once the next observation (its step's result) has come, and not for an
        episode's last observation (the policy may answer it before it hears of the end; nothing flies it)."""
        stamp = ns_from_stamp(msg.header.stamp)

        def log():
            if stamp not in self.final_stamps and self._once("cmd_vel", stamp):
                self.live.command(stamp, command_from_twist(msg))

        self._later(stamp + CONTROL_DT_NS, log)

    def destroy_node(self) -> None:
        self.live.close()  # the .rrd is complete
        if self.server is not None:
            self.server.stop()
        odoms = self.logged["odom"]
        missed = sum((b - a) // CONTROL_DT_NS + 1 - sum(a <= t <= b for t in odoms) for a, b in self.spans)
        # print, not the logger: at shutdown rosout's publisher may be gone already
        print("viewer: logged " + ", ".join(f"{v} {k}" for k, v in self.counts.items())
              + (f"; {len(self.pending)} without their odom" if self.pending else "")
              + (f"; missed {missed} odom(s) of ended episodes (the viewer fell behind the graph)" if missed else ""),
              file=sys.stderr, flush=True)
        super().destroy_node()


def main(args=None) -> int:
    return run_node(ViewerNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
