"""Stable-Baselines3 on the vector environment (airplay.rl.sb3), the ppo_depth policy, and the PPO
example end to end: SB3's env checker on a registered id, the VecEnv adapter step for step
against AirPlayVectorEnv, the exported actor against SB3's own, and a short PPO run whose
checkpoint `airplay eval` flies."""

from __future__ import annotations

import csv
import importlib.util
import json
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import busy_loops

pytest.importorskip("stable_baselines3")
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor  # noqa: E402
from stable_baselines3.common.vec_env.util import obs_space_info  # noqa: E402

import airplay.gym  # noqa: E402,F401
from airplay.cli import main as airplay_main  # noqa: E402
from airplay.eval.results import read_episodes  # noqa: E402
from airplay.eval.runner import run_episode  # noqa: E402
from airplay.policies import make_policy  # noqa: E402
from airplay.policies.base import ConfigError  # noqa: E402
from airplay.policies.checkpoint import load_policy, save_policy  # noqa: E402
from airplay.policies.ppo_depth import PPODepthConfig, PPODepthPolicy  # noqa: E402
from airplay.rl.sb3 import AirPlaySB3VecEnv, export_ppo_depth, ppo_policy_kwargs  # noqa: E402
from airplay.tasks.protocol import load_protocol  # noqa: E402
from airplay.tasks.sampler import sample_tasks  # noqa: E402
from airplay.world import World  # noqa: E402
from airplay.world.env import AirPlayEnv  # noqa: E402
from airplay.world.vector_env import AirPlayVectorEnv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SIZE = 16
OBS = ("depth", "goal")


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    protocol = load_protocol()  # a 0.2 m SDF and grid, built in ~1 s (as test_vector_env.py)
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(indoor_2, protocol=protocol, cache_dir=scene_cache).with_camera_size(SIZE, SIZE)


@pytest.fixture(scope="module")
def short_tasks(world):
    """Tasks of 0.3 s (15 steps), so that every sub-environment ends and restarts within a test."""
    return [replace(t, time_limit_s=0.3) for t in sample_tasks(world.scene, world.grid, 4, 0, "pointgoal",
                                                                  world.protocol)]


def test_sb3_env_checker_on_a_registered_id(world):
    env = gym.make("airplay/PointGoal-v0", scene=world, observations=OBS, num_tasks=2, render_backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3's advice on a non-normalized action space (the adapter normalizes)
        sb3_check_env(env.unwrapped, warn=True, skip_render_check=True)


def test_adapter_refuses_the_vln_instruction(world):
    venv = gym.make_vec("airplay/VLN-v0", num_envs=1, scene=world, num_tasks=1, observations=("depth", "instruction"))
    with pytest.raises(ValueError, match="observations: SB3's VecEnv takes arrays"):
        AirPlaySB3VecEnv(venv)
    venv.close()


def test_adapter_equals_the_vector_env_step_for_step(world, short_tasks):
    n = 3
    kwargs = dict(tasks=short_tasks, observations=OBS, render_backend="cpu")
    raw = AirPlayVectorEnv(n, world, threads=1, **kwargs)
    sb3 = AirPlaySB3VecEnv(AirPlayVectorEnv(n, world, threads=2, **kwargs))
    assert sb3.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    keys, shapes, dtypes = obs_space_info(sb3.observation_space)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-0.2, 0.2, (40, n, 4)).astype(np.float32)  # slow: no collision within 0.3 s

    def same(a: dict, b: dict, what: str) -> None:
        for key in OBS:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{what}: {key}")

    sb3.seed(5)
    got = sb3.reset()
    want, _ = raw.reset(seed=5)
    same(got, want, "reset")
    assert set(keys) == set(OBS)
    for key in keys:
        assert got[key].shape == (n, *shapes[key]) and got[key].dtype == dtypes[key]
    restarts = 0
    for k in range(len(actions)):
        sb3.step_async(actions[k])
        got, rewards, dones, infos = sb3.step_wait()
        want, r, term, trunc, info = raw.step(sb3.env_commands(actions[k]))
        np.testing.assert_array_equal(rewards, r.astype(np.float32), err_msg=f"step {k}: rewards")
        np.testing.assert_array_equal(dones, term | trunc, err_msg=f"step {k}: dones")
        assert len(infos) == n and [i["status"] for i in infos] == list(info["status"])
        for i in range(n):
            assert sb3.observation_space.contains({key: got[key][i] for key in OBS}), f"step {k}, env {i}"
        if not dones.any():
            same(got, want, f"step {k}")
            continue
        assert dones.all(), "the tasks are alike: every sub-environment times out at the same step"
        assert k in (14, 29), f"step {k}: the 0.3 s tasks end every 15 steps (SB3 restarts in the same step)"
        for i in range(n):
            assert infos[i]["TimeLimit.truncated"] and infos[i]["status"] == "timeout"
            same({key: infos[i]["terminal_observation"][key][None] for key in OBS},
                 {key: want[key][i][None] for key in OBS}, f"step {k}, terminal observation {i}")
        # SB3 restarts now; the vector environment on its next step (ignoring the action).
        want, r, term, trunc, info = raw.step(np.zeros((n, 4)))
        assert (r == 0).all() and (info["steps"] == 0).all()
        same(got, want, f"step {k}: the new episodes' first observations")
        restarts += 1
    assert restarts == 2
    sb3.close()
    raw.close()


