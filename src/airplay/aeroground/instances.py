"""Object instances of a scene and where they appear in a view.

Instances are the scene's landmarks (``scene.yaml`` ``landmarks:``, derived from the mesh
parts for synthetic scenes): id (index in that list), category (the landmark ``kind``),
name, centre and bounding-box size in map (ENU, m), and the footprint, the box's
axis-aligned rectangle on the ground ``[xmin, ymin, xmax, ymax]`` (m).

Per view, :func:`instance_mask` casts one ray per pixel against the collision mesh and
labels each pixel with the instance owning the first face hit (a face belongs to the
smallest instance box, grown by :data:`OWN_MARGIN_M`, that holds its centroid), so a
pixel counts for an instance only where nothing occludes it. :func:`view_boxes` gives per
instance the visible pixel count, the box of its visible pixels and the box of its whole
projected bounding box (amodal), all in pixels ``[u0, v0, u1, v1]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.mesh_depth import pixel_rays_camera

OWN_MARGIN_M = 0.05


@dataclass(frozen=True)
class Instance:
    """One object: ``id`` (landmark index), ``category``, ``name``, ``centre_m`` and ``size_m`` (map, m)."""

    id: int
    category: str
    name: str
    centre_m: tuple[float, float, float]
    size_m: tuple[float, float, float]

    @property
    def footprint(self) -> list[float]:
        """[xmin, ymin, xmax, ymax] of the box on the ground (m)."""
        cx, cy, _ = self.centre_m
        sx, sy, _ = self.size_m
        return [cx - sx / 2, cy - sy / 2, cx + sx / 2, cy + sy / 2]

    def corners(self) -> np.ndarray:
        """(8, 3) box corners in map."""
        c, s = np.asarray(self.centre_m), np.asarray(self.size_m) / 2
        signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], dtype=float)
        return c + signs * s

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "name": self.name,
                "centre_m": [round(float(v), 3) for v in self.centre_m],
                "size_m": [round(float(v), 3) for v in self.size_m],
                "footprint_m": [round(float(v), 3) for v in self.footprint]}


def scene_instances(landmarks: list[dict], where: str = "scene.yaml") -> list[Instance]:
    """Instances from a scene's landmark list; ValueError naming ``where`` and the entry on bad input."""
    out = []
    for i, lm in enumerate(landmarks):
        try:
            centre = tuple(float(v) for v in lm["position"])
            size = tuple(float(v) for v in lm["size"])
            if len(centre) != 3 or len(size) != 3:
                raise ValueError("position and size need 3 numbers")
            out.append(Instance(i, str(lm["kind"]), str(lm["name"]), centre, size))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: landmarks[{i}]: {err}") from None
    return out


def face_owners(mesh, instances: list[Instance]) -> np.ndarray:
    """(F,) instance id owning each mesh face (-1: none): the smallest grown box holding its centroid."""
    centroids = np.asarray(mesh.triangles_center)
    owner = np.full(len(centroids), -1, dtype=np.int32)
    best = np.full(len(centroids), np.inf)
    for inst in instances:
        c, half = np.asarray(inst.centre_m), np.asarray(inst.size_m) / 2 + OWN_MARGIN_M
        inside = np.all(np.abs(centroids - c) <= half, axis=1)
        vol = float(np.prod(2 * half))
        take = inside & (vol < best)
        owner[take], best[take] = inst.id, vol
    return owner


def instance_mask(caster, owners: np.ndarray, view) -> np.ndarray:
    """(H, W) int32 instance id seen at each pixel of ``view`` (-1: background or unowned surface)."""
    cam = view.camera
    cam_to_world = np.linalg.inv(view.viewmat())
    dirs = pixel_rays_camera(cam.K, cam.width, cam.height) @ cam_to_world[:3, :3].T
    _, faces = caster.first_hits(cam_to_world[:3, 3], dirs)
    ids = np.where(faces >= 0, owners[np.maximum(faces, 0)], -1)
    return ids.reshape(cam.height, cam.width).astype(np.int32)


def amodal_box(view, inst: Instance) -> list[float] | None:
    """Pixel box [u0, v0, u1, v1] of the projected bounding box, clipped to the image; None when
    any corner lies behind the camera or the box misses the image."""
    uv, z = view.project(inst.corners())
    if (z <= 0.05).any():
        return None
    u0, v0 = uv.min(axis=0)
    u1, v1 = uv.max(axis=0)
    w, h = view.camera.width, view.camera.height
    u0, v0, u1, v1 = max(0.0, u0), max(0.0, v0), min(float(w), u1), min(float(h), v1)
    if u1 <= u0 or v1 <= v0:
        return None
    return [round(float(u0), 2), round(float(v0), 2), round(float(u1), 2), round(float(v1), 2)]


def view_boxes(view, mask: np.ndarray, instances: list[Instance]) -> dict[int, dict]:
    """Per instance: ``{"pixels": visible pixel count, "visible_box": [u0, v0, u1, v1] or None,
    "amodal_box": ... or None, "distance_m": camera-to-centre distance}``."""
    out = {}
    eye = np.asarray(view.position_m)
    for inst in instances:
        vs, us = np.nonzero(mask == inst.id)
        box = None if len(us) == 0 else [int(us.min()), int(vs.min()), int(us.max()) + 1, int(vs.max()) + 1]
        out[inst.id] = {"pixels": int(len(us)), "visible_box": box, "amodal_box": amodal_box(view, inst),
                        "distance_m": round(float(np.linalg.norm(np.asarray(inst.centre_m) - eye)), 3)}
    return out
