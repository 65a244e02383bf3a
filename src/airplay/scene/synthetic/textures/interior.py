"""Indoor materials: plaster and brick walls (with painted windows), floors, ceilings, furniture."""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import Material
from airplay.scene.synthetic.textures._util import TexIn, box_cover, cell_random, cells, lines, mix, rgb, tone


def _wall_window(x: TexIn, m: Material, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Paint a row of bright windows on vertical faces (exterior walls seen from inside)."""
    sheen = np.zeros(len(x))
    if not m.get("windows", False):
        return base, sheen
    s, z, lu = x.st[:, 0], x.uv[:, 1], x.extent[:, 0]
    pitch, width, sill, top = 2.6, 1.4, 0.95, 2.25
    count = np.maximum(np.floor((lu - 0.8) / pitch), 0)
    margin = (lu - count * pitch) / 2
    col = np.floor((s - margin) / pitch)
    local = (s - margin) - col * pitch - pitch / 2
    vertical = np.abs(x.n[:, 2]) < 0.5
    in_row = vertical & (col >= 0) & (col < count)
    frame_cov = box_cover(local, -width / 2 - 0.07, width / 2 + 0.07, x.filt) * box_cover(z, sill - 0.07, top + 0.07, x.filt)
    glass_cov = box_cover(local, -width / 2, width / 2, x.filt) * box_cover(z, sill, top, x.filt)
    sky = mix(rgb((0.62, 0.76, 0.93), len(x)), (0.93, 0.96, 0.99), (z - sill) / (top - sill))
    sky = tone(sky, x.noise(2.0, 91), 0.05)
    mullion = lines(local, 10.0, 0.05, x.filt) * glass_cov
    out = mix(base, (0.93, 0.93, 0.9), frame_cov * in_row)
    out = mix(out, sky, glass_cov * in_row * (1 - mullion))
    sheen[in_row] = 0.12 * glass_cov[in_row]
    return out, sheen


def plaster(x: TexIn, m: Material):
    base = rgb(m.get("color"), len(x))
    base = tone(base, x.noise(0.8, 1), 0.06)
    base = tone(base, x.noise(18.0, 2, 1), 0.035)
    z = x.uv[:, 1]
    vertical = np.abs(x.n[:, 2]) < 0.5
    skirting = box_cover(z, -1.0, 0.10, x.filt) * vertical
    base = mix(base, np.asarray(m.get("trim", (0.92, 0.91, 0.88))), skirting)
    return _wall_window(x, m, base)


def brick(x: TexIn, m: Material):
    """Running-bond bricks, 0.30 x 0.10 m, mortar lines filtered to the sample spacing."""
    u, v = x.uv[:, 0], x.uv[:, 1]
    bl, bh = 0.30, 0.10
    row, _ = cells(v, bh)
    col, _ = cells(u + 0.5 * bl * (row % 2), bl)
    c = rgb(m.get("color"), len(x))
    c = tone(c, cell_random(x.seed, row, col), 0.14)
    c = tone(c, x.noise(1.2, 3), 0.08)
    mortar = 1 - (1 - lines(v, bh, 0.012, x.filt)) * (1 - lines(u + 0.5 * bl * (row % 2), bl, 0.012, x.filt))
    out = mix(c, np.asarray(m.get("mortar", (0.74, 0.72, 0.68))), mortar)
    return _wall_window(x, m, out)


def wood_floor(x: TexIn, m: Material):
    """Planks 0.18 m wide along u, 1.2 m long with staggered joints; grain along the plank."""
    u, v = x.uv[:, 0], x.uv[:, 1]
    row, _ = cells(v, 0.18)
    shift = cell_random(x.seed, row, 7) * 1.2
    col, _ = cells(u + shift, 1.2)
    c = rgb(m.get("color"), len(x))
    c = tone(c, cell_random(x.seed, row, col), 0.18)
    c = tone(c, x.noise2(u * 1.5, v * 40.0, 5), 0.12)
    gaps = 1 - (1 - lines(v, 0.18, 0.006, x.filt)) * (1 - lines(u + shift, 1.2, 0.006, x.filt))
    out = mix(c, c * 0.45, gaps)
    return out, np.full(len(x), 0.06)


def tiles(x: TexIn, m: Material):
    """Square tiles with grout; optional checkerboard of two colours."""
    size = m.get("size", 0.5)
    u, v = x.uv[:, 0], x.uv[:, 1]
    iu, _ = cells(u, size)
    iv, _ = cells(v, size)
    c = rgb(m.get("color"), len(x))
    if m.get("color2") is not None:
        c = np.where(((iu + iv) % 2 == 1)[:, None], np.asarray(m.get("color2")), c)
    c = tone(c, cell_random(x.seed, iu, iv), 0.06)
    c = tone(c, x.noise(3.0, 7, 2), 0.05)
    grout = 1 - (1 - lines(u, size, 0.008, x.filt)) * (1 - lines(v, size, 0.008, x.filt))
    return mix(c, (0.62, 0.61, 0.58), grout), np.full(len(x), 0.08)


def carpet(x: TexIn, m: Material):
    c = tone(rgb(m.get("color"), len(x)), x.noise(30.0, 8, 1), 0.10)
    return tone(c, x.noise(0.7, 9), 0.07), np.zeros(len(x))


def ceiling(x: TexIn, m: Material):
    """0.6 m suspended-ceiling panels; every few panels a light panel."""
    u, v = x.uv[:, 0], x.uv[:, 1]
    iu, _ = cells(u, 0.6)
    iv, _ = cells(v, 0.6)
    c = tone(rgb((0.90, 0.90, 0.88), len(x)), x.noise(2.0, 10), 0.03)
    light = ((iu % 4) == 1) & ((iv % 3) == 1)
    c[light] = (1.0, 0.99, 0.95)
    grid = 1 - (1 - lines(u, 0.6, 0.02, x.filt)) * (1 - lines(v, 0.6, 0.02, x.filt))
    return mix(c, (0.72, 0.72, 0.70), grid), np.zeros(len(x))


def wood(x: TexIn, m: Material):
    u, v = x.uv[:, 0], x.uv[:, 1]
    c = rgb(m.get("color"), len(x))
    c = tone(c, x.noise2(u * 2.0, v * 30.0, 11), 0.14)
    slat = m.get("slats")
    if slat:
        c = mix(c, c * 0.3, lines(v, slat, 0.015, x.filt) * (np.abs(x.n[:, 2]) < 0.5))
    return c, np.full(len(x), 0.04)


def books(x: TexIn, m: Material):
    """Shelf front: boards every 0.4 m, book spines of random colour between them."""
    u, z = x.uv[:, 0], x.uv[:, 1]
    shelf, zin = cells(z, 0.4)
    spine, _ = cells(u + cell_random(x.seed, shelf, 3) * 0.3, 0.09)
    palette = np.array([(0.55, 0.12, 0.10), (0.12, 0.25, 0.45), (0.15, 0.38, 0.20), (0.75, 0.62, 0.30),
                        (0.85, 0.84, 0.80), (0.25, 0.20, 0.18), (0.50, 0.30, 0.45), (0.80, 0.45, 0.15)])
    pick = (cell_random(x.seed, shelf, spine) * len(palette)).astype(np.int64)
    c = tone(palette[pick], cell_random(x.seed + 1, shelf, spine), 0.15)
    height = 0.22 + 0.12 * cell_random(x.seed + 2, shelf, spine)
    empty = zin > height + 0.04
    board = rgb(m.get("color", (0.45, 0.32, 0.20)), len(x))
    c = np.where(empty[:, None], board * 0.45, c)
    c = mix(c, board, lines(z, 0.4, 0.035, x.filt, offset=0.0))
    return c, np.zeros(len(x))


def fabric(x: TexIn, m: Material):
    c = tone(rgb(m.get("color"), len(x)), x.noise(25.0, 12, 1), 0.08)
    return tone(c, x.noise(1.5, 13), 0.08), np.zeros(len(x))


def metal(x: TexIn, m: Material):
    c = tone(rgb(m.get("color"), len(x)), x.noise(4.0, 14, 2), 0.06)
    return c, np.full(len(x), m.get("sheen", 0.10))


def concrete(x: TexIn, m: Material):
    c = rgb(m.get("color", (0.62, 0.61, 0.58)), len(x))
    c = tone(c, x.noise(0.9, 15), 0.10)
    c = tone(c, x.noise(22.0, 16, 1), 0.06)
    stains = np.clip((x.noise(0.35, 17) - 0.55) * 3.0, 0, 1)
    return mix(c, c * 0.78, stains), np.zeros(len(x))


def lamp(x: TexIn, m: Material):
    """Light fitting: bright on its underside, housing colour elsewhere."""
    housing = rgb(m.get("color", (0.25, 0.26, 0.27)), len(x))
    glow = np.asarray(m.get("glow", (1.0, 0.96, 0.85)))
    return mix(housing, glow, (x.n[:, 2] < -0.5).astype(float)), np.full(len(x), 0.05)


MATERIALS = {
    "plaster": plaster, "brick": brick, "wood_floor": wood_floor, "tiles": tiles, "carpet": carpet,
    "ceiling": ceiling, "wood": wood, "books": books, "fabric": fabric, "metal": metal,
    "concrete": concrete, "lamp": lamp,
}
