"""AirVLN-R1 with a real (tiny, random, briefly fine-tuned) Qwen2.5-VL: both backends, the
OpenAI-compatible server over real HTTP on 127.0.0.1, SFT export, and closed-loop VLN episodes
through ``airplay eval``. The model is the session fixture ``tiny_vl_model`` (conftest.py,
test/helpers/vln_tiny.py: built once, cached on disk)."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

from helpers.vln_tiny import prompt as _prompt  # noqa: E402

from airplay.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # a tiny Qwen2.5-VL, built once and loaded per test


@pytest.fixture
def model_dir(tiny_vl_model):
    """The tiny model fine-tuned to answer ["MOVE_FORWARD", "TURN_LEFT", "STOP"]."""
    return tiny_vl_model


@pytest.fixture(scope="module")
def scene(indoor_1):
    return indoor_1


def test_random_tiny_model_loads_through_the_real_path_and_fails_format(tmp_path):
    from airplay.vln.backends import BackendError, TransformersBackend
    from airplay.vln.parsing import parse_actions
    from airplay.vln.tiny import make_tiny_qwen2_5_vl

    folder = make_tiny_qwen2_5_vl(tmp_path / "random", seed=1)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "qwen2_5_vl" and (folder / "model.safetensors").is_file()
    backend = TransformersBackend(folder, max_new_tokens=12)
    answer = backend.generate(_prompt(0, 5))
    assert isinstance(answer, str)
    assert not parse_actions(answer).ok  # an untrained model's output is a format failure
    with pytest.raises(BackendError, match="does not exist"):
        TransformersBackend(tmp_path / "nowhere")
    (tmp_path / "notvl").mkdir()
    (tmp_path / "notvl" / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(BackendError, match="model_type 'llama'"):
        TransformersBackend(tmp_path / "notvl")


def test_both_backends_give_the_same_answer_over_real_http(model_dir):
    import urllib.error
    import urllib.request

    from airplay.vln.backends import OpenAIBackend, TransformersBackend
    from airplay.vln.server import ChatServer

    local = TransformersBackend(model_dir, max_new_tokens=32)
    prompt = _prompt(5, 6)  # not a training prompt
    expected = local.generate(prompt)
    assert json.loads(expected) == ["MOVE_FORWARD", "TURN_LEFT", "STOP"]
    with ChatServer(local, "127.0.0.1", 0) as server:
        assert server.server_address[0] == "127.0.0.1"
        remote = OpenAIBackend(server.url)
        assert remote.model_name == model_dir.name
        assert remote.generate(prompt) == expected
        req = urllib.request.Request(server.url + "/chat/completions", method="POST",
                                     data=json.dumps({"messages": [{"role": "user", "content": [
                                         {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}).encode(),
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 400 and b"messages[0].content[0].image_url" in err.value.read()
        assert server.requests == 1


def test_sft_export_writes_llama_factory_data(scene, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "sft"
    assert main(["vln", "sft-export", str(scene), "--out", str(out), "--episodes", "2", "--image-size", "56x56"]) == 0
    samples = json.loads((out / "vln_sft.json").read_text())
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["airplay_vln"]["formatting"] == "sharegpt" and samples
    for s in samples:
        user, answer = s["messages"]
        assert user["content"].count("<image>") == len(s["images"]) >= 1
        assert all((out / p).is_file() for p in s["images"])
        assert json.loads(answer["content"]) == s["gt_actions"] and 1 <= len(s["gt_actions"]) <= 8
    assert any(s["gt_actions"][-1] == "STOP" for s in samples)


def _vln_config(tmp_path):
    """Two actions per call (the answer's STOP is cut off): 2 + 2 + 1 actions of a 5-step budget."""
    path = tmp_path / "vln.yaml"
    path.write_text("reference: {max_steps: 5, max_actions_per_step: 2}\nexecutor: {hold_s: 0.2}\n")
    return path


@pytest.mark.parametrize("runtime", ["transformers", "openai"])
def test_closed_loop_vln_episode(runtime, model_dir, scene, tmp_path, monkeypatch):
    from airplay.vln.backends import TransformersBackend
    from airplay.vln.server import ChatServer

    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "results"
    args = ["eval", "--policy", "airvln_r1", "--scenes", str(scene), "--episodes", "1", "--seed", "3",
            "--out", str(out), "--image-size", "56x56", "--vln-config", str(_vln_config(tmp_path)),
            "--bootstrap", "20", "--no-progress"]
    if runtime == "transformers":
        assert main([*args, "--backend", "transformers", "--model", str(model_dir)]) == 0
    else:
        with ChatServer(TransformersBackend(model_dir, max_new_tokens=32), "127.0.0.1", 0) as server:
            assert main([*args, "--backend", "openai", "--endpoint", server.url]) == 0
            assert server.requests >= 2
    (line,) = (out / "episodes.jsonl").read_text().splitlines()
    ep = json.loads(line)
    assert ep["setting"] == "vln" and ep["policy"] == "airvln_r1" and ep["persona"] and ep["instruction"]
    assert ep["vln_steps"] == 5 and ep["format_failures"] == 0 and ep["stop_reason"] == "budget"
    assert ep["queries"] == 3  # 2 + 2 + 1 actions of the 5-step budget
    assert ep["path_length_m"] > 1.5  # it flew: 3 forward steps of 1 m, unless it hit something first
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["per_persona"]) == {ep["persona"]}
    assert {"ne", "sr", "osr", "spl"} <= set(summary["per_persona"][ep["persona"]])
    assert summary["meta"]["vln"]["backend"] == runtime
