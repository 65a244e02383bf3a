"""Named landmarks of a synthetic scene, for ``scene.yaml`` (``landmarks:``) and VLN instructions.

Derived from the builder after the layout is made (no random numbers are drawn, so the splat
and mesh bytes do not depend on it): every solid's material (the most common material of its
surface patches) maps to a landmark kind (bookshelf, sofa, potted plant, tree, bush, rock,
car, building, street lamp, bench, fountain); solids of one kind whose bounding boxes lie
within 0.3 m of each other form one landmark (a car body and its cabin, a trunk and its
crown). Each landmark gets a colour word from its material, a name ("red car") and a short
visual description ("a red car parked at the kerb"). Names are unique: a landmark whose
name is taken gets a longer one ("tall tree with green leaves"), or is left out when none
is free. At most :data:`MAX_LANDMARKS`: the largest of each kind first, then the second
largest of each kind, and so on.

Each entry of the list (the ``scene.yaml`` schema, read by :mod:`airplay.vln.episodes`):

    name: red car                       # unique in the scene
    kind: car
    description: a red car parked at the kerb
    position: [x, y, z]                 # centre of its bounding box, map frame (ENU), m
    size: [sx, sy, sz]                  # bounding-box extents, m
"""

from __future__ import annotations

import colorsys
from collections import Counter

import numpy as np

MAX_LANDMARKS = 24
MERGE_GAP_M = 0.3


def colour_name(rgb) -> str:
    """A plain colour word for linear-ish RGB in [0, 1]."""
    r, g, b = (float(v) for v in rgb[:3])
    h, s, v = colorsys.rgb_to_hsv(r, g, b)
    if v < 0.18:
        return "black"
    if s < 0.12:
        return "white" if v > 0.8 else ("light grey" if v > 0.6 else "grey")
    hue = h * 360.0
    if s < 0.35 and v > 0.6 and 20 <= hue < 70:
        return "beige"
    if hue < 15 or hue >= 340:
        return "red" if v > 0.45 else "dark red"
    if hue < 40:
        return "orange" if v > 0.75 and s > 0.5 else "brown"
    if hue < 70:
        return "yellow" if v > 0.6 and s > 0.4 else "olive"
    if hue < 170:
        return "green" if v > 0.35 else "dark green"
    if hue < 260:
        return "blue"
    if hue < 300:
        return "purple"
    return "pink"


def _kind(material, top_z: float, category: str) -> str | None:
    k = material.kind
    if k == "books":
        return "bookshelf"
    if k == "fabric":
        return "sofa"
    if k in ("leaves", "bark"):
        if category == "indoor":
            return "potted plant"
        return "tree" if top_z > 2.5 or k == "bark" else "bush"
    if k == "soil":
        return "potted plant"
    if k == "rock":
        return "rock"
    if k in ("car", "cabin"):
        return "car"
    if k == "facade":
        return "building"
    if k == "lamp":
        return "street lamp"
    if k == "wood" and material.get("slats"):
        return "bench"
    if k == "glass":
        return "fountain"
    return None


def _describe(kind: str, colour: str, material, size: np.ndarray) -> tuple[list[str], str]:
    """(candidate names, shortest first; description)."""
    big = "tall" if size[2] > 6.0 else ("large" if max(size) > 2.0 else "small")
    if kind == "building":
        style = material.get("style", "plaster")
        floors = max(1, int(round(size[2] / float(material.get("floor_h", 3.2)))))
        shop = " with shop windows" if material.get("shop") else ""
        base = f"{colour} {style} building"
        return ([base, f"{base}{shop or ' without shops'}", f"{floors}-storey {base}{shop}"],
                f"a {floors}-storey {colour} {style} building{shop}")
    if kind == "car":
        return [f"{colour} car", f"{big} {colour} car"], f"a {colour} car parked at the kerb"
    if kind == "tree":
        return ([f"tree with {colour} leaves", f"{big} tree with {colour} leaves"],
                f"a {big} tree with {colour} leaves")
    if kind == "bush":
        return [f"{colour} bush", f"{big} {colour} bush"], f"a low {colour} bush"
    if kind == "potted plant":
        return [f"{colour} potted plant", f"{big} {colour} potted plant"], f"a {colour} plant in a pot"
    if kind == "bookshelf":
        return [f"{colour} bookshelf", f"{big} {colour} bookshelf"], f"a {colour} wooden bookshelf full of books"
    if kind == "sofa":
        return [f"{colour} sofa", f"{big} {colour} sofa"], f"a {colour} sofa"
    if kind == "rock":
        return [f"{colour} rock", f"{big} {colour} rock"], f"a {big} {colour} rock"
    if kind == "street lamp":
        return ["street lamp"], "a tall dark street lamp"
    if kind == "bench":
        return [f"{colour} bench"], f"a {colour} wooden bench"
    if kind == "fountain":
        return ["round fountain"], "a round stone fountain with a glass top"
    return [f"{colour} {kind}", f"{big} {colour} {kind}"], f"a {colour} {kind}"


