"""Spatial-understanding items: relative distance, multi-target relation, region counting,
relative orientation. Distances are horizontal (map x/y, m) between the ground agent's
position and instance centres, or between instance centres; angles in degrees,
counter-clockwise, relative to the ground agent's heading (0 = straight ahead, +90 = left).
"""

from __future__ import annotations

import math

import numpy as np

from airplay.aeroground.items import (ANGLE_MARGIN_DEG, Group, Reject, distinct_distances, ordering_options,
                                      separated_boxes, shuffled_choice, wrap_deg)
from airplay.aeroground.tasks import LETTERS

QUADRANTS = ("front-left", "front-right", "back-left", "back-right")


def quadrant(bearing_deg: float) -> str:
    """Quadrant of a bearing relative to the heading (deg, CCW, 0 ahead, +90 left)."""
    front = abs(bearing_deg) < 90.0
    left = bearing_deg > 0.0
    return f"{'front' if front else 'back'}-{'left' if left else 'right'}"


def _ordering_item(g: Group, rng, with_reference: bool) -> dict:
    views = g.aerial()
    rng.shuffle(views)
    for aerial in views:
        agent_uv, ok = g.project_ground(aerial, g.agent_xy)
        if with_reference or ok[0]:
            break
    else:
        raise Reject("ground agent outside the aerial views")
    vis = g.visible(aerial)
    need = 4 if with_reference else 3
    if len(vis) < need:
        raise Reject("too few visible targets")
    ids = [int(i) for i in rng.choice(vis, size=need, replace=False)]
    if not separated_boxes([g.vbox(aerial, i) for i in ids]):
        raise Reject("overlapping candidate boxes")
    ref_xy = g.centre_xy(ids[0]) if with_reference else g.agent_xy
    targets = ids[1:] if with_reference else ids
    labels = {LETTERS[k]: i for k, i in enumerate(targets)}
    dist = {lab: round(float(np.linalg.norm(g.centre_xy(i) - ref_xy)), 3) for lab, i in labels.items()}
    if not distinct_distances(list(dist.values())):
        raise Reject("near-equal distances")
    order = sorted(labels, key=lambda lab: dist[lab])
    options, answer = ordering_options(rng, order)
    marks = [{"type": "box", "box": g.vbox(aerial, i), "label": lab} for lab, i in labels.items()]
    if with_reference:
        marks.append({"type": "box", "box": g.vbox(aerial, ids[0]), "label": "R"})
        q = (f"The image is a UAV's aerial view. Order the objects marked {', '.join(labels)} from nearest to farthest "
             "from the object marked R (distance on the ground).")
        evidence = {"reference": ids[0], "targets": labels, "distances_m": dist}
    else:
        marks.append({"type": "point", "uv": agent_uv[0], "label": "G"})
        q = (f"Image 1 is the ground robot's camera view; image 2 is the UAV's aerial view, where G marks the ground "
             f"robot. Order the objects marked {', '.join(labels)} from nearest to farthest from the ground robot.")
        evidence = {"agent_xy": [round(float(v), 4) for v in g.agent_xy], "targets": labels, "distances_m": dist}
    images = [] if with_reference else [{"view": "ground", "role": "ground", "marks": []}]
    images.append({"view": aerial, "role": aerial, "marks": marks})
    return {"images": images, "question": q, "answer_type": "choice", "options": options, "answer": answer,
            "evidence": evidence, "meta": g.view_meta(aerial, [g.px(aerial, i) for i in ids])}


def relative_distance(g: Group, rng) -> dict:
    return _ordering_item(g, rng, with_reference=False)


def multi_target_relation(g: Group, rng) -> dict:
    return _ordering_item(g, rng, with_reference=True)


REGION_TRIES = 6


