"""Recompute every item's answer from its stored evidence (and, given the scene's
instances, the evidence's distances from the instance positions).

:func:`answer_from_evidence` is the oracle: it knows nothing but the item's evidence and
options. :func:`check_item` compares it with the stored answer and returns the problems.
"""

from __future__ import annotations

import math

import numpy as np

from airplay.aeroground.gen_spatial import quadrant
from airplay.aeroground.items import distinct_distances, wrap_deg


def _letter_with_text(item: dict, text: str) -> str:
    hits = [k for k, v in item["options"].items() if v == text]
    if len(hits) != 1:
        raise ValueError(f"{item['id']}: {len(hits)} options read {text!r}")
    return hits[0]


def _only(labels: list[str], item: dict, what: str) -> str:
    if len(labels) != 1:
        raise ValueError(f"{item['id']}: {len(labels)} candidates are {what}")
    return labels[0]


def answer_from_evidence(item: dict):
    """The answer (a letter, or {target: letter} for mappings) implied by the evidence."""
    task, ev = item["task"], item["evidence"]
    if task == "single_target_matching":
        return _only([lab for lab, i in ev["candidates"].items() if i == ev["target"]], item, "the target")
    if task == "multi_target_matching":
        return {n: _only([lab for lab, i in ev["candidates"].items() if i == t], item, f"target {n}")
                for n, t in ev["targets"].items()}
    if task in ("relative_distance", "multi_target_relation"):
        d = ev["distances_m"]
        if not distinct_distances(list(d.values())):
            raise ValueError(f"{item['id']}: distances too close to order")
        return _letter_with_text(item, ", ".join(sorted(d, key=d.get)))
    if task == "region_counting":
        x0, y0, x1, y1 = ev["region_m"]
        n = sum(1 for x, y in ev["members"].values() if x0 < x < x1 and y0 < y < y1)
        return _letter_with_text(item, str(n))
    if task == "relative_orientation":
        dx, dy = np.subtract(ev["uav_xy"], ev["agent_xy"])
        bearing = wrap_deg(math.degrees(math.atan2(dy, dx)) - ev["agent_yaw_deg"])
        return _letter_with_text(item, quadrant(bearing))
    if task == "localization":
        d = {lab: float(np.linalg.norm(np.subtract(p, ev["agent_xy"]))) for lab, p in ev["positions_m"].items()}
        return _only([lab for lab, v in d.items() if v < 1e-6], item, "at the agent's position")
    if task == "occlusion":
        return _only([lab for lab, px in ev["ground_pixels"].items() if px == 0], item, "hidden")
    if task == "view_transformation":
        return _only([lab for lab, t in ev["option_turn_deg"].items() if t == ev["turn_deg"]], item, "the turn")
    if task == "reverse_sequence":
        idx = ev["image_path_index"]
        return _letter_with_text(item, ", ".join(sorted(idx, key=idx.get)))
    if task == "trajectory":
        return _only([lab for lab, t in ev["candidate_turn_deg"].items() if t == 0], item, "the walked path")
    raise ValueError(f"{item['id']}: unknown task {task!r}")


def check_item(item: dict, instances: dict[int, dict] | None = None) -> list[str]:
    """Problems with ``item`` (empty: its evidence implies its answer and matches the scene)."""
    problems = []
    try:
        derived = answer_from_evidence(item)
    except ValueError as err:
        return [str(err)]
    if derived != item["answer"]:
        problems.append(f"{item['id']}: evidence implies {derived!r}, stored answer {item['answer']!r}")
    if instances is not None:
        ev = item["evidence"]
        if item["task"] == "relative_distance":
            ref = np.asarray(ev["agent_xy"])
        elif item["task"] == "multi_target_relation":
            ref = np.asarray(instances[ev["reference"]]["centre_m"][:2])
        else:
            ref = None
        if ref is not None:
            for lab, iid in ev["targets"].items():
                d = float(np.linalg.norm(np.asarray(instances[iid]["centre_m"][:2]) - ref))
                if abs(d - ev["distances_m"][lab]) > 1e-2:
                    problems.append(f"{item['id']}: distance of {lab} is {d:.3f} m in the scene, "
                                    f"{ev['distances_m'][lab]} in the evidence")
        if item["task"] == "region_counting":
            for iid, xy in ev["members"].items():
                if np.abs(np.asarray(instances[int(iid)]["centre_m"][:2]) - xy).max() > 1e-2:
                    problems.append(f"{item['id']}: instance {iid} is not where the evidence puts it")
    return problems


def oracle_response(item: dict) -> str:
    """The answer text an evidence-reading oracle gives ("B" or "1-A, 2-C")."""
    ans = answer_from_evidence(item)
    if isinstance(ans, dict):
        return ", ".join(f"{n}-{lab}" for n, lab in ans.items())
    return ans
