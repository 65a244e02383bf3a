"""System identification: airplay's flight model fitted to a real autopilot's response.

:func:`fly_excitation` flies a vehicle through the bridge's own flight sequence (explicit arming,
take-off, offboard control, the safety supervisor) and, instead of a policy, commands a fixed
excitation (:data:`EXCITATION`: velocity steps forward, sideways, up and down, yaw-rate steps,
and a forward chirp of rising frequency), recording every control period the command the bridge
sent (after the supervisor's limits) and the autopilot's estimated velocity and yaw rate. Then it
lands.

:func:`fit_profile` fits the parameters of :mod:`airplay.sim.dynamics` (a first-order velocity lag
with clipped acceleration, horizontally and vertically; a first-order yaw-rate lag) plus a common
command delay, by a grid search that simulates the model on the recorded commands and minimises
the RMS velocity error. The result is a vehicle profile: a ``config/vehicle.yaml``-style file
(:func:`airplay.sim.dynamics.load_vehicle_params` reads it) whose ``profile`` mapping holds the
delay, the fit errors, what was identified and, where the simulator's true state was given, the
position estimate's error against it.

Frames: commands and velocities in the heading frame (x forward, y left, z up; m/s), yaw rate
rad/s CCW. Times are seconds on the flight controller's clock. No rclpy.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit

from airplay import frames

log = logging.getLogger("airplay.identify")

EXCITATION: tuple[tuple[float, tuple[float, float, float, float]], ...] = (
    (2.0, (0.0, 0.0, 0.0, 0.0)),
    (3.0, (1.0, 0.0, 0.0, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (3.0, (-1.0, 0.0, 0.0, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (3.0, (0.0, 1.0, 0.0, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (3.0, (0.0, -1.0, 0.0, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (2.0, (0.0, 0.0, 0.5, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (2.0, (0.0, 0.0, -0.5, 0.0)), (3.0, (0.0, 0.0, 0.0, 0.0)),
    (2.5, (0.0, 0.0, 0.0, 0.8)), (2.5, (0.0, 0.0, 0.0, 0.0)),
    (2.5, (0.0, 0.0, 0.0, -0.8)), (2.5, (0.0, 0.0, 0.0, 0.0)),
)
"""(seconds, heading-frame command) steps; then :data:`CHIRP`. A vehicle that follows them flies
within ~3.5 m of its start horizontally and 1 m vertically."""
CHIRP = (10.0, 0.8, 0.1, 1.0)
"""Forward chirp: seconds, amplitude m/s, start and end frequency Hz (then 2 s of hover)."""


def excitation_command(t_s: float) -> np.ndarray | None:
    """The excitation's command ``t_s`` seconds in (None: it is over)."""
    for duration, cmd in EXCITATION:
        if t_s < duration:
            return np.asarray(cmd, np.float64)
        t_s -= duration
    seconds, amplitude, f0, f1 = CHIRP
    if t_s < seconds:
        phase = 2.0 * math.pi * (f0 * t_s + 0.5 * (f1 - f0) / seconds * t_s * t_s)
        return np.array([amplitude * math.sin(phase), 0.0, 0.0, 0.0])
    if t_s < seconds + 2.0:
        return np.zeros(4)
    return None


def excitation_duration_s() -> float:
    return sum(d for d, _ in EXCITATION) + CHIRP[0] + 2.0


@dataclass
class Recording:
    """Per control period: t (s), sent (N, 4) the command sent, velocity (N, 3) heading frame m/s,
    yaw_rate (N,) rad/s, position (N, 3) map m (the estimate), truth (N, 3) or None."""

    t: list = field(default_factory=list)
    sent: list = field(default_factory=list)
    velocity: list = field(default_factory=list)
    yaw_rate: list = field(default_factory=list)
    position: list = field(default_factory=list)

    def arrays(self):
        return (np.asarray(self.t), np.asarray(self.sent).reshape(-1, 4), np.asarray(self.velocity).reshape(-1, 3),
                np.asarray(self.yaw_rate), np.asarray(self.position).reshape(-1, 3))


