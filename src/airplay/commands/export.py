"""``airplay export --onnx CHECKPOINT_DIR [--out OUT]``: a learned policy (cnn_bc, act, dp) as ONNX,
checked against torch (docs/policies.md, "Export to ONNX"). The work is
:mod:`airplay.policies.onnx_export`; what is written, :mod:`airplay.policies.onnx_format`."""

from __future__ import annotations

import argparse
import sys


def _cmd_export(args: argparse.Namespace) -> int:
    from airplay.policies.checkpoint import CheckpointError
    from airplay.policies.onnx_export import export_onnx
    from airplay.policies.onnx_format import DEFAULT_SUBFOLDER, OnnxExportError

    if args.tolerance is not None and not args.tolerance > 0:
        print(f"error: --tolerance must be > 0 (m/s, rad/s), got {args.tolerance}", file=sys.stderr)
        return 2
    try:
        meta = export_onnx(args.onnx, args.out, tolerance=args.tolerance, opset=args.opset,
                           observations=args.observations)
    except (OnnxExportError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    out = args.out or f"{args.onnx}/{DEFAULT_SUBFOLDER}"
    files = ", ".join(g["file"] for g in meta["graphs"].values())
    print(f"wrote {out}/: {files} and onnx.json (opset {meta['opset']}); max abs error "
          f"{meta['check']['max_abs_error']:.3g} <= tolerance {meta['check']['tolerance']:g} (m/s, rad/s)")
    print(f"fly it with: airplay eval --policy {meta['type']} --checkpoint {out} --policy-backend onnxruntime")
    return 0


def register(sub) -> None:
    """Add ``airplay export`` to the sub-parsers ``sub``."""
    from airplay.policies.onnx_format import CHECK_OBSERVATIONS, OPSET, TOLERANCE

    p = sub.add_parser(
        "export", help="export a learned policy's checkpoint (cnn_bc, act, dp) to ONNX, checked against torch",
        description="Write the policy's network as ONNX graphs plus onnx.json (inputs, outputs, opset, the "
                    "normalization it needs, the tolerance it was checked to). The export runs onnxruntime and "
                    "torch on the same observations and refuses, writing nothing, when their commands differ by "
                    "more than the tolerance; it prints the measured error.")
    p.add_argument("--onnx", required=True, metavar="CHECKPOINT_DIR",
                   help="checkpoint folder of a learned policy (the --out of airplay train)")
    p.add_argument("--out", default=None, metavar="OUT",
                   help="folder of the export (default CHECKPOINT_DIR/onnx, where --policy-backend onnxruntime "
                        "finds it from the checkpoint folder)")
    p.add_argument("--tolerance", type=float, default=None, metavar="TOL",
                   help="largest accepted absolute difference of the commands, m/s and rad/s (default: "
                        + ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()) + ")")
    p.add_argument("--opset", type=int, default=OPSET, help=f"ONNX opset (default {OPSET})")
    p.add_argument("--observations", type=int, default=CHECK_OBSERVATIONS, metavar="N",
                   help="observations the export is checked on, each alone and all as one batch (default %(default)s)")
    p.set_defaults(func=_cmd_export)
