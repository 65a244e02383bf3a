"""Reinforcement learning on the vector environment with Stable-Baselines3 (the ``rl`` extra):
:mod:`~airplay.rl.sb3` (the SB3 ``VecEnv`` adapter and the ``ppo_depth`` export),
:mod:`~airplay.rl.warmstart` (the expert's warm start: behaviour cloning into PPO's actor) and
:mod:`~airplay.rl.anchor` (``AnchoredPPO``: the critic warm-up and the anchor to the clone).
Used by ``examples/ppo_pointgoal.py``; nothing here is imported by the rest of airplay."""
