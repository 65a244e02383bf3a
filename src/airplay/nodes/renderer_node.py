"""``renderer``: RGB + depth for ``odom`` poses of a live episode, stamped with the odom's stamp.

In lockstep it renders every odom (each is a control step); in real time (a vehicle, the
``fly`` graph) the freshest one only, so that it never falls behind the stream
(:data:`airplay.nodes.common.LATEST_ONLY`).

Same images as :class:`airplay.world.env.AirPlayEnv`: the scene's camera on its mount, the
gimbal-stabilised pose (position + yaw), the scene's background, depth from the collision
mesh z-buffer clipped at ``MAX_DEPTH_M``. It loads the scene's splat, mesh and camera only (no
collision model, no planning grid). With ``render_images:=false`` it still publishes (zero)
images, so that the lockstep graph runs without rendering cost.

The scene of an episode comes from its ``episode/status`` "started" message (scene_dir, the
task, the first stamp). Which episode an odom belongs to is decided by its stamp
(:class:`airplay.world.lockstep.EpisodeGate`): odoms of an episode whose start has not arrived
yet are held until it does (DDS may deliver them first), odoms of an ended episode and stale
ones are dropped, and a repeated odom (the sim re-publishes while it waits) is answered with
the images already rendered for it; each kind is counted and logged once. For imagegoal it
publishes ``goal_image`` (the camera image at the task's goal pose) stamped with the episode's
first stamp, and again with a repeated first odom.

Before it subscribes to ``episode/command`` (the evaluator's sign that it is ready) it renders
one view of the first scene (:func:`airplay.world.warmup.warm_camera`), so that no kernel
compiles inside an episode; a command for a new scene does the same ahead of its episode.

Publishes ``camera/image_raw`` (rgb8), ``camera/depth/image_raw`` (32FC1, m) and
``camera/camera_info``; QoS: see :data:`airplay.nodes.common.LOCKSTEP_STREAM`.

A ground robot beside the UAV (AeroGround, :mod:`airplay.aeroground`): for each
``ground/pose`` (geometry_msgs/PoseStamped, frame ``map``, ENU; position = the robot's base on
the ground, yaw from the orientation by :func:`airplay.frames.yaw_from_quat`) it publishes
``ground/camera/image_raw`` (rgb8) and ``ground/camera/camera_info``, frame
``ground_camera_optical``, stamped with the pose's stamp: the AeroGround ground camera (1 m
above the base, level, forward, its own intrinsics;
:func:`airplay.aeroground.capture.render_ground_view`) in the current scene, the live
episode's, else the one prepared last (the first of ``scenes``, or the latest
``episode/command``'s). A pose in another frame, outside the scene's bounds
(:func:`airplay.aeroground.ground.check_in_scene`), with a zero quaternion, or with no scene
yet is refused with a logged error naming the field; nothing is published for it. Same QoS as
the UAV camera; with ``render_images:=false`` zero images.
"""

from __future__ import annotations

import math
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String

from airplay.frames import heading_of_state, yaw_from_quat
from airplay.node_schemas import RENDERER
from airplay.nodes.common import (CONTROL_DT_NS, EPISODE_STATUS, LATEST_ONLY, LOCKSTEP_STREAM, RELIABLE,
                                  SENSOR_DATA, GateLog, WorldCache, camera_info, episode_parameters, first_scene,
                                  image_from_depth, image_from_rgb, json_payload, ns_from_stamp, one_compute_thread,
                                  run_node, state_from_odometry)
from airplay.nodes.params import declare_schema

GROUND_POSE_TOPIC = "ground/pose"
GROUND_IMAGE_TOPIC = "ground/camera/image_raw"
GROUND_INFO_TOPIC = "ground/camera/camera_info"
GROUND_CAMERA_FRAME = "ground_camera_optical"


