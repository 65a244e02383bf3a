"""The autopilot's own geofence as a hard limit behind the bridge's braking fence.

With ``autopilot_fence:=true`` the bridge, before it reports ``ready``, installs its fence in
the autopilot: the horizontal polygon (``fence_box`` or ``fence_polygon``) as a MAVLink
inclusion fence (MAV_MISSION_TYPE_FENCE, MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION vertices in
latitude/longitude) and the ceiling (``fence_z_max``) as the autopilot's maximum altitude above
home, moved ``autopilot_fence_margin_m`` and ``autopilot_ceiling_margin_m`` outwards; it reads
them back and compares them, and sets the breach action. The bridge's own fence brakes
``fence_margin_m`` inside the boundary, so the autopilot's fence acts only when the vehicle is
well past it (a failed brake, a stale estimate, a dead bridge). The margins allow for the
autopilot judging its fence by its global position and its home altitude, not by the local
estimate the bridge flies by. The ceiling needs the larger one: PX4 (v1.17-dev SIH) moves its
home altitude in flight, and its altitude above home differed from the true height above the
take-off point by -2.4 to +3.1 m over ten flights (home_position and
vehicle_global_position_groundtruth in the ULogs of ``pytest test/test_px4_sitl.py``); with a
1 m ceiling margin PX4 declared a breach during a 0.9 m take-off under a 1.9 m ceiling.

Per autopilot:

==========  ==========================================  ==========================================
            PX4                                         ArduPilot
==========  ==========================================  ==========================================
polygon     fence mission (GF_SOURCE: its estimate)     fence mission, FENCE_TYPE bit 4
ceiling     GF_MAX_VER_DIST (m above home)              FENCE_ALT_MAX (m above home), bit 1
action      GF_ACTION 5 Land / 2 Hold                   FENCE_ACTION 2 Land / 4 Brake-or-Land
predict     GF_PREDICT 0 (acts at the boundary)         (acts at the boundary)
enable      (the fence is active once uploaded)         FENCE_ENABLE 1
==========  ==========================================  ==========================================

A floor (``fence_z_min``) stays the bridge's alone: an autopilot floor fence would trip on the
take-off. When the flight has ended on the ground, :meth:`InstalledFence.restore` puts back the
fence and the parameters that were there before.

Map metres (ENU) become latitude/longitude through the autopilot's EKF origin
(GPS_GLOBAL_ORIGIN; map = the :class:`~airplay.bridge.map_tie.MapTie` of local ENU) with the local flat-earth (equirectangular)
approximation, good to a millimetre over a few hundred metres. No rclpy here.
"""

from __future__ import annotations

import logging
import math
import queue
import struct
import time
from dataclasses import dataclass

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge.geofence import signed_area

log = logging.getLogger("airplay.mavlink")

EARTH_RADIUS_M = 6378137.0
"""WGS-84 equatorial radius, m: the flat-earth conversion's scale."""
FENCE_ACTIONS = ("land", "hold")
"""What the autopilot does when its fence is breached (autopilot_fence_action). Land is the
default: PX4 keeps re-asserting a Hold while the breach lasts, so a vehicle held above a ceiling
or outside a wall cannot be landed by the bridge's LAND until it is back inside."""

_PX4_ACTION = {"hold": 2, "land": 5}          # GF_ACTION: 2 Hold mode, 5 Land mode
_ARDUPILOT_ACTION = {"hold": 4, "land": 2}    # FENCE_ACTION: 4 Brake or Land, 2 Always Land
_ARDUPILOT_FENCE_ALT_MAX, _ARDUPILOT_FENCE_POLYGON = 1, 4   # FENCE_TYPE bits
_INT = mavlink.MAV_PARAM_TYPE_INT32
_FLOAT = mavlink.MAV_PARAM_TYPE_REAL32
_LATLON_TOLERANCE_E7 = 2      # read-back agreement of a vertex, 1e-7 degrees (~1 cm)


class AutopilotFenceError(RuntimeError):
    """Installing, checking or restoring the autopilot's fence failed; the message says which step."""


@dataclass(frozen=True)
class GlobalOrigin:
    """The autopilot's EKF origin (GPS_GLOBAL_ORIGIN): degrees, metres AMSL."""

    lat_deg: float
    lon_deg: float
    alt_m: float