def region_counting(g: Group, rng) -> dict:
    """Up to :data:`REGION_TRIES` regions are drawn; the reason of the last failure is counted."""
    nadirs = [a for a in g.aerial() if g.views[a].config == "nadir"]
    if not nadirs:
        raise Reject("no nadir view")
    for attempt in range(REGION_TRIES):
        try:
            return _region_item(g, rng, nadirs[int(rng.integers(len(nadirs)))])
        except Reject:
            if attempt == REGION_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _region_item(g: Group, rng, aerial: str) -> dict:
    view = g.views[aerial]
    alt = view.position_m[2] - g.agent_z
    categories = sorted({g.instances[int(i)]["category"] for i in g.rec["views"][aerial]["instances"]})
    if not categories:
        raise Reject("no objects in view")
    category = categories[int(rng.integers(len(categories)))]
    members = [i for i, inst in g.instances.items() if inst["category"] == category]
    half = rng.uniform(0.25, 0.5) * alt
    if rng.random() < 0.7:
        c = g.centre_xy(members[int(rng.integers(len(members)))]) + rng.uniform(-0.5, 0.5, 2) * half
    else:
        c = np.asarray(view.position_m[:2]) + rng.uniform(-0.4, 0.4, 2) * alt
    region = [float(c[0] - half), float(c[1] - half), float(c[0] + half), float(c[1] + half)]
    corners = [[region[0], region[1]], [region[2], region[1]], [region[2], region[3]], [region[0], region[3]]]
    uv, ok = g.project_ground(aerial, corners)
    if not ok.all():
        raise Reject("region outside the image")
    margin = max(0.5, 0.1 * half)
    inside = []
    for i in members:
        x, y = g.centre_xy(i)
        d_in = min(x - region[0], region[2] - x, y - region[1], region[3] - y)
        if abs(d_in) < margin:
            raise Reject("instance on region border")
        if d_in > 0:
            if g.px(aerial, i) < 1:
                raise Reject("counted instance hidden from the UAV")
            inside.append(i)
    n = len(inside)
    pool = [k for k in range(max(0, n - 3), n + 4) if k != n]
    distract = [str(k) for k in sorted(int(k) for k in rng.choice(pool, size=3, replace=False))]
    options, answer = shuffled_choice(rng, str(n), distract)
    noun = category if category.endswith("s") else category + "s"
    return {"images": [{"view": aerial, "role": aerial, "marks": [{"type": "polygon", "uv": uv}]}],
            "question": f"The image is a UAV's top-down view. How many {noun} lie inside the outlined region?",
            "answer_type": "choice", "options": options, "answer": answer,
            "evidence": {"category": category, "region_m": [round(v, 3) for v in region], "inside": inside,
                         "count": n, "members": {str(i): [round(float(v), 3) for v in g.centre_xy(i)]
                                                 for i in members}},
            "meta": g.view_meta(aerial, [g.px(aerial, i) for i in inside] or None)}


def relative_orientation(g: Group, rng) -> dict:
    obliques = [a for a in g.aerial() if g.views[a].config == "oblique"]
    if not obliques:
        raise Reject("no oblique view")
    aerial = obliques[int(rng.integers(len(obliques)))]
    uav = np.asarray(g.views[aerial].position_m[:2])
    bearing = wrap_deg(math.degrees(math.atan2(*(uav - g.agent_xy)[::-1]) - g.agent_yaw))
    if min(abs(wrap_deg(bearing - b)) for b in (0.0, 90.0, -90.0, 180.0)) < ANGLE_MARGIN_DEG:
        raise Reject("near quadrant boundary")
    agent_uv, ok = g.project_ground(aerial, g.agent_xy)
    if not ok[0]:
        raise Reject("ground agent outside the aerial view")
    truth = quadrant(bearing)
    options, answer = shuffled_choice(rng, truth, [q for q in QUADRANTS if q != truth])
    return {"images": [{"view": "ground", "role": "ground", "marks": []},
                       {"view": aerial, "role": aerial, "marks": [{"type": "point", "uv": agent_uv[0], "label": "G"}]}],
            "question": ("Image 1 is what the ground robot sees straight ahead. Image 2 was taken by the UAV and shows "
                         "the ground robot at G. Relative to the direction the ground robot faces, in which quadrant "
                         "is the UAV?"),
            "answer_type": "choice", "options": options, "answer": answer,
            "evidence": {"bearing_deg": round(bearing, 3), "uav_xy": [round(float(v), 4) for v in uav],
                         "agent_xy": [round(float(v), 4) for v in g.agent_xy],
                         "agent_yaw_deg": round(math.degrees(g.agent_yaw), 3)},
            "meta": g.view_meta(aerial)}