@pytest.mark.parametrize("shared_critic", [True, False], ids=["shared-critic", "own-critic"])
def test_exported_actor_acts_as_sb3s_and_round_trips_a_checkpoint(world, short_tasks, tmp_path, shared_critic):
    venv = AirPlaySB3VecEnv(AirPlayVectorEnv(2, world, tasks=short_tasks, observations=OBS, render_backend="cpu"))
    space = venv.venv.single_action_space
    config = PPODepthConfig(image_size=SIZE, action_low=tuple(map(float, space.low)),
                            action_high=tuple(map(float, space.high)))
    model = PPO("MultiInputPolicy", venv, n_steps=8, batch_size=16,
                policy_kwargs=ppo_policy_kwargs(config, shared_critic=shared_critic), seed=0, device="cpu")
    venv.seed(3)
    obs = venv.reset()
    sb3_actions, _ = model.predict(obs, deterministic=True)
    policy = export_ppo_depth(model, config)
    want = venv.env_commands(sb3_actions)
    with torch.no_grad():
        mine = policy.commands(torch.as_tensor(obs["depth"]), torch.as_tensor(obs["goal"])).numpy()
    np.testing.assert_allclose(mine, want, rtol=1e-5, atol=1e-5)
    folder = save_policy(policy, tmp_path / "ckpt")
    loaded = make_policy("ppo_depth", world, checkpoint=str(folder))
    assert loaded.config == config and json.loads((folder / "config.json").read_text())["type"] == "ppo_depth"
    loaded.reset()
    one = {"depth": obs["depth"][1], "goal": obs["goal"][1]}
    np.testing.assert_allclose(loaded.select_action(one), want[1], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="depth"):
        load_policy(folder).select_action({"goal": obs["goal"][0]})
    with pytest.raises(ValueError, match="checkpoint"):
        make_policy("ppo_depth", world)
    venv.close()


def test_a_command_envelope_scales_actions_and_the_exported_actor_matches(world, short_tasks):
    low, high = (-2.0, -2.0, -1.0, -1.0), (2.0, 2.0, 1.0, 1.0)
    venv = AirPlaySB3VecEnv(AirPlayVectorEnv(2, world, tasks=short_tasks, observations=OBS, render_backend="cpu"),
                            command_low=low, command_high=high)
    np.testing.assert_allclose(venv.env_commands(np.array([[1, -1, 0.5, -0.5]] * 2)), [[2, -2, 0.5, -0.5]] * 2)
    config = PPODepthConfig(image_size=SIZE, action_low=low, action_high=high)
    model = PPO("MultiInputPolicy", venv, n_steps=8, batch_size=16, seed=0, device="cpu",
                policy_kwargs={**ppo_policy_kwargs(config), "log_std_init": -1.0})
    venv.seed(3)
    obs = venv.reset()
    sb3_actions, _ = model.predict(obs, deterministic=True)
    with torch.no_grad():
        mine = export_ppo_depth(model, config).commands(torch.as_tensor(obs["depth"]),
                                                       torch.as_tensor(obs["goal"])).numpy()
    np.testing.assert_allclose(mine, venv.env_commands(sb3_actions), rtol=1e-5, atol=1e-5)
    # a config whose envelope is not the environment's would fly other commands: refused, also
    # through SB3's wrappers
    model.set_env(VecMonitor(venv))
    wider = PPODepthConfig(image_size=SIZE, action_low=(-5.0, -5.0, -1.0, -1.0), action_high=high)
    with pytest.raises(ValueError, match="action_low .* command_low"):
        export_ppo_depth(model, wider)
    export_ppo_depth(model, config)  # the matching one still exports
    venv.close()
    space = AirPlayVectorEnv(1, world, tasks=short_tasks, observations=OBS, render_backend="cpu")
    for kwargs, message in (({"command_high": (9.0, 2.0, 1.0, 1.0)}, "command_high .* outside"),
                            ({"command_low": (-1.0, -1.0)}, "command_low must be 4 finite"),
                            ({"command_low": (0.0, 0.0, 0.0, 0.0), "command_high": (1.0, 1.0, 0.0, 1.0)},
                             "must be below command_high")):
        with pytest.raises(ValueError, match=message):
            AirPlaySB3VecEnv(space, **kwargs)
    space.close()


