"""Spatial-reasoning items: localization, occlusion, view transformation, reverse sequence,
trajectory. Positions in map x/y (m), headings in degrees CCW from east, turns in degrees
CCW (+90 = a left turn).
"""

from __future__ import annotations

import math

import numpy as np

from airplay.aeroground.items import (MIN_IMAGE_DIFFERENCE, Group, Reject, image_difference, ordering_options)
from airplay.aeroground.tasks import LETTERS

MIN_LOCALIZATION_SEPARATION_M = 2.0
TURNS = {"left": ("ground-left", 90), "right": ("ground-right", -90), "around": ("ground-back", 180)}


def localization(g: Group, rng) -> dict:
    nadirs = [a for a in g.aerial() if g.views[a].config == "nadir"]
    rng.shuffle(nadirs)
    for aerial in nadirs:
        uv, ok = g.project_ground(aerial, g.agent_xy)
        if ok[0]:
            break
    else:
        raise Reject("ground agent outside the aerial views")
    alt = g.views[aerial].position_m[2] - g.agent_z
    sep = max(MIN_LOCALIZATION_SEPARATION_M, 0.15 * alt)
    chosen = [g.agent_xy]
    near = [np.asarray(p[:2]) for p in g.rec["walkable_near"]]
    for k in rng.permutation(len(near)):
        p = near[int(k)]
        if len(chosen) == 4:
            break
        if min(np.linalg.norm(p - c) for c in chosen) >= sep and g.project_ground(aerial, p)[1][0]:
            chosen.append(p)
    if len(chosen) < 4:
        raise Reject("too few distinct distractor positions")
    order = rng.permutation(4)
    positions = {LETTERS[k]: [round(float(v), 4) for v in chosen[int(i)]] for k, i in enumerate(order)}
    answer = LETTERS[int(np.nonzero(order == 0)[0][0])]
    marks = [{"type": "point", "uv": g.project_ground(aerial, p)[0][0], "label": lab} for lab, p in positions.items()]
    return {"images": [{"view": "ground", "role": "ground", "marks": []},
                       {"view": aerial, "role": aerial, "marks": marks}],
            "question": ("Image 1 is the ground robot's camera view. Image 2 is the UAV's top-down view with candidate "
                         "positions A, B, C and D. Where does the ground robot stand?"),
            "answer_type": "choice", "options": {lab: f"position {lab}" for lab in positions}, "answer": answer,
            "evidence": {"agent_xy": [round(float(v), 4) for v in g.agent_xy], "positions_m": positions,
                         "min_separation_m": round(sep, 3)},
            "meta": g.view_meta(aerial)}


def occlusion(g: Group, rng) -> dict:
    ground = g.views["ground"]
    in_frustum = []
    for iid in sorted(g.instances):
        uv, z = ground.project(np.asarray(g.instances[iid]["centre_m"])[None])
        if ground.in_image(uv, z, margin_px=0.1 * ground.camera.width)[0] and g.abox("ground", iid) is not None:
            in_frustum.append(iid)
    aerials = g.aerial()
    rng.shuffle(aerials)
    for aerial in aerials:
        hidden = [i for i in in_frustum if g.px("ground", i) == 0 and i in g.visible(aerial)]
        shown = [i for i in in_frustum if i in g.visible("ground") and i in g.visible(aerial)]
        if hidden and len(shown) >= 2:
            break
    else:
        raise Reject("no hidden target with two visible ones")
    hidden = [int(hidden[int(rng.integers(len(hidden)))])]
    ids = [hidden[0], *[int(i) for i in rng.choice(shown, size=2, replace=False)]]
    ids = [ids[int(k)] for k in rng.permutation(3)]
    labels = {LETTERS[k]: i for k, i in enumerate(ids)}
    answer = next(lab for lab, i in labels.items() if i == hidden[0])
    marks = [{"type": "box", "box": g.vbox(aerial, i), "label": lab} for lab, i in labels.items()]
    return {"images": [{"view": "ground", "role": "ground", "marks": []},
                       {"view": aerial, "role": aerial, "marks": marks}],
            "question": ("Image 1 is the ground robot's camera view. Image 2 is the UAV's aerial view with objects "
                         f"marked {', '.join(labels)}, all in front of the ground robot. Which of them is hidden from "
                         "the ground robot's view?"),
            "answer_type": "choice", "options": {lab: f"object {lab}" for lab in labels}, "answer": answer,
            "evidence": {"candidates": labels, "ground_pixels": {lab: g.px("ground", i) for lab, i in labels.items()},
                         "aerial_pixels": {lab: g.px(aerial, i) for lab, i in labels.items()}},
            "meta": g.view_meta(aerial, [g.px(aerial, i) for i in ids])}