def local_to_latlon(north_m: float, east_m: float, origin: GlobalOrigin) -> tuple[float, float]:
    """Latitude/longitude (degrees) of the point ``north_m``/``east_m`` from ``origin`` (flat earth)."""
    lat = origin.lat_deg + math.degrees(north_m / EARTH_RADIUS_M)
    lon = origin.lon_deg + math.degrees(east_m / (EARTH_RADIUS_M * math.cos(math.radians(origin.lat_deg))))
    return lat, lon


def fence_vertices_latlon(polygon_map_xy, tie, origin: GlobalOrigin) -> list[tuple[int, int]]:
    """The map-frame polygon ``[(x, y), ...]`` (ENU metres) as (lat, lon) in 1e-7 degrees, through
    ``tie`` (:class:`~airplay.bridge.map_tie.MapTie`: map = Rz(yaw) local ENU + origin; a plain
    (3,) origin is a shift without a turn)."""
    from airplay.bridge.map_tie import MapTie

    if not isinstance(tie, MapTie):
        tie = MapTie(tuple(float(v) for v in tie))
    out = []
    for x, y in polygon_map_xy:
        east, north, _ = tie.position_to_local((float(x), float(y), 0.0))
        lat, lon = local_to_latlon(float(north), float(east), origin)
        out.append((int(round(lat * 1e7)), int(round(lon * 1e7))))
    return out


def expand_polygon(polygon_xy, margin_m: float) -> tuple[tuple[float, float], ...]:
    """The simple polygon ``polygon_xy`` (either orientation) with every edge moved ``margin_m``
    outwards (mitred corners: a box grows by ``margin_m`` on each side)."""
    p = np.asarray(polygon_xy, np.float64)
    if margin_m == 0:
        return tuple((float(x), float(y)) for x, y in p)
    if signed_area(p) < 0:
        p = p[::-1]
    edges = np.roll(p, -1, axis=0) - p                               # edge i: p[i] -> p[i+1]
    normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1) / np.linalg.norm(edges, axis=1)[:, None]  # outward (CCW)
    before, after = np.roll(normals, 1, axis=0), normals             # the edges meeting at vertex i
    miter = (before + after) / (1.0 + np.sum(before * after, axis=1))[:, None]
    return tuple((float(x), float(y)) for x, y in p + margin_m * miter)


def box_polygon(box) -> tuple[tuple[float, float], ...]:
    """(x_min, y_min, x_max, y_max) as its four corners, counter-clockwise."""
    x0, y0, x1, y1 = (float(v) for v in box)
    return ((x0, y0), (x1, y0), (x1, y1), (x0, y1))


def _encode_param(flavour: str, value: float, kind: int) -> float:
    """The PARAM_SET ``param_value`` of ``value``: PX4 sends integers byte-wise in the float's
    bytes (MAV_PROTOCOL_CAPABILITY_PARAM_ENCODE_BYTEWISE), ArduPilot as a C cast."""
    if kind == _INT and flavour == "px4":
        return struct.unpack("<f", struct.pack("<i", int(value)))[0]
    return float(value)


def _decode_param(flavour: str, msg) -> float:
    if msg.param_type == _INT and flavour == "px4":
        return float(struct.unpack("<i", struct.pack("<f", msg.param_value))[0])
    return float(msg.param_value)


