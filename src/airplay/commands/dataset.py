"""``airplay dataset export BAGS... OUT/`` and ``airplay dataset stats DS``.

export: episode bags (rosbag2 MCAP, from ``airplay collect`` or the recorder) -> LeRobot v3.0
datasets ``OUT/seen`` and ``OUT/unseen`` (see :mod:`airplay.data.export`).
stats: counts, durations, action/state statistics; ``--plot PNG`` draws the action
distributions (see :mod:`airplay.data.stats`).
"""

from __future__ import annotations

import argparse
import sys


def _cmd_export(args: argparse.Namespace) -> int:
    from airplay.data.bag import BagError
    from airplay.data.export import ExportError, export_bags, format_export_summary
    from airplay.data.lerobot import DatasetError

    try:
        summary = export_bags(args.bags, args.out, split=args.split, depth=args.depth,
                              include_failures=args.include_failures, crf=args.crf, progress=not args.quiet)
    except (ExportError, DatasetError, BagError, FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_export_summary(summary))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from airplay.data.lerobot import DatasetError
    from airplay.data.stats import dataset_stats

    try:
        _, text = dataset_stats(args.dataset, args.plot)
    except DatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


def register(sub) -> None:
    """Add ``dataset`` with its ``export`` and ``stats`` sub-commands to the ``airplay`` parser."""
    ds = sub.add_parser("dataset", help="export bags to LeRobot v3 datasets; dataset statistics")
    ds_sub = ds.add_subparsers(dest="dataset_command", required=True, metavar="SUBCOMMAND")

    ex = ds_sub.add_parser("export", help="episode bags -> LeRobot v3.0 datasets OUT/seen and OUT/unseen",
                           description="Convert episode bags to LeRobot v3.0 datasets, one per scene split "
                                       "(OUT/seen, OUT/unseen). OUT must not exist or be empty; it appears "
                                       "only when complete.")
    ex.add_argument("paths", nargs="+", metavar="PATH", help="bag folders or folders of bags, then OUT/")
    ex.add_argument("--split", choices=("all", "seen", "unseen"), default="all",
                    help="export every split found (default) or only one")
    ex.add_argument("--depth", action="store_true", help="also export observation.depth (float32 metres)")
    ex.add_argument("--include-failures", action="store_true", help="also export flights that did not succeed")
    ex.add_argument("--crf", type=int, default=18, help="H.264 quality, lower is closer to the source (default 18)")
    ex.add_argument("--quiet", action="store_true", help="no progress bar")
    ex.set_defaults(func=_split_export_paths)

    st = ds_sub.add_parser("stats", help="counts, durations, action/state statistics of a dataset")
    st.add_argument("dataset", help="a LeRobot dataset folder, or an export folder holding several")
    st.add_argument("--plot", metavar="PNG", help="write histograms of the action dimensions here")
    st.set_defaults(func=_cmd_stats)


def _split_export_paths(args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        print("error: give at least one bag folder and the output folder (airplay dataset export BAGS... OUT/)",
              file=sys.stderr)
        return 2
    args.bags, args.out = args.paths[:-1], args.paths[-1]
    return _cmd_export(args)
