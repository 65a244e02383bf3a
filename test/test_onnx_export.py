"""``airplay export --onnx`` and the onnxruntime backend: each learned policy (CNN-BC, ACT, DP) exported
from a tiny untrained checkpoint (inference does not care about training; the normalization is set
to statistics far from identity so that it is exercised), its commands equal to torch's within the
export's tolerance (DP with the same seeded noise, ACT's chunk queue and temporal ensembling in
Python), a short in-process episode of CNN-BC ending alike on both backends, files that are
corrupted or of another export refused naming the file, an export over its tolerance leaving
nothing behind, and the command end to end in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.tiny_policies import TINY

from airplay.policies import make_policy
from airplay.policies.checkpoint import load_policy, save_policy
from airplay.policies.observation import ACTION, GOAL, STATE
from airplay.policies.onnx_export import export_onnx
from airplay.policies.onnx_format import SIDECAR, TOLERANCE, OnnxExportError, sha256
from airplay.policies.train import build_policy

KINDS = ("cnn_bc", "act", "dp")
FIELDS = {"cnn_bc": {}, "act": {"state_features": "velocity"}, "dp": {"prediction_type": "epsilon"}}
"""On top of the tiny configurations: ACT reads state features (their normalization is exported),
DP predicts the noise (the paper's, the DDIM inversion outside the graph)."""


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    from airplay.threads import compute_threads

    with compute_threads(1, torch_too=True):
        yield


def _checkpoint(kind: str, folder, **fields):
    torch.manual_seed(0)
    policy = build_policy(kind, **{**TINY[kind], **FIELDS[kind], **fields})
    rng = np.random.default_rng(1)
    stats = {}
    for key, s in zip(policy.normalizer.keys, policy.normalizer.stats.values()):
        d = s.center.numel()
        lo = rng.uniform(-2, -0.5, d)
        stats[key] = {"mean": rng.normal(0, 0.5, d), "std": rng.uniform(0.3, 2.0, d), "min": lo, "max": -lo}
    policy.normalizer.set_stats(stats)
    if kind == "cnn_bc":  # forward at ~1 m/s: an episode of seconds that ends on the cube or the region
        with torch.no_grad():
            policy.head[-1].bias[0] += 1.0
    return save_policy(policy, folder)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """kind -> (checkpoint folder, its export's onnx.json), exported into CHECKPOINT/onnx."""
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for kind in KINDS:
        ckpt = _checkpoint(kind, root / kind)
        out[kind] = (ckpt, export_onnx(ckpt, log=lambda _: None))
    return out


def _obs(rng, size: int = 48) -> dict:
    return {"rgb": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "state": rng.normal(size=13).astype(np.float32), "goal": rng.normal(0, 3, 3).astype(np.float32),
            "depth": np.zeros((size, size, 1), np.float32)}


def _rollout(policy, observations) -> np.ndarray:
    policy.reset()
    return np.stack([policy.select_action(o) for o in observations])


@pytest.mark.parametrize("kind", KINDS)
def test_the_export_records_what_it_needs_and_was_checked(kind, exported):
    ckpt, meta = exported[kind]
    folder = ckpt / "onnx"
    graphs = {"cnn_bc": {"policy"}, "act": {"policy"}, "dp": {"condition", "denoiser"}}[kind]
    assert set(meta["graphs"]) == graphs and json.loads((folder / SIDECAR).read_text()) == json.loads(json.dumps(meta))
    for entry in meta["graphs"].values():
        assert sha256(folder / entry["file"]) == entry["sha256"]
        assert all(i["shape"][0] == "batch" for i in entry["inputs"] + entry["outputs"])
    assert meta["opset"] == 17 and meta["type"] == kind
    assert meta["check"]["tolerance"] == TOLERANCE[kind] and 0 <= meta["check"]["max_abs_error"] <= TOLERANCE[kind]
    assert set(meta["normalization"]) == {ACTION, GOAL} | ({STATE} if kind == "act" else set())
    assert ("sampling" in meta) == (kind == "dp")
    assert not [p.name for p in folder.iterdir() if "partial" in p.name]


@pytest.mark.parametrize("kind", KINDS)
def test_onnxruntime_commands_equal_torch_within_the_tolerance(kind, exported):
    ckpt, meta = exported[kind]
    torch_policy = make_policy(kind, checkpoint=str(ckpt))
    ort_policy = make_policy(kind, checkpoint=str(ckpt), backend="onnxruntime")
    assert type(ort_policy).__name__ == "OnnxPolicy" and ort_policy.config == torch_policy.config
    rng = np.random.default_rng(7)
    steps = 3 * torch_policy.config.execution_horizon  # three chunks through the adapter's queue
    observations = [_obs(rng) for _ in range(steps)]
    a, b = _rollout(torch_policy, observations), _rollout(ort_policy, observations)
    assert np.abs(a - b).max() <= meta["check"]["tolerance"]
    assert np.abs(a[1:] - a[:-1]).max() > 1e-3  # the commands change: the comparison is not trivial
    # the same again after a reset (DP: the noise generator reseeded, the same chunks)
    np.testing.assert_array_equal(_rollout(ort_policy, observations), b)
    if kind == "act":  # temporal ensembling, kept in Python
        for p in (torch_policy, ort_policy):
            p.set_execution(adapter="ensemble", execution_horizon=1)
        a, b = _rollout(torch_policy, observations[:6]), _rollout(ort_policy, observations[:6])
        assert np.abs(a - b).max() <= meta["check"]["tolerance"]


def test_a_short_cnn_bc_episode_ends_alike_on_both_backends(exported, tiny_scenes, tmp_path, monkeypatch):
    """One in-process PointGoal episode per backend: the same status and length, the final
    position within 1 mm; ``airplay eval --policy-backend onnxruntime`` flies it alike."""
    from airplay.eval.episode_jobs import EpisodeJob, clear_cache, fly_job
    from airplay.eval.runner import EvalConfig, batchable

    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tiny_scenes.parent / "cache"))
    ckpt, _ = exported["cnn_bc"]
    scene = tiny_scenes / "tiny"
    results = {}
    for backend in ("torch", "onnxruntime"):
        cfg = EvalConfig(scenes=[scene], policy="cnn_bc", episodes=1, seed=2, render_backend="cpu",
                         checkpoint=str(ckpt), policy_backend=backend)
        assert batchable(cfg) == (backend == "torch")
        try:
            results[backend] = fly_job(EpisodeJob(cfg, str(scene), 0))
        finally:
            clear_cache()
    t, o = results["torch"], results["onnxruntime"]
    assert o["result"].status == t["result"].status and o["steps"] == t["steps"] > 5
    assert np.abs(o["trajectory"][-1] - t["trajectory"][-1]).max() <= 1e-3
    # the same episode through the command line's flag (in this process)
    from airplay.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "--policy", "cnn_bc", "--checkpoint", str(ckpt), "--policy-backend", "onnxruntime",
                 "--scenes", str(scene), "--episodes", "1", "--seed", "2", "--backend", "cpu", "--out", str(out),
                 "--bootstrap", "10", "--no-progress"]) == 0
    line = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert line["status"] == t["result"].status and line["steps"] == t["steps"]
    assert main(["eval", "--policy", "expert", "--policy-backend", "onnxruntime", "--scenes", str(scene)]) == 2


