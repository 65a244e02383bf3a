"""Offline metrics of a policy on recorded demonstrations (DESIGN.md section 6), pure numpy.

**What is compared.** At each anchor frame t of a held-out demonstration the policy's
predicted commands for the next K controls (K = 10: 0.2 s at 50 Hz) and the K commands the
expert recorded, ``action[t .. t+K-1]``, are each integrated the same way into a trajectory
from the anchor (:func:`integrate_commands`): start at the anchor's position with its yaw,
and per 20 ms control move by the commanded heading-frame velocity (vx forward, vy left,
vz up) rotated by the current yaw, then turn by yaw_rate x dt. Both trajectories are in the
anchor's heading frame (x forward, y left, z up; rotation about z leaves distances
unchanged). So the metrics measure the command error alone, in metres and radians: the
recorded commands score exactly 0, and the vehicle's response lag (the recorded states
trail the commands by the 0.15 s velocity time constant) is not counted against a policy.
That lag is reported on its own as ``lag_ade_cm``: the ADE between the integrated recorded
commands and the recorded future positions ``state[t+1 .. t+K, 0:3]``.

**Which commands a policy predicts at an anchor** (the ``rollout``, two modes):

* ``open-loop`` (the default of ``airplay eval-offline``, the headline figure): the policy sees
  only the anchor's observation; its chunk predicted at t gives the K commands, and a chunk
  shorter than K is extended by holding its last command (:func:`open_loop_commands`). No
  recorded observation after the anchor enters the prediction: a policy cannot score by
  re-observing the motion the expert's commands produced. (There is no vehicle response
  model here: both command sequences are integrated kinematically, as above.) ACT and DP
  with chunks of >= K commands give the same figures in both modes; CNN-BC (one command per
  chunk) holds its anchor command for the K controls.
* ``reobserve`` (the older mode): as the prefix adapter would execute them on the recorded
  observations: the first H (execution horizon) commands of the chunk predicted at t, then
  the first H of the chunk predicted at t + H from the *recorded* observation there, and so
  on until K (:func:`anchor_commands`). With the defaults ACT (H = 50) and DP (H = 16) use
  one chunk; CNN-BC (H = 1) predicts at each of the K frames, from recorded states that
  already contain the expert's response to the commands being scored.

**Baselines** scored the same way, on the same anchors and with the same rollout (each gives
one command per frame, held as a chunk): ``copycat`` (copycat_commands of :mod:`airplay.policies.motion`:
no image, no goal, the vehicle's current motion from ``observation.state`` as the command), ``zero``
(hover: all commands 0) and ``hold_last`` (:func:`hold_last_commands`: the previous recorded
command, 0 at frame 0). ``skill`` = 1 - policy / baseline (of ADE or FDE): > 0 means the policy
beats the baseline; a policy that does not beat ``copycat`` has learned nothing the current
motion does not already give.

**Metrics per anchor** (:func:`anchor_metrics`), then averaged over the anchors of a
trajectory (a demonstration), then over the trajectories of a scene, then over scenes
(:func:`hierarchical_mean`), as DESIGN.md prescribes for the yaw error and as we do for all:

* ``ade_cm``, ``fde_cm``: mean / final distance over the K predicted points (cm).
* ``p95_cm``: 95th percentile of the anchor FDE over all anchors of a scene, averaged over scenes.
* ``yaw_err_deg``: |wrap(predicted yaw change - recorded yaw change)| at the endpoint.
* ``motion_dir_err_deg``: angle between the predicted and the recorded endpoint displacement,
  on anchors where both are longer than 0.02 m.
* ``dtw_cm``: dynamic time warping distance between the two K-point trajectories with a
  Sakoe-Chiba band of max(1, ceil(0.1 K)) points, divided by K.
* ``lateral_dir_err_pct`` / ``yaw_dir_err_pct``: share of anchors whose lateral displacement
  (heading-frame y at the endpoint) / yaw change falls in a different class than the
  recorded one, classes left / none / right with a dead band of 0.02 m / 0.02 rad.
* ``corner_fde_cm``: the FDE over corner anchors only: where the recorded path of the next
  second turns by at least 20 degrees between its first and its last 0.1 s displacement,
  both longer than 0.02 m (:func:`corner_anchors`, on the recorded positions).
"""

