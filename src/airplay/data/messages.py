"""CDR message builders (struct-packed) and decoders (rosbags' Jazzy typestore) for the bag topics, no rclpy.

The conventions are those of the ROS graph (:mod:`airplay.nodes.common`, DESIGN.md sections
3 and 4), so that a bag written in-process by ``airplay collect`` and one recorded from the
live graph hold the same bytes for the same data:

* stamps are sim time, integer nanoseconds (``header.stamp`` = sec + nanosec);
* ``/odom`` nav_msgs/Odometry (REP-105): frame ``map`` -> child ``base_link``; pose = position
  (m, map ENU) + orientation quaternion (x, y, z, w) of base_link in map; twist in
  ``base_link`` (FLU): ``twist.linear`` = velocity (m/s) rotated into the body frame by the
  full attitude, ``twist.angular`` = body rates (rad/s). Reading it back rotates the velocity
  into map (:func:`airplay.frames.body_to_map_xyzw`), which is exact to a few ulp, not bit for
  bit. Bags of :data:`BAG_FORMAT` 1 (older airplay bags) hold the map-frame velocity in
  ``twist.linear`` instead; :func:`state_of` reads both;
* ``/cmd_vel`` geometry_msgs/TwistStamped: linear.x/y/z = heading-frame vx, vy, vz (m/s),
  angular.z = yaw rate (rad/s), frame ``base_stabilized`` (the yaw-only heading frame of
  :data:`airplay.frames.BASE_STABILIZED`; older bags say ``base_link``, with the same values);
* images: ``rgb8`` (H, W, 3) uint8 and ``32FC1`` depth in metres (little endian), frame
  ``camera_optical`` (z forward, x right, y down);
* ``/goal_pose`` geometry_msgs/PoseStamped in ``map``, orientation = rotation by the goal yaw
  about z (rad, CCW from east).
"""

from __future__ import annotations

import json
import math
import struct
from functools import lru_cache

import numpy as np

from airplay.frames import (BASE_LINK, BASE_STABILIZED, MAP, body_to_map_xyzw, map_to_body_xyzw, quat_xyzw_from_yaw,
                            yaw_from_quat)

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
"""The bag topics (absolute names) -> ROS 2 message type (the layout of docs/data.md)."""

CONTROL_DT_NS = 20_000_000
"""One control period (50 Hz) in nanoseconds: step k of an episode is stamped start + k * 20 ms."""

BAG_FORMAT = 2
"""The airplay bag format written now (``bag_format`` in the episode metadata and in each MCAP
file's ``airplay`` metadata record, :mod:`airplay.data.bag_writer`): the meaning of the recorded
messages. 2: ``/odom``'s twist in ``base_link`` (REP-105). 1 (a bag that names no format, as
airplay wrote before the field existed): ``/odom``'s ``twist.linear`` is the velocity in ``map``.
Everything else is the same in both."""
BAG_FORMATS = (1, 2)
"""The bag formats :func:`state_of` (and so :func:`airplay.data.bag_reader.read_episode`) reads."""


def check_bag_format(value, where: str) -> int:
    """``value`` as one of :data:`BAG_FORMATS`; ValueError naming ``where`` (a file or field) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or str(value).strip() not in map(str, BAG_FORMATS):
        raise ValueError(f"{where}: bag_format {value!r} is not one this airplay reads "
                         f"({', '.join(map(str, BAG_FORMATS))}); a newer airplay wrote it?")
    return int(value)


@lru_cache(maxsize=1)
def typestore():
    """The rosbags typestore of ROS 2 Jazzy (message classes, CDR (de)serialization, definitions)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_JAZZY)


# -- builders (CDR bytes) ---------------------------------------------------------------------
# The builders pack each message with one precompiled struct.Struct (cached per frame id /
# encoding) instead of building rosbags message objects: byte for byte what rosbags'
# ``serialize_cdr`` writes (test_messages.py checks it on random inputs), in a few microseconds
# (a 64x64 rgb8 image about 5 us, odometry 4 us, camera info 2 us, twist 3 us), and without
# loading the typestore.
# CDR (XCDR1, little endian, as ROS 2's rmw writes it): a 4-byte encapsulation header
# (0x00 0x01 = CDR_LE, options 0), then the payload, each primitive aligned to its size
# (8 for float64) relative to the start of the payload, padding bytes zero; a string is a
# uint32 length counting its NUL terminator, the UTF-8 bytes and the NUL.
_ENCAPSULATION = b"\x00\x01\x00\x00"
_INT32_MAX = 2**31 - 1
_STAMP = struct.Struct("<4siI")  # encapsulation + builtin_interfaces/Time (the first field of every Header)


