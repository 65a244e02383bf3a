"""Navigation instructions along an expert (A*) path, in the styles of ten user personas.

AirNav writes its instructions in the voices of ten kinds of users. We do the same with
templates (deterministic: the same path, landmarks, persona and seed give the same text),
optionally rewritten by any OpenAI-compatible LLM (:func:`rewrite_with_llm`).

1. :func:`route_of` turns the path (``(K, 3)`` map positions, m) and the start yaw (rad,
   CCW from east) into route steps: the first turn, then legs of straight flight (the path
   simplified by Ramer-Douglas-Peucker with 0.6 m tolerance, legs under 0.8 m merged) with
   the turn at each corner (left/right, slight < 50 deg, sharp > 120 deg), the climb or
   descent (> 0.6 m), and the landmark (from ``scene.yaml``) nearest to each corner and to the
   goal within :data:`LANDMARK_RADIUS_M` of it, with its side (left/right of the heading there).
2. :func:`generate_instruction` renders the steps with a persona's phrasing.

The ten personas (ours, after AirNav's idea; not AirNav's text) are :data:`PERSONAS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.frames import wrap_angle_deg

LANDMARK_RADIUS_M = 5.0
SIMPLIFY_TOLERANCE_M = 0.6
MIN_LEG_M = 0.8


@dataclass(frozen=True)
class Persona:
    name: str
    description: str


PERSONAS: tuple[Persona, ...] = (
    Persona("concise", "terse commands, no courtesy"),
    Persona("detailed", "step by step with distances in metres and turn angles"),
    Persona("tourist", "casual and friendly, guided by what can be seen"),
    Persona("courier", "a delivery rider in a hurry: where to go and where to drop"),
    Persona("elderly", "polite, careful, simple words, approximate distances"),
    Persona("child", "short playful sentences, colours and things"),
    Persona("pilot", "aviation phrasing: headings, climb, descend, metres"),
    Persona("photographer", "looks for views: what to face, what to pass"),
    Persona("inspector", "systematic, numbered steps, checks each landmark"),
    Persona("local", "a resident giving directions by landmarks, few numbers"),
)
PERSONA_NAMES = tuple(p.name for p in PERSONAS)


@dataclass(frozen=True)
class Landmark:
    """A named landmark: position and size (bounding box centre and extents, map frame, m)."""

    name: str
    kind: str
    description: str
    position: tuple[float, float, float]
    size: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def distance_xy(self, p) -> float:
        """Horizontal distance (m) from ``p`` to the landmark's bounding box."""
        c = np.asarray(self.position[:2])
        h = np.asarray(self.size[:2]) / 2
        d = np.maximum(np.abs(np.asarray(p[:2], dtype=float) - c) - h, 0.0)
        return float(np.hypot(*d))


@dataclass(frozen=True)
class RouteStep:
    """kind: "turn" (angle_deg > 0 left), "go" (distance_m, dz_m up), "arrive";
    landmark and side ("left"/"right"/"ahead") where one is near the step's end."""

    kind: str
    angle_deg: float = 0.0
    distance_m: float = 0.0
    dz_m: float = 0.0
    landmark: Landmark | None = None
    side: str = ""


def simplify(points: np.ndarray, tolerance: float) -> np.ndarray:
    """Ramer-Douglas-Peucker in 3-D: indices of the kept points (first and last always)."""
    keep = np.zeros(len(points), bool)
    keep[0] = keep[-1] = True
    stack = [(0, len(points) - 1)]
    while stack:
        i, j = stack.pop()
        if j <= i + 1:
            continue
        a, b = points[i], points[j]
        ab = b - a
        n = float(np.dot(ab, ab))
        seg = points[i + 1:j]
        t = np.clip(((seg - a) @ ab) / n, 0, 1) if n > 0 else np.zeros(len(seg))
        d = np.linalg.norm(seg - (a + t[:, None] * ab), axis=1)
        k = int(np.argmax(d))
        if d[k] > tolerance:
            keep[i + 1 + k] = True
            stack += [(i, i + 1 + k), (i + 1 + k, j)]
    return np.nonzero(keep)[0]


def _near(landmarks, p, heading: float, used: set) -> tuple[Landmark | None, str]:
    best, best_d = None, LANDMARK_RADIUS_M
    for lm in landmarks:
        d = lm.distance_xy(p)
        if d < best_d and lm.name not in used:
            best, best_d = lm, d
    if best is None:
        return None, ""
    v = np.asarray(best.position[:2]) - np.asarray(p[:2])
    rel = wrap_angle_deg(math.degrees(math.atan2(v[1], v[0]) - heading))
    side = "ahead" if abs(rel) < 25 or np.hypot(*v) < 0.5 else ("left" if rel > 0 else "right")
    return best, side


