"""Deterministic procedural noise: integer hashing, value noise and fractal sums.

Everything here is a pure function of its inputs and an integer ``seed`` (no global
random state), so textures are reproducible bit for bit on one machine.
"""

from __future__ import annotations

import numpy as np

_M1, _M2, _M3, _M4 = np.uint32(0x8DA6B343), np.uint32(0xD8163841), np.uint32(0xCB1AB31F), np.uint32(0x165667B1)


def _mix(h: np.ndarray) -> np.ndarray:
    """Avalanche a uint32 array (lowbias32 finaliser)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x7FEB352D)
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    return h ^ (h >> np.uint32(16))


def hash_uniform(seed: int, *coords: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) values, one per element of the broadcast integer ``coords`` (up to 3)."""
    mults = (_M1, _M2, _M3)
    with np.errstate(over="ignore"):
        h = np.uint32(seed & 0xFFFFFFFF) * _M4
        for c, m in zip(coords, mults):
            h = _mix(h ^ (np.asarray(c, dtype=np.int64).astype(np.uint32) * m))
        h = _mix(np.asarray(h, dtype=np.uint32))
    return (h >> np.uint32(8)).astype(np.float64) / float(1 << 24)


def _smooth(t: np.ndarray) -> np.ndarray:
    return t * t * (3.0 - 2.0 * t)


def value_noise(p: np.ndarray, freq: float, seed: int) -> np.ndarray:
    """Trilinear value noise in [0, 1) at points ``p`` (N, 3), lattice spacing 1 / ``freq`` metres."""
    q = np.asarray(p, dtype=np.float64) * freq
    i = np.floor(q)
    f = _smooth(q - i)
    i = i.astype(np.int64)
    out = np.zeros(len(q))
    for dx in (0, 1):
        wx = f[:, 0] if dx else 1.0 - f[:, 0]
        for dy in (0, 1):
            wy = f[:, 1] if dy else 1.0 - f[:, 1]
            for dz in (0, 1):
                wz = f[:, 2] if dz else 1.0 - f[:, 2]
                out += wx * wy * wz * hash_uniform(seed, i[:, 0] + dx, i[:, 1] + dy, i[:, 2] + dz)
    return out


def fbm(p: np.ndarray, freq: float, seed: int, octaves: int = 3, gain: float = 0.5) -> np.ndarray:
    """Fractal sum of value noise, normalised to [0, 1) with mean about 0.5."""
    total, amp, norm = np.zeros(len(p)), 1.0, 0.0
    for o in range(octaves):
        total += amp * value_noise(p, freq * (2.03 ** o), seed + 7919 * o)
        norm += amp
        amp *= gain
    return total / norm


def cell_random(seed: int, *cells: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) per integer cell (e.g. one value per brick, plank or tile)."""
    return hash_uniform(seed + 104729, *cells)