class CommandLog:
    """An episode observer (as ``airplay eval --view`` has): keeps the command of every control period."""

    def episode_started(self, env, task, obs):
        self.commands = []

    def episode_step(self, env, command, obs):
        self.commands.append(np.array(command))

    def episode_ended(self, env, flown):
        self.flown = flown


def test_action_repeat_checkpoint_holds_each_command_that_many_periods(world, short_tasks, tmp_path):
    """A ppo_depth checkpoint exported from training at action_repeat=4 is flown by the evaluator's
    episode loop (make_policy + run_episode, as airplay eval) with a new command every 4 control
    periods, the same flight as the training environment's 4-period steps; --execution-horizon 1
    still overrides it."""
    venv = AirPlaySB3VecEnv(AirPlayVectorEnv(2, world, tasks=short_tasks, observations=OBS, render_backend="cpu",
                                             action_repeat=4))
    space = venv.venv.single_action_space
    config = PPODepthConfig(image_size=SIZE, action_low=tuple(map(float, space.low)),
                            action_high=tuple(map(float, space.high)), action_repeat=4)
    assert config.execution_horizon == 4 and PPODepthConfig.from_dict(config.to_dict()) == config
    model = PPO("MultiInputPolicy", venv, n_steps=8, batch_size=16, policy_kwargs=ppo_policy_kwargs(config),
                seed=0, device="cpu")
    with pytest.raises(ValueError, match="action_repeat"):
        export_ppo_depth(model, config.replace(action_repeat=1, execution_horizon=1))
    folder = save_policy(export_ppo_depth(model, config), tmp_path / "ckpt")
    saved = json.loads((folder / "config.json").read_text())["config"]
    assert (saved["action_repeat"], saved["execution_horizon"]) == (4, 4)
    task = replace(short_tasks[0], time_limit_s=0.6)  # 30 periods
    log = CommandLog()
    flights = {}
    for h in (None, 1):
        policy = make_policy("ppo_depth", world, checkpoint=str(folder), execution_horizon=h)
        assert policy.config == (config if h is None else config.replace(execution_horizon=1))
        env = AirPlayEnv(world, "pointgoal", tasks=[task], render_backend="cpu", observations=OBS)
        flights[h] = run_episode(env, policy, task, observer=log)
        commands = np.array(log.commands)
        assert len(commands) >= 9, "the episode should last a few decisions"
        changed = np.any(commands[1:] != commands[:-1], axis=1)
        period = np.arange(1, len(commands))
        if h is None:
            assert changed.tolist() == (period % 4 == 0).tolist(), "a new command every 4 periods, none between"
        else:
            assert changed.all(), "execution_horizon=1: a new command every period"
    # The same flight as the environment stepping 4 periods per decision (and rendering once per decision).
    policy = make_policy("ppo_depth", world, checkpoint=str(folder), execution_horizon=1)
    env = AirPlayEnv(world, "pointgoal", tasks=[task], render_backend="cpu", observations=OBS, action_repeat=4)
    stepped = run_episode(env, policy, task)
    assert (stepped.status, stepped.steps) == (flights[None].status, flights[None].steps)
    np.testing.assert_array_equal(stepped.trajectory, flights[None].trajectory)
    venv.close()