from __future__ import annotations

import math

import numpy as np

from airplay.frames import heading_to_map, wrap_angle
from airplay.policies.motion import heading_frame

CONTROL_DT_S = 0.02
HORIZON = 10
"""Controls in the 0.2 s horizon at 50 Hz."""
LATERAL_THRESHOLD_M = 0.02
YAW_THRESHOLD_RAD = 0.02
MOTION_MIN_M = 0.02
CORNER_WINDOW, CORNER_SEGMENT, CORNER_ANGLE_DEG, CORNER_MIN_M = 50, 5, 20.0, 0.02
"""Corner anchors: 1 s look-ahead (50 controls), 0.1 s segments (5), turn >= 20 deg, segments > 0.02 m."""

METRICS = ("ade_cm", "fde_cm", "p95_cm", "yaw_err_deg", "motion_dir_err_deg", "dtw_cm", "lateral_dir_err_pct",
           "yaw_dir_err_pct", "corner_fde_cm")


def integrate_commands(commands: np.ndarray, dt: float = CONTROL_DT_S) -> tuple[np.ndarray, np.ndarray]:
    """(..., K, 4) commands [vx, vy, vz (heading frame, m/s), yaw_rate (rad/s)] ->
    positions (..., K + 1, 3) and yaw changes (..., K + 1) in the starting heading frame,
    both 0 at index 0. Control k moves by R(yaw_k) v_k dt, then turns by yaw_rate_k dt."""
    c = np.asarray(commands, np.float64)
    if c.ndim < 2 or c.shape[-1] != 4:
        raise ValueError(f"commands must be (..., K, 4), got {c.shape}")
    zeros = np.zeros(c.shape[:-2] + (1,))
    yaw = np.concatenate([zeros, np.cumsum(c[..., 3] * dt, axis=-1)], axis=-1)  # (..., K + 1)
    step = heading_to_map(c[..., :3], yaw[..., :-1]) * dt
    pos = np.concatenate([np.zeros(c.shape[:-2] + (1, 3)), np.cumsum(step, axis=-2)], axis=-2)
    return pos, yaw


