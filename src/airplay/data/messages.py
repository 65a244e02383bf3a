"""CDR message builders and decoders for the bag topics, with rosbags' Jazzy typestore (no rclpy).

The conventions are those of the ROS graph (:mod:`airplay.nodes.common`, DESIGN.md sections
3 and 4), so that a bag written in-process by ``airplay collect`` and one recorded from the
live graph hold the same bytes for the same data:

* stamps are sim time, integer nanoseconds (``header.stamp`` = sec + nanosec);
* ``/odom`` nav_msgs/Odometry: frame ``map`` -> child ``base_link``; pose = position (m, map
  ENU) + orientation quaternion (x, y, z, w); ``twist.linear`` = velocity in the MAP frame
  (m/s), ``twist.angular`` = body rates FLU (rad/s): the 13-vector state, float64 exact;
* ``/cmd_vel`` geometry_msgs/TwistStamped: linear.x/y/z = heading-frame vx, vy, vz (m/s),
  angular.z = yaw rate (rad/s), frame ``base_link``;
* images: ``rgb8`` (H, W, 3) uint8 and ``32FC1`` depth in metres (little endian), frame
  ``camera_optical`` (z forward, x right, y down);
* ``/goal_pose`` geometry_msgs/PoseStamped in ``map``, orientation = rotation by the goal yaw
  about z (rad, CCW from east).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np

TOPICS: dict[str, str] = {
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/camera/depth/image_raw": "sensor_msgs/msg/Image",
    "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
    "/odom": "nav_msgs/msg/Odometry",
    "/cmd_vel": "geometry_msgs/msg/TwistStamped",
    "/goal_pose": "geometry_msgs/msg/PoseStamped",
    "/goal_image": "sensor_msgs/msg/Image",
    "/episode/status": "std_msgs/msg/String",
    "/episode/metadata": "std_msgs/msg/String",
}
"""The bag topics (absolute names) -> ROS 2 message type, as agreed for issue 5."""

CONTROL_DT_NS = 20_000_000
"""One control period (50 Hz) in nanoseconds: step k of an episode is stamped start + k * 20 ms."""


@lru_cache(maxsize=1)
def typestore():
    """The rosbags typestore of ROS 2 Jazzy (message classes, CDR (de)serialization, definitions)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


def _t(msgtype: str):
    return typestore().types[msgtype]


