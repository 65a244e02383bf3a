"""The AeroGround task taxonomy (11 tasks, 3 levels) as built here, and the answer types.

Each task name maps to its level and what it asks (the issue's table). ``choice`` tasks
have lettered options and one correct letter; ``mapping`` tasks (multi-target matching)
ask for the full one-to-one mapping of numbered targets to lettered candidates.
"""

from __future__ import annotations

TASKS: dict[str, dict] = {
    "single_target_matching": {"level": "object alignment", "answer_type": "choice",
                               "asks": "which candidate in the target view is the marked target of the source view"},
    "multi_target_matching": {"level": "object alignment", "answer_type": "mapping",
                              "asks": "the one-to-one mapping of several marked targets to candidate labels"},
    "relative_distance": {"level": "spatial understanding", "answer_type": "choice",
                          "asks": "order targets from nearest to farthest from the ground agent"},
    "multi_target_relation": {"level": "spatial understanding", "answer_type": "choice",
                              "asks": "order targets by distance from a reference target"},
    "region_counting": {"level": "spatial understanding", "answer_type": "choice",
                        "asks": "how many instances of a category lie inside a marked aerial region"},
    "relative_orientation": {"level": "spatial understanding", "answer_type": "choice",
                             "asks": "egocentric quadrant of the UAV relative to the ground agent's facing"},
    "localization": {"level": "spatial reasoning", "answer_type": "choice",
                     "asks": "where the ground agent stands in the aerial view"},
    "occlusion": {"level": "spatial reasoning", "answer_type": "choice",
                  "asks": "which target is hidden from the ground agent"},
    "view_transformation": {"level": "spatial reasoning", "answer_type": "choice",
                            "asks": "what the ground agent would see after turning"},
    "reverse_sequence": {"level": "spatial reasoning", "answer_type": "choice",
                         "asks": "the order of ground views along a path seen from above"},
    "trajectory": {"level": "spatial reasoning", "answer_type": "choice",
                   "asks": "which aerial path matches a sequence of ground views"},
}

LETTERS = "ABCDEFGH"
