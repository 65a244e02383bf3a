"""The compositing constants every renderer backend shares (the CPU kernels, gsplat, the
level-of-detail cut) and :mod:`airplay.render.api` re-exports: one definition, no import of the
API by the backends it dispatches to."""

NEAR_PLANE_M = 0.05
"""Gaussians closer than this to the camera (optical z, metres) are culled."""
FAR_PLANE_M = 1.0e4
"""Gaussians farther than this from the camera (optical z, metres) are culled."""
EPS2D = 0.3
"""Low-pass dilation added to the projected 2D covariance, pixels^2 (gsplat's eps2d)."""
ALPHA_MIN = 1.0 / 255.0
"""Fragments whose alpha is below this are skipped (one 8-bit step)."""
ALPHA_MAX = 0.99
"""A fragment's alpha is clamped to this."""
TRANSMITTANCE_MIN = 1.0e-4
"""Compositing along a pixel stops once the remaining transmittance falls below this."""
