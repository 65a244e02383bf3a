"""The renderer node serves the AeroGround ground camera over real DDS: a ``ground/pose`` from
another process gives ``ground/camera/image_raw`` + ``camera_info`` stamped with the pose's
stamp, bit-for-bit the in-process render at that pose; a pose in another frame or outside the
scene gives no image and a logged error naming the field.

The renderer runs as its own process (as the launchers start it); every process is stopped in
a ``finally``.
"""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import stop_process_trees

rclpy = pytest.importorskip("rclpy")

pytestmark = [pytest.mark.usefixtures("own_ros_domain"), pytest.mark.slow]  # 6 s warm, ~35 s with cold numba caches

STAMP_NS = 7_123_456_789
BAD_FRAME_STAMP_NS = 5_000_000_000
OUTSIDE_STAMP_NS = 6_000_000_000
DEADLINE_S = 90.0  # the node's start (imports, scene load, one warm-up render) on a busy machine


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory) -> Path:
    from airplay.scene.synthetic import make_scene

    folder = tmp_path_factory.mktemp("scenes") / "urban_1"
    make_scene("urban", 1, folder, gaussians_per_m2=2)
    return folder


def _ground_pose(scene):
    """A walkable pose of the scene (the AeroGround ground sampler)."""
    from airplay.aeroground.ground import GroundProbe
    from airplay.scene.mesh_depth import MeshRaycaster

    probe = GroundProbe(MeshRaycaster(scene.mesh), scene.mesh, scene.spec.navigable, [])
    pose = probe.sample_pose(np.random.default_rng(3))
    assert pose is not None
    return pose


def _pose_msg(x: float, y: float, z: float, yaw: float, stamp_ns: int, frame: str = "map"):
    from geometry_msgs.msg import PoseStamped

    from airplay.nodes.common import stamp_from_ns

    msg = PoseStamped()
    msg.header.frame_id = frame
    msg.header.stamp = stamp_from_ns(stamp_ns)
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = float(x), float(y), float(z)
    msg.pose.orientation.z, msg.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return msg


class GroundClient:
    """Publishes ground poses and collects the ground camera's messages (own context, own thread)."""

    def __init__(self) -> None:
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import CameraInfo, Image

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import LOCKSTEP_STREAM, RELIABLE

        self.background = BackgroundNode("ground_camera_client")
        node = self.background.node
        self.images: list = []
        self.infos: list = []
        self.pub = node.create_publisher(PoseStamped, "ground/pose", RELIABLE)
        node.create_subscription(Image, "ground/camera/image_raw", self._image, LOCKSTEP_STREAM)
        node.create_subscription(CameraInfo, "ground/camera/camera_info", self._info, LOCKSTEP_STREAM)
        self.background.start()

    def _image(self, msg) -> None:
        with self.background.lock:
            self.images.append(msg)

    def _info(self, msg) -> None:
        with self.background.lock:
            self.infos.append(msg)

    def matched(self) -> bool:
        node = self.background.node
        return (self.pub.get_subscription_count() > 0 and node.count_publishers("ground/camera/image_raw") > 0
                and node.count_publishers("ground/camera/camera_info") > 0)

    def received(self, stamp_ns: int) -> tuple[list, list]:
        from airplay.nodes.common import ns_from_stamp

        with self.background.lock:
            return ([m for m in self.images if ns_from_stamp(m.header.stamp) == stamp_ns],
                    [m for m in self.infos if ns_from_stamp(m.header.stamp) == stamp_ns])

    def close(self) -> None:
        self.background.close()


def _start_renderer(scene_dir: Path, log: Path) -> subprocess.Popen:
    from airplay.graph import NodeSpec
    from airplay.launcher import graph_environment, node_command

    spec = NodeSpec("renderer", "airplay.nodes.renderer_node", "renderer_node",
                    {"scenes": str(scene_dir), "render_backend": "cpu"})
    return subprocess.Popen(node_command(spec), stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=graph_environment(), start_new_session=True)


def test_a_ground_pose_gets_the_ground_camera_image_bit_for_bit_and_bad_poses_none(scene_dir, tmp_path):
    from airplay.aeroground.cameras import ground_camera
    from airplay.aeroground.capture import render_ground_view
    from airplay.aeroground.ground import GroundPose
    from airplay.frames import yaw_from_quat
    from airplay.nodes.common import rgb_from_image
    from airplay.scene.scene import Scene

    scene = Scene.load(scene_dir)
    pose = _ground_pose(scene)
    log = tmp_path / "renderer.log"
    proc = _start_renderer(scene_dir, log)
    client = None
    try:
        client = GroundClient()
        deadline = time.monotonic() + DEADLINE_S
        while not client.matched():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        poly = scene.spec.navigable.polygon
        outside = (float(poly[:, 0].max()) + 50.0, pose.y, pose.z)
        # The node handles one topic's poses in order: the good pose's image proves the bad ones were handled.
        while not client.received(STAMP_NS)[0] or not client.received(STAMP_NS)[1]:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            client.pub.publish(_pose_msg(pose.x, pose.y, pose.z, pose.yaw_rad, BAD_FRAME_STAMP_NS, frame="odom"))
            client.pub.publish(_pose_msg(*outside, pose.yaw_rad, OUTSIDE_STAMP_NS))
            client.pub.publish(_pose_msg(pose.x, pose.y, pose.z, pose.yaw_rad, STAMP_NS))
            time.sleep(1.0)
        images, infos = client.received(STAMP_NS)
        while "ground/pose: pose.position" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # the log line may trail the image
        text = log.read_text()
    finally:
        if client is not None:
            client.close()
        stop_process_trees([proc], set())
    q = _pose_msg(pose.x, pose.y, pose.z, pose.yaw_rad, STAMP_NS).pose.orientation  # the node's yaw, to the bit
    expected, view = render_ground_view(scene, GroundPose(pose.x, pose.y, pose.z, yaw_from_quat(q.x, q.y, q.z, q.w)),
                                        "cpu")
    got = rgb_from_image(images[0])
    assert images[0].header.frame_id == "ground_camera_optical"
    assert got.shape == expected.shape == (ground_camera().height, ground_camera().width, 3)
    assert np.array_equal(got, expected), f"{int((got != expected).any(axis=2).sum())} pixels differ"
    assert got.std() > 1.0, "a blank image"
    info = infos[0]
    assert (info.width, info.height) == (view.camera.width, view.camera.height)
    assert np.array_equal(np.reshape(info.k, (3, 3)), np.asarray(view.camera.K, np.float64))
    assert view.position_m[2] == pytest.approx(pose.z + 1.0)
    assert client.received(BAD_FRAME_STAMP_NS) == ([], []) and client.received(OUTSIDE_STAMP_NS) == ([], [])
    assert "ground/pose: header.frame_id: must be 'map' (ENU), got 'odom'" in text, text[-3000:]
    assert "ground/pose: pose.position: (x, y) = " in text and "outside scene urban_1" in text, text[-3000:]

