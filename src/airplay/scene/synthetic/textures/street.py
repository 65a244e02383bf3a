"""Urban materials: asphalt with markings, paving, kerbs, facades with windows, roofs, cars."""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import Material
from airplay.scene.synthetic.textures._util import TexIn, box_cover, cell_random, cells, lines, mix, rgb, tone


def asphalt(x: TexIn, m: Material):
    """Asphalt; ``marks`` = ((axis, coord, lo, hi, width, dash, r, g, b), ...) painted lines
    (axis 0: along x at y = coord for lo <= x <= hi), ``zebras`` = ((x0, x1, y0, y1, axis), ...)."""
    px, py = x.p[:, 0], x.p[:, 1]
    c = rgb((0.24, 0.24, 0.25), len(x))
    c = tone(c, x.noise(0.25, 20), 0.10)
    c = tone(c, x.noise(4.0, 21, 2), 0.08)
    c = tone(c, x.noise(40.0, 22, 1), 0.10)
    wear = 0.55 + 0.45 * x.noise(3.0, 23, 2)
    for axis, coord, lo, hi, width, dash, *col in m.get("marks", ()):
        along, across = (px, py) if axis == 0 else (py, px)
        cov = box_cover(across, coord - width / 2, coord + width / 2, x.filt) * box_cover(along, lo, hi, x.filt)
        if dash:
            cov = cov * box_cover(np.mod(along - lo, 2 * dash), 0.0, dash, x.filt)
        c = mix(c, np.asarray(col), cov * wear)
    for x0, x1, y0, y1, axis in m.get("zebras", ()):
        inside = box_cover(px, x0, x1, x.filt) * box_cover(py, y0, y1, x.filt)
        across = px if axis == 1 else py
        stripe = box_cover(np.mod(across, 1.0), 0.0, 0.5, x.filt)
        c = mix(c, (0.88, 0.88, 0.85), inside * stripe * wear)
    return c, np.full(len(x), 0.03)


def paving(x: TexIn, m: Material):
    """Slabs ``size`` = (along u, along v) metres, rows offset when ``bond``; joints filtered."""
    su, sv = m.get("size", (0.4, 0.4))
    u, v = x.uv[:, 0], x.uv[:, 1]
    row, _ = cells(v, sv)
    shift = 0.5 * su * (row % 2) if m.get("bond", False) else 0.0
    col, _ = cells(u + shift, su)
    c = rgb(m.get("color"), len(x))
    if m.get("color2") is not None:
        c = np.where((cell_random(x.seed + 5, row, col) < 0.3)[:, None], np.asarray(m.get("color2")), c)
    c = tone(c, cell_random(x.seed, row, col), 0.09)
    c = tone(c, x.noise(0.5, 24), 0.08)
    c = tone(c, x.noise(25.0, 25, 1), 0.05)
    joints = 1 - (1 - lines(v, sv, 0.01, x.filt)) * (1 - lines(u + shift, su, 0.01, x.filt))
    top = x.n[:, 2] > 0.5
    return mix(c, c * 0.55, joints * top), np.zeros(len(x))


