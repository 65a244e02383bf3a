"""The field expert on the vector environment (airplay.world.vector_expert) and the PPO warm start
(airplay.rl.warmstart): the batched expert gives each row the single field expert's command for
that vehicle's state and task, rollouts record its clean labels and are reproducible, returns are
discounted per episode, and a PPO model cloned from a few expert flights flies those tasks to the
goal (its exported ppo_depth actor, through airplay's episode loop); PPO's fine-tuning of the clone
(airplay.rl.anchor) freezes the actor during the critic warm-up and keeps it near the
demonstrations with the anchor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

pytest.importorskip("stable_baselines3")
from stable_baselines3 import PPO  # noqa: E402

from airplay.eval.runner import run_episode  # noqa: E402
from airplay.policies.ppo_depth import PPODepthConfig  # noqa: E402
from airplay.rl.sb3 import AirPlaySB3VecEnv, export_ppo_depth, ppo_policy_kwargs  # noqa: E402
from airplay.rl.anchor import AnchoredPPO  # noqa: E402
from airplay.rl.warmstart import (Demonstrations, clone_into, discounted_returns,  # noqa: E402
                                   expert_rollouts)
from airplay.scene.synthetic import make_scene  # noqa: E402
from airplay.tasks.field_expert import FieldExpert  # noqa: E402
from airplay.tasks.protocol import load_protocol  # noqa: E402
from airplay.tasks.sampler import sample_tasks  # noqa: E402
from airplay.world import World  # noqa: E402
from airplay.world.env import AirPlayEnv  # noqa: E402
from airplay.world.vector_env import AirPlayVectorEnv  # noqa: E402
from airplay.world.vector_expert import VectorFieldExpert  # noqa: E402

SIZE = 16
OBS = ("depth", "goal")
LOW, HIGH = (-2.0, -2.0, -1.0, -1.0), (2.0, 2.0, 1.0, 1.0)


def _world(root, seed: int) -> World:
    make_scene("indoor", seed, root / f"indoor_{seed}", gaussians_per_m2=4, name=f"indoor_{seed}")
    protocol = load_protocol()  # a 0.2 m SDF and grid, built in ~1 s (as test_vector_env.py)
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(root / f"indoor_{seed}", protocol=protocol, cache_dir=root / "cache").with_camera_size(SIZE,
                                                                                                              SIZE)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmstart")
    return _world(root, 2), _world(root, 3)


@pytest.fixture(scope="module")
def tasks(worlds):
    """Per scene, 3 PointGoal tasks of 3-7 m shortest path (the expert's episodes end within a test)."""
    out = []
    for w in worlds:
        pool = sample_tasks(w.scene, w.grid, 40, 0, "pointgoal", w.protocol)
        out.append([t for t in pool if 3.0 <= t.astar_length_m <= 7.0][:3])
        assert len(out[-1]) == 3, f"{w.name}: too few short tasks"
    return out


def _sb3_env(world, tasks, n=4, **kwargs) -> AirPlaySB3VecEnv:
    venv = AirPlayVectorEnv(n, world, observations=OBS, tasks=tasks, render_backend="cpu", threads=1,
                            action_repeat=5, progress="geodesic", **kwargs)
    return AirPlaySB3VecEnv(venv, command_low=LOW, command_high=HIGH)


def test_vector_expert_gives_each_row_the_single_field_experts_command(worlds, tasks):
    """Two scenes, three rows: each row's command is that of a FieldExpert reset on the row's task
    and asked with the row's 13-D state (position and quaternion), at every step."""
    venv = AirPlayVectorEnv(3, list(worlds), observations=("state", "goal"), tasks=list(tasks), render_backend="cpu",
                            threads=1)
    by_id = {t.task_id: t for pool in tasks for t in pool}
    singles = [FieldExpert(w.grid, w.sdf, w.vehicle) for w in worlds]
    batched = VectorFieldExpert(venv)
    obs, infos = venv.reset(seed=5)
    rng = np.random.default_rng(0)
    for step in range(12):
        commands = batched.commands()
        assert commands.shape == (3, 4) and commands.dtype == np.float32
        for i in range(3):
            single = singles[int(venv.scene_of[i])]
            single.reset(by_id[infos["task_id"][i]])
            # the observed state is float32: equal to its rounding
            np.testing.assert_allclose(commands[i], single.act_on_state(obs["state"][i])[0], rtol=0, atol=1e-5,
                                       err_msg=f"row {i}, step {step}")
        obs, _, _, _, infos = venv.step(commands + rng.normal(0.0, 0.3, commands.shape).astype(np.float32))
    with pytest.raises(ValueError, match="venv must be an AirPlayVectorEnv"):
        VectorFieldExpert(object())


def test_actions_for_inverts_the_adapters_scaling(worlds, tasks):
    env = _sb3_env(worlds[0], tasks[0], n=2)
    commands = np.array([[1.0, -0.5, 0.25, 0.1], [-2.0, 2.0, -1.0, 1.0]])
    np.testing.assert_allclose(env.env_commands(env.actions_for(commands)), commands, atol=1e-6)
    outside = env.actions_for(np.array([[4.0, -3.0, 0.0, 0.0]] * 2))
    np.testing.assert_array_equal(outside[:, :2], [[1.0, -1.0]] * 2)  # clipped to PPO's [-1, 1]
    raw = AirPlaySB3VecEnv(AirPlayVectorEnv(2, worlds[0], observations=OBS, tasks=tasks[0], render_backend="cpu"),
                           normalize_actions=False)
    with pytest.raises(ValueError, match="normalize_actions"):
        raw.actions_for(commands)


def test_discounted_returns_stop_at_each_episodes_end():
    rewards = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0], [4.0, 5.0]])
    dones = np.array([[False, False], [True, False], [False, True], [False, False]])
    returns, ended = discounted_returns(rewards, dones, 0.5)
    np.testing.assert_allclose(returns[:, 0], [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])
    np.testing.assert_allclose(returns[:, 1], [0 + 0.5 * 1 + 0.25 * 0, 1 + 0.5 * 0, 0, 5])
    np.testing.assert_array_equal(ended, [[True, True], [True, True], [False, True], [False, False]])