class _Layout:
    """A struct format for one CDR message, built field by field with the CDR alignment.

    ``offset`` counts payload bytes (after the encapsulation header, which the format's
    first field ``4s`` holds). :meth:`build` returns the struct.Struct; :attr:`offset` is
    then the payload size so far (where a trailing uint8[] sequence's bytes would start).
    """

    def __init__(self) -> None:
        self.parts = ["<4s"]
        self.offset = 0

    def align(self, size: int) -> None:
        pad = -self.offset % size
        if pad:
            self.parts.append(f"{pad}x")
            self.offset += pad

    def prim(self, code: str, count: int = 1) -> None:
        """``count`` primitives of struct code ``code`` (one field or a fixed-size array)."""
        size = struct.calcsize("<" + code)
        self.align(size)
        self.parts.append(f"{count}{code}" if count != 1 else code)
        self.offset += size * count

    def zeros(self, size: int, count: int) -> None:
        """A fixed-size array of ``count`` zero primitives of ``size`` bytes (e.g. a covariance)."""
        self.align(size)
        self.parts.append(f"{size * count}x")
        self.offset += size * count

    def string(self, nbytes: int) -> None:
        """A string of ``nbytes`` UTF-8 bytes: its uint32 length (with the NUL), bytes and NUL
        (pack the length and the bytes; the ``s`` field pads the NUL)."""
        self.prim("I")
        self.parts.append(f"{nbytes + 1}s")
        self.offset += nbytes + 1

    def header(self, frame_id: bytes) -> None:
        """std_msgs/Header: stamp (int32 sec, uint32 nanosec), frame_id."""
        self.prim("i")
        self.prim("I")
        self.string(len(frame_id))

    def build(self) -> struct.Struct:
        return struct.Struct("".join(self.parts))


def _stamp(stamp_ns) -> tuple[int, int]:
    """(sec, nanosec) of builtin_interfaces/Time from integer nanoseconds (>= 0, sec fits int32)."""
    stamp_ns = int(stamp_ns)
    if stamp_ns < 0:
        raise ValueError(f"stamp must be >= 0 ns, got {stamp_ns}")
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    if sec > _INT32_MAX:
        raise ValueError(f"stamp {stamp_ns} ns is past builtin_interfaces/Time's int32 seconds")
    return sec, nanosec


def _utf8(text: str, what: str) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    return text.encode()


@lru_cache(maxsize=64)
def _image_head(frame_id: str, encoding: str) -> tuple[struct.Struct, tuple, tuple]:
    """sensor_msgs/Image up to its data bytes: (struct, constant args after the stamp (frame
    id), constant args after height + width (encoding, is_bigendian 0))."""
    f, e = _utf8(frame_id, "frame_id"), _utf8(encoding, "encoding")
    L = _Layout()
    L.header(f)
    L.prim("I", 2)  # height, width
    L.string(len(e))
    L.prim("B")  # is_bigendian
    L.prim("I", 2)  # step, len(data)
    return L.build(), (len(f) + 1, f), (len(e) + 1, e, 0)


def _image_cdr(data: np.ndarray, h: int, w: int, step: int, encoding: str, stamp_ns, frame_id: str) -> bytes:
    st, frame, enc = _image_head(frame_id, encoding)
    head = st.pack(_ENCAPSULATION, *_stamp(stamp_ns), *frame, h, w, *enc, step, data.nbytes)
    return b"".join((head, data.reshape(-1).data))


@lru_cache(maxsize=64)
def _stamped_struct(frame_id: str, doubles: int) -> tuple[struct.Struct, tuple]:
    """A Header (``frame_id``) then ``doubles`` float64 (TwistStamped: 6, PoseStamped: 7)."""
    f = _utf8(frame_id, "frame_id")
    L = _Layout()
    L.header(f)
    L.prim("d", doubles)
    return L.build(), (len(f) + 1, f)


