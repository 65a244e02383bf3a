"""Synthetic scenes: a seeded generator of indoor, urban and vegetation places.

:func:`make_scene` writes a complete scene folder (``scene.yaml``, ``splat.ply``,
``collision.ply``) whose splat and collision mesh are built from the same primitives:

* the collision mesh is the union of closed boxes, vertical prisms (cylinders) and
  icosphere ellipsoids, each a watertight component, the ground a slab with its top at
  z = 0 (map frame ENU, metres);
* the splat samples the visible surfaces of those primitives (faces buried in other
  solids or facing away from every place the vehicle can fly are left out): flat
  Gaussians on surfaces (tangent std 0.7-0.9 of the local sample spacing, 1.5 mm across),
  randomly oriented blobs for foliage; colours from procedural materials (bricks,
  plaster, planks, tiles, asphalt with markings, paving, facades with windows, grass,
  dirt paths, bark, leaves, rock) with value noise, lit by a baked sun with shadows
  (outdoor) or soft indoor light; SH degree 1 with a small view-dependent sheen
  (glass, polished floors, cars) so that the files exercise higher-order SH.
* There is no sky in the splat: outdoor scenes declare a sky blue ``background_rgb``
  in scene.yaml, which renderers composite the splat over.

``gaussians_per_m2`` is the sample density on fully detailed surfaces; roofs, facades,
distant ground and canopies use fractions of it. The default gives roughly 150k-300k
Gaussians per scene. Same arguments, same bytes: all randomness comes from
``np.random.default_rng(seed)``, drawn in a fixed order.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from airplay.scene.camera import CameraMount, PinholeCamera
from airplay.scene.ply_io import write_gaussians_ply
from airplay.scene.spec import Alignment, CameraSpec, NavigableRegion, SceneSpec, parse_scene_yaml, write_scene_yaml
from airplay.scene.synthetic.landmarks import scene_landmarks
from airplay.scene.synthetic.layouts import Layout
from airplay.scene.synthetic.layouts.indoor import make_indoor
from airplay.scene.synthetic.layouts.urban import make_urban
from airplay.scene.synthetic.layouts.vegetation import make_vegetation
from airplay.scene.synthetic.sampling import sample_surfaces
from airplay.scene.synthetic.solids import hidden_samples, inside_any
from airplay.scene.synthetic.splat import light, to_gaussians
from airplay.scene.synthetic.textures import FOLIAGE_KINDS, shade_materials
from airplay.scene.synthetic.writer import SCENE_FILES, check_target, write_atomically

__all__ = ["CATEGORIES", "DEFAULT_GAUSSIANS_PER_M2", "SCENE_FILES", "free_fraction", "generate", "make_scene"]

CATEGORIES = ("indoor", "urban", "vegetation")
DEFAULT_GAUSSIANS_PER_M2 = 90.0
MIN_FREE_FRACTION = 0.4
"""Share of the navigable polygon, at mid-band height, at least 0.3 m from any obstacle."""
CLEARANCE_M = 0.3

SKY_RGB = (0.62, 0.75, 0.90)
INDOOR_BACKGROUND_RGB = (0.5, 0.5, 0.5)

_LAYOUTS = {"indoor": make_indoor, "urban": make_urban, "vegetation": make_vegetation}


def free_fraction(layout: Layout, solids: dict, step: float = 0.25) -> float:
    """Share of grid points in the polygon at mid-band height clear of every solid by 0.3 m."""
    region = NavigableRegion(layout.polygon, layout.z_min, layout.z_max)
    lo, hi = layout.polygon.min(axis=0), layout.polygon.max(axis=0)
    xs = np.arange(lo[0] + step / 2, hi[0], step)
    ys = np.arange(lo[1] + step / 2, hi[1], step)
    xy = np.stack(np.meshgrid(xs, ys, indexing="ij"), axis=-1).reshape(-1, 2)
    xy = xy[region.contains_xy(xy)]
    pts = np.column_stack([xy, np.full(len(xy), (layout.z_min + layout.z_max) / 2)])
    return float(1.0 - inside_any(pts, solids, inflate=CLEARANCE_M).mean())


def generate(category: str, seed: int, gaussians_per_m2: float = DEFAULT_GAUSSIANS_PER_M2):
    """(layout, gaussians, trimesh mesh) for a category and seed, without writing anything."""
    if category not in _LAYOUTS:
        raise ValueError(f"unknown scene category {category!r}; choose one of {', '.join(CATEGORIES)}")
    if not (isinstance(gaussians_per_m2, (int, float)) and np.isfinite(gaussians_per_m2) and gaussians_per_m2 > 0):
        raise ValueError(f"gaussians_per_m2 must be a positive number, got {gaussians_per_m2!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    layout = _LAYOUTS[category](rng)
    noise_seed = int(rng.integers(0, 2**31 - 1))
    builder = layout.builder
    solids = builder.solid_arrays()
    free = free_fraction(layout, solids)
    if free < MIN_FREE_FRACTION:  # a layout bug, not bad luck: layouts keep their obstacles sparse
        raise RuntimeError(f"{category} seed {seed}: only {free:.0%} of the navigable region is free space")
    samples = sample_surfaces(builder, float(gaussians_per_m2) * layout.detail, rng)
    samples = samples.select(~hidden_samples(samples.p, samples.n, samples.part, solids))
    albedo, sheen = shade_materials(samples, builder.materials, noise_seed)
    color = light(samples, albedo, layout.lighting, solids)
    foliage_ids = [i for i, m in enumerate(builder.materials) if m.kind in FOLIAGE_KINDS]
    gaussians = to_gaussians(samples, color, sheen, np.isin(samples.material, foliage_ids), rng)
    return layout, gaussians, builder.mesh()


def make_scene(category: str, seed: int, out_dir: Path, *, gaussians_per_m2: float = DEFAULT_GAUSSIANS_PER_M2,
               name: str | None = None, split: str = "seen") -> SceneSpec:
    """Generate a synthetic scene of ``category`` from ``seed`` and write it into ``out_dir``.

    Writes ``scene.yaml``, ``splat.ply`` (INRIA 3DGS layout, SH degree 1) and
    ``collision.ply`` (binary PLY), atomically; refuses (ValueError) to write into a
    non-empty folder unless it holds only those files. Returns the spec as parsed back.
    """
    if split not in ("seen", "unseen"):
        raise ValueError(f"split must be 'seen' or 'unseen', got {split!r}")
    name = name if name is not None else f"{category}_{int(seed)}"
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ValueError(f"scene name {name!r}: use letters, digits, '_', '-' and '.' only")
    out_dir = Path(out_dir)
    check_target(out_dir)  # fail before spending time on generation
    layout, gaussians, mesh = generate(category, seed, gaussians_per_m2)

    def write(folder: Path) -> None:
        from trimesh.exchange.ply import export_ply

        spec = SceneSpec(
            root=folder, name=name, category=category, split=split,
            splat_file=folder / "splat.ply", splat_alignment=Alignment(),
            collision_file=folder / "collision.ply", collision_alignment=Alignment(),
            navigable=NavigableRegion(layout.polygon, layout.z_min, layout.z_max),
            camera=CameraSpec(PinholeCamera.from_fov(224, 224, 90.0), CameraMount((0.1, 0.0, 0.0), 0.0)),
            background_rgb=INDOOR_BACKGROUND_RGB if category == "indoor" else SKY_RGB,
            landmarks=scene_landmarks(layout.builder, category),
        )
        write_gaussians_ply(folder / "splat.ply", gaussians)
        # Explicit options: the bytes must not depend on what trimesh happens to have cached.
        (folder / "collision.ply").write_bytes(
            export_ply(mesh, encoding="binary", vertex_normal=False, include_attributes=False))
        write_scene_yaml(folder / "scene.yaml", spec)

    write_atomically(out_dir, write)
    return parse_scene_yaml(out_dir / "scene.yaml")
