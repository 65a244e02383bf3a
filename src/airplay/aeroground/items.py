"""Shared pieces of item generation: a group's ground truth, thresholds, rejections, options.

Thresholds (the paper filters ambiguous items; ours, with the reason each rejection counts under):

* a target must cover at least :data:`MIN_AREA_GROUND` of a ground image's pixels and
  :data:`MIN_AREA_AERIAL` of an aerial image's (60 and 30 pixels at the default 192x144 and
  192x192) to count as visible; fewer visible targets than a task needs rejects the item;
* distances to order must differ by at least :data:`MIN_DISTANCE_GAP_M` and
  :data:`MIN_DISTANCE_GAP_FRACTION` of the smaller one ("near-equal distances");
* an angle within :data:`ANGLE_MARGIN_DEG` of a quadrant boundary is ambiguous
  ("near quadrant boundary");
* images to tell apart must differ by a mean absolute pixel difference of at least
  :data:`MIN_IMAGE_DIFFERENCE` (0..255) ("indistinguishable views").
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from airplay.aeroground.cameras import View
from airplay.aeroground.tasks import LETTERS

MIN_AREA_GROUND = 60 / (192 * 144)
MIN_AREA_AERIAL = 30 / (192 * 192)
MIN_DISTANCE_GAP_M = 1.0
MIN_DISTANCE_GAP_FRACTION = 0.15
ANGLE_MARGIN_DEG = 15.0
MIN_IMAGE_DIFFERENCE = 6.0
MAX_BOX_IOU = 0.3


class Reject(Exception):
    """An item that cannot be made unambiguously from this group; ``reason`` is counted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Group:
    """Read access to one captured observation group (``group.json``) and its images."""

    def __init__(self, record: dict, instances: list[dict], capture_dir: Path) -> None:
        self.rec = record
        self.instances = {int(i["id"]): i for i in instances}
        self.dir = Path(capture_dir) / record["dir"]
        self._images: dict[str, np.ndarray] = {}
        self.views = {name: View.from_dict(v) for name, v in record["views"].items()}
        pose = record["ground_pose"]
        self.agent_xy = np.array([pose["x"], pose["y"]])
        self.agent_z = float(pose["z"])
        self.agent_yaw = float(pose["yaw_rad"])

    def px(self, view: str, iid: int) -> int:
        return int(self.rec["views"][view]["instances"].get(str(iid), {}).get("pixels", 0))

    def vbox(self, view: str, iid: int):
        return self.rec["views"][view]["instances"].get(str(iid), {}).get("visible_box")

    def abox(self, view: str, iid: int):
        return self.rec["views"][view]["instances"].get(str(iid), {}).get("amodal_box")

    def visible(self, view: str, min_px: int | None = None) -> list[int]:
        """Instance ids with at least ``min_px`` visible pixels (default by the view's kind), sorted."""
        if min_px is None:
            v = self.views[view]
            area = MIN_AREA_GROUND if v.kind == "ground" else MIN_AREA_AERIAL
            min_px = max(1, int(round(area * v.camera.width * v.camera.height)))
        return sorted(int(k) for k, b in self.rec["views"][view]["instances"].items() if b["pixels"] >= min_px)

    def aerial(self) -> list[str]:
        return sorted(n for n, v in self.views.items() if v.kind == "aerial")

    def centre_xy(self, iid: int) -> np.ndarray:
        return np.asarray(self.instances[iid]["centre_m"][:2], dtype=float)

    def image(self, view: str) -> np.ndarray:
        if view not in self._images:
            from PIL import Image

            self._images[view] = np.asarray(Image.open(self.dir / self.rec["views"][view]["image"]).convert("RGB"))
        return self._images[view]

    def project_ground(self, view: str, xy) -> tuple[list[float], bool]:
        """Pixel [u, v] of a ground point (at the agent's ground height) and whether it is in the image."""
        xy = np.atleast_2d(np.asarray(xy, dtype=float))
        p = np.column_stack([xy, np.full(len(xy), self.agent_z)])
        uv, z = self.views[view].project(p)
        ok = self.views[view].in_image(uv, z, margin_px=6.0)
        return [[round(float(a), 2), round(float(b), 2)] for a, b in uv], ok

    def view_meta(self, aerial: str | None, pixels: list[int] | None = None) -> dict:
        """Breakdown keys: aerial-ground distance (m), smallest target pixel area, view configuration."""
        meta = {"aerial_ground_distance_m": None, "target_pixel_area": min(pixels) if pixels else None,
                "view_config": "ground"}
        if aerial is not None:
            a, g = self.views[aerial], self.views["ground"]
            meta["aerial_ground_distance_m"] = round(float(np.linalg.norm(np.subtract(a.position_m, g.position_m))), 3)
            alts = sorted({self.views[n].position_m[2] for n in self.aerial()})
            meta["view_config"] = f"{a.config}/{'low' if a.position_m[2] == alts[0] else 'high'}"
        return meta


def iou(a, b) -> float:
    """Intersection over union of two pixel boxes [u0, v0, u1, v1]."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def separated_boxes(boxes: list) -> bool:
    """No two boxes overlap by more than :data:`MAX_BOX_IOU`."""
    return all(iou(a, b) <= MAX_BOX_IOU for a, b in itertools.combinations(boxes, 2))


def distinct_distances(values: list[float]) -> bool:
    """Sorted values differ pairwise by the gap thresholds (see the module docstring)."""
    s = sorted(values)
    return all(b - a >= max(MIN_DISTANCE_GAP_M, MIN_DISTANCE_GAP_FRACTION * a) for a, b in zip(s, s[1:]))


def shuffled_choice(rng: np.random.Generator, correct: str, distractors: list[str]) -> tuple[dict, str]:
    """({letter: text}, correct letter) with the options in a seeded random order."""
    texts = [correct, *distractors]
    if len(set(texts)) != len(texts):
        raise ValueError(f"options must be distinct: {texts}")
    order = rng.permutation(len(texts))
    options = {LETTERS[k]: texts[int(i)] for k, i in enumerate(order)}
    return options, LETTERS[int(np.nonzero(order == 0)[0][0])]


def ordering_options(rng: np.random.Generator, labels_in_order: list[str], n_options: int = 4) -> tuple[dict, str]:
    """Options that are orderings of ``labels_in_order`` ("B, A, C"): the true one and random others."""
    correct = ", ".join(labels_in_order)
    perms = [", ".join(p) for p in itertools.permutations(sorted(labels_in_order)) if ", ".join(p) != correct]
    picks = rng.choice(len(perms), size=min(n_options - 1, len(perms)), replace=False)
    return shuffled_choice(rng, correct, [perms[int(i)] for i in sorted(picks)])


def image_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two equal-size uint8 images (0..255)."""
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def wrap_deg(a: float) -> float:
    """Angle in degrees wrapped to (-180, 180]."""
    w = math.remainder(a, 360.0)
    return 180.0 if w == -180.0 else w
