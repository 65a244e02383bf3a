"""VLN (AirVLN-R1) through the ROS graph: ``airplay eval --runtime ros --policy airvln_r1 ...``
starts sim, renderer, policy and evaluator as separate processes over real DDS on loopback
(own ROS domain), with the tiny fine-tuned Qwen2.5-VL (conftest ``tiny_vl_model``) behind the
transformers backend in the policy node, or behind the OpenAI-compatible server on 127.0.0.1
in this process (openai backend over real HTTP). The episodes (status, steps, final position,
persona, instruction, model behaviour) and the metrics must equal the in-process VLN runner's
for the same scene, episodes and seed.

* transformers: the default vln.yaml, so the model's ["MOVE_FORWARD", "TURN_LEFT", "STOP"] ends
  each episode on STOP (the policy's ``episode/policy`` stop request; status ``stopped``).
* openai: two actions per call and a 5-step budget (3 model calls per episode; the budget ends
  the episode, status ``timeout``), on episodes read from an episode file (``--vln-episodes``,
  written by ``airplay vln episodes``).

Every process has a deadline and is killed in a ``finally`` (the launcher's nodes by their ids).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import descendants, stop_process_trees

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("transformers")

EPISODES = 2
SEED = 3
GRAPH_DEADLINE_S = 420  # a hang guard: ~40 s idle, several times that under load on 2 cores


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_ros_domain")]  # test/conftest.py


CONFIGS = {
    "stop": "executor: {hold_s: 0.2}\n",
    "budget": "reference: {max_steps: 5, max_actions_per_step: 2}\nexecutor: {hold_s: 0.2}\n",
}


def _args(scene_dir: Path, out: Path, config: Path, episodes_file: Path | None) -> list[str]:
    args = ["eval", "--policy", "airvln_r1", "--scenes", str(scene_dir), "--episodes", str(EPISODES),
            "--seed", str(SEED), "--out", str(out), "--image-size", "56x56", "--vln-config", str(config),
            "--bootstrap", "20", "--no-progress"]
    return args + (["--vln-episodes", str(episodes_file)] if episodes_file else [])



def run_airplay(args: list[str], log: Path, deadline_s: float) -> int:
    """``airplay ARGS`` as a process (its own session), killed with everything it started by the deadline."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airplay.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    nodes: set[int] = set()
    try:
        end = time.monotonic() + deadline_s
        while proc.poll() is None and time.monotonic() < end:
            nodes.update(descendants(proc.pid))
            time.sleep(0.5)
        if proc.poll() is None:
            pytest.fail(f"airplay {' '.join(args[:3])} did not finish within {deadline_s} s\n{log.read_text()[-6000:]}")
        return proc.returncode
    finally:
        stop_process_trees([proc], nodes, signal.SIGTERM, wait_s=20)  # the launcher stops its nodes


@pytest.fixture(scope="module")
def inprocess(indoor_1, tiny_vl_model, tmp_path_factory):
    """The in-process VLN runner's results for each configuration: {name: (out folder, vln.yaml,
    episode file or None)}."""
    from airplay.cli import main

    root = tmp_path_factory.mktemp("vln_inprocess")
    episodes_file = root / "episodes.json"
    assert main(["vln", "episodes", str(indoor_1), "--episodes", "3", "--seed", "5", "--out", str(episodes_file)]) == 0
    results = {}
    for name, text in CONFIGS.items():
        config = root / f"{name}.yaml"
        config.write_text(text)
        out = root / name
        file = episodes_file if name == "budget" else None
        assert main([*_args(indoor_1, out, config, file), "--backend", "transformers",
                     "--model", str(tiny_vl_model)]) == 0
        results[name] = (out, config, file)
    return results


class Listener:
    """``episode/status``, ``episode/policy`` and ``instruction`` as this process hears them (own context)."""

    def __init__(self) -> None:
        from std_msgs.msg import String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE

        self.background = BackgroundNode("vln_listener")
        self.messages: dict[str, list] = {"episode/status": [], "episode/policy": [], "instruction": []}
        for topic in self.messages:
            self.background.node.create_subscription(String, topic, lambda m, t=topic: self._on(t, m), RELIABLE)
        self.background.start()

    def _on(self, topic: str, msg) -> None:
        with self.background.lock:
            self.messages[topic].append(msg.data if topic == "instruction" else json.loads(msg.data))

    def get(self, topic: str) -> list:
        with self.background.lock:
            return list(self.messages[topic])

    def close(self) -> None:
        self.background.close()