class RendererNode(Node):
    def __init__(self) -> None:
        from airplay.world.lockstep import EpisodeGate

        super().__init__("renderer")
        values = declare_schema(self, RENDERER)
        p = episode_parameters(values)
        self.setting = p["setting"]
        self.backend = values["render_backend"]
        self.render_images = values["render_images"]
        self.lockstep = values["lockstep"]
        if not self.lockstep:
            one_compute_thread()  # real time: leave the cores to the loop's other nodes
        self.worlds = WorldCache()
        self.world = None
        self.prepared = None   # the scene folder warmed up last
        self.gate = EpisodeGate(CONTROL_DT_NS, self.lockstep)
        self.gate_log = GateLog(self, "odom")
        self.rendered = None   # (stamp, rgb, depth, camera_info messages) of the latest rendered odom
        self.goal_image = None  # the live episode's goal_image message (imagegoal)
        scene = first_scene(p["scenes"])
        if scene is not None:
            self._prepare(scene)
        qos = LOCKSTEP_STREAM if self.lockstep else SENSOR_DATA
        self.rgb_pub = self.create_publisher(Image, "camera/image_raw", qos)
        self.depth_pub = self.create_publisher(Image, "camera/depth/image_raw", qos)
        self.info_pub = self.create_publisher(CameraInfo, "camera/camera_info", qos)
        self.goal_image_pub = self.create_publisher(Image, "goal_image", RELIABLE)
        self.ground_rgb_pub = self.create_publisher(Image, GROUND_IMAGE_TOPIC, qos)
        self.ground_info_pub = self.create_publisher(CameraInfo, GROUND_INFO_TOPIC, qos)
        self.create_subscription(PoseStamped, GROUND_POSE_TOPIC, self.on_ground_pose,
                                 RELIABLE if self.lockstep else LATEST_ONLY)
        # lockstep: every odom is a control step; real time: render the freshest pose, skip a backlog
        self.create_subscription(Odometry, "odom", self.on_odom, RELIABLE if self.lockstep else LATEST_ONLY)
        self.create_subscription(String, "episode/status", self.on_episode_status, EPISODE_STATUS)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)  # last: ready

    def _prepare(self, scene_dir: str) -> None:
        """Load ``scene_dir``'s splat and mesh and render one view (module docstring); a scene
        that fails is reported here and again when its episode starts."""
        from airplay.world.env import MAX_DEPTH_M
        from airplay.world.warmup import warm_camera

        if scene_dir == self.prepared:
            return
        t0 = time.monotonic()
        try:
            world = self.worlds.get(scene_dir)
            if self.render_images:
                warm_camera(world, self.backend, MAX_DEPTH_M)
        except Exception as exc:
            self.get_logger().error(f"cannot render {scene_dir}: {exc}")
            return
        self.prepared = scene_dir
        self.get_logger().info(f"ready to render {world.name} ({time.monotonic() - t0:.1f} s)")

    def on_episode_command(self, msg: String) -> None:
        try:
            scene_dir = json_payload(msg)["scene_dir"]
        except (ValueError, KeyError, TypeError) as exc:  # a bad command must not kill the node
            self.get_logger().error(f"bad episode/command {msg.data[:200]!r}: {exc}")
            return
        self._prepare(str(scene_dir))  # ahead of the episode

    def on_episode_status(self, msg: String) -> None:
        try:
            status = json_payload(msg)
            if status.get("status") == "started":
                scene_dir, task = str(status["scene_dir"]), self._task(status)
            released = self.gate.apply(status)
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/status {msg.data[:200]!r}: {exc}")
            return
        if released is None:
            return  # an end, or a start not newer than the live episode (a repeat)
        start = self.gate.start_ns
        try:
            self.world = self.worlds.get(scene_dir)
        except Exception as exc:
            self.get_logger().error(f"episode {status.get('episode')}: cannot load {scene_dir}: {exc}")
            return
        self.goal_image = None
        if self.setting == "imagegoal":
            if task is None:
                self.get_logger().error("an imagegoal episode started without its task: no goal_image")
            else:
                rgb, _ = self.images(task.goal_position, task.goal_yaw, depth=False)
                self.goal_image = image_from_rgb(rgb, start)
                self.goal_image_pub.publish(self.goal_image)
        for stamp, odom in released:
            self.on_odom(odom)

    @staticmethod
    def _task(status: dict):
        """The task of a "started" status (the evaluator's command echoed by the sim); None where
        the status carries none (a vehicle's bridge names only the scene)."""
        from airplay.tasks.sampler import Task

        return Task.from_dict(status["task"]) if "task" in status else None

    def images(self, position, yaw: float, depth: bool = True):
        """(rgb (H, W, 3) uint8, depth (H, W, 1) float32 m) as AirPlayEnv renders them."""
        from airplay.world.env import MAX_DEPTH_M

        cam = self.world.scene.spec.camera.intrinsics
        if not self.render_images:
            return np.zeros((cam.height, cam.width, 3), np.uint8), np.zeros((cam.height, cam.width, 1), np.float32)
        return self.world.camera_images(position, yaw, self.backend, depth=depth, max_depth_m=MAX_DEPTH_M)

    def ground_scene(self):
        """The scene the ground camera renders: the live episode's, else the one prepared last; None before either."""
        if self.world is not None:
            return self.world.scene
        if self.prepared is not None:
            return self.worlds.get(self.prepared).scene
        return None

    def on_ground_pose(self, msg: PoseStamped) -> None:
        """Render and publish the ground camera at a ``ground/pose`` (module docstring)."""
        from airplay.aeroground.cameras import ground_camera
        from airplay.aeroground.capture import render_ground_view
        from airplay.aeroground.ground import GroundPose, check_in_scene

        def refuse(field: str, why: str) -> None:
            self.get_logger().error(f"{GROUND_POSE_TOPIC}: {field}: {why}; no ground camera image published")

        if msg.header.frame_id != "map":
            return refuse("header.frame_id", f"must be 'map' (ENU), got {msg.header.frame_id!r}")
        q = msg.pose.orientation
        if not (math.isfinite(q.x + q.y + q.z + q.w) and q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w > 1e-12):
            return refuse("pose.orientation", f"not a rotation: ({q.x}, {q.y}, {q.z}, {q.w})")
        scene = self.ground_scene()
        if scene is None:
            return refuse("scene", "none to render yet (no scenes parameter, episode or episode/command)")
        p = msg.pose.position
        try:
            check_in_scene(scene, p.x, p.y, p.z)
        except ValueError as exc:
            return refuse("pose.position", str(exc))
        stamp = ns_from_stamp(msg.header.stamp)
        camera = ground_camera()
        if self.render_images:
            pose = GroundPose(float(p.x), float(p.y), float(p.z), yaw_from_quat(q.x, q.y, q.z, q.w))
            rgb, _ = render_ground_view(scene, pose, self.backend, camera)
        else:
            rgb = np.zeros((camera.height, camera.width, 3), np.uint8)
        self.ground_rgb_pub.publish(image_from_rgb(rgb, stamp, GROUND_CAMERA_FRAME))
        self.ground_info_pub.publish(camera_info(camera, stamp, GROUND_CAMERA_FRAME))

    def on_odom(self, msg: Odometry) -> None:
        from airplay.world.lockstep import CURRENT, DUPLICATE, HELD

        stamp = ns_from_stamp(msg.header.stamp)
        verdict = self.gate.classify(stamp)
        self.gate_log.note(verdict, stamp)
        if verdict == HELD:
            self.gate.hold(stamp, msg)
        elif verdict == DUPLICATE and self.rendered is not None and self.rendered[0] == stamp:
            # the sim asks again: the images (and the episode's goal image) may not have arrived
            if self.goal_image is not None and stamp == self.gate.start_ns:
                self.goal_image_pub.publish(self.goal_image)
            self.publish(self.rendered)
        elif verdict == CURRENT and self.world is not None:
            state = state_from_odometry(msg)
            rgb, depth = self.images(state[0:3], heading_of_state(state))
            self.rendered = (stamp, image_from_rgb(rgb, stamp), image_from_depth(depth, stamp),
                             camera_info(self.world.scene.spec.camera.intrinsics, stamp))
            self.gate.handled(stamp)
            self.publish(self.rendered)

    def publish(self, rendered) -> None:
        _, rgb, depth, info = rendered
        self.rgb_pub.publish(rgb)
        self.depth_pub.publish(depth)
        self.info_pub.publish(info)

    def destroy_node(self) -> None:
        import sys

        # print, not the logger: at shutdown rosout's publisher may be gone already
        print(f"odom frames by verdict: {GateLog.summary(self.gate)}", file=sys.stderr, flush=True)
        super().destroy_node()


def main(args=None) -> int:
    return run_node(RendererNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
