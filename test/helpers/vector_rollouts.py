"""Step a batched environment beside N single ones and compare them (test_vector_env*.py)."""

from __future__ import annotations

import numpy as np

INFO_KEYS = ("status", "task_id", "steps", "time_s", "distance_to_goal_m", "min_distance_m", "path_length_m")
"""The per-episode info both must agree on at every step."""


def random_actions(n: int, steps: int, seed: int = 0) -> np.ndarray:
    """(steps, n, 4) random commands, per sub-environment from its own stream (so N does not change them)."""
    return np.stack([np.random.default_rng(seed + i).uniform(-1.0, 1.0, (steps, 4)) for i in range(n)], axis=1) \
        * np.array([2.0, 2.0, 0.5, 1.0])


def assert_steps_equal(singles, batch, actions: np.ndarray, obs_keys, seed: int, check_spaces: bool = False):
    """Reset both with ``seed``, step both with ``actions`` and assert equal observations (``obs_keys``;
    the instruction compared as strings), info (:data:`INFO_KEYS`), rewards, terminations and truncations
    at every step; with ``check_spaces`` each batched observation lies in the batch's space.
    Returns (singles' reset info, batch's reset info, the number of episodes that ended)."""
    a, ia = singles.reset(seed=seed)
    b, ib = batch.reset(seed=seed)
    first = (ia, ib)
    ended = 0
    for k in range(len(actions) + 1):
        for key in obs_keys:
            if key == "instruction":  # batched as a tuple of N strings
                assert tuple(a[key]) == b[key], f"step {k}, {key}"
            else:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"step {k}, {key}")
            if check_spaces:
                assert batch.observation_space[key].contains(b[key]), f"step {k}, {key}"
        for key in INFO_KEYS:
            np.testing.assert_array_equal(ia[key], ib[key], err_msg=f"step {k}, info {key}")
        if k == len(actions):
            break
        a, ra, ta, tra, ia = singles.step(actions[k])
        b, rb, tb, trb, ib = batch.step(actions[k])
        np.testing.assert_array_equal(ra, rb, err_msg=f"step {k}, reward")
        np.testing.assert_array_equal(ta, tb, err_msg=f"step {k}, terminated")
        np.testing.assert_array_equal(tra, trb, err_msg=f"step {k}, truncated")
        ended += int(np.sum(ta | tra))
    return first[0], first[1], ended
