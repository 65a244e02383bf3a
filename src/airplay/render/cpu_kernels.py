"""Which numba pieces the CPU renderer's kernels use: :mod:`airplay.render.numba_llvm` (LLVM
intrinsics and ``numba.cpython.unsafe``) or :mod:`airplay.render.numba_plain` (plain numba).
Both give the same images, bit for bit; the plain ones are slower (docs/rendering.md).

``AIRPLAY_CPU_KERNELS``, read at every frame:

* ``auto`` (default): numba_llvm's where the installed numba is one it was written against and
  has every piece of API it uses (:data:`PROBLEM` is None), plain otherwise (with a warning);
* ``llvm``: numba_llvm's; :class:`KernelChoiceError` where they are unavailable;
* ``plain``: numba_plain's.
"""

from __future__ import annotations

import os
import warnings

from airplay.render import numba_plain

KERNELS = ("auto", "llvm", "plain")
"""Values of ``AIRPLAY_CPU_KERNELS``."""


class KernelChoiceError(ValueError):
    """``AIRPLAY_CPU_KERNELS`` names no kernels, or ``llvm`` where they are unavailable."""


try:
    from airplay.render import numba_llvm

    PROBLEM = numba_llvm.version_problem() or "; ".join(numba_llvm.api_problems()) or None
except (ImportError, AttributeError) as exc:  # numba moved or removed something numba_llvm uses
    numba_llvm = None
    PROBLEM = f"airplay.render.numba_llvm does not import: {exc}"
"""Why numba_llvm's functions are unavailable (None: they are available)."""

fast = numba_plain if PROBLEM else numba_llvm
"""The module the kernels' non-plain variants take their functions from."""

_warned = []


def use_plain() -> bool:
    """True when the kernels are to use numba_plain's functions (``AIRPLAY_CPU_KERNELS``)."""
    name = os.environ.get("AIRPLAY_CPU_KERNELS", "auto") or "auto"
    if name == "plain":
        return True
    if name not in KERNELS:
        raise KernelChoiceError(f"environment variable AIRPLAY_CPU_KERNELS must be one of {', '.join(KERNELS)}, "
                                f"got {name!r}")
    if PROBLEM is None:
        return False
    if name == "llvm":
        raise KernelChoiceError(f"AIRPLAY_CPU_KERNELS=llvm, but {PROBLEM}")
    if not _warned:
        _warned.append(True)
        warnings.warn(f"{PROBLEM}; the CPU renderer uses plain numba kernels (slower, same images)",
                      RuntimeWarning, stacklevel=2)
    return True