def dtw_banded(a: np.ndarray, b: np.ndarray, band: int | None = None) -> float:
    """Dynamic time warping distance (sum of Euclidean point distances along the best
    monotone alignment) between point sequences a (K, D) and b (K', D), restricted to
    |i - j| <= band (default max(1, ceil(0.1 K))). Not divided by K."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n, m = len(a), len(b)
    if band is None:
        band = max(1, math.ceil(0.1 * n))
    band = max(band, abs(n - m))
    cost = np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(max(1, i - band), min(m, i + band) + 1):
            acc[i, j] = cost[i - 1, j - 1] + min(acc[i - 1, j], acc[i, j - 1], acc[i - 1, j - 1])
    return float(acc[n, m])


def _direction_class(x: np.ndarray, threshold: float) -> np.ndarray:
    return np.where(x > threshold, 1, np.where(x < -threshold, -1, 0))


def _angle_deg(u: np.ndarray, v: np.ndarray, min_norm: float) -> np.ndarray:
    """Angle (deg) between rows of u and v; NaN where either is not longer than ``min_norm``."""
    nu, nv = np.linalg.norm(u, axis=-1), np.linalg.norm(v, axis=-1)
    ok = (nu > min_norm) & (nv > min_norm)
    cos = np.einsum("...i,...i->...", u, v) / np.where(ok, nu * nv, 1.0)
    return np.where(ok, np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))), np.nan)


def anchor_metrics(predicted: np.ndarray, recorded: np.ndarray, dt: float = CONTROL_DT_S) -> dict[str, np.ndarray]:
    """Per-anchor errors of predicted vs recorded command sequences, both (N, K, 4).

    Returns arrays of N: ``ade_m``, ``fde_m``, ``yaw_err_rad``, ``motion_dir_err_deg`` (NaN where
    a displacement is <= 0.02 m), ``dtw_m`` (divided by K), ``lateral_dir_err`` and
    ``yaw_dir_err`` (0/1 floats). See the module docstring."""
    predicted, recorded = np.asarray(predicted, np.float64), np.asarray(recorded, np.float64)
    if predicted.shape != recorded.shape or predicted.ndim != 3:
        raise ValueError(f"predicted {predicted.shape} and recorded {recorded.shape} must both be (N, K, 4)")
    k = predicted.shape[1]
    pp, py = integrate_commands(predicted, dt)
    rp, ry = integrate_commands(recorded, dt)
    err = np.linalg.norm(pp[:, 1:] - rp[:, 1:], axis=-1)  # (N, K)
    band = max(1, math.ceil(0.1 * k))
    return {
        "ade_m": err.mean(axis=1),
        "fde_m": err[:, -1],
        "yaw_err_rad": np.abs(wrap_angle(py[:, -1] - ry[:, -1])),
        "motion_dir_err_deg": _angle_deg(pp[:, -1], rp[:, -1], MOTION_MIN_M),
        "dtw_m": np.array([dtw_banded(p[1:], r[1:], band) / k for p, r in zip(pp, rp)]),
        "lateral_dir_err": (_direction_class(pp[:, -1, 1], LATERAL_THRESHOLD_M)
                            != _direction_class(rp[:, -1, 1], LATERAL_THRESHOLD_M)).astype(np.float64),
        "yaw_dir_err": (_direction_class(py[:, -1], YAW_THRESHOLD_RAD)
                        != _direction_class(ry[:, -1], YAW_THRESHOLD_RAD)).astype(np.float64),
    }


def anchor_commands(chunks: dict[int, np.ndarray] | np.ndarray, anchors: np.ndarray, horizon: int = HORIZON,
                    execution_horizon: int = 1) -> np.ndarray:
    """(N, horizon, 4): for each anchor t the first H = ``execution_horizon`` commands of the
    chunk predicted at frame t, then of the chunk predicted at t + H, ... (``chunks[f]`` is
    the (C, 4) chunk predicted at frame f, C >= H)."""
    h = int(execution_horizon)
    if h < 1:
        raise ValueError(f"execution_horizon must be >= 1, got {execution_horizon}")
    out = np.empty((len(anchors), horizon, 4), np.float64)
    for n, t in enumerate(np.asarray(anchors, int)):
        for j in range(0, horizon, h):
            chunk = np.asarray(chunks[t + j])
            if len(chunk) < min(h, horizon - j):
                raise ValueError(f"chunk predicted at frame {t + j} has {len(chunk)} commands, fewer than H = {h}")
            out[n, j:j + h] = chunk[:min(h, horizon - j)]
    return out


def prediction_frames(anchors: np.ndarray, horizon: int = HORIZON, execution_horizon: int = 1) -> np.ndarray:
    """Sorted frames at which :func:`anchor_commands` needs a predicted chunk."""
    offsets = np.arange(0, horizon, int(execution_horizon))
    return np.unique((np.asarray(anchors, int)[:, None] + offsets[None, :]).ravel())


def episode_anchors(length: int, horizon: int = HORIZON, stride: int = 1) -> np.ndarray:
    """Anchor frames of an episode of ``length`` frames: those with ``horizon`` recorded frames after them."""
    return np.arange(0, max(0, length - horizon), int(stride))


def corner_anchors(positions: np.ndarray, anchors: np.ndarray, window: int = CORNER_WINDOW,
                   segment: int = CORNER_SEGMENT, angle_deg: float = CORNER_ANGLE_DEG,
                   min_m: float = CORNER_MIN_M) -> np.ndarray:
    """(N,) bool: the recorded path ``positions`` (T, 3) turns by >= ``angle_deg`` between its
    first and last ``segment``-control displacement of the next ``window`` controls after the
    anchor, both longer than ``min_m``. Anchors without ``window`` frames after them are not corners."""
    p = np.asarray(positions, np.float64)
    t = np.asarray(anchors, int)
    ok = t + window <= len(p) - 1
    out = np.zeros(len(t), bool)
    if ok.any():
        ta = t[ok]
        first = p[ta + segment] - p[ta]
        last = p[ta + window] - p[ta + window - segment]
        angle = _angle_deg(first, last, min_m)
        out[ok] = np.nan_to_num(angle, nan=-1.0) >= angle_deg
    return out


def lag_ade(recorded: np.ndarray, positions: np.ndarray, yaws: np.ndarray, anchors: np.ndarray,
            dt: float = CONTROL_DT_S) -> np.ndarray:
    """(N,) ADE (m) between the integrated recorded commands (N, K, 4) and the recorded
    positions (T, 3) at t+1..t+K in the heading frame of the recorded yaw (T,) at t."""
    k = recorded.shape[1]
    ip, _ = integrate_commands(recorded, dt)
    t = np.asarray(anchors, int)
    future = positions[t[:, None] + np.arange(1, k + 1)] - positions[t][:, None]  # (N, K, 3)
    actual = heading_frame(future, np.repeat(np.asarray(yaws, np.float64)[t][:, None], k, 1))
    return np.linalg.norm(ip[:, 1:] - actual, axis=-1).mean(axis=1)


def hierarchical_mean(values: np.ndarray, scenes: np.ndarray, trajectories: np.ndarray) -> float:
    """Mean over anchors of each trajectory, then over the trajectories of each scene, then over
    scenes. NaN values are left out; a trajectory or scene with none is left out; NaN if none."""
    values = np.asarray(values, np.float64)
    scenes, trajectories = np.asarray(scenes), np.asarray(trajectories)
    scene_means = []
    for s in dict.fromkeys(scenes.tolist()):
        in_scene = scenes == s
        traj_means = []
        for tr in dict.fromkeys(trajectories[in_scene].tolist()):
            v = values[in_scene & (trajectories == tr)]
            v = v[np.isfinite(v)]
            if v.size:
                traj_means.append(v.mean())
        if traj_means:
            scene_means.append(float(np.mean(traj_means)))
    return float(np.mean(scene_means)) if scene_means else float("nan")


def scene_percentile_mean(values: np.ndarray, scenes: np.ndarray, q: float = 95.0) -> float:
    """The ``q``-th percentile of the values of each scene (all its anchors), averaged over scenes."""
    values, scenes = np.asarray(values, np.float64), np.asarray(scenes)
    per_scene = [np.percentile(values[scenes == s], q) for s in dict.fromkeys(scenes.tolist())]
    return float(np.mean(per_scene)) if per_scene else float("nan")


def summarize(per_anchor: dict[str, np.ndarray], scenes: np.ndarray, trajectories: np.ndarray,
              corner: np.ndarray | None = None) -> dict[str, float]:
    """The offline metrics (``METRICS``, units in their names) from the per-anchor arrays of
    :func:`anchor_metrics` and each anchor's scene and trajectory (any hashable labels)."""
    scenes, trajectories = np.asarray(scenes), np.asarray(trajectories)
    m = lambda key, scale=1.0: hierarchical_mean(np.asarray(per_anchor[key]) * scale, scenes, trajectories)  # noqa: E731
    out = {
        "ade_cm": m("ade_m", 100.0),
        "fde_cm": m("fde_m", 100.0),
        "p95_cm": scene_percentile_mean(np.asarray(per_anchor["fde_m"]) * 100.0, scenes),
        "yaw_err_deg": m("yaw_err_rad", 180.0 / math.pi),
        "motion_dir_err_deg": m("motion_dir_err_deg"),
        "dtw_cm": m("dtw_m", 100.0),
        "lateral_dir_err_pct": m("lateral_dir_err", 100.0),
        "yaw_dir_err_pct": m("yaw_dir_err", 100.0),
        "corner_fde_cm": float("nan"),
    }
    if corner is not None and np.any(corner):
        corner = np.asarray(corner, bool)
        out["corner_fde_cm"] = hierarchical_mean(np.asarray(per_anchor["fde_m"])[corner] * 100.0, scenes[corner],
                                                 trajectories[corner])
    if "lag_ade_m" in per_anchor:
        out["lag_ade_cm"] = m("lag_ade_m", 100.0)
    return out