def fly_excitation(flight, period_s: float, timeout_s: float = 120.0, progress=None) -> Recording:
    """With a :class:`~airplay.bridge.flight.FlightController` already started and asked to arm:
    wait for ``flying``, fly :func:`excitation_command` at one command per ``period_s``, record
    (:class:`Recording`), then land and wait for the touchdown. ``progress(fraction)`` is called
    every second. A flight that ends early (a failure, the operator) raises RuntimeError."""
    rec = Recording()
    deadline = time.monotonic() + timeout_s
    while flight.phase != "flying":
        if flight.finished:
            raise RuntimeError(f"the flight ended before the excitation ({flight.phase}: {flight.error})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not flying within {timeout_s:.0f} s (phase {flight.phase})")
        flight.tick()
        time.sleep(period_s)
    t0, last_report = flight.clock(), -1
    while True:
        now = flight.clock()
        cmd = excitation_command(now - t0)
        if cmd is None:
            break
        if flight.phase != "flying":
            raise RuntimeError(f"the flight left 'flying' during the excitation ({flight.phase}: {flight.error})")
        flight.on_command(cmd, now)
        out = flight.tick()
        state = flight.autopilot.telemetry.state()
        if out is not None and out.command is not None and state is not None:
            yaw = frames.yaw_of_state(state)
            rec.t.append(now)
            rec.sent.append(np.asarray(out.command, np.float64))
            rec.velocity.append(frames.map_to_heading(state[7:10], yaw))
            rec.yaw_rate.append(float(state[12]))
            rec.position.append(state[0:3].copy())
        if progress is not None and int(now - t0) != last_report:
            last_report = int(now - t0)
            progress((now - t0) / excitation_duration_s())
        time.sleep(max(0.0, period_s - (flight.clock() - now)))
    flight.land("the excitation is over")
    end = time.monotonic() + 90.0
    while not flight.finished and time.monotonic() < end:
        flight.tick()
        time.sleep(period_s)
    return rec


# -- the fit ----------------------------------------------------------------------------------------

TAU_GRID_S = tuple(np.round(np.arange(0.05, 1.61, 0.025), 3))
ACCEL_GRID_M_S2 = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0)
DELAY_GRID_PERIODS = tuple(range(11))


def simulate_lag(t, command, v0, tau_s: float, accel_max: float, delay_periods: int, substeps: int = 5):
    """Velocity (N, k) of the first-order lag of :mod:`airplay.sim.dynamics` (``tau_s``, the norm of
    the acceleration clipped to ``accel_max``) driven by ``command`` (N, k) delayed by
    ``delay_periods`` samples, from ``v0`` (k,)."""
    command = np.ascontiguousarray(command, np.float64)
    return _lag(np.ascontiguousarray(t, np.float64), command, np.asarray(v0, np.float64).copy(), float(tau_s),
                float(accel_max), int(delay_periods), int(substeps))


@njit(cache=True)
def _lag(t, command, v0, tau, accel_max, delay, substeps):
    n, k = command.shape
    out = np.empty((n, k))
    v = v0.copy()
    out[0] = v
    a = np.empty(k)
    for i in range(1, n):
        j = max(i - 1 - delay, 0)
        dt = (t[i] - t[i - 1]) / substeps
        for _ in range(substeps):
            norm = 0.0
            for c in range(k):
                a[c] = (command[j, c] - v[c]) / tau
                norm += a[c] * a[c]
            norm = math.sqrt(norm)
            scale = accel_max / norm if norm > accel_max else 1.0
            for c in range(k):
                v[c] += a[c] * scale * dt
        out[i] = v
    return out


def _fit_axis(t, command, measured, delays, accels, base_accel: float = 1e9):
    """(rms, tau, accel, delay) of the best fit; of fits within 1 % of the best RMS, the one whose
    acceleration limit is nearest ``base_accel`` (a limit the excitation never reached is not
    identified: the base's is kept)."""
    fits = []
    for delay in delays:
        for accel in accels:
            for tau in TAU_GRID_S:
                sim = simulate_lag(t, command, measured[0], tau, accel, delay)
                fits.append((float(np.sqrt(np.mean((sim - measured) ** 2))), float(tau), float(accel), int(delay)))
    best = min(f[0] for f in fits)
    close = [f for f in fits if f[0] <= best * 1.01 + 1e-9]
    return min(close, key=lambda f: (abs(math.log(f[2] / base_accel)), f[0]))