PART_KINDS = {"bark": "tree", "cabin": "car", "soil": "potted plant"}
"""Materials of object parts: such a solid joins the overlapping main solid of its landmark kind."""


def scene_landmarks(builder, category: str, max_landmarks: int = MAX_LANDMARKS) -> list[dict]:
    """The landmark list (see the module docstring) of a filled builder."""
    solids = builder.solid_arrays()
    n = len(solids["kind"])
    if n == 0:
        return []
    quads, tris = builder.quads(), builder.triangles()
    material_of_patch = np.concatenate([quads["material"], tris["material"]])
    part_of_patch = np.concatenate([quads["part"], tris["part"]])
    lo, hi = solids["aabb_lo"], solids["aabb_hi"]
    kinds: list[str | None] = [None] * n
    materials = [None] * n
    for s in range(n):
        mats = material_of_patch[part_of_patch == s]
        if len(mats) == 0:
            continue
        counts = Counter(mats.tolist())
        books = [k for k in counts if builder.materials[k].kind == "books"]
        m = builder.materials[books[0] if books else counts.most_common(1)[0][0]]
        materials[s] = m
        kinds[s] = _kind(m, float(hi[s, 2]), category)
    # parts (trunk, cabin, soil) join the overlapping main solid of their kind
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    idx = [s for s in range(n) if kinds[s] is not None]
    mains = [s for s in idx if materials[s].kind not in PART_KINDS]
    for a in idx:
        if materials[a].kind not in PART_KINDS:
            continue
        near = [b for b in mains if kinds[b] == kinds[a]
                and np.maximum(lo[a] - hi[b], lo[b] - hi[a]).max() <= MERGE_GAP_M]
        if near:
            parent[find(a)] = find(min(near, key=lambda b: float(np.linalg.norm((lo[b] + hi[b]) - (lo[a] + hi[a])))))
    groups: dict[int, list[int]] = {}
    for s in idx:
        groups.setdefault(find(s), []).append(s)
    found = []
    for members in groups.values():
        kind = kinds[members[0]]
        g_lo, g_hi = lo[members].min(axis=0), hi[members].max(axis=0)
        size = g_hi - g_lo
        volume = float(np.prod(np.maximum(size, 1e-3)))
        # colour from the largest member that carries one (the crown of a tree, the car body)
        coloured = [s for s in members if materials[s].get("color") is not None and materials[s].kind != "bark"
                    and materials[s].kind != "cabin"] or members
        main = max(coloured, key=lambda s: float(np.prod(np.maximum(hi[s] - lo[s], 1e-3))))
        colour = colour_name(materials[main].get("color", (0.5, 0.5, 0.5)))
        candidates, description = _describe(kind, colour, materials[main], size)
        found.append((volume, candidates, kind, description, (g_lo + g_hi) / 2, size))
    found.sort(key=lambda f: (-f[0], f[1]))
    # interleave the kinds (largest of each kind, then the second largest, ...): variety first
    by_kind: dict[str, list] = {}
    for f in found:
        by_kind.setdefault(f[2], []).append(f)
    rank = {id(f): i for group in by_kind.values() for i, f in enumerate(group)}
    found.sort(key=lambda f: (rank[id(f)], -f[0], f[1]))
    out, names = [], set()
    for volume, candidates, kind, description, centre, size in found:
        free = [c for c in candidates if c not in names]
        if not free:
            continue
        name = free[0]
        names.add(name)
        out.append({"name": name, "kind": kind, "description": description,
                    "position": [round(float(v), 2) for v in centre], "size": [round(float(v), 2) for v in size]})
        if len(out) == max_landmarks:
            break
    return out