def view_transformation(g: Group, rng) -> dict:
    turn = list(TURNS)[int(rng.integers(len(TURNS)))]
    views = {"ground": 0, **{v: deg for v, deg in TURNS.values()}}
    names = list(views)
    order = rng.permutation(len(names))
    labelled = {LETTERS[k]: names[int(i)] for k, i in enumerate(order)}
    correct = TURNS[turn][0]
    for other in names:
        if other != correct and image_difference(g.image(other), g.image(correct)) < MIN_IMAGE_DIFFERENCE:
            raise Reject("indistinguishable views")
    answer = next(lab for lab, v in labelled.items() if v == correct)
    what = {"left": "turns 90 degrees to its left", "right": "turns 90 degrees to its right",
            "around": "turns around (180 degrees)"}[turn]
    return {"images": [{"view": "ground", "role": "current"}] + [{"view": v, "role": f"option {lab}"}
                                                                for lab, v in labelled.items()],
            "question": (f"Image 1 is what the ground robot sees now. The robot stays in place and {what}. Which "
                         f"of the images 2-5 (options {', '.join(labelled)} in that order) shows what it sees then?"),
            "answer_type": "choice", "options": {lab: f"image {k + 2}" for k, lab in enumerate(labelled)},
            "answer": answer,
            "evidence": {"turn": turn, "turn_deg": TURNS[turn][1],
                         "option_turn_deg": {lab: views[v] for lab, v in labelled.items()}},
            "meta": g.view_meta(None)}


def _path_views(g: Group) -> list[str]:
    if g.rec["path"] is None:
        raise Reject("no walkable path")
    return ["ground"] + [f"path-{k}" for k in range(1, len(g.rec["path"]))]


def _path_aerial(g: Group, rng, xys) -> tuple[str, list]:
    aerials = sorted(g.aerial(), key=lambda a: (g.views[a].position_m[2], g.views[a].config != "nadir"))
    for aerial in aerials:  # the lowest view that shows the whole path: paths are short
        uv, ok = g.project_ground(aerial, xys)
        if ok.all():
            return aerial, uv
    raise Reject("path outside the aerial views")


def reverse_sequence(g: Group, rng) -> dict:
    views = _path_views(g)
    for a, b in zip(views, views[1:]):
        if image_difference(g.image(a), g.image(b)) < MIN_IMAGE_DIFFERENCE:
            raise Reject("indistinguishable views")
    path = [[p["x"], p["y"]] for p in g.rec["path"]]
    aerial, uv = _path_aerial(g, rng, path)
    shown = rng.permutation(len(views))  # image number k+1 shows views[shown[k]]
    number_of = {int(v): str(k + 1) for k, v in enumerate(shown)}
    truth = [number_of[i] for i in range(len(views))]
    options, answer = ordering_options(rng, truth)
    return {"images": [{"view": aerial, "role": aerial, "marks": [{"type": "path", "uv": uv, "label": "S"}]}]
            + [{"view": views[int(v)], "role": f"ground {k + 1}"} for k, v in enumerate(shown)],
            "question": ("Image 1 is the UAV's aerial view with the ground robot's path drawn from S to the arrow "
                         f"head. Images 2-{len(views) + 1} are the robot's camera views along that path, shuffled and "
                         f"numbered 1-{len(views)}. In which order did the robot see them, walking from S?"),
            "answer_type": "choice", "options": options, "answer": answer,
            "evidence": {"path_xy": path, "image_path_index": {str(k + 1): int(v) for k, v in enumerate(shown)}},
            "meta": g.view_meta(aerial)}


def trajectory(g: Group, rng) -> dict:
    views = _path_views(g)
    path = [[p["x"], p["y"]] for p in g.rec["path"]]
    start, walked = np.asarray(path[0]), float(g.rec["path"][0]["yaw_rad"])
    length = float(np.linalg.norm(np.asarray(path[-1]) - start))
    cands = {}
    for k, turn in enumerate(rng.permutation(4)):
        yaw = walked + turn * math.pi / 2
        cands[LETTERS[k]] = (int(turn) * 90, [start.tolist(), (start + length * np.array([math.cos(yaw),
                                                                                          math.sin(yaw)])).tolist()])
    aerial, _ = _path_aerial(g, rng, [p for _, seg in cands.values() for p in seg])
    marks = [{"type": "path", "uv": g.project_ground(aerial, seg)[0], "label": lab} for lab, (_, seg) in cands.items()]
    answer = next(lab for lab, (t, _) in cands.items() if t == 0)
    return {"images": [{"view": v, "role": f"ground {k + 1}"} for k, v in enumerate(views)]
            + [{"view": aerial, "role": aerial, "marks": marks}],
            "question": (f"Images 1-{len(views)} are the ground robot's camera views, in order, as it walked. The last "
                         "image is the UAV's aerial view with candidate paths A, B, C and D (arrow heads at their "
                         "ends). Which path did the robot walk?"),
            "answer_type": "choice", "options": {lab: f"path {lab}" for lab in cands}, "answer": answer,
            "evidence": {"walked_yaw_deg": round(math.degrees(walked), 3),
                         "candidate_turn_deg": {lab: t for lab, (t, _) in cands.items()},
                         "candidate_xy": {lab: [[round(float(v), 4) for v in p] for p in seg]
                                          for lab, (_, seg) in cands.items()}},
            "meta": g.view_meta(aerial)}
