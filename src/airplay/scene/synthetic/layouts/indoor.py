"""Indoor: an office/school floor, two rows of rooms off a central corridor.

Map frame: the building's inner outline is [0, L] x [0, D]; south rooms y in [0, ds],
the corridor y in [ds, ds + cw], north rooms above. Every room has a door to the
corridor; some neighbours share a door; some pairs are merged into a hall. Walls are
boxes (interior 0.15 m, exterior 0.25 m, outside the outline), floor slabs end at z = 0
and a ceiling slab starts at z = H. Exterior walls carry painted, bright windows.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import SceneBuilder
from airplay.scene.synthetic.layouts import Layout, split_lengths
from airplay.scene.synthetic.layouts import props
from airplay.scene.synthetic.splat import Lighting

T_IN, T_EX = 0.15, 0.25
WALL_COLORS = [(0.87, 0.85, 0.79), (0.80, 0.84, 0.86), (0.89, 0.81, 0.71), (0.77, 0.83, 0.74),
               (0.91, 0.91, 0.89), (0.84, 0.76, 0.80), (0.93, 0.87, 0.68)]
WOODS = [(0.62, 0.45, 0.28), (0.42, 0.29, 0.18), (0.76, 0.63, 0.46), (0.55, 0.38, 0.24)]
FABRICS = [(0.25, 0.32, 0.45), (0.45, 0.20, 0.18), (0.30, 0.40, 0.30), (0.55, 0.52, 0.48), (0.20, 0.20, 0.22)]


def _pick(rng: np.random.Generator, items: list):
    return items[int(rng.integers(len(items)))]


def _room_materials(b: SceneBuilder, rng: np.random.Generator) -> tuple[int, int, int]:
    """(inner wall, exterior wall with windows, floor) materials of one room."""
    if rng.random() < 0.15:
        color = tuple(np.round(np.array((0.60, 0.33, 0.25)) * rng.uniform(0.85, 1.15), 3))
        wall, ext = b.material("brick", color=color), b.material("brick", color=color, windows=True)
    else:
        color = _pick(rng, WALL_COLORS)
        wall, ext = b.material("plaster", color=color), b.material("plaster", color=color, windows=True)
    kind = rng.random()
    if kind < 0.5:
        floor = b.material("wood_floor", color=_pick(rng, WOODS))
    elif kind < 0.8:
        grey = float(np.round(rng.uniform(0.55, 0.8), 3))
        floor = b.material("tiles", color=(grey, grey * 0.98, grey * 0.93), size=float(_pick(rng, [0.3, 0.5, 0.6])))
    else:
        floor = b.material("carpet", color=_pick(rng, FABRICS))
    return wall, ext, floor


def _wall_x(b, x0, x1, y0, y1, H, mats: dict, door: tuple | None, jamb: int) -> None:
    """Wall along x from x0 to x1 (thickness y0..y1) with an optional door (lo, hi, height)."""
    if door is None:
        b.box((x0, y0, 0), (x1, y1, H), mats["+y"], faces=mats, skip=("-z", "+z"))
        return
    lo, hi, hd = door
    b.box((x0, y0, 0), (lo, y1, H), mats["+y"], faces={**mats, "+x": jamb}, skip=("-z", "+z"))
    b.box((hi, y0, 0), (x1, y1, H), mats["+y"], faces={**mats, "-x": jamb}, skip=("-z", "+z"))
    b.box((lo, y0, hd), (hi, y1, H), mats["+y"], faces={**mats, "-z": jamb}, skip=("+z", "+x", "-x"))


def _wall_y(b, y0, y1, x0, x1, H, mats: dict, door: tuple | None, jamb: int) -> None:
    """Wall along y from y0 to y1 (thickness x0..x1) with an optional door (lo, hi, height)."""
    if door is None:
        b.box((x0, y0, 0), (x1, y1, H), mats["+x"], faces=mats, skip=("-z", "+z"))
        return
    lo, hi, hd = door
    b.box((x0, y0, 0), (x1, lo, H), mats["+x"], faces={**mats, "+y": jamb}, skip=("-z", "+z"))
    b.box((x0, hi, 0), (x1, y1, H), mats["+x"], faces={**mats, "-y": jamb}, skip=("-z", "+z"))
    b.box((x0, lo, hd), (x1, hi, H), mats["+x"], faces={**mats, "-z": jamb}, skip=("+z", "+y", "-y"))


def _door(rng, a: float, b: float, H: float) -> tuple[float, float, float] | None:
    width = rng.uniform(1.2, 1.6)
    if b - a < width + 1.0:
        return None
    centre = rng.uniform(a + 0.5 + width / 2, b - 0.5 - width / 2)
    return centre - width / 2, centre + width / 2, min(rng.uniform(2.3, 2.5), H - 0.3)


def _furnish(b: SceneBuilder, rng, x0: float, x1: float, y0: float, y1: float, back: str, H: float,
             side_free: tuple[bool, bool]) -> None:
    """Furniture in the room interior [x0, x1] x [y0, y1]; ``back`` is the window wall side."""
    wood = b.material("wood", color=_pick(rng, WOODS))
    w, d = x1 - x0, y1 - y0
    by = y0 if back == "-y" else y1
    sgn = 1.0 if back == "-y" else -1.0
    # Along the back wall: left corner, middle, right corner.
    mid = rng.random()
    if mid < 0.4 and w > 3.0:
        width, depth, height = min(rng.uniform(1.0, 2.0), w - 1.6), rng.uniform(0.35, 0.45), rng.uniform(1.8, 2.1)
        cx = (x0 + x1) / 2 + rng.uniform(-0.3, 0.3)
        ya, yb = sorted((by, by + sgn * depth))
        front = "+y" if back == "-y" else "-y"
        b.box((cx - width / 2, ya, 0), (cx + width / 2, yb, height), wood,
              faces={front: b.material("books", color=tuple(c * 0.8 for c in b.materials[wood].get("color")))},
              skip=("-z",))
    elif mid < 0.7 and w > 3.0:
        width = min(rng.uniform(1.6, 2.2), w - 1.6)
        cx = (x0 + x1) / 2
        ya, yb = sorted((by, by + sgn * 0.9))
        props.sofa(b, (cx - width / 2, ya), (cx + width / 2, yb), back, b.material("fabric", color=_pick(rng, FABRICS)))
    elif w > 2.5:
        width = min(rng.uniform(1.0, 2.0), w - 1.0)
        cx = (x0 + x1) / 2
        ya, yb = sorted((by, by + sgn * 0.5))
        b.box((cx - width / 2, ya, 0), (cx + width / 2, yb, rng.uniform(0.8, 1.0)), wood, skip=("-z",))
    for corner_x, free in ((x0 + 0.35, side_free[0]), (x1 - 0.35, side_free[1])):
        if free and rng.random() < 0.5:
            props.potted_plant(b, corner_x, by + sgn * 0.35, rng, size=rng.uniform(0.9, 1.4))
    # A table in the middle of larger rooms.
    if d > 3.6 and w > 3.2 and rng.random() < 0.8:
        tw, td = min(rng.uniform(1.2, 2.0), w - 2.2), min(rng.uniform(0.7, 1.0), d - 2.6)
        props.table(b, (x0 + x1) / 2 + rng.uniform(-0.3, 0.3), (y0 + y1) / 2 + rng.uniform(-0.2, 0.2), tw, td, wood)


def make_indoor(rng: np.random.Generator) -> Layout:
    b = SceneBuilder()
    H = float(rng.uniform(2.8, 3.3))
    ds, dn, cw = rng.uniform(4.5, 7.0), rng.uniform(4.5, 7.0), rng.uniform(2.0, 2.8)
    D = ds + cw + dn
    L = float(np.clip(rng.uniform(300.0, 600.0) / D, 18.0, 40.0))
    jamb = b.material("wood", color=(0.55, 0.40, 0.26))
    corridor_wall = b.material("plaster", color=_pick(rng, WALL_COLORS))
    corridor_ext = b.material("plaster", color=b.materials[corridor_wall].get("color"), windows=True)
    corridor_floor = b.material("tiles", color=(0.72, 0.70, 0.66), color2=(0.45, 0.44, 0.42), size=0.5)
    ceiling = b.material("ceiling")

    # Floor and ceiling slabs.
    b.box((-T_EX, -T_EX, H), (L + T_EX, D + T_EX, H + 0.2), ceiling, skip=("+z", "+x", "-x", "+y", "-y"), detail=0.6)
    b.box((-T_EX, ds, -0.2), (L + T_EX, ds + cw, 0.0), corridor_floor, skip=("-z", "+x", "-x", "+y", "-y"))
    # Corridor end walls (exterior, with a window).
    for x_lo, x_hi, face in ((-T_EX, 0.0, "+x"), (L, L + T_EX, "-x")):
        b.box((x_lo, ds, 0), (x_hi, ds + cw, H), corridor_ext, skip=("-z", "+z", "+x" if face == "-x" else "-x"))

    for side in ("south", "north"):
        y_room0, y_room1 = (0.0, ds) if side == "south" else (ds + cw, D)
        widths = split_lengths(L, rng, 3.8, 7.0)
        bounds = np.concatenate([[0.0], np.cumsum(widths)])
        bounds[-1] = L
        if len(widths) > 2 and rng.random() < 0.35:  # merge two rooms into a hall
            k = int(rng.integers(1, len(bounds) - 1))
            bounds = np.delete(bounds, k)
        n_rooms = len(bounds) - 1
        mats = [_room_materials(b, rng) for _ in range(n_rooms)]
        # Partition walls (with a door between neighbours now and then).
        side_doors = []
        for k in range(1, n_rooms):
            xb = bounds[k]
            door = _door(rng, y_room0, y_room1, H) if rng.random() < 0.3 else None
            side_doors.append(door is not None)
            wm = {"-x": mats[k - 1][0], "+x": mats[k][0], "+y": mats[k][0], "-y": mats[k][0]}
            _wall_y(b, y_room0, y_room1, xb - T_IN / 2, xb + T_IN / 2, H, wm, door, jamb)
        for k in range(n_rooms):
            x0, x1 = bounds[k], bounds[k + 1]
            wall, ext, floor = mats[k]
            # Floor slab of the room, reaching under its walls.
            fx0, fx1 = (x0 if k else -T_EX), (x1 if k < n_rooms - 1 else L + T_EX)
            fy0, fy1 = (-T_EX, ds) if side == "south" else (ds + cw, D + T_EX)
            b.box((fx0, fy0, -0.2), (fx1, fy1, 0.0), floor, skip=("-z", "+x", "-x", "+y", "-y"))
            # Exterior back wall (windows) and corridor wall (door).
            if side == "south":
                b.box((x0, -T_EX, 0), (x1, 0.0, H), ext, skip=("-z", "+z", "-y"))
                cm = {"-y": wall, "+y": corridor_wall}
                corridor_y = (ds - T_IN / 2, ds + T_IN / 2)
            else:
                b.box((x0, D, 0), (x1, D + T_EX, H), ext, skip=("-z", "+z", "+y"))
                cm = {"+y": wall, "-y": corridor_wall}
                corridor_y = (ds + cw - T_IN / 2, ds + cw + T_IN / 2)
            _wall_x(b, x0, x1, *corridor_y, H, {**cm, "+x": wall, "-x": wall}, _door(rng, x0, x1, H), jamb)
            # End walls of the building.
            if k == 0:
                b.box((-T_EX, y_room0, 0), (0.0, y_room1, H), ext, skip=("-z", "+z", "-x"))
            if k == n_rooms - 1:
                b.box((L, y_room0, 0), (L + T_EX, y_room1, H), ext, skip=("-z", "+z", "+x"))
            ix0 = x0 + (T_IN / 2 if k else 0.0)
            ix1 = x1 - (T_IN / 2 if k < n_rooms - 1 else 0.0)
            iy0, iy1 = (0.0, ds - T_IN / 2) if side == "south" else (ds + cw + T_IN / 2, D)
            free = (k == 0 or not side_doors[k - 1], k == n_rooms - 1 or not side_doors[k])
            _furnish(b, rng, ix0, ix1, iy0, iy1, "-y" if side == "south" else "+y", H, free)
            if x1 - x0 > 9.0:  # halls get pillars
                for px in (x0 + (x1 - x0) / 3, x0 + 2 * (x1 - x0) / 3):
                    b.box((px - 0.2, (iy0 + iy1) / 2 - 0.2, 0), (px + 0.2, (iy0 + iy1) / 2 + 0.2, H),
                          b.material("concrete", color=(0.80, 0.79, 0.76)), skip=("-z", "+z"))
    for px in (0.6, L - 0.6):
        if rng.random() < 0.7:
            props.potted_plant(b, px, ds + T_IN / 2 + 0.35 + (cw - T_IN - 0.7) * float(rng.integers(2)), rng)
    polygon = np.array([[0.0, 0.0], [L, 0.0], [L, D], [0.0, D]])
    # Rooms are small and seen from close by: 1.3x the density of outdoor scenes.
    return Layout(b, polygon, 0.8, min(2.2, H - 0.6), Lighting(sun=None, ceiling_m=H), detail=1.3)
