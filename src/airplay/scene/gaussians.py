"""The in-memory 3D Gaussian splat: one array per attribute, activated values.

Conventions (fixed here, used by every loader and renderer):

* ``means``       (N, 3) float32, metres, in the frame the splat is expressed in
                  (after :meth:`airplay.scene.Scene.load`: the ``map`` frame, ENU).
* ``scales``      (N, 3) float32, metres: standard deviations along the Gaussian's
                  principal axes (linear; the PLY file stores their logarithm).
* ``quats_wxyz``  (N, 4) float32, unit quaternions (w, x, y, z) rotating the Gaussian's
                  principal axes into the frame of ``means``. Note the order: the 3DGS PLY
                  layout stores w first; ROS messages use (x, y, z, w).
* ``opacities``   (N,) float32 in [0, 1] (the PLY file stores the logit).
* ``sh``          (N, K, 3) float32 spherical-harmonic colour coefficients per RGB channel,
                  K = (degree + 1) ** 2, K in {1, 4, 9, 16}; ``sh[:, 0]`` is the DC term.
                  Colour = clamp(SH(d) + 0.5, 0) as in the INRIA reference implementation.
* ``sh_rotation`` (3, 3) float64: maps a direction in the frame of ``means`` to the frame
                  the SH coefficients were fitted in (d_src = sh_rotation @ d). Rotating a
                  splat leaves the coefficients untouched and updates this matrix instead,
                  which is exact for every SH degree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SH_C0 = 0.28209479177387814
"""Degree-0 real spherical harmonic constant: colour = SH_C0 * f_dc + 0.5."""

SH_COEFFS_FOR_DEGREE = {0: 1, 1: 4, 2: 9, 3: 16}


def sh_degree_from_coeffs(k: int) -> int:
    """SH degree for K coefficients per channel; ValueError for any K not in {1, 4, 9, 16}."""
    for degree, count in SH_COEFFS_FOR_DEGREE.items():
        if count == k:
            return degree
    raise ValueError(f"{k} SH coefficients per channel is not (degree+1)^2 for degree 0..3")


def rgb_to_sh_dc(rgb: np.ndarray) -> np.ndarray:
    """DC coefficient that renders as ``rgb`` (values in [0, 1]) from any direction."""
    return (np.asarray(rgb, dtype=np.float32) - 0.5) / SH_C0


def sh_dc_to_rgb(dc: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rgb_to_sh_dc` (no clamping)."""
    return np.asarray(dc, dtype=np.float32) * SH_C0 + 0.5