def facade(x: TexIn, m: Material):
    """Building wall with a grid of windows per floor; shop windows on the ground floor."""
    s, z, lu = x.st[:, 0], x.uv[:, 1], x.extent[:, 0]
    floor_h, pitch = m.get("floor_h", 3.2), m.get("pitch", 2.8)
    win_w, win_h, sill = m.get("win_w", 1.3), m.get("win_h", 1.6), m.get("sill", 0.9)
    style = m.get("style", "plaster")
    c = rgb(m.get("color"), len(x))
    if style == "brick":
        row, _ = cells(z, 0.15)
        col, _ = cells(s + 0.2 * (row % 2), 0.4)
        c = tone(c, cell_random(x.seed, row, col), 0.12)
        c = mix(c, (0.70, 0.67, 0.62), 1 - (1 - lines(z, 0.15, 0.015, x.filt)) * (1 - lines(s + 0.2 * (row % 2), 0.4, 0.015, x.filt)))
    c = tone(c, x.noise(0.6, 30), 0.07)
    c = tone(c, x.noise(15.0, 31, 1), 0.04)
    grime = np.clip(1.0 - z / 2.5, 0, 1) * x.noise(1.5, 32)
    c = c * (1 - 0.25 * grime)[:, None]
    floor, zf = cells(z, floor_h)
    count = np.maximum(np.floor((lu - 0.6) / pitch), 1)
    margin = (lu - count * pitch) / 2
    col, local = cells(s - margin, pitch)
    local = local - pitch / 2
    in_col = (col >= 0) & (col < count)
    shop = m.get("shop", False) & (floor == 0)
    w = np.where(shop, pitch - 0.5, win_w)
    zl, zh = np.where(shop, 0.35, sill), np.where(shop, 2.6, sill + win_h)
    frame = box_cover(local, -w / 2 - 0.08, w / 2 + 0.08, x.filt) * box_cover(zf, zl - 0.08, zh + 0.1, x.filt)
    glass = box_cover(local, -w / 2, w / 2, x.filt) * box_cover(zf, zl, zh, x.filt)
    frame, glass = frame * in_col, glass * in_col
    wid = cell_random(x.seed, floor, col)
    gl = mix(rgb(m.get("glass", (0.20, 0.26, 0.32)), len(x)), (0.60, 0.70, 0.80), 0.25 + 0.45 * (zf - zl) / np.maximum(zh - zl, 0.1))
    gl = tone(gl, wid, 0.25)  # each pane reflects a little differently
    blinds = (wid > 0.85) & (zf > zh - (zh - zl) * 0.45)  # some blinds half down
    gl[blinds] = (0.78, 0.77, 0.74) * (1.0 - 0.15 * lines(zf[blinds], 0.06, 0.015, x.filt[blinds]))[:, None]
    gl = tone(gl, x.noise(4.0, 33, 1), 0.05)
    cross_bar = lines(zf - zl, 100.0, 0.05, x.filt, offset=(zh - zl) * 0.62) * glass * (~shop)
    c = mix(c, np.asarray(m.get("frame", (0.90, 0.89, 0.86))), frame)
    c = mix(c, gl, glass * (1 - cross_bar))
    cornice = lines(z, floor_h, 0.18, x.filt) * (z > 1.0)
    c = mix(c, c * 0.8, cornice)
    if m.get("shop", False):
        sign = box_cover(z, 2.85, 3.25, x.filt) * in_col
        c = mix(c, np.asarray(m.get("sign", (0.6, 0.15, 0.12))), sign)
    plinth = box_cover(z, -1.0, 0.35, x.filt) * (1 - shop)
    c = mix(c, (0.40, 0.39, 0.37), plinth)
    return c, 0.14 * glass


def roof(x: TexIn, m: Material):
    c = rgb(m.get("color", (0.35, 0.34, 0.33)), len(x))
    c = tone(c, x.noise(0.5, 40), 0.12)
    return tone(c, x.noise(20.0, 41, 1), 0.08), np.zeros(len(x))


def glass(x: TexIn, m: Material):
    z = x.uv[:, 1]
    c = rgb(m.get("color", (0.16, 0.20, 0.25)), len(x))
    c = mix(c, (0.55, 0.62, 0.70), 0.3 * np.clip(np.mod(z, 1.0), 0, 1))
    return tone(c, x.noise(3.0, 42, 1), 0.06), np.full(len(x), 0.18)


def car(x: TexIn, m: Material):
    c = tone(rgb(m.get("color"), len(x)), x.noise(2.0, 43, 1), 0.04)
    z0 = m.get("z0", 0.15)
    dark = box_cover(x.uv[:, 1], -1.0, z0 + 0.2, x.filt) * (np.abs(x.n[:, 2]) < 0.5)
    return mix(c, (0.08, 0.08, 0.09), dark), np.full(len(x), 0.15)


def cabin(x: TexIn, m: Material):
    """Car cabin: tinted windows on the sides, body colour on the roof and pillars."""
    side = np.abs(x.n[:, 2]) < 0.5
    s, lu = x.st[:, 0], x.extent[:, 0]
    pillar = (box_cover(s, -1, 0.12, x.filt) + box_cover(s, lu - 0.12, lu + 1, x.filt)
              + box_cover(s, lu / 2 - 0.06, lu / 2 + 0.06, x.filt) * (lu > 1.5))
    body = tone(rgb(m.get("color"), len(x)), x.noise(2.0, 44, 1), 0.04)
    win = mix(rgb((0.10, 0.12, 0.15), len(x)), (0.45, 0.50, 0.58), 0.4 * x.noise(1.5, 45, 1))
    return mix(body, win, side * (1 - np.clip(pillar, 0, 1))), np.full(len(x), 0.18)


MATERIALS = {"asphalt": asphalt, "paving": paving, "facade": facade, "roof": roof, "glass": glass,
             "car": car, "cabin": cabin}
