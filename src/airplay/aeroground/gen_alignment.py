"""Object-alignment items: single-target and multi-target matching across the two views.

Single target matching: one view (ground or aerial, drawn at random) marks a target "T";
the other marks 3-4 candidates A-D, one of which is the same instance. Multi-target
matching: the ground view marks targets 1 and 2, an aerial view marks candidates A-C (both
targets and one other instance); the answer is the full mapping. Candidates are instances
visible in both views as the module :mod:`.items` requires, with boxes that do not overlap.
"""

from __future__ import annotations

from airplay.aeroground.items import Group, Reject, separated_boxes
from airplay.aeroground.tasks import LETTERS


def _pick_aerial(g: Group, rng, need: list[int]) -> str:
    views = [a for a in g.aerial() if all(i in g.visible(a) for i in need)]
    if not views:
        raise Reject("target not visible from the UAV")
    return views[int(rng.integers(len(views)))]


def single_target_matching(g: Group, rng) -> dict:
    shared = [i for i in g.visible("ground") if any(i in g.visible(a) for a in g.aerial())]
    if not shared:
        raise Reject("no target visible in both views")
    target = shared[int(rng.integers(len(shared)))]
    aerial = _pick_aerial(g, rng, [target])
    ground_to_aerial = bool(rng.integers(2))
    source, dest = ("ground", aerial) if ground_to_aerial else (aerial, "ground")
    others = [i for i in g.visible(dest) if i != target]
    if len(others) < 2:
        raise Reject("too few candidates")
    picks = [int(i) for i in rng.choice(others, size=min(3, len(others)), replace=False)]
    ids = [target, *picks]
    ids = [ids[int(k)] for k in rng.permutation(len(ids))]
    if not separated_boxes([g.vbox(dest, i) for i in ids]):
        raise Reject("overlapping candidate boxes")
    labels = {LETTERS[k]: i for k, i in enumerate(ids)}
    answer = next(lab for lab, i in labels.items() if i == target)
    names = {"ground": "the ground robot's camera view", aerial: "the UAV's aerial view"}
    question = (f"Image 1 is {names[source]}; the object marked T is the target. Image 2 is {names[dest]} of the "
                f"same place, with candidate objects marked {', '.join(labels)}. Which candidate is the same object "
                f"as the target?")
    return {
        "images": [{"view": source, "role": source,
                    "marks": [{"type": "box", "box": g.vbox(source, target), "label": "T"}]},
                   {"view": dest, "role": dest, "marks": [{"type": "box", "box": g.vbox(dest, i), "label": lab}
                                                          for lab, i in labels.items()]}],
        "question": question, "answer_type": "choice",
        "options": {lab: f"candidate {lab}" for lab in labels}, "answer": answer,
        "evidence": {"target": target, "candidates": labels, "source_view": source, "target_view": dest,
                     "pixels": {lab: g.px(dest, i) for lab, i in labels.items()}},
        "meta": g.view_meta(aerial, [g.px(source, target), g.px(dest, target)]),
    }


def multi_target_matching(g: Group, rng) -> dict:
    shared = [i for i in g.visible("ground") if any(i in g.visible(a) for a in g.aerial())]
    if len(shared) < 2:
        raise Reject("fewer than two targets visible in both views")
    targets = [int(i) for i in rng.choice(shared, size=2, replace=False)]
    aerial = _pick_aerial(g, rng, targets)
    others = [i for i in g.visible(aerial) if i not in targets]
    if not others:
        raise Reject("too few candidates")
    ids = [*targets, int(others[int(rng.integers(len(others)))])]
    ids = [ids[int(k)] for k in rng.permutation(len(ids))]
    if not separated_boxes([g.vbox(aerial, i) for i in ids]) or not separated_boxes([g.vbox("ground", i)
                                                                                     for i in targets]):
        raise Reject("overlapping candidate boxes")
    labels = {LETTERS[k]: i for k, i in enumerate(ids)}
    numbers = {str(k + 1): t for k, t in enumerate(targets)}
    answer = {n: next(lab for lab, i in labels.items() if i == t) for n, t in numbers.items()}
    question = ("Image 1 is the ground robot's camera view with targets marked 1 and 2. Image 2 is the UAV's aerial "
                f"view of the same place with candidates marked {', '.join(labels)}. Match each target to its "
                "candidate. Answer with the full mapping in the form 1-X, 2-Y.")
    return {
        "images": [{"view": "ground", "role": "ground",
                    "marks": [{"type": "box", "box": g.vbox("ground", t), "label": n} for n, t in numbers.items()]},
                   {"view": aerial, "role": aerial, "marks": [{"type": "box", "box": g.vbox(aerial, i), "label": lab}
                                                              for lab, i in labels.items()]}],
        "question": question, "answer_type": "mapping", "options": None, "targets": list(numbers),
        "labels": list(labels), "answer": answer,
        "evidence": {"targets": numbers, "candidates": labels},
        "meta": g.view_meta(aerial, [g.px("ground", t) for t in targets] + [g.px(aerial, t) for t in targets]),
    }