def route_of(path_m: np.ndarray, start_yaw: float, landmarks=()) -> list[RouteStep]:
    """Route steps (see the module docstring) of a path from a start heading."""
    path = np.asarray(path_m, dtype=float).reshape(-1, 3)
    if len(path) < 2:
        return [RouteStep("arrive", landmark=None)]
    idx = simplify(path, SIMPLIFY_TOLERANCE_M)
    pts = path[idx]
    # merge legs that are too short (keep the ends)
    merged = [pts[0]]
    for p in pts[1:-1]:
        if np.linalg.norm((p - merged[-1])[:2]) >= MIN_LEG_M:
            merged.append(p)
    if len(merged) > 1 and np.linalg.norm((pts[-1] - merged[-1])[:2]) < MIN_LEG_M:
        merged.pop()
    merged.append(pts[-1])
    pts = np.array(merged)
    steps: list[RouteStep] = []
    heading = start_yaw
    used: set = set()
    for k in range(len(pts) - 1):
        d = pts[k + 1] - pts[k]
        horizontal = float(np.hypot(d[0], d[1]))
        if horizontal > 0.2:
            new_heading = math.atan2(d[1], d[0])
            turn = wrap_angle_deg(math.degrees(new_heading - heading))
            if abs(turn) >= 20.0:
                steps.append(RouteStep("turn", angle_deg=turn))
            heading = new_heading
        last = k == len(pts) - 2
        lm, side = (None, "") if last else _near(landmarks, pts[k + 1], heading, used)
        if lm is not None:
            used.add(lm.name)
        steps.append(RouteStep("go", distance_m=horizontal, dz_m=float(d[2]), landmark=lm, side=side))
    lm, side = _near(landmarks, pts[-1], heading, used)
    steps.append(RouteStep("arrive", landmark=lm, side=side))
    return steps


# --- rendering -------------------------------------------------------------------------

def _turn_words(angle: float) -> tuple[str, str]:
    """(direction, qualifier): ("left"|"right"|"around", "slightly"|"sharply"|"")."""
    a = abs(angle)
    direction = "left" if angle > 0 else "right"
    if a > 150:
        return "around", ""
    return direction, "slightly " if a < 50 else ("sharply " if a > 120 else "")


def _metres(d: float, style: str) -> str:
    if style == "exact":
        return f"{d:.0f} m" if d >= 1.5 else f"{d:.1f} m"
    if style == "approx":
        return f"about {max(1, round(d)):.0f} metres"
    return "a little way" if d < 3 else ("a while" if d < 8 else "a long way")


def _vertical(dz: float, persona: str) -> str:
    if abs(dz) < 0.6:
        return ""
    up = dz > 0
    if persona == "pilot":
        return f", {'climbing' if up else 'descending'} {abs(dz):.0f} m"
    if persona == "child":
        return ", going up high" if up else ", going down low"
    return f", {'rising' if up else 'dropping'} about {abs(dz):.0f} m" if persona in ("detailed", "inspector") \
        else (" and go up a bit" if up else " and go down a bit")


def _landmark_phrase(step: RouteStep, persona: str) -> str:
    lm = step.landmark
    if lm is None:
        return ""
    where = {"left": "on your left", "right": "on your right", "ahead": "ahead of you"}[step.side]
    if persona == "child":
        return f" until you see the {lm.name}"
    if persona == "inspector":
        return f" to the {lm.name} ({lm.description}, {where})"
    if persona == "photographer":
        return f" towards the {lm.name} {where}"
    if persona in ("local", "tourist", "elderly"):
        return f" until the {lm.name} is {where}"
    return f" to the {lm.name}"


_STYLE = {
    "concise": dict(dist="exact", open="", turn="Turn {q}{d}.", go="Forward {m}{v}{lm}.", stop="Stop{lm}.",
                    around="Turn around."),
    "detailed": dict(dist="exact", open="Starting where you are: ", turn="turn {q}{d} by about {a:.0f} degrees;",
                     go="fly forward {m}{v}{lm};", stop="then stop{lm}.", around="turn around;"),
    "tourist": dict(dist="approx", open="Hi! ", turn="Turn {q}{d},", go="then head on for {m}{v}{lm},",
                    stop="and you're there{lm}. Thanks!", around="Turn around first,"),
    "courier": dict(dist="approx", open="Quick one: ", turn="{d} turn,", go="go {m}{v}{lm},",
                    stop="and stop there{lm}, that's the drop point.", around="turn back,"),
    "elderly": dict(dist="approx", open="Could you please fly carefully for me. ", turn="Please turn {q}{d}.",
                    go="Then go on for {m}{v}{lm}.", stop="Please stop there{lm}, thank you.",
                    around="Please turn around."),
    "child": dict(dist="vague", open="", turn="Spin {d}!", go="Zoom forward{v}{lm}!", stop="Stop{lm}! Yay!",
                  around="Spin all the way round!"),
    "pilot": dict(dist="exact", open="", turn="Yaw {q}{d} {a:.0f} degrees, heading {h:03.0f}.",
                  go="Proceed {m}{v}{lm}.", stop="Hold position{lm}. Stop.", around="Yaw around, heading {h:03.0f}."),
    "photographer": dict(dist="approx", open="", turn="Turn {q}{d} to face the new view,", go="glide {m}{v}{lm},",
                         stop="and stop for the shot{lm}.", around="Turn around for the view behind you,"),
    "inspector": dict(dist="exact", open="", turn="Step {n}: turn {q}{d} ({a:.0f} deg).",
                      go="Step {n}: advance {m}{v}{lm}.", stop="Step {n}: stop{lm} and hold.",
                      around="Step {n}: turn around."),
    "local": dict(dist="vague", open="", turn="Take a {d},", go="go on {m}{v}{lm},",
                  stop="and stop{lm}, you can't miss it.", around="Turn back the way you came,"),
}