def fit_profile(rec: Recording, base) -> tuple[object, dict]:
    """(VehicleParams, fit report) fitted to ``rec`` over ``base`` (VehicleParams: the limits and
    rates not identified are kept). The report gives each axis' RMS error with the fitted and with
    ``base``'s parameters (m/s, rad/s), the delay (s) and the samples used."""
    t, sent, vel, yaw_rate, _ = rec.arrays()
    if len(t) < 100:
        raise ValueError(f"too few samples to fit ({len(t)}): the excitation did not fly")
    period = float(np.median(np.diff(t)))
    # the delay first, on the horizontal axes with a free acceleration limit (it shifts every axis alike)
    rms_xy, tau_xy, acc_xy, delay = _fit_axis(t, sent[:, 0:2], vel[:, 0:2], DELAY_GRID_PERIODS,
                                              (*ACCEL_GRID_M_S2, base.max_accel_xy_m_s2), base.max_accel_xy_m_s2)
    rms_z, tau_z, acc_z, _ = _fit_axis(t, sent[:, 2:3], vel[:, 2:3], (delay,),
                                       (*ACCEL_GRID_M_S2, base.max_accel_z_m_s2), base.max_accel_z_m_s2)
    rms_r, tau_r, _, _ = _fit_axis(t, sent[:, 3:4], yaw_rate[:, None], (delay,), (1e9,))

    def base_rms(cmd, meas, tau, accel):
        return float(np.sqrt(np.mean((simulate_lag(t, cmd, meas[0], tau, accel, 0) - meas) ** 2)))

    params = replace(base, velocity_time_constant_s=float(tau_xy), vertical_velocity_time_constant_s=float(tau_z),
                     yaw_rate_time_constant_s=float(tau_r), max_accel_xy_m_s2=float(acc_xy),
                     max_accel_z_m_s2=float(acc_z))
    report = {
        "command_delay_s": round(delay * period, 3), "control_period_s": round(period, 4), "samples": len(t),
        "rms_error": {"xy_m_s": round(rms_xy, 4), "z_m_s": round(rms_z, 4), "yaw_rate_rad_s": round(rms_r, 4)},
        "rms_error_of_the_base_model": {
            "xy_m_s": round(base_rms(sent[:, 0:2], vel[:, 0:2], base.velocity_time_constant_s, base.max_accel_xy_m_s2), 4),
            "z_m_s": round(base_rms(sent[:, 2:3], vel[:, 2:3], base.vertical_velocity_time_constant_s,
                                    base.max_accel_z_m_s2), 4),
            "yaw_rate_rad_s": round(base_rms(sent[:, 3:4], yaw_rate[:, None], base.yaw_rate_time_constant_s, 1e9), 4)},
    }
    return params, report


def estimate_error(times, estimate, truth_times, truth, ground_s: float) -> dict:
    """The position estimate's error against the simulator's truth (both (N, 3) map-aligned ENU m,
    any origin): the offset between the two over the first ``ground_s`` seconds (on the ground)
    is removed, then {xy_rms_m, z_rms_m, xy_p95_m, z_p95_m, time_constant_s, samples} over the rest
    (``time_constant_s``: :func:`correlation_time` of the error, the
    :mod:`airplay.sim.estimate_error` model's)."""
    times, estimate = np.asarray(times), np.asarray(estimate).reshape(-1, 3)
    truth_times, truth = np.asarray(truth_times), np.asarray(truth).reshape(-1, 3)
    idx = np.clip(np.searchsorted(truth_times, times), 0, len(truth_times) - 1)
    err = estimate - truth[idx]
    ground = times < times[0] + ground_s
    err = err - (err[ground].mean(axis=0) if ground.any() else 0.0)
    flight = err[~ground] if (~ground).any() else err
    xy, z = np.hypot(flight[:, 0], flight[:, 1]), np.abs(flight[:, 2])
    return {"xy_rms_m": round(float(np.sqrt(np.mean(xy ** 2))), 3), "z_rms_m": round(float(np.sqrt(np.mean(z ** 2))), 3),
            "xy_p95_m": round(float(np.percentile(xy, 95)), 3), "z_p95_m": round(float(np.percentile(z, 95)), 3),
            "time_constant_s": correlation_time(times[~ground] if (~ground).any() else times, flight),
            "samples": len(flight)}


