"""Flight simulation: quadrotor dynamics, the scene's signed distance field, collision and
episode status, and the in-process Gymnasium environment :class:`AirPlayEnv`."""