# -- rollouts and baselines -----------------------------------------------------------------------
ROLLOUTS = ("open-loop", "reobserve")


def open_loop_commands(chunks: dict[int, np.ndarray] | np.ndarray, anchors: np.ndarray,
                       horizon: int = HORIZON) -> np.ndarray:
    """(N, horizon, 4): for each anchor t the first ``horizon`` commands of the chunk predicted
    at t alone (``chunks[t]``, (C, 4)); a chunk with C < horizon is extended by holding its last
    command. Only ``chunks[t]`` of the anchors is read: nothing observed after an anchor."""
    out = np.empty((len(anchors), horizon, 4), np.float64)
    for n, t in enumerate(np.asarray(anchors, int)):
        chunk = np.asarray(chunks[t], np.float64)
        if chunk.ndim != 2 or len(chunk) < 1:
            raise ValueError(f"chunk predicted at frame {t} must be (C >= 1, 4), got {chunk.shape}")
        c = min(len(chunk), horizon)
        out[n, :c] = chunk[:c]
        out[n, c:] = chunk[c - 1]
    return out


def rollout_commands(chunks: dict[int, np.ndarray] | np.ndarray, anchors: np.ndarray, rollout: str,
                     horizon: int = HORIZON, execution_horizon: int = 1) -> np.ndarray:
    """(N, horizon, 4) predicted commands per anchor in the ``rollout`` mode (:data:`ROLLOUTS`)."""
    if rollout == "open-loop":
        return open_loop_commands(chunks, anchors, horizon)
    if rollout == "reobserve":
        return anchor_commands(chunks, anchors, horizon, execution_horizon)
    raise ValueError(f"rollout must be one of {ROLLOUTS}, got {rollout!r}")


