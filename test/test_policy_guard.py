"""A policy's failure ends its episode, not the run (airplay.policies.guard), in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from airplay.policies import guard, is_policy_name, plugin_factory


class Scripted:
    """A policy that does what each call of a test asks: return a command, raise, or burn CPU."""

    def __init__(self, *steps) -> None:
        self.steps = list(steps)

    def reset(self, task=None) -> None:
        if task == "bad task":
            raise KeyError("no plan")

    def select_action(self, obs):
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, float):  # CPU seconds to burn, then hover
            t0 = time.process_time()
            while time.process_time() - t0 < step:
                pass
            return np.zeros(4, np.float32)
        return step


def test_guard_turns_failures_into_statuses():
    assert guard.reset(Scripted(), "task") is None
    assert guard.reset(Scripted(), "bad task") == "KeyError: 'no plan'"
    ok = guard.act(Scripted(np.ones(4, np.float32)), {})
    assert ok.status is None and np.array_equal(ok.command, np.ones(4)) and ok.command.dtype == np.float32
    assert guard.act(Scripted(ValueError("bad obs")), {}).error == "ValueError: bad obs"
    assert guard.act(Scripted(RuntimeError()), {}).error == "RuntimeError"
    nan = guard.act(Scripted(np.array([0, np.nan, 0, 0])), {})
    assert nan.status == "policy_error" and "non-finite command" in nan.error
    assert "4 values" in guard.act(Scripted(np.zeros(3)), {}).error
    slow = guard.act(Scripted(0.05), {}, budget_ms=10.0)
    assert slow.status == "over_budget" and slow.cpu_s >= 0.05 and "over the 10 ms budget" in slow.error
    assert guard.act(Scripted(0.02), {}, budget_ms=0.0).status is None  # no budget
    with pytest.raises(KeyboardInterrupt):  # not an Exception: the node's own stop passes through
        guard.act(Scripted(KeyboardInterrupt()), {})


def test_budget_counts_cpu_time_not_waiting():
    """Sleeping (a loaded machine, a slow network) is not compute: within the budget."""
    class Sleeper(Scripted):
        def select_action(self, obs):
            time.sleep(0.2)
            return np.zeros(4, np.float32)

    assert guard.act(Sleeper(), {}, budget_ms=50.0).status is None


def test_plugin_names_resolve_or_say_what_is_missing():
    assert is_policy_name("expert") and is_policy_name("my_pkg.policies:make") and not is_policy_name("mine")
    assert plugin_factory("json:dumps") is json.dumps
    with pytest.raises(ValueError, match="cannot import module 'no_such_module'"):
        plugin_factory("no_such_module:make")
    with pytest.raises(ValueError, match="has no 'nothing'"):
        plugin_factory("json:nothing")
    with pytest.raises(ValueError, match="not callable"):
        plugin_factory("json.decoder:NaN")


BURNER = '''
import time
from airplay.policies.expert import ExpertNavigator


class Burner(ExpertNavigator):
    """The expert, burning 60 ms of CPU on the 3rd call of task 1."""

    def reset(self, task=None):
        super().reset(task)
        self.calls, self.slow = 0, task.task_id.endswith("-1")

    def select_action(self, obs):
        self.calls += 1
        if self.slow and self.calls == 3:
            t0 = time.process_time()
            while time.process_time() - t0 < 0.06:
                pass
        return super().select_action(obs)


def make(world):
    return Burner(world)
'''


@pytest.mark.slow
def test_eval_ends_an_episode_over_budget_and_goes_on(indoor_1, tmp_path, monkeypatch):
    """airplay eval --policy-budget-ms: the one slow step ends its episode as over_budget, with
    the time in episodes.jsonl; the others fly as without a budget."""
    from airplay.cli import main

    scene = indoor_1
    (tmp_path / "burner.py").write_text(BURNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["eval", "--scenes", str(scene), "--episodes", "3", "--no-images", "--bootstrap", "10",
              "--no-progress", "--policy", "burner:make"]
    assert main([*common, "--policy-budget-ms", "40", "--out", str(tmp_path / "budget")]) == 0
    assert main([*common, "--out", str(tmp_path / "free")]) == 0
    budget = [json.loads(line) for line in (tmp_path / "budget" / "episodes.jsonl").read_text().splitlines()]
    free = [json.loads(line) for line in (tmp_path / "free" / "episodes.jsonl").read_text().splitlines()]
    assert [line["status"] for line in budget] == ["success", "over_budget", "success"]
    assert budget[1]["steps"] == 2 and "over the 40 ms budget" in budget[1]["error"]
    assert [budget[0], budget[2]] == [free[0], free[2]] and free[1]["status"] == "success"
    summary = json.loads((tmp_path / "budget" / "summary.json").read_text())
    assert summary["meta"]["policy_budget_ms"] == 40.0
    assert main([*common, "--policy-budget-ms", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert not Path(tmp_path / "bad").exists()