@lru_cache(maxsize=16)
def _odometry_struct(frame_id: str, child_frame_id: str) -> tuple[struct.Struct, tuple]:
    """nav_msgs/Odometry: Header, child_frame_id, pose (7 float64) + zero covariance (36),
    twist (6 float64) + zero covariance (36)."""
    f, c = _utf8(frame_id, "frame_id"), _utf8(child_frame_id, "child_frame_id")
    L = _Layout()
    L.header(f)
    L.string(len(c))
    L.prim("d", 7)
    L.zeros(8, 36)
    L.prim("d", 6)
    L.zeros(8, 36)
    return L.build(), (len(f) + 1, f, len(c) + 1, c)


def odometry_cdr(state13, stamp_ns: int) -> bytes:
    """REP-105 nav_msgs/Odometry from the (13,) state [x y z qx qy qz qw vx vy vz wx wy wz]
    (position m and velocity m/s in map ENU, quaternion (x, y, z, w) of base_link in map, body
    rates rad/s FLU), as :func:`airplay.nodes.common.odometry_from_state` builds it.

    Frames ``map`` -> ``base_link``. Pose: position and quaternion, float64 exact. Twist in
    ``base_link``: linear = the velocity rotated into the body frame by the full attitude
    (:func:`airplay.frames.map_to_body_xyzw`, m/s), angular = the body rates (rad/s, as they
    are). Covariances zero (unknown). The bag format this writes is :data:`BAG_FORMAT`.
    """
    s = np.asarray(state13, dtype=np.float64).reshape(13)
    values = s.tolist()
    if not all(map(math.isfinite, values)):
        raise ValueError(f"odometry state is not finite: {s}")
    values[7:10] = map_to_body_xyzw(s[3:7], s[7:10]).tolist()
    st, frames = _odometry_struct(MAP, BASE_LINK)
    return st.pack(_ENCAPSULATION, *_stamp(stamp_ns), *frames, *values)