class _Inbox:
    """The autopilot's messages of some types, queued by the receive thread while a transfer runs."""

    def __init__(self, autopilot, kinds: tuple[str, ...]) -> None:
        self.autopilot, self.kinds, self.queue = autopilot, kinds, queue.Queue()

    def __enter__(self) -> "_Inbox":
        self.autopilot.on_message.append(self._put)
        return self

    def __exit__(self, *exc) -> None:
        self.autopilot.on_message.remove(self._put)

    def _put(self, msg) -> None:
        if msg.get_type() in self.kinds:
            self.queue.put(msg)

    def get(self, deadline: float, accept) -> object | None:
        """The next queued message for which ``accept(msg)`` holds, or None at ``deadline`` (monotonic)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                msg = self.queue.get(timeout=left)
            except queue.Empty:
                return None
            if accept(msg):
                return msg


class FenceTransfer:
    """The MAVLink mission protocol for MAV_MISSION_TYPE_FENCE and the parameter protocol, on an
    :class:`airplay.bridge.mavlink_link.Autopilot` (its receive thread delivers the answers).
    ``timeout_s``: the wait for each answer; each request is sent up to ``retries`` times."""

    def __init__(self, autopilot, timeout_s: float = 1.0, retries: int = 3) -> None:
        self.ap, self.timeout_s, self.retries = autopilot, timeout_s, retries

    @property
    def _target(self) -> tuple[int, int]:
        st = self.ap.status
        if st.system is None:
            raise AutopilotFenceError("no autopilot heartbeat yet")
        return st.system, st.component

    def _ask(self, kinds: tuple[str, ...], send, accept, what: str):
        with _Inbox(self.ap, kinds) as inbox:
            for _ in range(self.retries):
                send()
                msg = inbox.get(time.monotonic() + self.timeout_s, accept)
                if msg is not None:
                    return msg
        raise AutopilotFenceError(f"no answer to {what} after {self.retries} tries of {self.timeout_s:.1f} s")

    # -- origin ------------------------------------------------------------------------------
    def global_origin(self) -> GlobalOrigin:
        """The EKF origin, asked for with MAV_CMD_REQUEST_MESSAGE(GPS_GLOBAL_ORIGIN)."""
        sysid, compid = self._target

        def send() -> None:
            self.ap.link.mav.command_long_send(sysid, compid, mavlink.MAV_CMD_REQUEST_MESSAGE, 0,
                                               mavlink.MAVLINK_MSG_ID_GPS_GLOBAL_ORIGIN, 0, 0, 0, 0, 0, 0)

        msg = self._ask(("GPS_GLOBAL_ORIGIN",), send, lambda m: True, "the request for GPS_GLOBAL_ORIGIN")
        return GlobalOrigin(msg.latitude / 1e7, msg.longitude / 1e7, msg.altitude / 1000.0)

    # -- parameters --------------------------------------------------------------------------
    def get_param(self, name: str) -> float:
        sysid, compid = self._target
        msg = self._ask(("PARAM_VALUE",),
                        lambda: self.ap.link.mav.param_request_read_send(sysid, compid, name.encode(), -1),
                        lambda m: m.param_id == name, f"PARAM_REQUEST_READ {name}")
        return _decode_param(self.ap.status.flavour, msg)

    def set_param(self, name: str, value: float, kind: int) -> float:
        """PARAM_SET, then the echoed PARAM_VALUE must hold ``value``; returns it."""
        sysid, compid = self._target
        flavour = self.ap.status.flavour
        encoded = _encode_param(flavour, value, kind)
        msg = self._ask(("PARAM_VALUE",),
                        lambda: self.ap.link.mav.param_set_send(sysid, compid, name.encode(), encoded, kind),
                        lambda m: m.param_id == name, f"PARAM_SET {name}={value:g}")
        got = _decode_param(flavour, msg)
        if not math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-6):
            raise AutopilotFenceError(f"parameter {name}: set to {value:g}, the autopilot holds {got:g}")
        return got

    # -- the fence mission ---------------------------------------------------------------------
    def download(self) -> list[tuple[int, int, int, float]]:
        """The autopilot's fence items as (command, lat 1e-7 deg, lon 1e-7 deg, param1)."""
        sysid, compid = self._target
        mav, fence = self.ap.link.mav, mavlink.MAV_MISSION_TYPE_FENCE
        count = self._ask(("MISSION_COUNT",), lambda: mav.mission_request_list_send(sysid, compid, fence),
                          lambda m: getattr(m, "mission_type", fence) == fence, "MISSION_REQUEST_LIST (fence)").count
        items = []
        for seq in range(count):
            item = self._ask(("MISSION_ITEM_INT",), lambda s=seq: mav.mission_request_int_send(sysid, compid, s, fence),
                             lambda m, s=seq: m.seq == s and m.mission_type == fence,
                             f"MISSION_REQUEST_INT {seq} (fence)")
            items.append((int(item.command), int(item.x), int(item.y), float(item.param1)))
        mav.mission_ack_send(sysid, compid, mavlink.MAV_MISSION_ACCEPTED, fence)
        return items

    def upload(self, items: list[tuple[int, int, int, float]]) -> None:
        """Replace the autopilot's fence by ``items`` ((command, lat, lon, param1), as :meth:`download`
        gives them; an empty list clears it); raises unless the autopilot ACKs MAV_MISSION_ACCEPTED."""
        sysid, compid = self._target
        mav, fence = self.ap.link.mav, mavlink.MAV_MISSION_TYPE_FENCE
        if not items:
            ack = self._ask(("MISSION_ACK",), lambda: mav.mission_clear_all_send(sysid, compid, fence),
                            lambda m: getattr(m, "mission_type", fence) == fence, "MISSION_CLEAR_ALL (fence)")
            if ack.type != mavlink.MAV_MISSION_ACCEPTED:
                raise AutopilotFenceError(f"clearing the fence refused: {_mission_result(ack.type)}")
            return
        kinds = ("MISSION_REQUEST_INT", "MISSION_REQUEST", "MISSION_ACK")
        with _Inbox(self.ap, kinds) as inbox:
            answer = None
            for _ in range(self.retries):
                mav.mission_count_send(sysid, compid, len(items), fence)
                answer = inbox.get(time.monotonic() + self.timeout_s, lambda m: m.mission_type == fence)
                if answer is not None:
                    break
            while True:
                if answer is None:
                    raise AutopilotFenceError(f"the fence upload ({len(items)} items) stalled: no MISSION_REQUEST "
                                              f"or MISSION_ACK within {self.timeout_s:.1f} s")
                if answer.get_type() == "MISSION_ACK":
                    if answer.type != mavlink.MAV_MISSION_ACCEPTED:
                        raise AutopilotFenceError(f"the fence upload refused: {_mission_result(answer.type)}"
                                                  f"{self.ap.recent_texts()}")
                    return
                if not 0 <= answer.seq < len(items):
                    raise AutopilotFenceError(f"the autopilot asked for fence item {answer.seq} of {len(items)}")
                command, lat, lon, param1 = items[answer.seq]
                mav.mission_item_int_send(sysid, compid, answer.seq, mavlink.MAV_FRAME_GLOBAL, command, 0, 1,
                                          param1, 0, 0, 0, lat, lon, 0.0, fence)
                answer = inbox.get(time.monotonic() + self.timeout_s * self.retries,
                                   lambda m: m.mission_type == fence)