def generate_instruction(path_m: np.ndarray, start_yaw: float, landmarks=(), persona: str = "concise",
                         seed: int = 0) -> str:
    """The instruction for flying ``path_m`` from heading ``start_yaw`` (rad), in ``persona``'s style.

    Deterministic in its arguments (``seed`` picks among equivalent phrasings)."""
    if persona not in _STYLE:
        raise ValueError(f"unknown persona {persona!r}; choose one of {', '.join(PERSONA_NAMES)}")
    style = _STYLE[persona]
    rng = np.random.default_rng(seed)
    steps = route_of(path_m, start_yaw, landmarks)
    heading = math.degrees(start_yaw)
    out, n = [], 1
    for step in steps:
        if step.kind == "turn":
            heading += step.angle_deg
            d, q = _turn_words(step.angle_deg)
            template = style["around"] if d == "around" else style["turn"]
            out.append(template.format(d=d, q=q, a=abs(step.angle_deg), h=(90.0 - heading) % 360.0, n=n))
        elif step.kind == "go":
            out.append(style["go"].format(m=_metres(step.distance_m, style["dist"]), v=_vertical(step.dz_m, persona),
                                          lm=_landmark_phrase(step, persona), n=n))
        else:
            lm = step.landmark
            where = "" if lm is None else (
                f" next to the {lm.name}" if rng.random() < 0.5 or persona != "tourist" else f" by the {lm.name}")
            out.append(style["stop"].format(lm=where, n=n))
        n += 1
    joined = []
    for piece in out:  # after a comma the next piece goes on in lower case
        if joined and joined[-1].endswith(","):
            piece = piece[0].lower() + piece[1:]
        joined.append(piece)
    text = style["open"] + " ".join(joined)
    text = text[0].upper() + text[1:]
    return " ".join(text.split())


def rewrite_with_llm(instruction: str, persona: str, endpoint: str, model: str | None = None,
                     api_key: str | None = None, timeout_s: float = 60.0) -> str:
    """Ask an OpenAI-compatible chat endpoint to rephrase ``instruction`` in ``persona``'s voice,
    keeping every turn, distance and landmark (the request goes through urllib). Errors raise
    :class:`airplay.vln.backends.BackendError` naming the URL."""
    from airplay.vln.backends import OpenAIBackend
    from airplay.vln.prompt import Prompt

    desc = {p.name: p.description for p in PERSONAS}.get(persona, persona)
    backend = OpenAIBackend(endpoint, model=model, api_key=api_key, max_new_tokens=256, timeout_s=timeout_s)
    prompt = Prompt("You rewrite drone navigation instructions. Keep every turn, its direction, every distance "
                    "and every landmark; change only the wording. Answer with the instruction only.",
                    [f"Persona: {persona} ({desc}).\nInstruction: {instruction}"])
    text = backend.generate(prompt).strip()
    return text or instruction


def landmarks_from_spec(landmarks: list, source: str = "scene.yaml") -> list[Landmark]:
    """:class:`Landmark` objects from a ``landmarks:`` list (scene.yaml schema, see
    :mod:`airplay.scene.synthetic.landmarks`); errors name ``source`` and the field."""
    out = []
    for i, item in enumerate(landmarks or []):
        where = f"{source}: landmarks[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: must be a mapping with name, description, position")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}.name: must be a non-empty string")
        pos = item.get("position")
        try:
            pos_a = np.asarray(pos, dtype=float).reshape(3)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.position: must be [x, y, z] in metres, got {pos!r}") from None
        size = item.get("size", [0.0, 0.0, 0.0])
        try:
            size_a = np.asarray(size, dtype=float).reshape(3)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.size: must be [sx, sy, sz] in metres, got {size!r}") from None
        if not (np.isfinite(pos_a).all() and np.isfinite(size_a).all()) or (size_a < 0).any():
            raise ValueError(f"{where}: position and size must be finite, size >= 0")
        out.append(Landmark(name.strip(), str(item.get("kind", "")), str(item.get("description", name)),
                            tuple(float(v) for v in pos_a), tuple(float(v) for v in size_a)))
    return out

