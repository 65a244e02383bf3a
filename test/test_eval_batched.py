"""Batched inference (``airplay eval --batch N``): a batch's forward equals N forwards of one, bit
for bit, and episodes flown N at a time on the vector environment end exactly as one at a time.

Tiny untrained policies (inference does not care about training) on a sparse synthetic scene
whose camera renders 32 x 32: the episodes are short (collisions, leaving the region) and their
statuses and lengths differ, which is what the comparisons need.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from airplay.cli import main
from airplay.eval.batched import fly_batched
from airplay.eval.episode_jobs import EpisodeJob, clear_cache, fly_job
from airplay.eval.runner import RUN_FIELDS, EvalConfig
from airplay.policies.batched import BatchedPolicy
from airplay.policies.checkpoint import save_policy
from airplay.policies.observation import ObservationHistory
from airplay.policies.train import build_policy
from helpers.small_policy import scene_with_camera

SIZE = 32
TINY = {"backbone": "small", "backbone_width": 8, "image_size": SIZE}
POLICIES = {
    "cnn_bc": ("cnn_bc", "pointgoal", {"image_features": 32, "hidden_dim": 32}),
    "act": ("act", "pointgoal", {"dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1,
                                 "n_vae_encoder_layers": 1, "chunk_size": 10, "execution_horizon": 6}),
    "act_ensemble_imagegoal": ("act", "imagegoal", {"dim_model": 32, "n_heads": 2, "dim_feedforward": 64,
                                                    "n_encoder_layers": 1, "n_vae_encoder_layers": 1,
                                                    "chunk_size": 10, "execution_horizon": 1, "adapter": "ensemble",
                                                    "goal": "image"}),
    "dp": ("dp", "pointgoal", {"down_dims": (16, 32), "image_features": 16, "step_embed_dim": 16,
                               "num_inference_steps": 3, "chunk_size": 8, "execution_horizon": 4}),
}
EPISODES, SEED = 4, 1


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """torch and numba on one thread each, as ``airplay eval`` runs a learned policy: two spinning
    pools on a busy 2-core machine made one of these tests 30x slower."""
    from airplay.threads import compute_threads

    with compute_threads(1, torch_too=True):
        yield


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return scene_with_camera(tmp_path_factory.mktemp("batched") / "indoor_3", 3, SIZE)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched_policies")
    out = {}
    for key, (kind, _, fields) in POLICIES.items():
        torch.manual_seed(0)
        policy = build_policy(kind, **TINY, **fields)
        if kind == "act":  # forward at ~1 m/s (normalized 0 is the mean): episodes of seconds, not the time limit
            with torch.no_grad():
                policy.head.bias[0] += 1.0
        out[key] = save_policy(policy, root / key)
    return out


def _config(key, scene, checkpoints, **changes) -> EvalConfig:
    kind, setting, _ = POLICIES[key]
    return EvalConfig(scenes=[scene], policy=kind, setting=setting, episodes=EPISODES, seed=SEED,
                      render_backend="cpu", checkpoint=str(checkpoints[key]), **changes)


def _observations(rng, n: int, steps: int) -> list[list[dict]]:
    return [[{"rgb": rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8), "goal_image":
              rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8), "state": rng.normal(size=13).astype(np.float32),
              "goal": rng.normal(size=3).astype(np.float32)} for _ in range(steps)] for _ in range(n)]


@pytest.mark.parametrize("key", sorted(POLICIES))
def test_a_batch_forward_equals_forwards_of_one_bit_for_bit(key):
    kind, _, fields = POLICIES[key]
    torch.manual_seed(1)
    policy = build_policy(kind, **TINY, **fields).eval()
    c = policy.config
    histories = []
    for frames in _observations(np.random.default_rng(0), 5, c.n_obs_steps):
        h = ObservationHistory(c.n_obs_steps, c.image_size, c.goal)
        for obs in frames:
            h.append(obs)
        histories.append(h.batch())
    ones = torch.cat([policy.predict_batch(b, [torch.Generator().manual_seed(7)]) for b in histories])
    batch = {k: torch.cat([b[k] for b in histories]) for k in histories[0]}
    together = policy.predict_batch(batch, [torch.Generator().manual_seed(7) for _ in histories])
    assert torch.equal(together, ones)
    # torch's batched kernels as they are: equal to ~1e-6 relative, the tolerance docs/policies.md states
    loose = policy.predict_batch(batch, [torch.Generator().manual_seed(7) for _ in histories], exact=False)
    torch.testing.assert_close(loose, ones, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("key", sorted(POLICIES))
def test_batched_acting_serves_each_episode_its_own_commands(key):
    """N slots stepped together (chunk queues, temporal ensembles, DP noise per episode) give each
    slot the commands of the single policy on that episode, including slots reset mid-way."""
    kind, _, fields = POLICIES[key]
    torch.manual_seed(2)
    policy = build_policy(kind, **TINY, **fields).eval()
    episodes = _observations(np.random.default_rng(1), 3, 12)
    singles = []
    for frames in episodes:
        policy.reset()
        singles.append(np.stack([policy.select_action(o) for o in frames]))
    actor = BatchedPolicy(policy, 3)
    for slot in range(3):
        actor.reset(slot)
    got = [[] for _ in range(3)]
    for t in range(12):
        slots = [0, 1, 2] if t >= 4 else [0, 2]  # slot 1 starts 4 steps late
        if t == 4:
            actor.reset(1)
        obs = {k: np.stack([episodes[s][t if s != 1 else t - 4][k] for s in slots]) for k in episodes[0][0]}
        for s, command in zip(slots, actor.act(slots, obs)):
            got[s].append(command)
    for s in (0, 2):
        np.testing.assert_array_equal(np.stack(got[s]), singles[s])
    np.testing.assert_array_equal(np.stack(got[1]), singles[1][:8])


@pytest.mark.parametrize("key", sorted(POLICIES))
def test_episodes_flown_in_batches_end_as_one_at_a_time(key, scene, checkpoints):
    cfg = _config(key, scene, checkpoints)
    try:
        single = {r["index"]: r for r in (fly_job(EpisodeJob(cfg, str(scene), k)) for k in range(EPISODES))}
        batched = {r["index"]: r for r in fly_batched(cfg, str(scene), range(EPISODES), 3)}
    finally:
        clear_cache()
    assert sorted(batched) == list(range(EPISODES))
    for k in range(EPISODES):
        assert batched[k]["result"] == single[k]["result"], k
        assert batched[k]["steps"] == single[k]["steps"]
        np.testing.assert_array_equal(batched[k]["trajectory"], single[k]["trajectory"])
    assert len({r["result"].steps for r in single.values()}) > 1  # the episodes differ


def test_non_finite_commands_end_episodes_as_policy_errors_as_one_at_a_time(scene, tmp_path):
    torch.manual_seed(0)
    policy = build_policy("cnn_bc", **TINY, **POLICIES["cnn_bc"][2])
    with torch.no_grad():
        policy.head[-1].bias[0] = float("nan")
    cfg = EvalConfig(scenes=[scene], episodes=3, seed=SEED, render_backend="cpu", policy="cnn_bc",
                     checkpoint=str(save_policy(policy, tmp_path / "nan")))
    try:
        single = [fly_job(EpisodeJob(cfg, str(scene), k)) for k in range(3)]
        batched = sorted(fly_batched(cfg, str(scene), range(3), 2), key=lambda r: r["index"])
    finally:
        clear_cache()
    for a, b in zip(single, batched):
        assert a["result"] == b["result"] and b["result"].status == "policy_error"
        assert "non-finite command" in b["result"].error


def test_a_policy_that_raises_in_a_batch_flies_the_rest_one_at_a_time(scene, checkpoints, monkeypatch):
    cfg = _config("cnn_bc", scene, checkpoints)
    calls = []

    def fail(self, slots, obs):
        calls.append(len(slots))
        raise RuntimeError("boom")
    try:
        single = {r["index"]: r["result"] for r in (fly_job(EpisodeJob(cfg, str(scene), k)) for k in range(3))}
        monkeypatch.setattr(BatchedPolicy, "act", fail)
        batched = {r["index"]: r["result"] for r in fly_batched(cfg, str(scene), range(3), 2)}
    finally:
        clear_cache()
    assert calls == [2] and batched == single


def _summary(out) -> dict:
    doc = json.loads((out / "summary.json").read_text())
    for key in RUN_FIELDS:
        doc["meta"].pop(key)
    return doc


def test_eval_batch_writes_the_files_of_one_at_a_time(scene, checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    runs = {}
    for name, extra in (("1", ()), ("4", ()), ("pool", ("--workers", "2"))):
        out = tmp_path / name
        assert main(["eval", "--policy", "dp", "--checkpoint", str(checkpoints["dp"]), "--scenes", str(scene),
                     "--episodes", str(EPISODES), "--seed", str(SEED), "--backend", "cpu", "--out", str(out),
                     "--bootstrap", "50", "--no-progress", "--batch", "1" if name == "1" else "2" if extra else "4",
                     *extra]) == 0
        runs[name] = out
    for name in ("4", "pool"):
        assert (runs[name] / "episodes.jsonl").read_bytes() == (runs["1"] / "episodes.jsonl").read_bytes()
        assert _summary(runs[name]) == _summary(runs["1"])
    pool = json.loads((runs["pool"] / "summary.json").read_text())["meta"]["execution"]
    assert pool["engine"] == "process pool (2 workers), batches of 2" and pool["batch"] == 2
    meta = json.loads((runs["4"] / "summary.json").read_text())["meta"]
    assert meta["execution"] == {"engine": "in-process, batches of 4", "workers": 1, "batch": 4,
                                 "resumed_episodes": 0}
    assert "batch" not in json.loads((runs["1"] / "summary.json").read_text())["meta"]["execution"]
    assert main(["eval", "--policy", "dp", "--checkpoint", str(checkpoints["dp"]), "--scenes", str(scene),
                 "--out", str(tmp_path / "bad"), "--batch", "0", "--no-progress"]) == 2


def test_dagger_rollouts_flown_in_batches_are_the_files_of_one_at_a_time(scene, checkpoints, tmp_path):
    """The policy flies, the field expert labels every visited state, with probability beta the label
    is executed: the batched rollouts' files hold the same frames, labels, commands and status."""
    from airplay.policies import dagger as dg
    from airplay.policies import dagger_rollouts

    beta = 0.1
    jobs = {}
    for how in ("one", "batch"):
        (tmp_path / how).mkdir()
        jobs[how] = [dg.RolloutJob(str(scene), k, EPISODES, SEED, str(checkpoints["cnn_bc"]), 1, beta, None, "cpu",
                                   str(tmp_path / how / f"{k}.npz")) for k in range(EPISODES)]
    try:
        single = [dg.rollout(job) for job in jobs["one"]]
        batched = sorted(dg.rollout_batch(dg.RolloutBatch(tuple(jobs["batch"]), 3)), key=lambda r: r["task_id"])
    finally:
        dagger_rollouts._CACHE.clear()
    assert [(r["task_id"], r["status"], r["steps"]) for r in sorted(single, key=lambda r: r["task_id"])] == \
        [(r["task_id"], r["status"], r["steps"]) for r in batched]
    for a, b in zip(jobs["one"], jobs["batch"]):
        with np.load(a.path) as za, np.load(b.path) as zb:
            assert sorted(za.files) == sorted(zb.files)
            for key in za.files:
                np.testing.assert_array_equal(za[key], zb[key], err_msg=key)
