"""Train a PointGoal policy with Stable-Baselines3 PPO on airplay's vector environment (CPU torch).

Observations: 64x64 depth and the goal in the heading frame; actions: [vx, vy, vz, yaw_rate]
in [-1, 1], scaled to the vehicle's limits, each applied for ``--action-repeat`` 50 Hz control
periods (default 5: a decision every 0.1 s; the vector environment's ``action_repeat``: one
rendered observation and the summed reward per decision). The reward's progress term is
geodesic by default (``--progress``: the drop of the goal's cost-to-go around obstacles,
:mod:`airplay.world.geodesic`), plus +10 on success and -10 on a collision. The network is
:class:`airplay.policies.ppo_depth.PPODepthPolicy`'s (a small CNN on the depth, an MLP on the
goal, one Tanh layer each for actor and critic). Every ``--eval-every-min`` minutes (or
``--eval-every-steps`` decisions) and at the end the actor is exported into a ``ppo_depth``
checkpoint and flown greedily on held-out tasks of the same scene (sampled with another seed),
through the same episode loop as ``airplay eval``, deciding every ``--action-repeat`` control
periods as in training; its success rate (SR) is logged. With ``--curriculum STAGES`` training
starts on the shortest tasks and widens the pool stage by stage (:func:`curriculum_pools`). The
checkpoint records the action repeat and holds each command that long wherever it is flown.
By default PPO starts from a warm start (:mod:`airplay.rl.warmstart`;
``--expert-decisions M``, 0 leaves it out): the field expert flies M decisions on all training
tasks in the same vector environment (with ``--expert-noise``), its actions and returns are
cloned into the actor and the critic (``--bc-epochs``), ``--dagger-rounds`` DAgger rounds
follow (the clone flies, the expert labels, the clone is re-fitted on everything), the clone
is evaluated, and PPO fine-tunes it; all inside ``--minutes``. The fine-tuning first trains
the critic alone for ``--critic-warmup`` decisions, then keeps the actor near the expert's
decisions with an anchor of weight ``--bc-coef`` that halves every ``--bc-half-life`` decisions
(:class:`airplay.rl.anchor.AnchoredPPO`; 100,000, 1 and 500,000 by default; ``--critic-warmup 0
--bc-coef 0`` is plain PPO from the clone).

A budget of ``--minutes`` gives fewer decisions on a slower or busier machine. ``--minutes 0
--max-steps N --eval-every-steps K`` trains for N decisions and evaluates every K. With OpenMP on
one thread (``OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1``, ``--torch-threads 1``) the checkpoint and
the curve (its minutes aside) are then the same whatever the load or the number of render
threads, on one machine; with two OpenMP threads the weights can differ in their last bits.

Writes into ``--out``:

* ``checkpoint/``: ``config.json`` + ``model.safetensors``, an ordinary airplay checkpoint
  (``airplay eval --policy ppo_depth --checkpoint OUT/checkpoint --scenes SCENE``; the policy
  node's ``policy:=ppo_depth checkpoint:=OUT/checkpoint``);
* ``curve.csv`` and ``curve.png``: the training curve (held-out SR, the SR of the training
  episodes since the last row, mean episode return, against minutes and env steps);
* ``train.json``: the arguments, steps, wall time and the last row.

    PYTHONPATH=src python examples/ppo_pointgoal.py --minutes 60 --num-envs 16 --seed 0 --out out/ppo

``--scene`` defaults to ``scenes/indoor_0``, generated if missing (any ``<category>_<seed>``
folder name of the synthetic categories is).
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from pathlib import Path

import numpy as np

# the fine-tuning's defaults after a warm start: the critic alone for 100,000 decisions, then an anchor
# of weight 1 to the expert's decisions (halving every --bc-half-life); docs/gym.md has the runs
CRITIC_WARMUP, BC_COEF = 100_000, 1.0
CURVE_FIELDS = ("minutes", "env_steps", "eval_sr", "eval_successes", "eval_episodes", "train_sr", "train_episodes",
                "ep_return_mean", "train_pool", "actor_frozen", "bc_weight")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", default="scenes/indoor_0", help="scene folder (a missing <category>_<seed> is generated)")
    p.add_argument("--minutes", type=float, default=60.0,
                   help="wall-clock budget of training and its periodic evaluations (set-up and the final "
                        "evaluation come on top; 0: none, with --max-steps)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many env steps (decisions) too (0: no limit); unlike --minutes, a "
                        "machine's speed or load does not change how much a run trains")
    p.add_argument("--num-envs", type=int, default=16, help="sub-environments of the vector environment")
    p.add_argument("--seed", type=int, default=0, help="seeds PPO, the environments and the training tasks")
    p.add_argument("--out", default="out/ppo_pointgoal", help="output folder")
    p.add_argument("--image-size", type=int, default=64, help="side of the square depth image (pixels)")
    p.add_argument("--train-tasks", type=int, default=256, help="training tasks (sampled with --seed)")
    p.add_argument("--eval-tasks", type=int, default=20, help="held-out tasks (sampled with --seed + 10000)")
    p.add_argument("--eval-every-min", type=float, default=6.0, help="minutes between held-out evaluations")
    p.add_argument("--eval-every-steps", type=int, default=0,
                   help="env steps (decisions) between held-out evaluations, instead of --eval-every-min")
    p.add_argument("--n-steps", type=int, default=128, help="PPO rollout length per sub-environment")
    p.add_argument("--batch-size", type=int, default=256, help="PPO minibatch size")
    p.add_argument("--epochs", type=int, default=4, help="PPO epochs per rollout")
    p.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate")
    p.add_argument("--gamma", type=float, default=0.99, help="PPO discount per env step (per decision)")
    p.add_argument("--action-repeat", type=int, default=5,
                   help="50 Hz control periods each action is applied for (5: a decision every 0.1 s)")
    p.add_argument("--max-speed", type=float, default=2.0,
                   help="horizontal speed (m/s) that actions of +-1 command; the vehicle's limit is 5")
    p.add_argument("--max-climb", type=float, default=1.0, help="vertical speed (m/s) of actions +-1")
    p.add_argument("--max-yaw-rate", type=float, default=1.0, help="yaw rate (rad/s) of actions +-1")
    p.add_argument("--log-std-init", type=float, default=-1.0,
                   help="initial log standard deviation of PPO's Gaussian actions (in [-1, 1] units)")
    p.add_argument("--ent-coef", type=float, default=0.0, help="PPO entropy bonus")
    p.add_argument("--progress", choices=("geodesic", "euclidean"), default="geodesic",
                   help="the reward's progress to the goal: the drop of the cost-to-go around obstacles "
                        "(geodesic) or of the straight-line distance (euclidean)")
    p.add_argument("--curriculum", type=int, default=8, metavar="STAGES",
                   help="train on the shortest tasks first: the training tasks sorted by shortest-path length "
                        "in STAGES equal parts, the next added once the training SR on the pool reaches "
                        "--promote-sr (0: all tasks from the start)")
    p.add_argument("--promote-sr", type=float, default=0.5,
                   help="training SR (over the last --promote-episodes episodes) that adds a curriculum stage")
    p.add_argument("--promote-episodes", type=int, default=100,
                   help="training episodes on a pool before its SR may add a curriculum stage")
    p.add_argument("--expert-decisions", type=int, default=30000,
                   help="warm start: fly the field expert for this many decisions on all training tasks and "
                        "clone it into PPO's actor and critic before training (0: no warm start)")
    p.add_argument("--expert-noise", type=float, default=0.3,
                   help="DART noise (std, in [-1, 1] action units) on the expert's executed actions")
    p.add_argument("--bc-epochs", type=int, default=8, help="warm start: passes over the expert's decisions")
    p.add_argument("--bc-lr", type=float, default=1e-3, help="warm start: Adam learning rate")
    p.add_argument("--dagger-rounds", type=int, default=0,
                   help="warm start: DAgger rounds after the first clone, each flying the clone (greedy) for "
                        "--expert-decisions decisions, the expert labelling its states, then re-cloning on all")
    p.add_argument("--critic-warmup", type=int, default=None, metavar="DECISIONS",
                   help="after the warm start, only the critic learns for this many decisions (the actor frozen; "
                        f"default {CRITIC_WARMUP:,} with a warm start, 0 without)")
    p.add_argument("--bc-coef", type=float, default=None,
                   help="after the warm start, weight of the anchor to the expert's decisions added to PPO's loss "
                        f"(their negative log-likelihood under the actor; airplay.rl.anchor; default {BC_COEF:g} "
                        "with a warm start, 0: none)")
    p.add_argument("--bc-half-life", type=float, default=500_000.0, metavar="DECISIONS",
                   help="decisions (after the critic warm-up) over which the anchor's weight halves")
    p.add_argument("--critic-features", choices=("shared", "own"), default="shared",
                   help="the critic reads the actor's depth and goal encoder (shared) or has its own (own: the "
                        "value loss cannot change the actor's features)")
    p.add_argument("--threads", type=int, default=None, help="render threads (default: the CPUs)")
    p.add_argument("--torch-threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args(argv)
    for name in ("num_envs", "image_size", "train_tasks", "eval_tasks", "n_steps", "batch_size", "epochs",
                 "action_repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.minutes < 0 or args.max_steps < 0 or (args.minutes == 0 and not args.max_steps):
        p.error(f"--minutes must be > 0, or 0 with --max-steps > 0; got --minutes {args.minutes:g}, "
                f"--max-steps {args.max_steps}")
    if args.eval_every_min <= 0 or args.eval_every_steps < 0:
        p.error(f"--eval-every-min must be > 0 and --eval-every-steps >= 0, got {args.eval_every_min:g}, "
                f"{args.eval_every_steps}")
    for name in ("max_speed", "max_climb", "max_yaw_rate"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if not 0.0 < args.gamma <= 1.0:
        p.error(f"--gamma must be in (0, 1], got {args.gamma}")
    if not 0 <= args.curriculum <= args.train_tasks:
        p.error(f"--curriculum must be in 0..--train-tasks ({args.train_tasks}), got {args.curriculum}")
    if args.expert_decisions < 0 or args.bc_epochs < 1 or not args.expert_noise >= 0 or not args.bc_lr > 0:
        p.error("--expert-decisions must be >= 0, --bc-epochs >= 1, --expert-noise >= 0 and --bc-lr > 0")
    if args.dagger_rounds < 0 or (args.dagger_rounds and not args.expert_decisions):
        p.error(f"--dagger-rounds must be >= 0 and needs --expert-decisions > 0, got {args.dagger_rounds}")
    if args.critic_warmup is None:
        args.critic_warmup = CRITIC_WARMUP if args.expert_decisions else 0
    if args.bc_coef is None:
        args.bc_coef = BC_COEF if args.expert_decisions else 0.0
    if args.critic_warmup < 0 or not args.bc_coef >= 0 or not args.bc_half_life > 0:
        p.error(f"--critic-warmup must be >= 0, --bc-coef >= 0 and --bc-half-life > 0, got {args.critic_warmup}, "
                f"{args.bc_coef}, {args.bc_half_life}")
    if (args.critic_warmup or args.bc_coef) and not args.expert_decisions:
        p.error("--critic-warmup and --bc-coef fine-tune a warm start: they need --expert-decisions > 0")
    if not 0.0 < args.promote_sr <= 1.0 or args.promote_episodes < 1:
        p.error(f"--promote-sr must be in (0, 1] and --promote-episodes >= 1, got {args.promote_sr}, "
                f"{args.promote_episodes}")
    return args


def scene_folder(path: str) -> Path:
    """``path``, generated first when it is a missing ``<category>_<seed>`` synthetic scene."""
    folder = Path(path)
    if folder.is_dir():
        return folder
    m = re.fullmatch(r"(indoor|urban|vegetation)_(\d+)", folder.name)
    if m is None:
        raise SystemExit(f"--scene {path}: no such folder (a missing <category>_<seed> one would be generated)")
    from airplay.scene.synthetic import make_scene

    print(f"generating {folder} ...", flush=True)
    make_scene(m.group(1), int(m.group(2)), folder, name=folder.name)
    return folder


def env_config(args: argparse.Namespace | None = None, action_repeat: int | None = None):
    """The environment PPO trains in and the held-out episodes fly in (one
    :class:`~airplay.world.env_config.EnvConfig`): PointGoal, depth and the heading-frame goal (m), the CPU
    renderer, ``--threads`` render threads, one decision per ``--action-repeat`` 50 Hz control periods
    (or ``action_repeat``), progress measured as ``--progress`` says."""
    from airplay.world.env_config import EnvConfig, RewardConfig

    return EnvConfig(setting="pointgoal", observations=("depth", "goal"), render_backend="cpu",
                     threads=args.threads if args is not None else None,
                     action_repeat=action_repeat if action_repeat is not None else args.action_repeat,
                     reward=RewardConfig(progress=args.progress if args is not None else "euclidean"))


def curriculum_pools(tasks: list, stages: int) -> list[list]:
    """The training pools of a curriculum of ``stages`` stages: ``tasks`` sorted by shortest-path
    length (A*, m), the first pool its shortest 1/stages, each next one adding the next part; with
    0 stages, one pool of every task."""
    if stages <= 0:
        return [list(tasks)]
    ordered = sorted(tasks, key=lambda t: (t.astar_length_m, t.task_id))
    bounds = np.linspace(0, len(ordered), stages + 1).round().astype(int)[1:]
    return [ordered[:b] for b in bounds]


def held_out_sr(policy, world, tasks) -> tuple[int, int]:
    """(successes, episodes): ``policy`` flown greedily on each task once, as ``airplay eval`` does.

    ``airplay eval`` steps one control period at a time and the policy holds each command for its
    ``execution_horizon`` (its ``action_repeat``); here the environment applies each command for
    ``action_repeat`` periods and the policy decides every step (H = 1): the same flights, period
    for period, with one rendered observation per decision instead of one per period."""
    from airplay.eval.runner import run_episode
    from airplay.world.env import AirPlayEnv

    repeat = policy.config.execution_horizon
    policy.set_execution(execution_horizon=1)
    env = AirPlayEnv(world, env_config(action_repeat=repeat), tasks=list(tasks))
    successes = 0
    for task in tasks:
        successes += run_episode(env, policy, task).status == "success"
    env.close()
    policy.set_execution(execution_horizon=repeat)
    return successes, len(tasks)


def warm_start(args, sb3_env, model, train_tasks: list, first_pool: list, t_start: float):
    """Clone the field expert, flown ``--expert-decisions`` decisions on all training tasks, into
    ``model`` (:mod:`airplay.rl.warmstart`), then ``--dagger-rounds`` DAgger rounds on the same
    tasks; then the curriculum's first pool is back in place. Returns every decision cloned
    (:class:`~airplay.rl.warmstart.Demonstrations`)."""
    from airplay.rl.warmstart import Demonstrations, clone_into, expert_rollouts
    from airplay.world.vector_expert import VectorFieldExpert

    venv = sb3_env.venv
    venv.set_tasks(train_tasks)
    t0 = time.monotonic()

    def flown(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) < sb3_env.num_envs:
            print(f"  expert: {done:,}/{total:,} decisions", flush=True)

    expert = VectorFieldExpert(venv)  # one for every round: its goal fields are built once
    demos = expert_rollouts(sb3_env, args.expert_decisions, gamma=args.gamma, noise_std=args.expert_noise,
                            seed=args.seed, expert=expert, progress=flown)
    print(f"warm start: the field expert flew {len(demos):,} decisions ({demos.episodes} episodes ended, "
          f"{demos.successes} at the goal) in {time.monotonic() - t0:.0f} s", flush=True)

    def clone(data, epochs: int) -> None:
        t0 = time.monotonic()
        clone_into(model, data, epochs=epochs, batch_size=args.batch_size, lr=args.bc_lr, seed=args.seed,
                   progress=lambda e, n, mse: print(f"  clone: epoch {e}/{n}, action MSE {mse:.4f}", flush=True))
        print(f"warm start: cloned {len(data):,} decisions in {time.monotonic() - t0:.0f} s "
              f"({(time.monotonic() - t_start) / 60:.1f} min in)", flush=True)

    clone(demos, args.bc_epochs)
    parts, everything = [demos], demos
    for r in range(1, args.dagger_rounds + 1):
        t0 = time.monotonic()
        flown_by_clone = expert_rollouts(sb3_env, args.expert_decisions, gamma=args.gamma, seed=args.seed + r,
                                         expert=expert, pilot=lambda obs: model.predict(obs, deterministic=True)[0])
        parts.append(flown_by_clone)
        print(f"DAgger round {r}/{args.dagger_rounds}: the clone flew {len(flown_by_clone):,} decisions "
              f"({flown_by_clone.episodes} episodes ended, {flown_by_clone.successes} at the goal) in "
              f"{time.monotonic() - t0:.0f} s, labelled by the expert", flush=True)
        # about --bc-epochs x --expert-decisions samples per round, whatever the aggregate's size
        everything = Demonstrations.concatenate(parts)
        clone(everything, max(1, round(args.bc_epochs / (r + 1))))
    venv.set_tasks(first_pool)
    return everything


def write_curve(out: Path, rows: list[dict]) -> None:
    with open(out / "curve.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CURVE_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    minutes = [r["minutes"] for r in rows]
    ax.plot(minutes, [100 * r["eval_sr"] for r in rows], "o-", label="held-out SR (greedy)")
    ax.plot(minutes, [100 * r["train_sr"] if r["train_episodes"] else np.nan for r in rows], "s--",
            label="training episodes' SR")
    ax.set_xlabel("wall-clock minutes")
    ax.set_ylabel("SR %")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    steps = rows[-1]["env_steps"] if rows else 0
    ax.set_title(f"PPO PointGoal, depth + goal ({steps:,} env steps)")
    fig.tight_layout()
    fig.savefig(out / "curve.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecMonitor

    from airplay.policies.checkpoint import save_json, save_policy
    from airplay.policies.ppo_depth import PPODepthConfig
    from airplay.rl.sb3 import AirPlaySB3VecEnv, export_ppo_depth, ppo_policy_kwargs
    from airplay.rl.anchor import AnchoredPPO
    from airplay.tasks.sampler import sample_tasks
    from airplay.world.env_factory import load_world, task_pool
    from airplay.world.vector_env import AirPlayVectorEnv

    t_start = time.monotonic()
    budget_s = 60.0 * args.minutes
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    world = load_world(scene_folder(args.scene), args.image_size)
    train_tasks = task_pool(world, "pointgoal", args.train_tasks, args.seed)
    eval_tasks = sample_tasks(world.scene, world.grid, args.eval_tasks, args.seed + 10_000, "pointgoal",
                              world.protocol)
    pools = curriculum_pools(train_tasks, args.curriculum)
    venv = AirPlayVectorEnv(args.num_envs, world, env_config(args), tasks=pools[0])
    # actions of +-1 command this envelope (heading frame: vx, vy, vz m/s, yaw rate rad/s)
    high = (args.max_speed, args.max_speed, args.max_climb, args.max_yaw_rate)
    low = tuple(-v for v in high)
    try:
        env = VecMonitor(AirPlaySB3VecEnv(venv, command_low=low, command_high=high))
    except ValueError as err:
        raise SystemExit(f"--max-speed / --max-climb / --max-yaw-rate: {err}") from None
    env.seed(args.seed)
    config = PPODepthConfig(image_size=args.image_size, action_low=low, action_high=high,
                            action_repeat=args.action_repeat)
    batch = min(args.batch_size, args.n_steps * args.num_envs)
    # SB3's PPO, plus the critic warm-up and the anchor to the warm start's decisions
    policy_kwargs = {**ppo_policy_kwargs(config, shared_critic=args.critic_features == "shared"),
                     "log_std_init": args.log_std_init}
    model = AnchoredPPO("MultiInputPolicy", env, n_steps=args.n_steps, batch_size=batch, n_epochs=args.epochs,
                        learning_rate=args.lr, gamma=args.gamma, gae_lambda=0.95, clip_range=0.2,
                        ent_coef=args.ent_coef, policy_kwargs=policy_kwargs,
                        seed=args.seed, device="cpu", verbose=0, critic_warmup=args.critic_warmup,
                        bc_coef=args.bc_coef, bc_half_life=args.bc_half_life, bc_batch_size=batch,
                        anchor_seed=args.seed)
    rows: list[dict] = []
    print(f"scene {world.name}: {len(train_tasks)} training tasks, {len(eval_tasks)} held-out; "
          f"{args.num_envs} envs, {args.image_size}x{args.image_size} depth, a decision every {args.action_repeat} "
          f"control periods, gamma {args.gamma:g}, {args.progress} progress; budget {args.minutes:g} min", flush=True)
    if args.curriculum:
        print(f"curriculum: {len(pools)} stages of {', '.join(str(len(q)) for q in pools)} tasks (shortest paths up "
              f"to {', '.join(f'{q[-1].astar_length_m:.1f}' for q in pools)} m)", flush=True)

    def evaluate(train: dict) -> None:
        policy = export_ppo_depth(model, config)
        save_policy(policy, out / "checkpoint")
        ok, n = held_out_sr(policy, world, eval_tasks)
        row = {"minutes": round((time.monotonic() - t_start) / 60.0, 3), "env_steps": int(model.num_timesteps),
               "eval_sr": ok / n, "eval_successes": ok, "eval_episodes": n,
               "train_sr": train["success"] / train["episodes"] if train["episodes"] else 0.0,
               "train_episodes": train["episodes"],
               "ep_return_mean": float(np.mean([e["r"] for e in model.ep_info_buffer])) if model.ep_info_buffer
               else 0.0, "train_pool": len(venv.tasks), "actor_frozen": model.actor_frozen(),
               "bc_weight": round(model.anchor_weight(), 6)}
        rows.append(row)
        write_curve(out, rows)
        print(f"[{row['minutes']:6.1f} min] {row['env_steps']:>9,} steps  held-out SR {100 * row['eval_sr']:5.1f}% "
              f"({ok}/{n})  training episodes {row['train_episodes']} SR {100 * row['train_sr']:5.1f}%  "
              f"return {row['ep_return_mean']:.2f}", flush=True)

    if args.expert_decisions:
        model.set_demonstrations(warm_start(args, env.venv, model, train_tasks, pools[0], t_start))
        evaluate({"success": 0, "episodes": 0})

    class Budget(BaseCallback):
        """Stops at the wall-clock budget or --max-steps; evaluates every --eval-every-min (or, with
        --eval-every-steps, at the first rollout's end past each multiple of it)."""

        def _init_callback(self) -> None:
            self.train = {"success": 0, "episodes": 0}
            self.last_eval, self.last_eval_steps = time.monotonic(), 0
            self.stage, self.recent = 0, []  # curriculum stage; its episodes' successes since it began

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"]):
                if done:
                    success = info.get("status") == "success"
                    self.train["episodes"] += 1
                    self.train["success"] += success
                    self.recent.append(success)
            window = self.recent[-args.promote_episodes:]
            if (self.stage + 1 < len(pools) and len(window) == args.promote_episodes
                    and np.mean(window) >= args.promote_sr):
                self.stage, self.recent = self.stage + 1, []
                venv.set_tasks(pools[self.stage])
                print(f"[{(time.monotonic() - t_start) / 60:6.1f} min] curriculum stage {self.stage + 1}/{len(pools)}:"
                      f" {len(pools[self.stage])} tasks (training SR {100 * np.mean(window):.0f}% over the last "
                      f"{len(window)} episodes)", flush=True)
            if args.max_steps and self.num_timesteps >= args.max_steps:
                return False
            return not budget_s or time.monotonic() - t_start < budget_s

        def _on_rollout_end(self) -> None:
            if args.eval_every_steps:
                due = self.num_timesteps // args.eval_every_steps > self.last_eval_steps // args.eval_every_steps
            else:
                due = time.monotonic() - self.last_eval >= 60.0 * args.eval_every_min
            if due:
                evaluate(self.train)
                self.train = {"success": 0, "episodes": 0}
                self.last_eval, self.last_eval_steps = time.monotonic(), self.num_timesteps

    callback = Budget()
    model.learn(total_timesteps=10**12, callback=callback, progress_bar=False)
    evaluate(callback.train)
    env.close()
    summary = {"args": vars(args), "env_steps": int(model.num_timesteps),
               "wall_minutes": round((time.monotonic() - t_start) / 60.0, 3), "final": rows[-1],
               "scene": world.name, "held_out_task_seed": args.seed + 10_000,
               "checkpoint": str(out / "checkpoint")}
    save_json(out / "train.json", summary)
    print(f"checkpoint: {out / 'checkpoint'}  curve: {out / 'curve.csv'}, {out / 'curve.png'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
