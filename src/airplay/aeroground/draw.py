"""Marks drawn on item images: target boxes, candidate labels, points, regions, paths.

A mark is a plain dict (stored with the item, so the drawing can be redone):

* ``{"type": "box", "box": [u0, v0, u1, v1], "label": "A"}`` - a rectangle with its label;
* ``{"type": "point", "uv": [u, v], "label": "G"}`` - a filled disc with its label;
* ``{"type": "polygon", "uv": [[u, v], ...]}`` - a closed outline (a region on the ground);
* ``{"type": "path", "uv": [[u, v], ...], "label": "A"}`` - a polyline with an arrow head
  at its end and the label at its start.

Pixel coordinates as in :class:`airplay.aeroground.cameras.View` (u right, v down). Colours
are fixed per label so the same label has the same colour everywhere.
"""

from __future__ import annotations

import numpy as np

COLOURS = {"A": (255, 40, 40), "B": (40, 110, 255), "C": (255, 200, 0), "D": (200, 40, 255),
           "1": (255, 40, 40), "2": (40, 110, 255), "3": (255, 200, 0), "G": (0, 230, 90),
           "T": (255, 40, 40), "R": (0, 230, 230), "S": (0, 230, 90), "E": (255, 255, 255)}
DEFAULT_COLOUR = (255, 80, 0)


def _label(draw, xy, text: str, colour) -> None:
    x, y = xy
    w = 7 * len(text) + 4
    draw.rectangle([x, y, x + w, y + 11], fill=(0, 0, 0))
    draw.text((x + 2, y), text, fill=colour)


def draw_marks(rgb: np.ndarray, marks: list[dict]) -> np.ndarray:
    """A copy of ``rgb`` (H, W, 3) uint8 with ``marks`` drawn (see the module docstring)."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    h = img.height
    for m in marks:
        label = m.get("label", "")
        colour = COLOURS.get(label, DEFAULT_COLOUR)
        kind = m["type"]
        if kind == "box":
            u0, v0, u1, v1 = m["box"]
            draw.rectangle([u0, v0, max(u0, u1 - 1), max(v0, v1 - 1)], outline=colour, width=2)
            _label(draw, (u0, max(0, v0 - 12) if v0 >= 12 else min(h - 12, v1)), label, colour)
        elif kind == "point":
            u, v = m["uv"]
            draw.ellipse([u - 4, v - 4, u + 4, v + 4], fill=colour, outline=(0, 0, 0))
            _label(draw, (u + 5, v - 6), label, colour)
        elif kind == "polygon":
            pts = [tuple(p) for p in m["uv"]]
            draw.line(pts + [pts[0]], fill=colour, width=2)
        elif kind == "path":
            pts = [tuple(p) for p in m["uv"]]
            draw.line(pts, fill=colour, width=2)
            (x0, y0), (x1, y1) = np.asarray(pts[-2], float), np.asarray(pts[-1], float)
            d = np.array([x1 - x0, y1 - y0])
            n = np.linalg.norm(d)
            if n > 1e-6:
                d /= n
                side = np.array([-d[1], d[0]])
                tip = np.array([x1, y1])
                draw.polygon([tuple(tip), tuple(tip - 8 * d + 4 * side), tuple(tip - 8 * d - 4 * side)], fill=colour)
            if label:
                _label(draw, (pts[0][0] + 3, pts[0][1] + 3), label, colour)
        else:
            raise ValueError(f"unknown mark type {kind!r}")
    return np.asarray(img)