def _header(stamp_ns: int, frame_id: str):
    stamp_ns = int(stamp_ns)
    if stamp_ns < 0:
        raise ValueError(f"stamp must be >= 0 ns, got {stamp_ns}")
    time = _t("builtin_interfaces/msg/Time")(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    return _t("std_msgs/msg/Header")(stamp=time, frame_id=frame_id)


def _vector3(x: float, y: float, z: float):
    return _t("geometry_msgs/msg/Vector3")(x=float(x), y=float(y), z=float(z))


def _serialize(msg) -> bytes:
    return bytes(typestore().serialize_cdr(msg, msg.__msgtype__))


# -- builders (CDR bytes) ---------------------------------------------------------------------
def odometry_cdr(state13, stamp_ns: int) -> bytes:
    """nav_msgs/Odometry from the (13,) state [x y z qx qy qz qw vx vy vz wx wy wz] (float64 exact).

    Position (m) and velocity (m/s) in map ENU, quaternion (x, y, z, w) of base_link in map,
    angular rates (rad/s) in base_link FLU; as :func:`airplay.nodes.common.odometry_from_state`.
    """
    s = np.asarray(state13, dtype=np.float64).reshape(13)
    if not np.all(np.isfinite(s)):
        raise ValueError(f"odometry state is not finite: {s}")
    ts = typestore()
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(s[0]), y=float(s[1]), z=float(s[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=float(s[3]), y=float(s[4]), z=float(s[5]), w=float(s[6])))
    twist = _t("geometry_msgs/msg/Twist")(linear=_vector3(*s[7:10]), angular=_vector3(*s[10:13]))
    msg = _t("nav_msgs/msg/Odometry")(
        header=_header(stamp_ns, "map"), child_frame_id="base_link",
        pose=_t("geometry_msgs/msg/PoseWithCovariance")(pose=pose, covariance=np.zeros(36, np.float64)),
        twist=_t("geometry_msgs/msg/TwistWithCovariance")(twist=twist, covariance=np.zeros(36, np.float64)))
    return bytes(ts.serialize_cdr(msg, msg.__msgtype__))


def image_rgb_cdr(rgb, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/Image ``rgb8`` from an (H, W, 3) uint8 array."""
    a = np.asarray(rgb)
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"rgb image must be (H, W, 3) uint8, got {a.shape} {a.dtype}")
    h, w = a.shape[:2]
    msg = _t("sensor_msgs/msg/Image")(header=_header(stamp_ns, frame_id), height=h, width=w, encoding="rgb8",
                                      is_bigendian=0, step=w * 3, data=np.ascontiguousarray(a).reshape(-1))
    return _serialize(msg)


def image_depth_cdr(depth, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/Image ``32FC1`` (metres along the optical axis, little endian) from (H, W) or (H, W, 1)."""
    a = np.asarray(depth)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim != 2:
        raise ValueError(f"depth image must be (H, W) or (H, W, 1), got {np.asarray(depth).shape}")
    h, w = a.shape
    data = np.ascontiguousarray(a, dtype="<f4").view(np.uint8).reshape(-1)
    msg = _t("sensor_msgs/msg/Image")(header=_header(stamp_ns, frame_id), height=h, width=w, encoding="32FC1",
                                      is_bigendian=0, step=w * 4, data=data)
    return _serialize(msg)


def camera_info_cdr(intrinsics, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/CameraInfo of a pinhole camera (``.K`` 3x3 pixels, ``.width``, ``.height``), no distortion."""
    K = np.asarray(intrinsics.K, np.float64).reshape(3, 3)
    P = np.zeros((3, 4))
    P[:, :3] = K
    roi = _t("sensor_msgs/msg/RegionOfInterest")(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    msg = _t("sensor_msgs/msg/CameraInfo")(
        header=_header(stamp_ns, frame_id), height=int(intrinsics.height), width=int(intrinsics.width),
        distortion_model="plumb_bob", d=np.zeros(5, np.float64), k=K.reshape(-1), r=np.eye(3).reshape(-1),
        p=P.reshape(-1), binning_x=0, binning_y=0, roi=roi)
    return _serialize(msg)


def twist_cdr(cmd4, stamp_ns: int, frame_id: str = "base_link") -> bytes:
    """geometry_msgs/TwistStamped from a (4,) [vx, vy, vz (m/s, heading frame), yaw_rate (rad/s)] command."""
    c = np.asarray(cmd4, dtype=np.float64).reshape(4)
    twist = _t("geometry_msgs/msg/Twist")(linear=_vector3(c[0], c[1], c[2]), angular=_vector3(0.0, 0.0, c[3]))
    return _serialize(_t("geometry_msgs/msg/TwistStamped")(header=_header(stamp_ns, frame_id), twist=twist))


def pose_cdr(position3, yaw: float, stamp_ns: int, frame_id: str = "map") -> bytes:
    """geometry_msgs/PoseStamped at ``position3`` (m, map ENU) with the rotation by ``yaw`` (rad) about z."""
    p = np.asarray(position3, dtype=np.float64).reshape(3)
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(p[0]), y=float(p[1]), z=float(p[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=0.0, y=0.0, z=float(np.sin(yaw / 2)),
                                                       w=float(np.cos(yaw / 2))))
    return _serialize(_t("geometry_msgs/msg/PoseStamped")(header=_header(stamp_ns, frame_id), pose=pose))


def string_cdr(text: str) -> bytes:
    """std_msgs/String (the episode JSON topics)."""
    return _serialize(_t("std_msgs/msg/String")(data=str(text)))


def json_cdr(payload: dict) -> bytes:
    """std_msgs/String holding ``json.dumps(payload)``."""
    return string_cdr(json.dumps(payload))


# -- decoders ---------------------------------------------------------------------------------
def decode(msgtype: str, cdr: bytes):
    """The rosbags message object of ``msgtype`` (e.g. "nav_msgs/msg/Odometry") from CDR bytes."""
    return typestore().deserialize_cdr(cdr, msgtype)


def stamp_ns(msg) -> int:
    """Integer nanoseconds of a stamped message's ``header.stamp``."""
    s = msg.header.stamp
    return int(s.sec) * 1_000_000_000 + int(s.nanosec)


def state_of(odom) -> np.ndarray:
    """(13,) float64 state from a decoded nav_msgs/Odometry (inverse of :func:`odometry_cdr`)."""
    p, q = odom.pose.pose.position, odom.pose.pose.orientation
    v, w = odom.twist.twist.linear, odom.twist.twist.angular
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z, w.x, w.y, w.z], np.float64)


def command_of(twist) -> np.ndarray:
    """(4,) float64 [vx, vy, vz, yaw_rate] from a decoded geometry_msgs/TwistStamped."""
    t = twist.twist
    return np.array([t.linear.x, t.linear.y, t.linear.z, t.angular.z], np.float64)


def rgb_of(image) -> np.ndarray:
    """(H, W, 3) uint8 from a decoded ``rgb8`` sensor_msgs/Image (``bgr8`` is converted)."""
    if image.encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"expected an rgb8 image, got encoding {image.encoding!r}")
    rows = np.asarray(image.data, np.uint8).reshape(image.height, image.step)
    a = rows[:, : image.width * 3].reshape(image.height, image.width, 3)
    return np.ascontiguousarray(a[:, :, ::-1] if image.encoding == "bgr8" else a)


def depth_of(image) -> np.ndarray:
    """(H, W) float32 metres from a decoded ``32FC1`` sensor_msgs/Image."""
    if image.encoding != "32FC1":
        raise ValueError(f"expected a 32FC1 depth image, got encoding {image.encoding!r}")
    rows = np.asarray(image.data, np.uint8).reshape(image.height, image.step)[:, : image.width * 4]
    dtype = ">f4" if image.is_bigendian else "<f4"
    return np.ascontiguousarray(rows).view(dtype).reshape(image.height, image.width).astype(np.float32)


def position_yaw_of(pose) -> tuple[np.ndarray, float]:
    """(position (3,) m map, yaw rad) of a decoded geometry_msgs/PoseStamped (yaw about z)."""
    p, q = pose.pose.position, pose.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    return np.array([p.x, p.y, p.z], np.float64), yaw
