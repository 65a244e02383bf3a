"""Urban: a street between two rows of buildings, a plaza on one side, a side street.

Map frame: the main street (sidewalk, road, sidewalk) spans x in [0, W], y in [0, Ws];
buildings stand south of y = 0 and north of y = Ws; a plaza opens north of the street at
px0..px0+pw; a side street leaves southwards at sx0..sx0+ssw. Taller buildings close
the street ends. Ground (asphalt) is at z = 0; sidewalks and the plaza are 0.15 m kerbs.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import SceneBuilder
from airplay.scene.synthetic.layouts import Layout, props, split_lengths, sun_direction
from airplay.scene.synthetic.splat import Lighting

KERB = 0.15
ROOF_DETAIL = 0.12
FACADE_COLORS = [(0.80, 0.74, 0.62), (0.88, 0.86, 0.80), (0.66, 0.66, 0.66), (0.78, 0.60, 0.45),
                 (0.70, 0.76, 0.78), (0.85, 0.78, 0.55), (0.62, 0.52, 0.46)]
BRICKS = [(0.58, 0.30, 0.22), (0.66, 0.40, 0.28), (0.50, 0.28, 0.24)]
SIGNS = [(0.65, 0.12, 0.10), (0.10, 0.30, 0.55), (0.15, 0.45, 0.25), (0.85, 0.60, 0.10)]


def _facade_material(b: SceneBuilder, rng: np.random.Generator, shop: bool) -> int:
    brick = rng.random() < 0.35
    color = BRICKS[int(rng.integers(len(BRICKS)))] if brick else FACADE_COLORS[int(rng.integers(len(FACADE_COLORS)))]
    return b.material(
        "facade", color=color, style="brick" if brick else "plaster",
        floor_h=float(np.round(rng.uniform(3.0, 3.5), 2)), pitch=float(np.round(rng.uniform(2.4, 3.4), 2)),
        win_w=float(np.round(rng.uniform(1.0, 1.5), 2)), win_h=float(np.round(rng.uniform(1.3, 1.8), 2)),
        sill=0.9, shop=shop, sign=SIGNS[int(rng.integers(len(SIGNS)))],
        frame=(0.92, 0.91, 0.88) if rng.random() < 0.6 else (0.25, 0.25, 0.27),
    )


def _building(b: SceneBuilder, rng, x0: float, x1: float, y0: float, y1: float, front: str,
              height: float | None = None) -> None:
    """A block on [x0, x1] x [y0, y1]; ``front`` faces the street. Faces facing away are skipped."""
    h = height if height is not None else float(rng.integers(2, 7)) * rng.uniform(3.1, 3.5)
    mat = _facade_material(b, rng, shop=rng.random() < 0.55)
    roof = b.material("roof", color=tuple(np.round(np.array((0.36, 0.35, 0.34)) * rng.uniform(0.8, 1.2), 3)))
    away = {"+y": "-y", "-y": "+y", "+x": "-x", "-x": "+x"}[front]
    # Below the top of the flight band facades get full detail, above it less, roofs least.
    split = min(h, 9.5)
    roof_or_skip = ("-z", away) if split == h else ("-z", away, "+z")
    top = {"+z": ROOF_DETAIL}
    b.box((x0, y0, 0.0), (x1, y1, split), mat, faces={"+z": roof}, skip=roof_or_skip, detail=0.75, face_detail=top)
    if h > split:
        b.box((x0, y0, split), (x1, y1, h), mat, faces={"+z": roof}, skip=("-z", away), detail=0.3, face_detail=top)
    if h > 9.0 and rng.random() < 0.3:  # an upper setback storey
        inset = 1.5
        ya, yb = (y0, y1 - inset) if front == "+y" else ((y0 + inset, y1) if front == "-y" else (y0, y1))
        xa, xb = (x0, x1 - inset) if front == "+x" else ((x0 + inset, x1) if front == "-x" else (x0, x1))
        b.box((xa, ya, h), (xb, yb, h + 3.2), mat, faces={"+z": roof}, skip=("-z", away), detail=0.3,
              face_detail={"+z": ROOF_DETAIL})


def _row(b, rng, x0: float, x1: float, y0: float, y1: float, front: str) -> None:
    x = x0
    for width in split_lengths(x1 - x0, rng, 6.0, 12.0):
        _building(b, rng, x, x + width, y0, y1, front)
        x += width


def make_urban(rng: np.random.Generator) -> Layout:
    b = SceneBuilder()
    W = float(rng.uniform(38.0, 46.0))
    rw, sw = float(rng.uniform(6.5, 8.5)), float(rng.uniform(2.2, 3.2))
    Ws = rw + 2 * sw
    bd = float(rng.uniform(7.0, 10.0))
    pw = float(rng.uniform(10.0, 14.0))
    px0 = float(rng.uniform(4.0, W - pw - 4.0))
    ssw = float(rng.uniform(7.0, 9.0))
    sx0 = float(rng.uniform(4.0, W - ssw - 4.0))
    ext = bd + 4.0  # how far the side street runs south
    sr0, sr1 = sx0 + 1.5, sx0 + ssw - 1.5  # side road

    # Ground: one slab under everything (never seen), asphalt on the roads.
    hidden = ("+x", "-x", "+y", "-y", "+z", "-z")
    white, yellow = (0.92, 0.92, 0.88), (0.95, 0.80, 0.20)
    asphalt = b.material(
        "asphalt",
        marks=((0, sw + rw / 2, 0.0, W, 0.12, 3.0, *white),      # centre line, dashed
               (0, sw + 0.3, 0.0, W, 0.12, 0.0, *white),         # edge lines
               (0, sw + rw - 0.3, 0.0, W, 0.12, 0.0, *white),
               (1, (sr0 + sr1) / 2, -ext, -0.6, 0.12, 2.0, *yellow),  # side street centre
               (0, -0.45, sr0, sr1, 0.3, 0.0, *white)),          # stop line
        zebras=((px0 + pw / 2 - 2.0, px0 + pw / 2 + 2.0, sw + 0.4, sw + rw - 0.4, 1),),
    )
    b.box((-8.0, -ext - 8.0, -0.3), (W + 8.0, Ws + bd + 8.0, -0.1), asphalt, skip=hidden)
    b.box((0.0, sw - 0.01, -0.2), (W, sw + rw + 0.01, 0.0), asphalt, skip=hidden[:4] + ("-z",))
    b.box((sr0, -ext, -0.2), (sr1, sw - 0.01, 0.0), asphalt, skip=hidden[:4] + ("-z",))

    # Sidewalks (kerbs) and the plaza.
    walk = b.material("paving", color=(0.66, 0.64, 0.60), size=(0.4, 0.4))
    kerb = b.material("concrete", color=(0.72, 0.71, 0.68))
    plaza = b.material("paving", color=(0.74, 0.66, 0.56), color2=(0.62, 0.55, 0.50), size=(0.6, 0.3), bond=True)
    top = ("-z",)
    b.box((0.0, 0.0, -0.2), (sr0, sw, KERB), walk, faces={"+y": kerb, "+x": kerb}, skip=top + ("-y", "-x"))
    b.box((sr1, 0.0, -0.2), (W, sw, KERB), walk, faces={"+y": kerb, "-x": kerb}, skip=top + ("-y", "+x"))
    b.box((sx0, -ext, -0.2), (sr0, 0.0, KERB), walk, faces={"+x": kerb}, skip=top + ("-x", "+y"))
    b.box((sr1, -ext, -0.2), (sx0 + ssw, 0.0, KERB), walk, faces={"-x": kerb}, skip=top + ("+x", "+y"))
    b.box((0.0, sw + rw, -0.2), (px0, Ws, KERB), walk, faces={"-y": kerb}, skip=top + ("+y", "-x"))
    b.box((px0 + pw, sw + rw, -0.2), (W, Ws, KERB), walk, faces={"-y": kerb}, skip=top + ("+y", "+x"))
    b.box((px0, sw + rw, -0.2), (px0 + pw, Ws + bd, KERB), plaza, faces={"-y": kerb}, skip=top + ("+y",))

    # Buildings: two rows, the plaza's back, the side street's end and the street ends.
    _row(b, rng, 0.0, sx0, -ext, 0.0, "+y")
    _row(b, rng, sx0 + ssw, W, -ext, 0.0, "+y")
    _row(b, rng, 0.0, px0, Ws, Ws + bd, "-y")
    _row(b, rng, px0 + pw, W, Ws, Ws + bd, "-y")
    _building(b, rng, px0 - 1.0, px0 + pw + 1.0, Ws + bd, Ws + bd + 6.0, "-y")
    _building(b, rng, sx0 - 2.0, sx0 + ssw + 2.0, -ext - 6.0, -ext, "+y")
    _building(b, rng, -7.0, 0.0, -ext, Ws + bd, "+x", height=float(rng.uniform(12.0, 20.0)))
    _building(b, rng, W, W + 7.0, -ext, Ws + bd, "-x", height=float(rng.uniform(12.0, 20.0)))

    # Street furniture: lamp posts, parked cars, benches, trees or a fountain on the plaza.
    spacing = float(rng.uniform(9.0, 13.0))
    for x in np.arange(spacing / 2, W, spacing):
        if not (sx0 - 0.5 < x < sx0 + ssw + 0.5):
            props.lamp_post(b, float(x), sw - 0.45, np.pi / 2)
        xn = float(x) + spacing / 2
        if xn < W - 1.0 and not (px0 < xn < px0 + pw):
            props.lamp_post(b, xn, sw + rw + 0.45, -np.pi / 2)
    busy = [(sx0 - 3.0, sx0 + ssw + 3.0), (px0 + pw / 2 - 4.5, px0 + pw / 2 + 4.5)]
    for lane_y, yaw in ((sw + 1.05, 0.0), (sw + rw - 1.05, np.pi)):
        x = float(rng.uniform(1.0, 6.0))
        while x < W - 5.0:
            if rng.random() < 0.45 and not any(a < x + 4.7 and x < b_ for a, b_ in busy):
                props.car(b, x + 2.3, lane_y, yaw, rng)
            x += float(rng.uniform(5.0, 9.0))
    cx, cy = px0 + pw / 2, Ws + bd / 2
    if rng.random() < 0.5:
        stone = b.material("concrete", color=(0.70, 0.68, 0.64))
        b.cylinder(cx, cy, KERB, KERB + 0.5, 2.0, stone, cap=b.material("glass", color=(0.20, 0.32, 0.40)), segments=24)
        b.cylinder(cx, cy, KERB + 0.5, KERB + 1.6, 0.25, stone, segments=10)
        for a in (0.25, 0.75):
            props.bench(b, cx + (pw / 2 - 1.0) * (2 * a - 1) * 1.0, cy + 2.5, -np.pi / 2)
    else:
        for dx in (-pw / 4, pw / 4):
            props.tree(b, cx + dx, cy + rng.uniform(-1.0, 1.0), rng, base=rng.uniform(2.8, 3.4), size=0.8, detail=0.6)
        props.bench(b, cx, cy - bd / 2 + 1.5, np.pi / 2)
    for x in (px0 + 0.6, px0 + pw - 0.6):
        props.bin_(b, x, Ws + 0.4)

    polygon = np.array([
        [0.0, 0.0], [sx0, 0.0], [sx0, -ext], [sx0 + ssw, -ext], [sx0 + ssw, 0.0], [W, 0.0],
        [W, Ws], [px0 + pw, Ws], [px0 + pw, Ws + bd], [px0, Ws + bd], [px0, Ws], [0.0, Ws],
    ])
    return Layout(b, polygon, 1.5, 8.0, Lighting(sun=sun_direction(rng)))