def _mission_result(code: int) -> str:
    entry = mavlink.enums["MAV_MISSION_RESULT"].get(code)
    return entry.name if entry is not None else str(code)


@dataclass(frozen=True)
class FenceRequest:
    """What to install: the polygon (map x/y metres, ENU), the ceiling (map z, None: none), the
    ground's map z now (heights above home are measured from it), the breach action."""

    polygon_map_xy: tuple[tuple[float, float], ...] | None
    z_max_map_m: float | None
    ground_map_z_m: float
    action: str = "land"
    margin_m: float = 0.0           # the polygon moved this far outwards, m
    ceiling_margin_m: float = 0.0   # the ceiling moved this far up, m

    def __post_init__(self) -> None:
        if not (math.isfinite(self.margin_m) and self.margin_m >= 0):
            raise ValueError(f"autopilot_fence_margin_m must be >= 0, got {self.margin_m!r}")
        if not (math.isfinite(self.ceiling_margin_m) and self.ceiling_margin_m >= 0):
            raise ValueError(f"autopilot_ceiling_margin_m must be >= 0, got {self.ceiling_margin_m!r}")
        if self.action not in FENCE_ACTIONS:
            raise ValueError(f"autopilot_fence_action must be one of {', '.join(FENCE_ACTIONS)}, got {self.action!r}")


def ceiling_above_home_m(request: FenceRequest) -> float | None:
    """The autopilot's ceiling in metres above home (the vehicle on the ground now): the bridge's
    ``fence_z_max`` raised by ``ceiling_margin_m`` (None: no ceiling). Raises
    :class:`AutopilotFenceError` where that is not above the vehicle."""
    if request.z_max_map_m is None:
        return None
    ceiling = request.z_max_map_m + request.ceiling_margin_m - request.ground_map_z_m
    if ceiling <= 0:
        raise AutopilotFenceError(f"the ceiling fence_z_max ({request.z_max_map_m:g}) + autopilot_ceiling_margin_m "
                                  f"is not above the vehicle on the ground (map z {request.ground_map_z_m:.2f})")
    return ceiling


@dataclass
class InstalledFence:
    """An installed fence and what it replaced; :meth:`restore` puts that back."""

    transfer: FenceTransfer
    previous_items: list
    previous_params: dict            # name -> (value, MAV_PARAM_TYPE)
    summary: str

    def restore(self) -> None:
        """The autopilot's previous fence and parameters (parameters first: a fence left without its
        enable is harmless)."""
        for name, (value, kind) in self.previous_params.items():
            self.transfer.set_param(name, value, kind)
        self.transfer.upload(self.previous_items)
        log.info("autopilot fence: the previous fence (%d items) and parameters (%s) restored",
                 len(self.previous_items), ", ".join(f"{k}={v[0]:g}" for k, v in self.previous_params.items()))


