"""Velocity vs waypoint actions (config ``actions``) in the closed-loop overfit setting of
``test/test_policy_closed_loop.py``: a small CNN-BC trained on DART flights of 5 tasks, flown on
those tasks with a 2-period delay. Prints, per variant, the goals reached, the R² of the
predicted chunk against its labels on the training frames per action component, and the
reference: the tracker flying the recorded waypoints of clean expert flights (no learning).

    .venv/bin/python bench/action_spaces.py                      # ~10 min on 2 cores
    .venv/bin/python bench/action_spaces.py --noise 0 --variants velocity waypoint:10:5
    .venv/bin/python bench/action_spaces.py --quick   # seconds: 2 variants, 1 task, 32x32, 20 updates (make test)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import torch

from airplay.policies import make_policy
from airplay.policies.adapters import TrackerAdapter
from airplay.policies.dagger import fly_episode
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import TrainConfig, build_policy, train
from airplay.policies.waypoints import episode_waypoints
from airplay.scene.synthetic import make_scene
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv
from airplay.world.env_config import EnvConfig

IMAGE, TASKS, DELAYS, EVAL_DELAY = 64, 5, (0, 2, 4), 2
CNN_BC = {"image_size": IMAGE, "backbone": "small", "backbone_width": 16, "image_features": 64, "hidden_dim": 128}
VARIANTS = ["velocity", "waypoint:1:1", "waypoint:10:1", "waypoint:10:5", "waypoint:25:5", "waypoint:10:5:velocity"]
"""velocity[:STATE] or waypoint:K:H[:STATE] (STATE: the state_features, default none)."""
QUICK = {"image": 32, "tasks": 1, "delays": (0,), "updates": 20, "variants": ["velocity", "waypoint:10:5"]}
"""``--quick``: the same steps at a fraction of the work (the figures mean nothing; the code runs)."""


def variant_fields(spec: str) -> dict:
    parts = spec.split(":")
    if parts[0] == "velocity" and len(parts) <= 2:
        return {"state_features": parts[1] if len(parts) == 2 else "none"}
    if parts[0] == "waypoint" and len(parts) in (3, 4):
        return {"actions": "waypoint", "adapter": "tracker", "chunk_size": int(parts[1]),
                "execution_horizon": int(parts[2]), "state_features": parts[3] if len(parts) == 4 else "none"}
    raise SystemExit(f"error: variant {spec!r}: velocity[:STATE] or waypoint:K:H[:STATE]")


class RecordedWaypoints:
    """A policy that serves the recorded waypoint chunk of the current step through the tracker."""

    def __init__(self, waypoints: np.ndarray, horizon: int) -> None:
        self.waypoints, self.adapter, self.t = waypoints, TrackerAdapter(horizon), 0

    def reset(self, task=None) -> None:
        self.adapter.reset()
        self.t = 0

    def select_action(self, obs: dict) -> np.ndarray:
        chunk = self.waypoints[min(self.t, len(self.waypoints) - 1)]
        self.t += 1
        return self.adapter.step(obs, lambda _: chunk)


def r2(policy, ds: ChunkDataset) -> np.ndarray:
    """(4,) R² of the policy's chunks against the labels over every 5th training frame."""
    b = ds.batch(np.arange(0, len(ds), 5))
    k = policy.config.chunk_size
    pred = torch.cat([policy.predict_batch({key: v[i:i + 256] for key, v in b.items()})
                      for i in range(0, len(b["action"]), 256)])
    keep = ~b["action_is_pad"][:, :k]
    y = b["action"][:, :k][keep]
    return (1 - ((pred[keep] - y) ** 2).mean(0) / y.var(0)).numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="+", default=VARIANTS, help="velocity[:STATE] or waypoint:K:H[:STATE]")
    ap.add_argument("--noise", type=float, default=0.3, help="DART noise of the demonstrations (m/s, rad/s)")
    ap.add_argument("--updates", type=int, default=None, help="training updates per variant (default 2000)")
    ap.add_argument("--quick", action="store_true",
                    help=f"seconds, not minutes (what make test runs): variants {' '.join(QUICK['variants'])} unless "
                         f"given, {QUICK['tasks']} task, no delays, {QUICK['image']}x{QUICK['image']}, "
                         f"{QUICK['updates']} updates")
    args = ap.parse_args()
    image, n_tasks, delays = (QUICK["image"], QUICK["tasks"], QUICK["delays"]) if args.quick else (IMAGE, TASKS, DELAYS)
    updates = args.updates or (QUICK["updates"] if args.quick else 2000)
    if args.quick and args.variants == VARIANTS:
        args.variants = QUICK["variants"]
    fields = {v: variant_fields(v) for v in args.variants}
    numba.set_num_threads(1)
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="action-spaces-"))
    make_scene("indoor", 2, root / "indoor", gaussians_per_m2=4)
    world = World.load(root / "indoor").with_camera_size(image, image)  # the same field of view
    env = AirPlayEnv(world, EnvConfig(setting="pointgoal", render_backend="cpu", render_images=False), tasks=[])
    expert = make_policy("field_expert", world)
    tasks = sample_tasks(world.scene, world.grid, n_tasks, 0, "pointgoal", world.protocol)
    rng = np.random.default_rng(0)
    demos = []
    for task in tasks:
        for delay in delays:
            ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, rng, noise_std=args.noise,
                             delay_steps=delay)
            demos.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    print(f"{len(demos)} demonstrations of {n_tasks} tasks (DART noise {args.noise}, delays {delays} periods)\n",
          flush=True)

    rows = ["| variant | goals reached | R² vx, vy, vz, yaw (chunk vs labels, training frames) | s |",
            "|---|---|---|---|"]
    for name, extra in fields.items():
        t0 = time.perf_counter()
        config = {**CNN_BC, "image_size": image, **extra}
        cfg = build_policy("cnn_bc", **config).config
        ds = ChunkDataset(demos, cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, "point", cfg.actions)
        torch.manual_seed(0)
        policy = build_policy("cnn_bc", ds, **config)
        train(policy, ds, TrainConfig.for_policy("cnn_bc", steps=updates, batch_size=64, lr=1e-3, save_every=0,
                                                 log_every=0), root / name.replace(":", "_"), progress=False)
        policy.eval()
        statuses = [fly_episode(world, env, policy, expert, t, "cpu", 0.0, np.random.default_rng(0),
                                delay_steps=EVAL_DELAY)["status"] for t in tasks]
        rows.append(f"| {name} | {statuses.count('success')}/{n_tasks} | {', '.join(f'{x:.2f}' for x in r2(policy, ds))} "
                    f"| {time.perf_counter() - t0:.0f} |")
        print(rows[-1], flush=True)

    # The reference: the recorded waypoints of clean expert flights, flown by the tracker.
    reached, worst = 0, []
    for task in tasks:
        ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, np.random.default_rng(0))
        replay = fly_episode(world, env, RecordedWaypoints(episode_waypoints(ep["state"], 10)[0], 5), expert, task,
                             "cpu", 0.0, np.random.default_rng(0))
        n = min(len(ep["state"]), len(replay["state"]))
        worst.append(float(np.linalg.norm(ep["state"][:n, :3] - replay["state"][:n, :3], axis=1).max()))
        reached += replay["status"] == "success"
    rows.append(f"| recorded waypoints (K 10, H 5), clean expert flights | {reached}/{n_tasks} | largest distance from "
                f"the flight {min(worst):.2f}-{max(worst):.2f} m | |")
    print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
