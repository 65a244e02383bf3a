"""The numba pieces of the CPU renderer that reach below numba's public API, in one place.

* :func:`trailing_zeros`, :func:`leading_zeros`: ``numba.cpython.unsafe.numbers`` (LLVM's
  cttz/ctlz on a uint64);
* :func:`bits_of_f32`: an ``@intrinsic`` emitting an LLVM bitcast (float32 -> int32);
* :func:`make_composite8`: the rasterizer's 8-pixel step, an ``@intrinsic`` emitting LLVM
  ``<8 x float>`` code through ``llvmlite.ir`` and numba's target context (``make_array``,
  ``get_value_type``);
* :func:`prefetch`: an ``@intrinsic`` calling ``llvm.prefetch`` (``numba.core.cgutils``).

:mod:`airplay.render.numba_plain` has the same functions in plain numba, giving the same
results bit for bit; :mod:`airplay.render.cpu_kernels` chooses between them
(``AIRPLAY_CPU_KERNELS``). :data:`WRITTEN_AGAINST` is the numba release this module was written
and tested against; :func:`version_problem` says when the installed numba is outside
[:data:`OLDEST`, :data:`WRITTEN_AGAINST`], and :func:`api_problems` names each piece of numba's
or llvmlite's API used here that is missing.

Numba caches a kernel by the file that defines it: after editing this module, clear the numba
cache (``NUMBA_CACHE_DIR``, or the ``__pycache__`` folders of ``airplay/render``) so that the
kernels inlining it are compiled again.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros
from numba.extending import intrinsic

from airplay.render.cpu_layout import _E, _LN2_HI, _LN2_LO, _ROUND, _SB, _SG, _SR, _ST, _STEP_CONSTANTS, _SZ

__all__ = ["bits_of_f32", "leading_zeros", "make_composite8", "prefetch", "trailing_zeros"]

OLDEST = (0, 59)
"""The oldest numba release airplay supports (setup.py)."""

WRITTEN_AGAINST = (0, 68)
"""The numba release line (major, minor) this module was written and tested against."""

IR_BUILDER_METHODS = ("insert_element", "shuffle_vector", "select", "fcmp_ordered", "fadd", "fsub", "fmul",
                      "fptosi", "bitcast", "zext", "gep", "load", "store", "add", "and_", "call")
"""``llvmlite.ir.IRBuilder`` methods the intrinsics call."""

TARGET_CONTEXT_METHODS = ("make_array", "get_value_type", "get_dummy_value")
"""Methods of numba's target context the intrinsics call."""


def numba_version() -> tuple[int, int]:
    """(major, minor) of the installed numba."""
    major, minor = numba.__version__.split(".")[:2]
    return int(major), int(minor)


def version_problem(version: tuple[int, int] | None = None) -> str | None:
    """None when numba ``version`` (default: the installed one) is within [OLDEST, WRITTEN_AGAINST];
    otherwise why not, in words."""
    version = numba_version() if version is None else tuple(version)
    if OLDEST <= version <= WRITTEN_AGAINST:
        return None
    return (f"numba {version[0]}.{version[1]} is installed; airplay.render.numba_llvm was written against numba "
            f"{OLDEST[0]}.{OLDEST[1]} to {WRITTEN_AGAINST[0]}.{WRITTEN_AGAINST[1]}")


def api_problems() -> list[str]:
    """Each piece of numba's or llvmlite's API used here that is missing, in words (empty: none)."""
    from numba.core.base import BaseContext
    from numba.core.extending import _Intrinsic

    problems = []
    for name, fn in (("trailing_zeros", trailing_zeros), ("leading_zeros", leading_zeros)):
        if not isinstance(fn, _Intrinsic):
            problems.append(f"numba.cpython.unsafe.numbers.{name} is not an @intrinsic: {type(fn)}")
    for name in ("FloatType", "IntType", "VectorType", "VoidType", "FunctionType", "Constant", "Undefined",
                 "IRBuilder"):
        if not hasattr(ir, name):
            problems.append(f"llvmlite.ir.{name} is missing")
    problems += [f"llvmlite.ir.IRBuilder.{m} is missing" for m in IR_BUILDER_METHODS
                 if not hasattr(getattr(ir, "IRBuilder", object), m)]
    problems += [f"numba.core.base.BaseContext.{m} is missing" for m in TARGET_CONTEXT_METHODS
                 if not hasattr(BaseContext, m)]
    if not callable(getattr(cgutils, "get_or_insert_function", None)):
        problems.append("numba.core.cgutils.get_or_insert_function is missing")
    return problems


_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_V8 = ir.VectorType(_F32, 8)
_V8I = ir.VectorType(_I32, 8)