def reference_flights(scene_dir: Path, model: Path, config: Path, episodes_file: Path | None) -> list:
    """(steps, final position) per episode, flown in this process as the in-process VLN runner flies them."""
    from airplay.policies import make_policy
    from airplay.vln.evaluate import run_vln_episode, vln_scene
    from airplay.vln.options import load_episode_options
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    world = World.load(scene_dir)
    vcfg, imported = load_episode_options(str(config), str(episodes_file) if episodes_file else None)
    vs = vln_scene(world, EPISODES, SEED, vcfg, imported)
    env = AirPlayEnv(vs.env_world, "goalfree", tasks=vs.tasks, render_images=True)
    policy = make_policy("airvln_r1", world, vln=dict(backend="transformers", model=str(model), image_size=(56, 56),
                                                       vln_config=vcfg))
    policy.set_actions(vs.actions)
    out = []
    for ep in vs.episodes:
        trajectory, _, _ = run_vln_episode(env, policy, ep, vs.time_limit_s)
        out.append((len(trajectory) - 1, trajectory[-1]))
    return out


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("backend,config", [("transformers", "stop"), ("openai", "budget")])
def test_vln_through_the_ros_graph_equals_inprocess(backend, config, inprocess, indoor_1, tiny_vl_model, tmp_path):
    from airplay.vln.backends import TransformersBackend
    from airplay.vln.server import ChatServer

    ref_out, config_file, episodes_file = inprocess[config]
    out = tmp_path / "ros"
    args = [*_args(indoor_1, out, config_file, episodes_file), "--runtime", "ros"]
    t0 = time.monotonic()
    listener = Listener()
    try:
        if backend == "transformers":
            code = run_airplay([*args, "--backend", "transformers", "--model", str(tiny_vl_model)],
                               tmp_path / "graph.log", GRAPH_DEADLINE_S)
        else:
            with ChatServer(TransformersBackend(tiny_vl_model, max_new_tokens=64), "127.0.0.1", 0) as server:
                code = run_airplay([*args, "--backend", "openai", "--endpoint", server.url], tmp_path / "graph.log",
                                   GRAPH_DEADLINE_S)
                requests = server.requests
        deadline = time.monotonic() + (30 if code == 0 else 0)  # the last statuses may still be on their way
        while True:
            statuses = {m["episode"]: m for m in listener.get("episode/status") if m["status"] != "started"}
            if len(statuses) >= EPISODES or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        reports, instructions = listener.get("episode/policy"), listener.get("instruction")
    finally:
        listener.close()
    log = (tmp_path / "graph.log").read_text()
    assert code == 0, log[-8000:]
    print(f"{backend}: the graph run took {time.monotonic() - t0:.1f} s")

    got = _lines(out)
    assert len(got) == EPISODES
    # Byte for byte the in-process runner's lines: status, steps, final position, persona,
    # instruction, vln_steps, queries, format_failures, stop_reason, metrics.
    assert (out / "episodes.jsonl").read_text() == (ref_out / "episodes.jsonl").read_text()
    for line in got:
        assert line["setting"] == "vln" and line["persona"] and line["instruction"]
        if config == "stop":
            assert line["stop_reason"] == "stop" and line["vln_steps"] == 3 and line["queries"] == 1
            assert line["status"] in ("stopped", "success", "collision")
        else:
            assert line["stop_reason"] == "budget" and line["vln_steps"] == 5 and line["queries"] == 3
            assert line["status"] in ("timeout", "success", "collision")
    if config == "stop":
        assert any(line["status"] == "stopped" for line in got)
    else:
        assert requests == sum(line["queries"] for line in got)
    summary = json.loads((out / "summary.json").read_text())
    reference = json.loads((ref_out / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if k != "meta"} == {k: v for k, v in reference.items() if k != "meta"}
    assert summary["meta"]["runtime"] == "ros" and summary["meta"]["vln"]["backend"] == backend
    assert summary["meta"]["vln"]["queries"] == reference["meta"]["vln"]["queries"]
    assert summary["meta"]["vln"]["episodes_file"] == str(episodes_file or "")
    assert set(summary["per_persona"]) == {line["persona"] for line in got}
    assert (out / "indoor_1_trajectories.png").is_file()
    assert "the policy stopped" in log  # the sim ended each episode on the policy's request

    # What went over the graph: each episode's instruction, the policy's stop request, and the
    # sim's status and trajectory; steps and final position as flown in this process.
    # (this listener may join after the first instruction went out: the evaluator does not wait for it)
    assert instructions and instructions == [line["instruction"] for line in got][-len(instructions):]
    assert sorted({r["episode"] for r in reports if r["stop"]}) == list(range(EPISODES))
    assert sorted(statuses) == list(range(EPISODES)), log[-4000:]
    for k, (steps, final) in enumerate(reference_flights(indoor_1, tiny_vl_model, config_file, episodes_file)):
        assert statuses[k]["status"] == "policy_stop" and statuses[k]["steps"] == steps == got[k]["steps"]
        assert np.abs(np.asarray(statuses[k]["trajectory"][-1]) - final).max() <= 1e-9, f"episode {k}"


def test_policy_node_names_bad_vln_parameters(indoor_1, tmp_path):
    """policy:=airvln_r1 with a model folder that does not exist: exit code 2, the parameter named."""
    cmd = [sys.executable, "-m", "airplay.nodes.policy_node", "--ros-args", "-p", f"scenes:={indoor_1}",
           "-p", "setting:=vln", "-p", "policy:=airvln_r1", "-p", "vln_backend:=transformers",
           "-p", f"model:={tmp_path / 'nowhere'}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True)
    try:
        text, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 2, text
    assert "parameter 'model'" in text and "does not exist" in text, text