def correlation_time(times, error, dt_s: float = 0.1, limit_s: float = 30.0) -> float:
    """The lag (s) at which the error's autocorrelation (its three axes' together, mean removed,
    resampled every ``dt_s``) first falls below 1/e: a first-order Gauss-Markov process's time
    constant. At most ``limit_s`` or a third of the record (an error that stays correlated longer
    is reported at that bound), at least ``dt_s``."""
    times, error = np.asarray(times, np.float64), np.asarray(error, np.float64).reshape(-1, 3)
    if len(times) < 10 or times[-1] - times[0] < 10 * dt_s:
        return round(float(dt_s), 3)
    grid = np.arange(times[0], times[-1], dt_s)
    e = np.stack([np.interp(grid, times, error[:, i]) for i in range(3)], axis=1)
    e = e - e.mean(axis=0)
    energy = float(np.sum(e * e))
    if energy <= 0.0:
        return round(float(dt_s), 3)
    max_lag = max(1, min(int(limit_s / dt_s), len(grid) // 3))
    for lag in range(1, max_lag + 1):
        rho = float(np.sum(e[lag:] * e[:-lag])) / energy * len(grid) / (len(grid) - lag)
        if rho < math.exp(-1.0):
            return round(lag * dt_s, 3)
    return round(max_lag * dt_s, 3)


# -- the profile file -------------------------------------------------------------------------------

def profile_text(params, report: dict, identified: dict) -> str:
    """A vehicle file (``config/vehicle.yaml``'s fields, then ``profile``: what was identified and how
    well) that :func:`airplay.sim.dynamics.load_vehicle_profile` reads back."""
    import dataclasses

    import yaml

    values = {f.name: float(getattr(params, f.name)) for f in dataclasses.fields(params)}
    head = ("# A vehicle profile identified by `airplay identify` (airplay.bridge.identify): airplay's flight\n"
            "# model fitted to an autopilot's response. Use it with --vehicle in airplay collect, dagger, eval.\n")
    return head + yaml.safe_dump(values, sort_keys=False) + yaml.safe_dump(
        {"profile": {**identified, **report}}, sort_keys=False)


class TruthListener(threading.Thread):
    """The simulator's true position from a MAVLink stream (PX4 SIH's HIL_STATE_QUATERNION, ArduPilot
    SITL's SIM_STATE), as local ENU metres from its first sample: ``samples`` [(t, e, n, u)] on
    ``clock``."""

    def __init__(self, url: str, clock=time.time) -> None:
        super().__init__(name=f"truth {url}", daemon=True)
        from pymavlink import mavutil

        self.conn = mavutil.mavlink_connection(url, source_system=250, dialect="ardupilotmega")
        self.clock, self.samples, self._origin = clock, [], None
        self._stop_event = threading.Event()

    def run(self) -> None:
        radius = 6378137.0
        requested = 0.0
        while not self._stop_event.is_set():
            if not self._origin and time.monotonic() - requested > 2.0 and self.conn.target_system:
                requested = time.monotonic()  # ArduPilot streams SIM_STATE on request (PX4 SIH sends its own)
                self.conn.mav.command_long_send(self.conn.target_system, 0, 511, 0, 108, 20000, 0, 0, 0, 0, 0)
            msg = self.conn.recv_match(type=["HIL_STATE_QUATERNION", "SIM_STATE"], blocking=True, timeout=0.2)
            if msg is None:
                continue
            if msg.get_type() == "HIL_STATE_QUATERNION":
                lat, lon, alt = msg.lat * 1e-7, msg.lon * 1e-7, msg.alt * 1e-3
            else:
                lat, lon = (msg.lat_int * 1e-7, msg.lon_int * 1e-7) if getattr(msg, "lat_int", 0) else (msg.lat, msg.lon)
                alt = msg.alt
            if self._origin is None:
                self._origin = (lat, lon, alt)
            lat0, lon0, alt0 = self._origin
            n = math.radians(lat - lat0) * radius
            e = math.radians(lon - lon0) * radius * math.cos(math.radians(lat0))
            self.samples.append((self.clock(), e, n, alt - alt0))

    def close(self) -> None:
        self._stop_event.set()
        self.join(timeout=2)
        self.conn.close()
