"""A small CNN-BC trained by the tests themselves on a sparse synthetic scene: the scene, the field
expert's demonstrations (DART noise, real-time delays) and the training. Shared by the closed-loop
tests (test_policy_closed_loop.py) and the hardware-in-the-loop test on PX4 (test_px4_hil.py)."""

from __future__ import annotations

import numpy as np
import yaml

SMALL = {"backbone": "small", "backbone_width": 16, "image_features": 64, "hidden_dim": 128}
"""The CNN-BC configuration of the tests (with ``image_size``)."""
DELAYS = (0, 2, 4)
"""Control periods between observation and execution, one demonstration each (0-80 ms: the states a
real-time loop's latency leads to)."""


def scene_with_camera(folder, seed: int, size: int, density: float = 4.0, category: str = "indoor"):
    """A sparse synthetic scene (``category``, ``seed``, ``density`` Gaussians/m^2) whose camera
    renders ``size`` x ``size`` pixels (same field of view), with its disk-cached SDF built."""
    from airplay.scene.synthetic import make_scene
    from airplay.world import World

    make_scene(category, seed, folder, gaussians_per_m2=density, name=f"{category}_{seed}")
    spec = yaml.safe_load((folder / "scene.yaml").read_text())
    cam = spec["camera"]
    scale = size / cam["width"]
    cam.update(width=size, height=size, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=size / 2, cy=size / 2)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    World.load(folder).sdf
    return folder


def demonstrations(world, env, expert, tasks, noise_std: float, repeats: int = 1, delays=DELAYS, seed: int = 0):
    """The field expert's flights of ``tasks`` with DART noise, once per delay and repeat; each must
    succeed. Returns EpisodeData with the clean labels."""
    from airplay.policies.dagger import fly_episode
    from airplay.policies.dataset import EpisodeData

    rng = np.random.default_rng(seed)
    demos = []
    for task in tasks:
        for _ in range(repeats):
            for delay in delays:
                ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, rng, noise_std=noise_std,
                                 delay_steps=delay)
                assert ep["status"] == "success", (task.task_id, ep["status"])
                demos.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    return demos


def train_cnn_bc(demos, out, image_size: int, steps: int = 2000, batch_size: int = 64, lr: float = 1e-3):
    """A CNN-BC of :data:`SMALL` trained on ``demos`` into the checkpoint folder ``out``; the policy."""
    import torch

    from airplay.policies.dataset import ChunkDataset
    from airplay.policies.train import TrainConfig, build_policy, train

    fields = {**SMALL, "image_size": image_size}
    cfg = build_policy("cnn_bc", **fields).config
    ds = ChunkDataset(demos, cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, "point")
    torch.manual_seed(0)
    policy = build_policy("cnn_bc", ds, **fields)
    train(policy, ds, TrainConfig.for_policy("cnn_bc", steps=steps, batch_size=batch_size, lr=lr, save_every=0,
                                             log_every=0), out, progress=False)
    policy.eval()
    return policy
