"""SFT data for AirVLN-R1 from expert VLN episodes (ShareGPT / LLaMA-Factory JSON + PNG images).

The expert in discrete actions (:func:`oracle_action`) follows the episode's reference path
(the A* path): towards the path point one forward step ahead of the closest one, it turns
when the bearing is off by more than half a turn, climbs or descends when those actions are
enabled and the height is off by more than half a vertical step, stops within half a
forward step (at most the success radius) of the goal, and otherwise moves forward. Poses
follow the actions exactly (:func:`airplay.vln.actions.apply_action`, as AirNav's simulator
does). The actions are grouped into steps of up to ``max_actions_per_step``; each step is one
sample: the AirNav prompt (:mod:`airplay.vln.prompt`) at the step's first pose, with the
history views chosen as the navigator chooses them, and the expert's actions as the answer.

Output folder::

    vln_sft.json        [{"system", "messages": [{"role": "user", "content": "<image>..."},
                                                  {"role": "assistant", "content": "[\"MOVE_FORWARD\", ...]"}],
                          "images": ["images/<episode>_<k>.png", ...], "gt_actions": [...],
                          "scene", "episode_id", "persona", "forward_m", "turn_deg", "vertical_m"}, ...]
    dataset_info.json   the LLaMA-Factory entry (formatting sharegpt, columns messages/system/images)
    images/             one PNG per action start (views are shared between samples)

``gt_actions`` and the magnitudes are the columns :mod:`airplay.vln.rewards` reads for GRPO.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from airplay.frames import wrap_angle
from airplay.vln.actions import ActionSpace, apply_action


def oracle_action(pose, path: np.ndarray, goal: np.ndarray, space: ActionSpace, radius_m: float) -> str:
    """The expert's next discrete action from ``pose`` (x, y, z, yaw) along ``path`` (K, 3)."""
    pos = np.asarray(pose[:3], float)
    yaw = float(pose[3])
    if np.linalg.norm(goal - pos) <= min(radius_m, 0.5 * space.forward_m):
        return "STOP"
    seg = np.linalg.norm(np.diff(path, axis=0), axis=1)
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    k = int(np.argmin(np.linalg.norm(path - pos, axis=1)))
    target_s = arc[k] + space.forward_m
    j = min(int(np.searchsorted(arc, target_s)), len(path) - 1)
    target = path[j]
    d = target - pos
    vertical = "ASCEND" in space.names
    if vertical and abs(goal[2] - pos[2]) > 0.5 * space.vertical_m and np.hypot(*(goal - pos)[:2]) < space.forward_m:
        return "ASCEND" if goal[2] > pos[2] else "DESCEND"
    if np.hypot(d[0], d[1]) < 0.25 * space.forward_m:
        if vertical and abs(d[2]) > 0.5 * space.vertical_m:
            return "ASCEND" if d[2] > 0 else "DESCEND"
        d = goal - pos
    err = wrap_angle(math.atan2(d[1], d[0]) - yaw)
    if abs(err) > 0.5 * space.turn_rad:
        return "TURN_LEFT" if err > 0 else "TURN_RIGHT"
    if vertical and abs(d[2]) > 0.5 * space.vertical_m:
        return "ASCEND" if d[2] > 0 else "DESCEND"
    return "MOVE_FORWARD"


def oracle_actions(episode, space: ActionSpace, radius_m: float) -> tuple[list[str], list[tuple]]:
    """(actions ending in STOP unless the budget ran out, the pose before each action)."""
    pose = (*[float(v) for v in episode.start_position], float(episode.start_yaw))
    path = np.asarray(episode.reference_path, float)
    goal = np.asarray(episode.goal_position, float)
    actions, poses = [], []
    for _ in range(space.max_steps):
        a = oracle_action(pose, path, goal, space, radius_m)
        actions.append(a)
        poses.append(pose)
        if a == "STOP":
            break
        pose = apply_action(pose, a, space)
    return actions, poses


def export_sft(scene_dirs, out_dir: Path, episodes: int = 10, seed: int = 0, image_size=None,
               render_backend: str = "auto", vln_config=None, history_offsets=None) -> dict:
    """Write the SFT folder (module docstring) for ``episodes`` sampled episodes per scene."""
    from airplay.render.views import save_png
    from airplay.world import World
    from airplay.vln.actions import load_vln_config
    from airplay.vln.episodes import sample_vln_episodes
    from airplay.vln.prompt import DEFAULT_HISTORY_OFFSETS, PromptBuilder

    vcfg = vln_config or load_vln_config()
    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    samples, n_images, n_episodes = [], 0, 0
    for scene_dir in scene_dirs:
        world = World.load(scene_dir)
        space = vcfg.action_space(world.name, world.scene.spec.category)
        radius = vcfg.success_radius_m or world.protocol.success_radius_m
        builder = PromptBuilder(space, tuple(history_offsets or DEFAULT_HISTORY_OFFSETS), image_size)
        max_dz = None if "ASCEND" in space.names else 0.5 * radius
        for ep in sample_vln_episodes(world, episodes, seed, max_dz_m=max_dz):
            n_episodes += 1
            actions, poses = oracle_actions(ep, space, radius)
            frames, names = [], []
            for k, pose in enumerate(poses):
                rgb, _ = world.camera_images(np.asarray(pose[:3]), pose[3], render_backend, depth=False)
                if image_size:
                    from airplay.vln.prompt import to_pil

                    rgb = np.asarray(to_pil(rgb, tuple(image_size)))
                frames.append(rgb)
                name = f"images/{world.name}_{ep.episode_id}_{k:03d}.png"
                save_png(out_dir / name, rgb)
                names.append(name)
                n_images += 1
            for start in range(0, len(actions), space.max_actions_per_step):
                group = actions[start:start + space.max_actions_per_step]
                prompt = builder.build(ep.instruction, poses[start], actions[:start], frames[:start + 1])
                used = [i for i in range(start + 1) if any(p is frames[i] for p in prompt.images)]
                samples.append({
                    "system": prompt.system,
                    "messages": [{"role": "user", "content": prompt.text},
                                 {"role": "assistant", "content": json.dumps(group)}],
                    "images": [names[i] for i in used],
                    "gt_actions": group, "scene": world.name, "episode_id": ep.episode_id, "persona": ep.persona,
                    "forward_m": space.forward_m, "turn_deg": math.degrees(space.turn_rad),
                    "vertical_m": space.vertical_m,
                })
    file = "vln_sft.json"
    (out_dir / file).write_text(json.dumps(samples, indent=1) + "\n")
    info = {"airplay_vln": {"file_name": file, "formatting": "sharegpt",
                            "columns": {"messages": "messages", "system": "system", "images": "images"},
                            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                     "assistant_tag": "assistant"}}}
    (out_dir / "dataset_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return {"samples": len(samples), "episodes": n_episodes, "images": n_images, "file": file}