def image_rgb_cdr(rgb, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/Image ``rgb8`` from an (H, W, 3) uint8 array (rows of W * 3 bytes)."""
    a = np.asarray(rgb)
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"rgb image must be (H, W, 3) uint8, got {a.shape} {a.dtype}")
    h, w = a.shape[:2]
    return _image_cdr(np.ascontiguousarray(a), h, w, w * 3, "rgb8", stamp_ns, frame_id)


def image_depth_cdr(depth, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/Image ``32FC1`` (metres along the optical axis, little endian) from (H, W) or (H, W, 1)."""
    a = np.asarray(depth)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim != 2:
        raise ValueError(f"depth image must be (H, W) or (H, W, 1), got {np.asarray(depth).shape}")
    h, w = a.shape
    return _image_cdr(np.ascontiguousarray(a, dtype="<f4"), h, w, w * 4, "32FC1", stamp_ns, frame_id)


@lru_cache(maxsize=16)
def _camera_info_tail(k9: bytes, width: int, height: int, frame_id: str) -> bytes:
    """The CDR of a sensor_msgs/CameraInfo after its stamp (which starts the payload, so the
    rest does not depend on it), packed once per camera and frame and reused for every stamp:
    frame_id, height, width, distortion_model "plumb_bob", d (float64[] of 5 zeros), k (9),
    r (identity), p ([K | 0], 12), binning_x = binning_y = 0, roi all zero (do_rectify false)."""
    f, model = _utf8(frame_id, "frame_id"), b"plumb_bob"
    K = np.frombuffer(k9, np.float64).reshape(3, 3)
    P = np.zeros((3, 4))
    P[:, :3] = K
    L = _Layout()
    L.header(f)
    L.prim("I", 2)  # height, width
    L.string(len(model))
    L.prim("I")  # len(d)
    L.zeros(8, 5)  # d: a sequence's float64 are 8-aligned too (when there is one)
    L.prim("d", 9 + 9 + 12)  # k, r, p
    L.prim("I", 2)  # binning_x, binning_y
    L.prim("I", 4)  # roi x_offset, y_offset, height, width
    L.prim("?")  # roi do_rectify
    cdr = L.build().pack(_ENCAPSULATION, 0, 0, len(f) + 1, f, height, width, len(model) + 1, model, 5,
                         *K.reshape(-1).tolist(), *np.eye(3).reshape(-1).tolist(), *P.reshape(-1).tolist(),
                         0, 0, 0, 0, 0, 0, False)
    return cdr[_STAMP.size:]


def camera_info_cdr(intrinsics, stamp_ns: int, frame_id: str = "camera_optical") -> bytes:
    """sensor_msgs/CameraInfo of a pinhole camera (``.K`` 3x3 pixels, ``.width``, ``.height``), no distortion.

    ``plumb_bob`` with d = 0, r = identity, p = [K | 0], no binning, empty ROI. The message
    after the stamp is serialized once per (K, width, height, frame_id) and reused.
    """
    K = np.asarray(intrinsics.K, np.float64)
    if K.size != 9:
        raise ValueError(f"camera intrinsics K must be 3x3, got shape {K.shape}")
    tail = _camera_info_tail(K.tobytes(), int(intrinsics.width), int(intrinsics.height), frame_id)
    return _STAMP.pack(_ENCAPSULATION, *_stamp(stamp_ns)) + tail


def twist_cdr(cmd4, stamp_ns: int, frame_id: str = BASE_STABILIZED) -> bytes:
    """geometry_msgs/TwistStamped from a (4,) [vx, vy, vz (m/s, heading frame), yaw_rate (rad/s)] command:
    linear = (vx, vy, vz), angular = (0, 0, yaw_rate)."""
    vx, vy, vz, yaw_rate = np.asarray(cmd4, dtype=np.float64).reshape(4).tolist()
    st, frame = _stamped_struct(frame_id, 6)
    return st.pack(_ENCAPSULATION, *_stamp(stamp_ns), *frame, vx, vy, vz, 0.0, 0.0, yaw_rate)


def pose_cdr(position3, yaw: float, stamp_ns: int, frame_id: str = "map") -> bytes:
    """geometry_msgs/PoseStamped at ``position3`` (m, map ENU) with the rotation by ``yaw`` (rad) about z."""
    x, y, z = np.asarray(position3, dtype=np.float64).reshape(3).tolist()
    _, _, qz, qw = (float(v) for v in quat_xyzw_from_yaw(yaw))
    st, frame = _stamped_struct(frame_id, 7)
    return st.pack(_ENCAPSULATION, *_stamp(stamp_ns), *frame, x, y, z, 0.0, 0.0, qz, qw)


_UINT32 = struct.Struct("<4sI")  # encapsulation + a string's length


def string_cdr(text: str) -> bytes:
    """std_msgs/String (the episode JSON topics): UTF-8."""
    data = str(text).encode()
    return b"".join((_UINT32.pack(_ENCAPSULATION, len(data) + 1), data, b"\x00"))


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


def state_of(odom, bag_format: int = BAG_FORMAT) -> np.ndarray:
    """(13,) float64 state [position m map, quaternion xyzw, velocity m/s MAP, body rates rad/s]
    from a decoded nav_msgs/Odometry: the inverse of :func:`odometry_cdr`.

    ``bag_format`` 2 (REP-105, twist in base_link): the linear twist is rotated into map with
    :func:`airplay.frames.body_to_map_xyzw` (exact to a few ulp of the speed, not bit for bit);
    1 (older airplay bags): it is the map velocity already. Pose and rates are taken as they are.
    """
    fmt = check_bag_format(bag_format, "state_of")
    p, q = odom.pose.pose.position, odom.pose.pose.orientation
    v, w = odom.twist.twist.linear, odom.twist.twist.angular
    s = np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w, v.x, v.y, v.z, w.x, w.y, w.z], np.float64)
    if fmt >= 2:
        s[7:10] = body_to_map_xyzw(s[3:7], s[7:10])
    return s


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
    """(position (3,) m map, yaw rad) of a decoded geometry_msgs/PoseStamped (:func:`airplay.frames.yaw_from_quat`)."""
    p, q = pose.pose.position, pose.pose.orientation
    yaw = yaw_from_quat(q.x, q.y, q.z, q.w)
    return np.array([p.x, p.y, p.z], np.float64), yaw