def test_rollouts_record_the_experts_clean_labels_and_repeat_with_a_seed(worlds, tasks):
    env = _sb3_env(worlds[0], tasks[0])
    clean = expert_rollouts(env, 40, noise_std=0.0, seed=3)
    noisy = expert_rollouts(env, 40, noise_std=0.5, seed=3)
    again = expert_rollouts(env, 40, noise_std=0.5, seed=3)
    assert len(clean) == len(noisy) == 40 and set(noisy.obs) == set(OBS)
    assert noisy.obs["depth"].shape == (40, SIZE, SIZE, 1) and noisy.actions.shape == (40, 4)
    for key in OBS:
        np.testing.assert_array_equal(noisy.obs[key], again.obs[key])
    np.testing.assert_array_equal(noisy.actions, again.actions)
    np.testing.assert_array_equal(noisy.returns, again.returns)
    assert np.all(np.abs(noisy.actions) <= 1.0)
    # the first decision of each row (same start, same state) gets the same label with and without noise;
    # later the noise has moved the vehicles, and the labels follow the states
    np.testing.assert_array_equal(clean.actions[:4], noisy.actions[:4])
    np.testing.assert_array_equal(clean.obs["depth"][:4], noisy.obs["depth"][:4])
    assert not np.array_equal(clean.obs["depth"][4:], noisy.obs["depth"][4:])
    for bad, match in ((dict(decisions=0), "decisions"), (dict(decisions=8, gamma=0.0), "gamma"),
                       (dict(decisions=8, noise_std=-1.0), "noise_std")):
        with pytest.raises(ValueError, match=match):
            expert_rollouts(env, **bad)