def test_a_corrupted_or_foreign_graph_is_refused_naming_the_file(exported, tmp_path):
    import shutil

    ckpt, _ = exported["cnn_bc"]
    folder = tmp_path / "export"
    shutil.copytree(ckpt / "onnx", folder)
    graph = folder / "policy.onnx"
    shutil.copy(exported["act"][0] / "onnx" / "policy.onnx", graph)  # another export's graph
    with pytest.raises(OnnxExportError, match=f"{graph}: its SHA-256 is not the one"):
        make_policy("cnn_bc", checkpoint=str(folder), backend="onnxruntime")
    graph.write_bytes(b"not a protobuf")  # corrupted, and the sidecar made to agree: onnxruntime refuses it
    meta = json.loads((folder / SIDECAR).read_text())
    meta["graphs"]["policy"]["sha256"] = sha256(graph)
    (folder / SIDECAR).write_text(json.dumps(meta))
    with pytest.raises(OnnxExportError, match=f"{graph}: onnxruntime cannot load it"):
        make_policy("cnn_bc", checkpoint=str(folder), backend="onnxruntime")
    with pytest.raises(ValueError, match="holds a 'cnn_bc' policy, not 'act'"):
        make_policy("act", checkpoint=str(ckpt), backend="onnxruntime")
    with pytest.raises(OnnxExportError, match=f"{tmp_path / SIDECAR}: no such file"):
        make_policy("cnn_bc", checkpoint=str(tmp_path), backend="onnxruntime")
    with pytest.raises(ValueError, match="'expert' has no onnxruntime backend"):
        make_policy("expert", backend="onnxruntime")


