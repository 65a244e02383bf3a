"""Prompts per task template, for both backends (an :class:`airplay.vln.prompt.Prompt`).

System text: the setting (a UAV and a ground robot observing one place) and the answer
format. User text: one line per image ("Image k (the UAV's aerial view):" + the image), the
task's template line (:data:`TEMPLATES`), the question, the lettered options, and the
format line of the answer type.
"""

from __future__ import annotations

import numpy as np

from airplay.vln.prompt import Prompt

SYSTEM = ("You are an expert in aerial-ground spatial reasoning. A UAV (drone) and a ground robot observe the same "
          "place. You get images from both, with marks drawn on them, and answer one question.")

TEMPLATES = {
    "single_target_matching": "Task: match an object across the aerial and the ground view.",
    "multi_target_matching": "Task: match several objects across the ground and the aerial view.",
    "relative_distance": "Task: compare distances on the ground from the ground robot.",
    "multi_target_relation": "Task: compare distances on the ground from a reference object.",
    "region_counting": "Task: count objects of one kind inside a region of the aerial view.",
    "relative_orientation": "Task: say where the UAV is relative to the ground robot's facing direction.",
    "localization": "Task: find the ground robot's position in the aerial view.",
    "occlusion": "Task: decide which object the ground robot cannot see.",
    "view_transformation": "Task: imagine the ground robot's view after it turns.",
    "reverse_sequence": "Task: order the ground robot's views along a path drawn in the aerial view.",
    "trajectory": "Task: find the path in the aerial view that matches the ground robot's views.",
}

FORMAT = {"choice": "Answer with the letter of the correct option only.",
          "mapping": "Answer with the full mapping only, in the form 1-X, 2-Y."}

ROLE_NAMES = {"ground": "the ground robot's camera view", "current": "the ground robot's current view"}


def role_text(role: str) -> str:
    if role in ROLE_NAMES:
        return ROLE_NAMES[role]
    if role.startswith(("nadir", "oblique")):
        return f"the UAV's {role.split('-')[0]} aerial view"
    return role


def build_prompt(item: dict, images: list[np.ndarray], image_size: tuple[int, int] | None = None) -> Prompt:
    """The prompt of ``item`` with its (marked) ``images`` in order."""
    parts: list = []
    for k, (meta, img) in enumerate(zip(item["images"], images)):
        parts.append(f"Image {k + 1} ({role_text(meta['role'])}):\n")
        parts.append(img)
        parts.append("\n")
    text = f"{TEMPLATES[item['task']]}\n{item['question']}\n"
    if item["answer_type"] == "choice":
        text += "Options:\n" + "".join(f"{k}. {v}\n" for k, v in sorted(item["options"].items()))
    else:
        text += f"Targets: {', '.join(item['targets'])}. Candidates: {', '.join(item['labels'])}.\n"
    parts.append(text + FORMAT[item["answer_type"]])
    return Prompt(SYSTEM, parts, image_size)