def test_a_pilot_flies_and_the_expert_labels_the_states_it_visits(worlds, tasks):
    """DAgger's rollouts: a pilot that commands a hover keeps every vehicle at its start, so the
    goal it observes does not come nearer; the labels are still the expert's, for those states,
    and equal the labels of the expert's own first decision from the same starts."""
    env = _sb3_env(worlds[0], tasks[0])
    seen = []

    def hover(obs: dict) -> np.ndarray:
        seen.append({k: v.shape for k, v in obs.items()})
        return env.actions_for(np.zeros((4, 4)))

    hovered = expert_rollouts(env, 24, seed=1, pilot=hover)
    own = expert_rollouts(env, 4, seed=1)
    assert seen[0] == {"depth": (4, SIZE, SIZE, 1), "goal": (4, 3)} and len(seen) == 6
    goal = hovered.obs["goal"].reshape(6, 4, 3)
    np.testing.assert_allclose(np.linalg.norm(goal, axis=2), np.linalg.norm(goal[:1], axis=2).repeat(6, 0),
                               atol=0.05)  # hovering: the goal stays as far
    labels = hovered.actions.reshape(6, 4, 4)
    np.testing.assert_allclose(labels, labels[:1].repeat(6, 0), atol=0.05)  # the same state, the same label
    np.testing.assert_array_equal(labels[0], own.actions)
    assert np.abs(labels).max() > 0.3, "the expert asks to move where the pilot hovers"
    both = Demonstrations.concatenate([own, hovered])
    assert len(both) == 28 and both.obs["depth"].shape == (28, SIZE, SIZE, 1)
    np.testing.assert_array_equal(both.actions[4:], hovered.actions)
    with pytest.raises(ValueError, match="nothing to concatenate"):
        Demonstrations.concatenate([])


def test_a_ppo_model_cloned_from_the_expert_flies_its_tasks_to_the_goal(worlds, tasks):
    """The warm start's whole path: expert flights with DART noise -> clone_into SB3 PPO -> the
    exported ppo_depth actor, flown greedily through airplay's episode loop on the same tasks."""
    world, pool = worlds[0], tasks[0]
    env = _sb3_env(world, pool)
    demos = expert_rollouts(env, 1200, noise_std=0.3, seed=0)
    assert demos.episodes >= 6 and demos.successes >= 0.8 * demos.episodes, "the expert reaches its goals"
    config = PPODepthConfig(image_size=SIZE, action_low=LOW, action_high=HIGH, action_repeat=5)
    model = PPO("MultiInputPolicy", env, n_steps=32, policy_kwargs={**ppo_policy_kwargs(config), "log_std_init": -1.0},
                seed=0, device="cpu", verbose=0)
    log_std = model.policy.log_std.detach().clone()
    history = clone_into(model, demos, epochs=20, batch_size=128, lr=2e-3, seed=0)
    assert history[-1] < 0.25 * history[0], f"the actor fits the expert's actions: {history}"
    assert np.array_equal(model.policy.log_std.detach().numpy(), log_std.numpy()), "the exploration noise is kept"
    ended = demos.ended & (demos.returns > 5.0)  # the successful episodes' decisions: +10 at the goal
    values = model.policy.predict_values(model.policy.obs_to_tensor(
        {k: v[ended][:64] for k, v in demos.obs.items()})[0]).detach().numpy().ravel()
    assert np.mean(values) > 2.0, "the critic learned that these states lead to the goal"
    policy = export_ppo_depth(model, config)
    successes = 0
    for task in pool:
        single = AirPlayEnv(world, tasks=[task], observations=OBS, render_backend="cpu", action_repeat=1)
        successes += run_episode(single, policy, task).status == "success"
    assert successes >= 2, (f"{successes}/3 of the training tasks reached (action MSE {history[0]:.3f} -> "
                            f"{history[-1]:.3f}; the expert {demos.successes}/{demos.episodes})")
    with pytest.raises(ValueError, match="no decisions"):
        clone_into(model, Demonstrations({k: v[:0] for k, v in demos.obs.items()}, demos.actions[:0],
                                         demos.returns[:0], demos.ended[:0], 0, 0))


def _anchored(env, shared_critic: bool = True, **kwargs) -> AnchoredPPO:
    config = PPODepthConfig(image_size=SIZE, action_low=LOW, action_high=HIGH, action_repeat=5)
    return AnchoredPPO("MultiInputPolicy", env, n_steps=16, batch_size=32, n_epochs=2, learning_rate=1e-3,
                       policy_kwargs={**ppo_policy_kwargs(config, shared_critic=shared_critic), "log_std_init": -1.0},
                       seed=0, device="cpu", verbose=0, **kwargs)


CRITIC = ("value_net", "mlp_extractor.value_net", "vf_features_extractor")
"""state_dict prefixes of the critic's own layers (its features extractor where it has one)."""


def _actor_state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.policy.state_dict().items() if not k.startswith(CRITIC)}


