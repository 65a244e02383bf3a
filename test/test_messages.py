"""The struct-packed CDR builders of airplay.data.messages give, byte for byte, what rosbags'
``serialize_cdr`` writes for the same message objects: random values, stamps up to the int32
seconds limit, frame ids and strings of every length modulo 4 (UTF-8 too), images whose byte
count is no multiple of 4 and non-contiguous arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airplay.data import messages as M


def _t(name):
    return M.typestore().types[name]


def _ref(msg) -> bytes:
    return bytes(M.typestore().serialize_cdr(msg, msg.__msgtype__))


def _header(stamp_ns: int, frame_id: str):
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return _t("std_msgs/msg/Header")(stamp=_t("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec),
                                     frame_id=frame_id)


def _vec(x, y, z):
    return _t("geometry_msgs/msg/Vector3")(x=float(x), y=float(y), z=float(z))


def ref_odometry(s, stamp):
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(s[0]), y=float(s[1]), z=float(s[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=float(s[3]), y=float(s[4]), z=float(s[5]), w=float(s[6])))
    twist = _t("geometry_msgs/msg/Twist")(linear=_vec(*s[7:10]), angular=_vec(*s[10:13]))
    return _ref(_t("nav_msgs/msg/Odometry")(
        header=_header(stamp, "map"), child_frame_id="base_link",
        pose=_t("geometry_msgs/msg/PoseWithCovariance")(pose=pose, covariance=np.zeros(36)),
        twist=_t("geometry_msgs/msg/TwistWithCovariance")(twist=twist, covariance=np.zeros(36))))


def ref_image(data: np.ndarray, h, w, step, encoding, stamp, frame_id):
    return _ref(_t("sensor_msgs/msg/Image")(header=_header(stamp, frame_id), height=h, width=w, encoding=encoding,
                                            is_bigendian=0, step=step, data=data.reshape(-1)))


def ref_camera_info(K, width, height, stamp, frame_id):
    P = np.zeros((3, 4))
    P[:, :3] = K
    roi = _t("sensor_msgs/msg/RegionOfInterest")(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return _ref(_t("sensor_msgs/msg/CameraInfo")(
        header=_header(stamp, frame_id), height=height, width=width, distortion_model="plumb_bob",
        d=np.zeros(5), k=K.reshape(-1), r=np.eye(3).reshape(-1), p=P.reshape(-1), binning_x=0, binning_y=0,
        roi=roi))


def ref_twist(c, stamp, frame_id):
    twist = _t("geometry_msgs/msg/Twist")(linear=_vec(c[0], c[1], c[2]), angular=_vec(0.0, 0.0, c[3]))
    return _ref(_t("geometry_msgs/msg/TwistStamped")(header=_header(stamp, frame_id), twist=twist))


def ref_pose(p, yaw, stamp, frame_id):
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(p[0]), y=float(p[1]), z=float(p[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=0.0, y=0.0, z=float(np.sin(yaw / 2)),
                                                       w=float(np.cos(yaw / 2))))
    return _ref(_t("geometry_msgs/msg/PoseStamped")(header=_header(stamp, frame_id), pose=pose))


def ref_string(text):
    return _ref(_t("std_msgs/msg/String")(data=text))


class Cam:
    def __init__(self, K, width, height):
        self.K, self.width, self.height = K, width, height


def _text(rng, n: int) -> str:
    alphabet = "abcxyz_/0123456789éü✓"
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), n))


def test_builders_byte_identical_to_rosbags():
    rng = np.random.default_rng(7)
    for trial in range(200):
        stamp = int(rng.integers(0, (2**31 - 1) * 1_000_000_000 + 999_999_999, endpoint=True))
        if trial == 0:
            stamp = 0
        elif trial == 1:
            stamp = (2**31 - 1) * 1_000_000_000 + 999_999_999  # the last representable stamp
        frame = _text(rng, trial % 11)  # every length mod 4 and mod 8, empty included
        h, w = (int(v) for v in rng.integers(1, 12, 2))  # h * w * 3 mostly no multiple of 4
        rgb = rng.integers(0, 256, (h, w, 3), np.uint8)
        if trial % 3 == 0:
            rgb = rgb[:, ::-1]  # not contiguous
        assert M.image_rgb_cdr(rgb, stamp, frame) == ref_image(np.ascontiguousarray(rgb), h, w, w * 3, "rgb8",
                                                               stamp, frame)
        depth = rng.uniform(0, 50, (h, w)).astype(np.float64 if trial % 2 else np.float32)
        assert M.image_depth_cdr(depth, stamp, frame) == ref_image(
            np.ascontiguousarray(depth, "<f4").view(np.uint8), h, w, w * 4, "32FC1", stamp, frame)
        assert M.image_depth_cdr(depth[:, :, None], stamp, frame) == M.image_depth_cdr(depth, stamp, frame)
        state = rng.standard_normal(13) * 10.0 ** rng.integers(-300, 300, 13)
        assert M.odometry_cdr(state, stamp) == ref_odometry(state, stamp)
        assert M.odometry_cdr(list(state), stamp) == ref_odometry(state, stamp)
        cmd = rng.standard_normal(4).astype(np.float32 if trial % 2 else np.float64)
        assert M.twist_cdr(cmd, stamp, frame) == ref_twist(np.asarray(cmd, np.float64), stamp, frame)
        yaw = float(rng.uniform(-4, 4))
        assert M.pose_cdr(state[:3], yaw, stamp, frame) == ref_pose(state[:3], yaw, stamp, frame)
        K = rng.standard_normal((3, 3))
        cam = Cam(K, int(w), int(h))
        assert M.camera_info_cdr(cam, stamp, frame) == ref_camera_info(K, w, h, stamp, frame)
        text = _text(rng, int(rng.integers(0, 40)))
        assert M.string_cdr(text) == ref_string(text)
        payload = {"episode": text, "k": trial, "trajectory": state[:6].tolist()}
        assert M.json_cdr(payload) == ref_string(json.dumps(payload))


def test_builders_decode_with_rosbags():
    """What the builders write decodes to the inputs (a round trip through rosbags' deserializer)."""
    rng = np.random.default_rng(3)
    state, stamp = rng.standard_normal(13), 1_234 * 1_000_000_000 + 5
    odom = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, stamp))
    assert np.array_equal(M.state_of(odom), state) and M.stamp_ns(odom) == stamp
    assert (odom.header.frame_id, odom.child_frame_id) == ("map", "base_link")
    assert not odom.pose.covariance.any() and not odom.twist.covariance.any()
    rgb = rng.integers(0, 256, (5, 7, 3), np.uint8)
    image = M.decode("sensor_msgs/msg/Image", M.image_rgb_cdr(rgb, stamp, "cam_x"))
    assert np.array_equal(M.rgb_of(image), rgb) and image.header.frame_id == "cam_x" and image.step == 21
    info = M.decode("sensor_msgs/msg/CameraInfo", M.camera_info_cdr(Cam(np.eye(3) * 2, 7, 5), stamp + 1))
    assert M.stamp_ns(info) == stamp + 1 and (info.width, info.height) == (7, 5) and info.k[0] == 2.0
    assert M.decode("std_msgs/msg/String", M.string_cdr("héllo")).data == "héllo"


def test_builders_reject_bad_input():
    with pytest.raises(ValueError, match=">= 0 ns"):
        M.odometry_cdr(np.zeros(13), -1)
    with pytest.raises(ValueError, match="int32"):
        M.twist_cdr(np.zeros(4), 2**31 * 1_000_000_000)
    with pytest.raises(ValueError, match="not finite"):
        M.odometry_cdr(np.r_[np.zeros(12), np.inf], 0)
    with pytest.raises(ValueError, match="3x3"):
        M.camera_info_cdr(Cam(np.eye(2), 4, 4), 0)
    with pytest.raises(TypeError, match="frame_id must be a str"):
        M.twist_cdr(np.zeros(4), 0, frame_id=None)
    with pytest.raises(ValueError, match="uint8"):
        M.image_rgb_cdr(np.zeros((2, 2, 3), np.float32), 0)