def test_an_export_over_its_tolerance_writes_nothing(exported, tmp_path):
    ckpt, _ = exported["dp"]
    out = tmp_path / "dp-onnx"
    with pytest.raises(OnnxExportError, match=r"differ from torch's by .* > tolerance 1e-12 .*nothing written"):
        export_onnx(ckpt, out, tolerance=1e-12, log=lambda _: None)
    assert list(out.iterdir()) == []


def test_the_command_exports_and_prints_the_error(exported, tmp_path, capsys):
    from airplay.cli import main

    ckpt, _ = exported["act"]
    out = tmp_path / "act-onnx"
    done = subprocess.run([sys.executable, "-m", "airplay.cli", "export", "--onnx", str(ckpt), "--out", str(out),
                           "--observations", "2"], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "max abs error" in done.stdout and (out / "policy.onnx").is_file() and (out / SIDECAR).is_file()
    assert json.loads((out / SIDECAR).read_text())["check"]["observations"] == 2
    capsys.readouterr()
    assert main(["export", "--onnx", str(tmp_path), "--out", str(tmp_path / "x")]) == 1  # not a checkpoint
    assert f"{tmp_path / 'config.json'}: no such file" in capsys.readouterr().err


def test_the_exported_policy_matches_its_checkpoint_in_torch(exported):
    """The export reads the checkpoint as load_policy does (the comparison's reference)."""
    ckpt, meta = exported["dp"]
    assert meta["config"] == load_policy(ckpt).config.to_dict()  # tuples as the export returns them
    assert meta["source"]["model_sha256"] == sha256(ckpt / "model.safetensors")


@pytest.mark.ros
def test_the_policy_node_flies_the_export_with_policy_backend_onnxruntime(exported, tiny_scenes, tmp_path,
                                                                          monkeypatch):
    """The policy node makes the onnxruntime policy from the parameters and warms it up (one
    forward pass) before it reports ready."""
    pytest.importorskip("rclpy")
    import time

    from conftest import random_ros_domain
    from helpers.ros_nodes import start_node, stop_all

    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tiny_scenes.parent / "cache"))
    ckpt, _ = exported["cnn_bc"]
    proc = start_node("policy", {"scenes": str(tiny_scenes / "tiny"), "episodes": 1, "policy": "cnn_bc",
                                 "checkpoint": str(ckpt / "onnx"), "policy_backend": "onnxruntime"}, tmp_path)
    log = tmp_path / "policy.log"
    try:
        deadline = time.monotonic() + 60
        while "policy ready" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_all({"policy": proc})
    text = log.read_text()
    assert "cnn_bc policy ready" in text and "(onnxruntime)" in text, text
    assert "could not make" not in text and "warm-up" not in text, text