def _critic_state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.policy.state_dict().items() if k.startswith(CRITIC)}


def _action_mse(model, demos: Demonstrations) -> float:
    obs = model.policy.obs_to_tensor(demos.obs)[0]
    mean = model.policy.get_distribution(obs).distribution.mean.detach().numpy()
    return float(np.mean((mean - demos.actions) ** 2))


@pytest.mark.parametrize("shared_critic", [True, False], ids=["shared-critic", "own-critic"])
def test_the_critic_warmup_trains_the_critic_alone_then_the_actor(worlds, tasks, shared_critic):
    env = _sb3_env(worlds[0], tasks[0])  # 4 rows x 16 steps: 64 decisions per update
    model = _anchored(env, shared_critic=shared_critic, critic_warmup=128)
    actor, critic = _actor_state(model), _critic_state(model)
    model.learn(total_timesteps=128)
    assert [(r["decisions"], r["actor_frozen"]) for r in model.anchor_log] == [(64, True), (128, True)]
    after = _actor_state(model)
    for key, value in actor.items():  # the features extractor shared with the critic included
        assert torch.equal(after[key], value), f"{key} moved during the critic warm-up"
    moved = {k for k, v in _critic_state(model).items() if not torch.equal(v, critic[k])}
    assert "value_net.weight" in moved, "the critic learns during its warm-up"
    if not shared_critic:
        assert any(k.startswith("vf_features_extractor") for k in moved), "with its own encoder"
    assert all(p.requires_grad for p in model.policy.parameters()), "every parameter trains again afterwards"
    model.learn(total_timesteps=64, reset_num_timesteps=False)
    assert model.anchor_log[-1]["actor_frozen"] is False
    assert not torch.equal(model.policy.action_net.weight, actor["action_net.weight"]), "then the actor learns"


def test_the_anchor_keeps_the_fine_tuned_actor_near_the_demonstrations(worlds, tasks):
    """Two clones of the same expert decisions fine-tuned by the same PPO updates, one with the
    anchor: its actor stays nearer the expert's actions; the anchor's weight halves on schedule."""
    env = _sb3_env(worlds[0], tasks[0])
    demos = expert_rollouts(env, 400, noise_std=0.3, seed=0)
    fits = {}
    for coef in (0.0, 1.0):
        model = _anchored(env, bc_coef=coef, bc_half_life=128, demos=demos)
        clone_into(model, demos, epochs=10, batch_size=128, lr=2e-3, seed=0)
        cloned = _action_mse(model, demos)
        model.learn(total_timesteps=256)
        fits[coef] = (cloned, _action_mse(model, demos), model.anchor_log)
    assert fits[0.0][0] == fits[1.0][0], "the same clone before fine-tuning"
    free, anchored = fits[0.0][1], fits[1.0][1]
    assert anchored < 0.7 * free, f"action MSE on the demonstrations: {anchored:.4f} anchored, {free:.4f} free"
    weights = [r["bc_weight"] for r in fits[1.0][2]]
    np.testing.assert_allclose(weights, [0.5 ** (d / 128) for d in (64, 128, 192, 256)])
    assert all(np.isfinite(r["bc_nll"]) for r in fits[1.0][2]) and all(np.isnan(r["bc_nll"]) for r in fits[0.0][2])


def test_anchored_ppo_refuses_bad_arguments(worlds, tasks):
    env = _sb3_env(worlds[0], tasks[0])
    for bad, match in ((dict(bc_coef=-1.0), "bc_coef"), (dict(bc_half_life=0.0), "bc_half_life"),
                       (dict(critic_warmup=-5), "critic_warmup"), (dict(critic_warmup=1.5), "critic_warmup"),
                       (dict(bc_batch_size=0), "bc_batch_size")):
        with pytest.raises(ValueError, match=match):
            _anchored(env, **bad)
    model = _anchored(env, bc_coef=1.0)
    with pytest.raises(ValueError, match="no demonstrations to anchor to"):
        model.learn(total_timesteps=64)
    empty = expert_rollouts(env, 4, seed=0)
    with pytest.raises(ValueError, match="no demonstrations"):
        model.set_demonstrations(Demonstrations({k: v[:0] for k, v in empty.obs.items()}, empty.actions[:0],
                                                empty.returns[:0], empty.ended[:0], 0, 0))