def install(autopilot, request: FenceRequest, tie, timeout_s: float = 1.0) -> InstalledFence:
    """Install ``request`` in the autopilot, read it back, and return what to restore afterwards.
    Raises :class:`AutopilotFenceError` naming the step that failed (nothing is left half-set: a
    failure after the first change restores what was there)."""
    flavour = autopilot.status.flavour
    if flavour not in ("px4", "ardupilot"):
        raise AutopilotFenceError(f"unknown autopilot flavour {flavour!r}")
    t = FenceTransfer(autopilot, timeout_s)
    items = []
    if request.polygon_map_xy is not None:
        origin = t.global_origin()
        vertices = fence_vertices_latlon(expand_polygon(request.polygon_map_xy, request.margin_m), tie, origin)
        command = mavlink.MAV_CMD_NAV_FENCE_POLYGON_VERTEX_INCLUSION
        items = [(command, lat, lon, float(len(vertices))) for lat, lon in vertices]
    ceiling = ceiling_above_home_m(request)
    if flavour == "px4":
        # GF_PREDICT 0: PX4 acts at the boundary, not ahead of it (the bridge's own fence does the
        # braking ahead; PX4's predictor tripped during a take-off 0.9 m under a ceiling 1.8 m up)
        params = {"GF_ACTION": (_PX4_ACTION[request.action], _INT), "GF_PREDICT": (0, _INT)}
        if ceiling is not None:
            params["GF_MAX_VER_DIST"] = (ceiling, _FLOAT)
    else:
        fence_type = (_ARDUPILOT_FENCE_POLYGON if items else 0) | (_ARDUPILOT_FENCE_ALT_MAX if ceiling else 0)
        params = {"FENCE_TYPE": (fence_type, _INT), "FENCE_ACTION": (_ARDUPILOT_ACTION[request.action], _INT)}
        if ceiling is not None:
            params["FENCE_ALT_MAX"] = (ceiling, _FLOAT)
        params["FENCE_ENABLE"] = (1, _INT)
    previous_items = t.download()
    previous_params = {name: (t.get_param(name), kind) for name, (_, kind) in params.items()}
    installed = InstalledFence(t, previous_items, previous_params, "")
    try:
        t.upload(items)
        for name, (value, kind) in params.items():
            t.set_param(name, value, kind)
        back = t.download()
        if len(back) != len(items) or any(
                b[0] != i[0] or abs(b[1] - i[1]) > _LATLON_TOLERANCE_E7 or abs(b[2] - i[2]) > _LATLON_TOLERANCE_E7
                for b, i in zip(back, items)):
            raise AutopilotFenceError(f"the fence read back differs from the one uploaded: {back} vs {items}")
    except AutopilotFenceError:
        try:
            installed.restore()
        except AutopilotFenceError as again:
            log.error("autopilot fence: restoring the previous fence failed too: %s", again)
        raise
    parts = []
    if items:
        parts.append(f"{len(items)}-vertex inclusion polygon")
    if items:
        parts.append(f"{request.margin_m:g} m outside the bridge's polygon")
    if ceiling is not None:
        parts.append(f"ceiling {ceiling:.2f} m above home, {request.ceiling_margin_m:g} m above the bridge's")
    parts.append(", ".join(f"{name}={value:g}" for name, (value, _) in params.items()))
    installed.summary = "; ".join(parts)
    log.info("autopilot fence installed and read back: %s (on breach: %s)", installed.summary, request.action)
    return installed


def request_from_supervisor(sup, ground_map_z_m: float, action: str, margin_m: float = 0.0,
                            ceiling_margin_m: float = 0.0) -> FenceRequest | None:
    """The fence of a SupervisorConfig as a FenceRequest (None where it has no polygon and no ceiling)."""
    polygon = sup.fence_polygon_xy_m
    if polygon is None and sup.fence_box_xy_m is not None:
        polygon = box_polygon(sup.fence_box_xy_m)
    if polygon is None and sup.fence_z_max_m is None:
        return None
    if polygon is not None:
        polygon = tuple((float(x), float(y)) for x, y in np.asarray(polygon, np.float64))
    return FenceRequest(polygon, sup.fence_z_max_m, ground_map_z_m, action, margin_m, ceiling_margin_m)
