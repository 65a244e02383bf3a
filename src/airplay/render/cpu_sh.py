"""Colour from real spherical harmonics up to degree 3 for the CPU rasterizer's projection
(:func:`airplay.render.cpu_geometry.make_project`): INRIA's constants and signs, max(SH + 0.5, 0),
in the direction from the camera centre to the mean, rotated into the SH frame."""

from __future__ import annotations

import numpy as np
from numba import njit

from airplay.render.cpu_layout import _F_R, _NR, _P_DX, _P_DY, _P_DZ, _P_R, _PB
from airplay.scene.gaussians import SH_C0

SH_C1 = 0.4886025119029199
SH_C2 = np.array(
    [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
)
SH_C3 = np.array(
    [
        -0.5900435899266435,
        2.890611442640554,
        -0.4570457994644658,
        0.3731763325901154,
        -0.4570457994644658,
        1.445305721320277,
        -0.5900435899266435,
    ]
)

@njit(inline="always")
def _view_dir(S, k):
    """(dx, dy, dz, dx^2, dy^2, dz^2) of row k's unit view direction in the SH frame, from ``S``."""
    dx = S[np.uintp(k + _P_DX)]
    dy = S[np.uintp(k + _P_DY)]
    dz = S[np.uintp(k + _P_DZ)]
    return dx, dy, dz, dx * dx, dy * dy, dz * dz


@njit(inline="always")
def _sh_colour(S, shf, order, j0, cnt, nk, gf):
    """RGB of the Gaussians order[j0 + k], k < cnt, from their SH (INRIA constants and signs),
    max(SH + 0.5, 0), into records j0 + k of the flat record array ``gf``, from the unit view
    directions in the SH frame in ``S`` (_P_DX ..): one branch-free loop per SH degree, so that
    each vectorizes (the nk coefficients of Gaussian i are shf[3 nk i ..], gathered)."""
    nk3 = np.uintp(3 * nk)
    for k in range(cnt):
        base = nk3 * np.uintp(order[np.uintp(j0 + k)])
        for ch in range(3):
            S[np.uintp(k + _P_R + ch * _PB)] = SH_C0 * shf[base + np.uintp(ch)]
    if nk > 1:
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)])
            b1 = -SH_C1 * S[np.uintp(k + _P_DY)]
            b2 = SH_C1 * S[np.uintp(k + _P_DZ)]
            b3 = -SH_C1 * S[np.uintp(k + _P_DX)]
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (b1 * shf[base + c + np.uintp(3)] + b2 * shf[base + c + np.uintp(6)]
                                                     + b3 * shf[base + c + np.uintp(9)])
    if nk > 4:
        c20, c21, c22, c23, c24 = SH_C2[0], SH_C2[1], SH_C2[2], SH_C2[3], SH_C2[4]
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)]) + np.uintp(12)
            dx, dy, dz, xx, yy, zz = _view_dir(S, k)
            b4 = c20 * dx * dy
            b5 = c21 * dy * dz
            b6 = c22 * (2.0 * zz - xx - yy)
            b7 = c23 * dx * dz
            b8 = c24 * (xx - yy)
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (
                    b4 * shf[base + c] + b5 * shf[base + c + np.uintp(3)] + b6 * shf[base + c + np.uintp(6)]
                    + b7 * shf[base + c + np.uintp(9)] + b8 * shf[base + c + np.uintp(12)])
    if nk > 9:
        c30, c31, c32, c33, c34, c35, c36 = SH_C3[0], SH_C3[1], SH_C3[2], SH_C3[3], SH_C3[4], SH_C3[5], SH_C3[6]
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)]) + np.uintp(27)
            dx, dy, dz, xx, yy, zz = _view_dir(S, k)
            b9 = c30 * dy * (3.0 * xx - yy)
            b10 = c31 * dx * dy * dz
            b11 = c32 * dy * (4.0 * zz - xx - yy)
            b12 = c33 * dz * (2.0 * zz - 3.0 * xx - 3.0 * yy)
            b13 = c34 * dx * (4.0 * zz - xx - yy)
            b14 = c35 * dz * (xx - yy)
            b15 = c36 * dx * (xx - 3.0 * yy)
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (
                    b9 * shf[base + c] + b10 * shf[base + c + np.uintp(3)] + b11 * shf[base + c + np.uintp(6)]
                    + b12 * shf[base + c + np.uintp(9)] + b13 * shf[base + c + np.uintp(12)]
                    + b14 * shf[base + c + np.uintp(15)] + b15 * shf[base + c + np.uintp(18)])
    for k in range(cnt):
        for ch in range(3):
            gf[np.uintp(_NR * (j0 + k) + _F_R + ch)] = np.float32(max(S[np.uintp(k + _P_R + ch * _PB)] + 0.5, 0.0))

