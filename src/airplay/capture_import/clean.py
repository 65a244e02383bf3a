"""Which Gaussians of a capture stay out of the collision geometry, and why.

Four tests, applied in the capture's own frame with thresholds relative to its robust size
(the median distance of the Gaussians from their median point, "size"):

* low opacity: opacity < ``min_opacity`` (they barely occlude anything);
* huge: largest standard deviation > max(``huge_factor`` x the median largest one, 0.1 size);
* far background: farther than ``far_factor`` x size from the centre (sky domes, distant
  buildings, the trees behind a courtyard); with ``core`` (a centre and radius, e.g. from the
  capture's cameras: :func:`camera_core`), outside that sphere instead;
* isolated: in a connected group of occupied cells (cells of size / 25, 26-connected) that
  holds fewer than max(``min_cluster``, 0.05 % of all) Gaussians, or with its 4th-nearest
  neighbour more than ``sparse_factor`` times the median such distance away (floaters in
  free space, even where they are many).

Each Gaussian is counted under the first test it fails, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.gaussians import Gaussians


@dataclass(frozen=True)
class CleanResult:
    """keep: (N,) bool; counts: dropped per reason (a Gaussian counts once)."""

    keep: np.ndarray
    counts: dict[str, int]

    @property
    def dropped(self) -> int:
        return int((~self.keep).sum())


def camera_core(camera_positions: np.ndarray, factor: float) -> tuple[np.ndarray, float]:
    """(centre, radius) of the capture's core from its cameras (source frame and units): the
    cameras' median position and ``factor`` x the 95th percentile of their distances from it
    (at least a tenth of the cameras' largest extent, so a tight cluster still has a core)."""
    pos = np.asarray(camera_positions, float)
    centre = np.median(pos, axis=0)
    d = np.linalg.norm(pos - centre, axis=1)
    extent = float(np.max(pos.max(axis=0) - pos.min(axis=0))) if len(pos) > 1 else 0.0
    return centre, factor * max(float(np.percentile(d, 95)), 0.1 * extent, 1e-9)


def clean_capture(g: Gaussians, *, min_opacity: float = 0.05, huge_factor: float = 20.0, far_factor: float = 3.0,
                  min_cluster: int = 20, cells_per_size: float = 25.0, sparse_factor: float = 4.0,
                  core: tuple[np.ndarray, float] | None = None) -> CleanResult:
    """Decide which Gaussians go into the collision geometry (see the module docstring).
    ``core``: (centre (3,), radius), source frame and units; Gaussians outside are far background."""
    from scipy import ndimage

    n = len(g)
    means = g.means.astype(np.float64)
    centre = np.median(means, axis=0)
    size = float(np.median(np.linalg.norm(means - centre, axis=1))) or 1.0
    counts: dict[str, int] = {}
    keep = np.ones(n, bool)

    def drop(name: str, mask: np.ndarray) -> None:
        new = mask & keep
        counts[name] = int(new.sum())
        keep[new] = False

    drop("low_opacity", g.opacities < min_opacity)
    smax = g.scales.max(axis=1)
    drop("huge", smax > max(huge_factor * float(np.median(smax)), 0.1 * size))
    if core is None:
        drop("far_background", np.linalg.norm(means - centre, axis=1) > far_factor * size)
    else:
        drop("far_background", np.linalg.norm(means - np.asarray(core[0], float), axis=1) > float(core[1]))
    cell = size / cells_per_size
    idx = np.floor((means[keep] - means[keep].min(axis=0)) / cell).astype(np.int64)
    shape = tuple(idx.max(axis=0) + 1)
    isolated = np.zeros(n, bool)
    if np.prod(shape, dtype=np.float64) <= 64e6:
        occ = np.zeros(shape, bool)
        occ[tuple(idx.T)] = True
        labels, count = ndimage.label(occ, structure=np.ones((3, 3, 3), bool))
        lab = labels[tuple(idx.T)]
        sizes = np.bincount(lab, minlength=count + 1)
        small = sizes[lab] < max(min_cluster, int(0.0005 * n))
        isolated[np.flatnonzero(keep)[small]] = True
    # Alone in its neighbourhood: the 4th-nearest neighbour much farther than is typical.
    from scipy.spatial import cKDTree

    idx_keep = np.flatnonzero(keep & ~isolated)
    if len(idx_keep) > 10:
        d4 = cKDTree(means[idx_keep]).query(means[idx_keep], k=5)[0][:, 4]
        isolated[idx_keep[d4 > sparse_factor * float(np.median(d4))]] = True
    drop("isolated", isolated)
    return CleanResult(keep, counts)
