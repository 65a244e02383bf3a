"""The struct-packed CDR builders of airplay.data.messages give, byte for byte, what rosbags'
``serialize_cdr`` writes for the same message objects: random values, stamps up to the int32
seconds limit, frame ids and strings of every length modulo 4 (UTF-8 too), images whose byte
count is no multiple of 4 and non-contiguous arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airplay import frames
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
    """REP-105: the twist in base_link, its linear part the map velocity rotated by the attitude."""
    pose = _t("geometry_msgs/msg/Pose")(
        position=_t("geometry_msgs/msg/Point")(x=float(s[0]), y=float(s[1]), z=float(s[2])),
        orientation=_t("geometry_msgs/msg/Quaternion")(x=float(s[3]), y=float(s[4]), z=float(s[5]), w=float(s[6])))
    twist = _t("geometry_msgs/msg/Twist")(linear=_vec(*frames.map_to_body_xyzw(s[3:7], s[7:10])),
                                          angular=_vec(*s[10:13]))
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
        state[3:7] = rng.standard_normal(4)
        state[3:7] /= np.linalg.norm(state[3:7])  # a unit quaternion, the velocity within rotation's range:
        state[7:10] = rng.standard_normal(3) * 10.0 ** rng.integers(-300, 150, 3)  # REP-105 rotates it
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
    state[3:7] /= np.linalg.norm(state[3:7])
    odom = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, stamp))
    back = M.state_of(odom)
    # Pose and body rates bit for bit; the velocity went to base_link and back: a few ulp.
    assert np.array_equal(np.r_[back[:7], back[10:]], np.r_[state[:7], state[10:]]) and M.stamp_ns(odom) == stamp
    np.testing.assert_allclose(back[7:10], state[7:10], rtol=0, atol=1e-14 * np.linalg.norm(state[7:10]))
    assert (odom.header.frame_id, odom.child_frame_id) == ("map", "base_link")
    assert not odom.pose.covariance.any() and not odom.twist.covariance.any()
    rgb = rng.integers(0, 256, (5, 7, 3), np.uint8)
    image = M.decode("sensor_msgs/msg/Image", M.image_rgb_cdr(rgb, stamp, "cam_x"))
    assert np.array_equal(M.rgb_of(image), rgb) and image.header.frame_id == "cam_x" and image.step == 21
    info = M.decode("sensor_msgs/msg/CameraInfo", M.camera_info_cdr(Cam(np.eye(3) * 2, 7, 5), stamp + 1))
    assert M.stamp_ns(info) == stamp + 1 and (info.width, info.height) == (7, 5) and info.k[0] == 2.0
    assert M.decode("std_msgs/msg/String", M.string_cdr("héllo")).data == "héllo"


def test_odometry_twist_is_rep105_and_old_bags_read_as_map_frame():
    """/odom's twist is in base_link: yawed 90 degrees (x forward = north) and flying north at 2 m/s
    the body frame sees 2 m/s forward; pitched nose down by 30 degrees and flying level east, the
    body velocity has an upward component. A bag_format 1 message (older bags: map-frame twist)
    reads back unchanged."""
    c, s_ = np.cos(np.pi / 4), np.sin(np.pi / 4)
    yawed = np.r_[1.0, 2.0, 3.0, 0.0, 0.0, s_, c, 0.0, 2.0, -0.5, 0.1, 0.2, 0.3]
    odom = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(yawed, 0))
    v = odom.twist.twist.linear
    np.testing.assert_allclose([v.x, v.y, v.z], [2.0, 0.0, -0.5], atol=1e-15)
    w = odom.twist.twist.angular
    assert [w.x, w.y, w.z] == [0.1, 0.2, 0.3]  # body rates already: not rotated
    np.testing.assert_allclose(M.state_of(odom), yawed, rtol=0, atol=1e-15)
    half = np.radians(30.0) / 2  # pitch +30 deg about y (FLU): nose down
    pitched = np.r_[np.zeros(3), 0.0, np.sin(half), 0.0, np.cos(half), 1.0, 0.0, 0.0, np.zeros(3)]
    v = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(pitched, 0)).twist.twist.linear
    np.testing.assert_allclose([v.x, v.y, v.z], [np.cos(2 * half), 0.0, np.sin(2 * half)], atol=1e-15)
    old = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(yawed, 0))
    old.twist.twist.linear = _vec(*yawed[7:10])  # what airplay wrote before bag_format 2
    assert np.array_equal(M.state_of(old, bag_format=1), yawed)
    with pytest.raises(ValueError, match="bag_format 3 is not one this airplay reads"):
        M.state_of(old, bag_format=3)


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
