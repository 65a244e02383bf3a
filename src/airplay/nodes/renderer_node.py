"""``renderer``: RGB + depth for every ``odom``, stamped with the odom's stamp.

Same images as :class:`airplay.sim.env.AirPlayEnv`: the scene's camera on its mount, the
gimbal-stabilised pose (position + yaw), the scene's background, depth from the collision
mesh z-buffer clipped at ``MAX_DEPTH_M``. With ``render_images:=false`` it still publishes
(zero) images, so that the lockstep graph runs without rendering cost.

The scene of an odom comes from ``episode/status`` "started" messages (scene_dir and the
episode's first stamp); odoms that arrive between an episode's end and the next start are
held (the latest) until the start is known. For imagegoal it publishes ``goal_image``
(the camera image at the goal pose) stamped with the episode's first stamp.

Publishes ``camera/image_raw`` (rgb8), ``camera/depth/image_raw`` (32FC1, m) and
``camera/camera_info``; QoS: see :data:`airplay.nodes.common.LOCKSTEP_IMAGES`.
"""

from __future__ import annotations

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String

from airplay.nodes.common import (LOCKSTEP_IMAGES, RELIABLE, SENSOR_DATA, EpisodeTasks, ParameterError, camera_info,
                                  declare, episode_parameters, image_from_depth, image_from_rgb, json_payload,
                                  ns_from_stamp, preload_first_scene, run_node, state_from_odometry, yaw_from_state)


class RendererNode(Node):
    def __init__(self) -> None:
        super().__init__("renderer")
        p = episode_parameters(self)
        self.setting = p["setting"]
        self.backend = declare(self, "render_backend", "auto")
        self.render_images = declare(self, "render_images", True)
        self.lockstep = declare(self, "lockstep", True)
        if self.backend not in ("auto", "cpu", "gsplat"):
            raise ParameterError(f"parameter 'render_backend' must be auto, cpu or gsplat, got {self.backend!r}")
        if not isinstance(self.render_images, bool):
            raise ParameterError(f"parameter 'render_images' must be true or false, got {self.render_images!r}")
        self.tasks = EpisodeTasks.from_parameters(p)
        self.world = None
        self.start_ns = None   # first stamp of the live episode; None between episodes
        self.held = None       # an odom that arrived while no episode was live
        preload_first_scene(self, p["scenes"], self._load_for_rendering)
        qos = LOCKSTEP_IMAGES if self.lockstep else SENSOR_DATA
        self.rgb_pub = self.create_publisher(Image, "camera/image_raw", qos)
        self.depth_pub = self.create_publisher(Image, "camera/depth/image_raw", qos)
        self.info_pub = self.create_publisher(CameraInfo, "camera/camera_info", qos)
        self.goal_image_pub = self.create_publisher(Image, "goal_image", RELIABLE)
        self.create_subscription(Odometry, "odom", self.on_odom, RELIABLE)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)
        self.create_subscription(String, "episode/status", self.on_episode_status, RELIABLE)

    def _load_for_rendering(self, scene_dir: str) -> None:
        """The scene, and its level-of-detail hierarchy where RGB is rendered with one."""
        world, _ = self.tasks.load(scene_dir)
        if self.render_images and world.protocol.render_lod_px > 0:
            world.lod_hierarchy()

    def on_episode_command(self, msg: String) -> None:
        try:
            self.tasks.load(str(json_payload(msg)["scene_dir"]))  # load ahead of the episode
        except Exception as exc:  # a bad command must not kill the node
            self.get_logger().error(f"bad episode/command {msg.data!r}: {exc}")

    def on_episode_status(self, msg: String) -> None:
        status = json_payload(msg)
        if status.get("status") != "started":
            self.start_ns = None
            return
        self.world, tasks = self.tasks.load(str(status["scene_dir"]))
        self.start_ns = int(status["stamp_ns"])
        if self.setting == "imagegoal":
            task = tasks[int(status["index"])]
            rgb, _ = self.images(task.goal_position, task.goal_yaw, depth=False)
            self.goal_image_pub.publish(image_from_rgb(rgb, self.start_ns))
        held, self.held = self.held, None
        if held is not None and ns_from_stamp(held.header.stamp) >= self.start_ns:
            self.on_odom(held)

    def images(self, position, yaw: float, depth: bool = True):
        """(rgb (H, W, 3) uint8, depth (H, W, 1) float32 m) as AirPlayEnv renders them."""
        from airplay.sim.env import MAX_DEPTH_M

        cam = self.world.scene.spec.camera.intrinsics
        if not self.render_images:
            return np.zeros((cam.height, cam.width, 3), np.uint8), np.zeros((cam.height, cam.width, 1), np.float32)
        return self.world.camera_images(position, yaw, self.backend, depth=depth, max_depth_m=MAX_DEPTH_M)

    def on_odom(self, msg: Odometry) -> None:
        stamp = ns_from_stamp(msg.header.stamp)
        if self.start_ns is None or self.world is None or stamp < self.start_ns:
            if self.start_ns is None:
                self.held = msg
            return
        state = state_from_odometry(msg)
        rgb, depth = self.images(state[0:3], yaw_from_state(state))
        self.rgb_pub.publish(image_from_rgb(rgb, stamp))
        self.depth_pub.publish(image_from_depth(depth, stamp))
        self.info_pub.publish(camera_info(self.world.scene.spec.camera.intrinsics, stamp))


def main(args=None) -> int:
    return run_node(RendererNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