def quat_wxyz_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3) from quaternions (..., 4) in (w, x, y, z) order.

    The quaternions are normalised first; a zero quaternion gives NaNs (callers validate).
    """
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    m = np.empty(q.shape[:-1] + (3, 3))
    m[..., 0, 0] = 1 - 2 * (y * y + z * z)
    m[..., 0, 1] = 2 * (x * y - w * z)
    m[..., 0, 2] = 2 * (x * z + w * y)
    m[..., 1, 0] = 2 * (x * y + w * z)
    m[..., 1, 1] = 1 - 2 * (x * x + z * z)
    m[..., 1, 2] = 2 * (y * z - w * x)
    m[..., 2, 0] = 2 * (x * z - w * y)
    m[..., 2, 1] = 2 * (y * z + w * x)
    m[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return m


def matrix_to_quat_wxyz(m: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z) with w >= 0 for one rotation matrix (3, 3)."""
    m = np.asarray(m, dtype=np.float64)
    tr = np.trace(m)
    if tr > 0:
        s = np.sqrt(tr + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.array(q)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def quat_wxyz_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of quaternions in (w, x, y, z) order, broadcasting."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, dtype=np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, dtype=np.float64), -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


@dataclass(frozen=True)
class Gaussians:
    """A 3D Gaussian splat; see the module docstring for shapes, units and frames."""

    means: np.ndarray
    scales: np.ndarray
    quats_wxyz: np.ndarray
    opacities: np.ndarray
    sh: np.ndarray
    sh_rotation: np.ndarray = field(default_factory=lambda: np.eye(3))

    def __post_init__(self) -> None:
        n = self.means.shape[0]
        expected = {
            "means": (n, 3),
            "scales": (n, 3),
            "quats_wxyz": (n, 4),
            "opacities": (n,),
        }
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"Gaussians.{name}: shape {getattr(self, name).shape}, expected {shape}")
        if self.sh.ndim != 3 or self.sh.shape[0] != n or self.sh.shape[2] != 3:
            raise ValueError(f"Gaussians.sh: shape {self.sh.shape}, expected ({n}, K, 3)")
        sh_degree_from_coeffs(self.sh.shape[1])
        if self.sh_rotation.shape != (3, 3):
            raise ValueError(f"Gaussians.sh_rotation: shape {self.sh_rotation.shape}, expected (3, 3)")

    def __len__(self) -> int:
        return int(self.means.shape[0])

    @property
    def sh_degree(self) -> int:
        """Spherical-harmonic degree, 0 to 3."""
        return sh_degree_from_coeffs(self.sh.shape[1])

    @property
    def colors_dc(self) -> np.ndarray:
        """(N, 3) view-independent base colour in [0, 1] (DC term only, clamped)."""
        return np.clip(sh_dc_to_rgb(self.sh[:, 0]), 0.0, 1.0)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Axis-aligned (min, max) corners of the means, metres."""
        return self.means.min(axis=0), self.means.max(axis=0)

    def subset(self, index: np.ndarray) -> "Gaussians":
        """The Gaussians selected by a boolean mask or an index array."""
        return Gaussians(
            means=self.means[index],
            scales=self.scales[index],
            quats_wxyz=self.quats_wxyz[index],
            opacities=self.opacities[index],
            sh=self.sh[index],
            sh_rotation=self.sh_rotation,
        )

    def transformed(self, scale: float, rotation: np.ndarray, translation: np.ndarray) -> "Gaussians":
        """Apply the similarity x' = scale * R @ x + t (R a 3x3 rotation matrix).

        Means, scales and orientations change; SH coefficients stay and ``sh_rotation``
        is composed so that view-dependent colour is evaluated in the original frame.
        """
        rotation = np.asarray(rotation, dtype=np.float64)
        q_r = matrix_to_quat_wxyz(rotation)
        means = (scale * (self.means.astype(np.float64) @ rotation.T) + np.asarray(translation)).astype(np.float32)
        quats = quat_wxyz_multiply(q_r, self.quats_wxyz.astype(np.float64)).astype(np.float32)
        return Gaussians(
            means=means,
            scales=(self.scales * np.float32(scale)).astype(np.float32),
            quats_wxyz=quats,
            opacities=self.opacities,
            sh=self.sh,
            sh_rotation=self.sh_rotation @ rotation.T,
        )

    @staticmethod
    def concatenate(parts: list["Gaussians"]) -> "Gaussians":
        """Join splats that share an SH degree and ``sh_rotation``."""
        if not parts:
            raise ValueError("Gaussians.concatenate: nothing to join")
        degree = parts[0].sh_degree
        for p in parts:
            if p.sh_degree != degree or not np.allclose(p.sh_rotation, parts[0].sh_rotation):
                raise ValueError("Gaussians.concatenate: parts differ in SH degree or sh_rotation")
        return Gaussians(
            means=np.concatenate([p.means for p in parts]),
            scales=np.concatenate([p.scales for p in parts]),
            quats_wxyz=np.concatenate([p.quats_wxyz for p in parts]),
            opacities=np.concatenate([p.opacities for p in parts]),
            sh=np.concatenate([p.sh for p in parts]),
            sh_rotation=parts[0].sh_rotation,
        )