def _example():
    spec = importlib.util.spec_from_file_location("ppo_pointgoal", REPO / "examples" / "ppo_pointgoal.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ppo_example_trains_and_airplay_eval_flies_its_checkpoint(indoor_1, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    scene = indoor_1
    out = tmp_path / "ppo"
    assert _example().main(["--scene", str(scene), "--max-steps", "256", "--num-envs", "2", "--image-size", "16",
                            "--n-steps", "64", "--batch-size", "64", "--epochs", "1", "--train-tasks", "2",
                            "--curriculum", "2", "--eval-tasks", "1", "--threads", "1", "--torch-threads", "1",
                            "--expert-decisions", "8", "--bc-epochs", "1", "--dagger-rounds", "1",
                            "--critic-warmup", "128", "--bc-coef", "1", "--bc-half-life", "128",
                            "--critic-features", "own", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "held-out SR" in printed and "curriculum: 2 stages of 1, 2 tasks" in printed
    assert "warm start: the field expert flew 8 decisions" in printed and "clone: epoch 1/1" in printed
    assert "DAgger round 1/1: the clone flew 8 decisions" in printed and "cloned 16 decisions" in printed
    assert (out / "curve.csv").read_text().startswith("minutes,env_steps,eval_sr")
    with open(out / "curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2  # after the warm start, at the end
    # the first stage (the shorter task); after the warm start (on all training tasks) it is back
    assert [r["train_pool"] for r in rows] == ["1", "1"]
    assert int(rows[0]["env_steps"]) == 0 and int(rows[1]["env_steps"]) >= 256
    # the first update (128 decisions) trained the critic alone; the second, at 256, the actor with the anchor
    # at half its weight (128 decisions past the warm-up, --bc-half-life 128)
    assert [(r["actor_frozen"], float(r["bc_weight"])) for r in rows] == [("True", 0.0), ("False", 0.5)]
    assert (out / "curve.png").stat().st_size > 1000
    summary = json.loads((out / "train.json").read_text())
    assert summary["env_steps"] >= 256 and summary["final"]["eval_episodes"] == 1
    assert {p.name for p in (out / "checkpoint").iterdir()} == {"config.json", "model.safetensors"}
    saved = json.loads((out / "checkpoint" / "config.json").read_text())["config"]
    assert summary["args"]["action_repeat"] == 5 and summary["args"]["gamma"] == 0.99
    assert (saved["action_repeat"], saved["execution_horizon"]) == (5, 5), "the default: a decision every 0.1 s"
    results = tmp_path / "eval"
    assert airplay_main(["eval", "--policy", "ppo_depth", "--checkpoint", str(out / "checkpoint"), "--scenes",
                         str(scene), "--episodes", "1", "--no-images", "--bootstrap", "10", "--no-progress",
                         "--out", str(results)]) == 0
    (episode,) = read_episodes(results)
    assert episode.policy == "ppo_depth" and episode.status in {"success", "collision", "out_of_bounds", "timeout"}


@pytest.mark.slow  # two runs of the example as processes (~40 s)
def test_a_step_budget_gives_the_same_checkpoint_and_curve_under_load_and_any_render_threads(indoor_1, tmp_path):
    """``--minutes 0 --max-steps N --eval-every-steps K``: the run does not depend on the machine's
    speed. The command twice, as a user runs it: with 1 render thread on a quiet machine, and with
    2 threads beside a busy loop: the same checkpoint bytes and the same curve rows, minutes aside.
    OpenMP (torch's and numba's parallel regions) on one thread: with two, one run in three or four
    ends with weights a few ulp apart (measured beside a busy machine)."""
    import os
    import subprocess
    import sys

    scene = indoor_1
    env = {**os.environ, "AIRPLAY_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}

    def run(out: Path, threads: int) -> tuple[bytes, list[dict]]:
        subprocess.run([sys.executable, str(REPO / "examples" / "ppo_pointgoal.py"), "--scene", str(scene),
                        "--minutes", "0", "--max-steps", "384", "--eval-every-steps", "128", "--num-envs", "2",
                        "--image-size", "16", "--n-steps", "64", "--batch-size", "64", "--epochs", "1",
                        "--train-tasks", "2", "--curriculum", "2", "--eval-tasks", "1", "--threads", str(threads),
                        "--torch-threads", "1", "--expert-decisions", "8", "--bc-epochs", "1",
                        "--critic-warmup", "128", "--bc-coef", "1", "--bc-half-life", "128", "--out", str(out)],
                       env=env, check=True, capture_output=True, timeout=600)
        with open(out / "curve.csv", newline="") as f:
            rows = [{k: v for k, v in r.items() if k != "minutes"} for r in csv.DictReader(f)]
        return (out / "checkpoint" / "model.safetensors").read_bytes(), rows

    quiet = run(tmp_path / "quiet", threads=1)
    with busy_loops(1):
        busy = run(tmp_path / "busy", threads=2)
    # after the warm start, after the rollouts that end at 128 and 256 decisions, at the end (384)
    assert [int(r["env_steps"]) for r in quiet[1]] == [0, 128, 256, 384]
    assert busy[1] == quiet[1]
    assert busy[0] == quiet[0], "the same weights, to the byte"


def test_ppo_example_refuses_a_budget_it_cannot_keep(capsys):
    example = _example()
    for argv, named in ((["--minutes", "0"], "--minutes must be > 0, or 0 with --max-steps > 0"),
                        (["--minutes", "-1", "--max-steps", "10"], "--minutes must be > 0"),
                        (["--eval-every-steps", "-5"], "--eval-every-steps >= 0")):
        with pytest.raises(SystemExit):
            example.parse_args(argv)
        assert named in capsys.readouterr().err


def test_ppo_depth_reads_any_camera_size_and_checks_its_config():
    policy = PPODepthPolicy(PPODepthConfig())  # 64x64, the example's default
    policy.reset()
    for h, w in ((64, 64), (224, 224), (48, 80)):
        command = policy.select_action({"depth": np.full((h, w, 1), 3.0, np.float32),
                                        "goal": np.array([5.0, 1.0, 0.0], np.float32)})
        assert command.shape == (4,) and np.isfinite(command).all()
        assert (command >= np.array(policy.config.action_low) - 1e-6).all()
        assert (command <= np.array(policy.config.action_high) + 1e-6).all()
    with pytest.raises(ConfigError, match="action_high"):
        PPODepthConfig(action_low=(0.0,) * 4, action_high=(0.0,) * 4)
    with pytest.raises(ConfigError, match="image_size"):
        PPODepthConfig(image_size=4)
    with pytest.raises(ConfigError, match="depth_clip_m"):
        PPODepthConfig(depth_clip_m=float("nan"))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="action_repeat"):
            PPODepthConfig(action_repeat=bad)
    old = {**PPODepthConfig().to_dict(), "execution_horizon": 1}
    del old["action_repeat"]  # a checkpoint written before the field: trained one period per step
    assert PPODepthConfig.from_dict(old) == PPODepthConfig()


def test_ppo_example_curriculum_pools_shortest_first(capsys):
    """--curriculum STAGES: pools of the training tasks sorted by shortest path, each the previous
    plus the next part, the last all of them; 0 stages: one pool; a bad count is refused by name."""
    from dataclasses import dataclass

    @dataclass
    class T:
        task_id: str
        astar_length_m: float

    tasks = [T(f"t{k}", length) for k, length in enumerate([9.0, 3.0, 27.0, 5.0, 12.0, 3.0, 40.0])]
    example = _example()
    pools = example.curriculum_pools(tasks, 3)
    assert [[t.astar_length_m for t in q] for q in pools] == [
        [3.0, 3.0], [3.0, 3.0, 5.0, 9.0, 12.0], [3.0, 3.0, 5.0, 9.0, 12.0, 27.0, 40.0]]
    assert [t.task_id for t in pools[0]] == ["t1", "t5"]  # ties by id: the same pools every run
    assert example.curriculum_pools(tasks, 0) == [tasks]
    with pytest.raises(SystemExit):
        example.parse_args(["--train-tasks", "4", "--curriculum", "5"])
    assert "--curriculum must be in 0..--train-tasks (4), got 5" in capsys.readouterr().err
    args = example.parse_args([])
    assert (args.curriculum, args.train_tasks, args.promote_sr, args.promote_episodes) == (8, 256, 0.5, 100)
    assert (args.expert_decisions, args.expert_noise, args.bc_epochs, args.dagger_rounds) == (30000, 0.3, 8, 0)
    assert (args.critic_warmup, args.bc_coef, args.bc_half_life, args.critic_features) == (
        100_000, 1.0, 500_000.0, "shared"), "with the warm start: the critic warm-up and the anchor"
    args = example.parse_args(["--expert-decisions", "0"])
    assert (args.critic_warmup, args.bc_coef) == (0, 0.0), "from scratch: plain PPO"
    args = example.parse_args(["--critic-warmup", "0", "--bc-coef", "0"])
    assert (args.expert_decisions, args.critic_warmup, args.bc_coef) == (30000, 0, 0.0), "PPO from the clone"
    with pytest.raises(SystemExit):
        example.parse_args(["--expert-decisions", "0", "--bc-coef", "1"])
    assert "--critic-warmup and --bc-coef fine-tune a warm start" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse_args(["--bc-half-life", "0"])
    assert "--bc-half-life > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        example.parse_args(["--expert-decisions", "0", "--dagger-rounds", "2"])
    assert "--dagger-rounds must be >= 0 and needs --expert-decisions > 0, got 2" in capsys.readouterr().err
