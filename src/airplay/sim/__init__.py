"""Flight simulation: quadrotor dynamics, the scene's signed distance field, collision and
the batched flight loop (the environment that composes them with a scene and tasks is
:mod:`airplay.world.env`)."""