def rollout_frames(anchors: np.ndarray, rollout: str, horizon: int = HORIZON, execution_horizon: int = 1) -> np.ndarray:
    """Sorted frames at which :func:`rollout_commands` needs a predicted chunk."""
    if rollout == "open-loop":
        return np.unique(np.asarray(anchors, int))
    if rollout == "reobserve":
        return prediction_frames(anchors, horizon, execution_horizon)
    raise ValueError(f"rollout must be one of {ROLLOUTS}, got {rollout!r}")


def hold_last_commands(actions: np.ndarray) -> np.ndarray:
    """(T, 4) recorded commands -> (T, 4): at frame f the command recorded at f - 1 (0 at f = 0)."""
    a = np.asarray(actions, np.float64)
    return np.concatenate([np.zeros((1, a.shape[-1])), a[:-1]], axis=0)


class HeldChunks:
    """Frame f -> a (length, 4) chunk that holds the per-frame command ``commands[f]``: how a
    one-command baseline enters :func:`rollout_commands`."""

    def __init__(self, commands: np.ndarray, length: int) -> None:
        self.commands, self.length = np.asarray(commands, np.float64), int(length)

    def __getitem__(self, frame: int) -> np.ndarray:
        return np.repeat(self.commands[int(frame)][None], self.length, axis=0)


def skill(policy: float | None, baseline: float | None) -> tuple[float, float]:
    """(policy / baseline, 1 - policy / baseline); NaN where undefined (a None or 0 baseline)."""
    if policy is None or baseline is None or not math.isfinite(policy) or not math.isfinite(baseline) \
            or baseline == 0:
        return float("nan"), float("nan")
    r = policy / baseline
    return r, 1.0 - r


# -- offline vs closed loop -----------------------------------------------------------------------
def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` (n,), ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (Pearson of average ranks) of paired values; NaN if either is
    constant or fewer than 2 pairs remain after leaving out pairs with a NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if len(a) < 2:
        return float("nan")
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def spearman_bootstrap(a: np.ndarray, b: np.ndarray, bootstrap: int = 1000, seed: int = 0) -> dict:
    """``{"rho", "ci95": [lo, hi], "n"}``: Spearman's rho of the pairs (a_i, b_i) and a 95%
    percentile bootstrap interval over the pairs (each replicate resamples the n pairs with
    replacement; replicates where rho is undefined, e.g. all ranks tied, are left out, as
    :func:`airplay.eval.aggregate._ci` does). ``bootstrap=0``: NaN bounds."""
    from airplay.eval.aggregate import _ci

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rho = spearman(a, b)
    ci = [float("nan"), float("nan")]
    if bootstrap > 0 and len(a) >= 2:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(a), size=(bootstrap, len(a)))
        ci = _ci(np.array([spearman(a[i], b[i]) for i in idx]))
    return {"rho": rho, "ci95": ci, "n": len(a)}