@intrinsic
def bits_of_f32(typingctx, x):
    """The int32 holding the IEEE-754 bits of the float32 ``x`` (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


def make_composite8(with_depth: bool):
    """The rasterizer's step for 8 consecutive pixels of a tile row and one Gaussian, as an intrinsic
    that emits LLVM <8 x float> code (AVX2 on x86-64), with or without the expected depth.

    ``composite8(S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, r, g, b, z, alpha_max, alpha_min,
    t_min, consts)`` updates the tile state ``S`` (float32, channels at _ST, _SR, ...
    of :mod:`airplay.render.cpu_layout`) at elements p .. p+7 (unsigned offsets; pixel centres x
    in px[lx ..], float32) and returns the pixels it finished (uint64, bit i for lane i). ``consts``
    is :func:`airplay.render.cpu_layout._step_constants`' array: the step loads its vector
    constants from it (one plain vector load each) instead of from LLVM's constant pool,
    which numba's large code model reaches through a 64-bit address load and a broadcast per
    constant (28 of 92 instructions per step). It must be an argument
    of the kernel: numba freezes a global array into the code, and LLVM folds it back into pool
    constants. Per lane: power = dx (hca dx + bdy) + hcdy2 with dx = x - mx; alpha = min(alpha_max,
    op exp(-power)); the fragment is composited where 0 <= power <= thr, alpha >= alpha_min and the
    pixel is unfinished (T > 0); a fragment that would leave T <= t_min is dropped and finishes the
    pixel (T := -T). exp is Cephes expf (range reduction by ln 2 in two parts, its degree-5
    polynomial evaluated by Estrin's scheme; relative error < 1e-7, tested) without branches or calls.

    Written as vector IR because LLVM's loop vectorizer, on the equivalent loop, adds per-row
    runtime alias checks and spills around the 1-2 iterations a footprint row takes.
    """

    @intrinsic
    def composite8(typingctx, S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin, consts):
        sig = types.uint64(S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin, consts)

        def codegen(context, builder, signature, args):
            b = builder

            def splat(x):
                v = b.insert_element(ir.Constant(_V8, ir.Undefined), x, ir.Constant(_I32, 0))
                zeros = ir.Constant(_V8I, [ir.Constant(_I32, 0)] * 8)
                return b.shuffle_vector(v, ir.Constant(_V8, ir.Undefined), zeros)

            def vmin(x, y):
                return b.select(b.fcmp_ordered("<", x, y), x, y)

            def vmax(x, y):
                return b.select(b.fcmp_ordered(">", x, y), x, y)

            def mul_add(x, y, z):  # x * y + z (LLVM may fuse it under ``contract``)
                return b.fadd(b.fmul(x, y), z)

            s_data = context.make_array(signature.args[0])(context, b, args[0]).data
            px_data = context.make_array(signature.args[1])(context, b, args[1]).data
            p = args[2]
            mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin = (splat(a) for a in args[4:17])
            c_data = context.make_array(signature.args[17])(context, b, args[17]).data

            def _v8(x):  # the constant x, read from ``consts``
                i = _STEP_CONSTANTS.index(float(np.float32(x)))
                ptr = b.gep(c_data, [ir.Constant(ir.IntType(64), 8 * i)], inbounds=True)
                return b.load(b.bitcast(ptr, _V8.as_pointer()), align=4)  # (aligned to 32 in fact)

            def at(channel):
                ptr = b.gep(s_data, [b.add(p, ir.Constant(p.type, channel))], inbounds=True)
                return b.bitcast(ptr, _V8.as_pointer())

            zero, one = _v8(0.0), _v8(1.0)
            dx = b.fsub(b.load(b.bitcast(b.gep(px_data, [args[3]], inbounds=True), _V8.as_pointer()), align=4), mx)
            power = mul_add(dx, mul_add(hca, dx, bdy), hcdy2)
            x = vmin(vmax(power, zero), _v8(87.0))
            # exp(-x) = 2^-n exp(r), n = round(x / ln 2), r = n ln 2 - x in [-ln2/2, ln2/2]
            n = b.fsub(mul_add(x, _v8(1.0 / math.log(2.0)), _v8(_ROUND)), _v8(_ROUND))
            r = mul_add(n, _v8(_LN2_LO), b.fsub(b.fmul(n, _v8(_LN2_HI)), x))
            r2 = b.fmul(r, r)
            q = mul_add(r2, mul_add(r2, mul_add(_v8(_E[5]), r, _v8(_E[4])), mul_add(_v8(_E[3]), r, _v8(_E[2]))),
                        mul_add(_v8(_E[1]), r, _v8(_E[0])))
            scale = b.bitcast(b.fptosi(b.fmul(b.fsub(_v8(127.0), n), _v8(8388608.0)), _V8I), _V8)  # 2^-n
            e = b.fmul(b.fadd(mul_add(q, r2, r), one), scale)
            alpha = vmin(amax, b.fmul(op, e))
            t_ptr = at(_ST)
            tp = b.load(t_ptr, align=4)
            hit = b.and_(b.and_(b.fcmp_ordered("<=", power, thr), b.fcmp_ordered(">=", power, zero)),
                         b.and_(b.fcmp_ordered(">=", alpha, amin), b.fcmp_ordered(">", tp, zero)))
            next_t = b.fmul(tp, b.fsub(one, alpha))
            last = b.and_(hit, b.fcmp_ordered("<=", next_t, tmin))
            keep = b.and_(hit, b.fcmp_ordered(">", next_t, tmin))
            w = b.select(keep, b.fmul(alpha, tp), zero)
            for channel, value in ((_SR, gr), (_SG, gg), (_SB, gb)) + (((_SZ, gz),) if with_depth else ()):
                ptr = at(channel)
                b.store(mul_add(w, value, b.load(ptr, align=4)), ptr, align=4)
            b.store(b.select(keep, next_t, b.select(last, b.fsub(zero, tp), tp)), t_ptr, align=4)
            return b.zext(b.bitcast(last, ir.IntType(8)), ir.IntType(64))

        return sig, codegen

    return composite8




@intrinsic
def prefetch(typingctx, arr, flat_index):
    """Ask the CPU to start loading the cache line of element ``flat_index`` of the C-contiguous
    array ``arr`` (LLVM's llvm.prefetch: a read, kept in every cache level). A hint only: it
    reads nothing and changes no result. The cut of a new pose cell reads a few thousand
    scattered rows of arrays of ~100 MB, mostly from DRAM; prefetching rows a few iterations
    ahead overlaps those misses."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, flat_index), codegen

