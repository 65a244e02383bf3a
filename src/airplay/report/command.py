"""``airplay report RESULTS... -o report.html`` (:mod:`airplay.report`)."""

from __future__ import annotations

import argparse
import sys


def _cmd_report(args: argparse.Namespace) -> int:
    from airplay.report.kinds import ReportInputError
    from airplay.report.page import build_report, write_report

    try:
        page, problems = build_report(args.results, title=args.title, topdown=not args.no_topdown)
    except ReportInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    try:
        out = write_report(page, args.out)
    except OSError as err:
        print(f"error: cannot write {args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"{out} ({len(page.encode('utf-8')) / 1e6:.1f} MB, {len(problems)} problem(s) shown in the page)")
    return 0


def register(sub) -> None:
    """Add ``airplay report`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "report", help="one self-contained HTML page from results folders (eval, eval-offline, ...)",
        description="Write one HTML file (inline CSS, images embedded, nothing fetched when it is opened) from "
                    "results: `airplay eval` folders (the metrics with 95%% intervals per scene, split and category, "
                    "policies as columns; the trajectory plots; one row per episode; the run's metadata), "
                    "`airplay eval-offline --out` JSON files and `offline-vs-closed --out` relate.json files, and "
                    "folders holding "
                    "such results. Problems with an input (another results format version, a missing plot, an "
                    "empty run) are listed at the top of the page and on stderr; the rest still renders.")
    p.add_argument("results", nargs="+", metavar="RESULTS", help="results folders or files")
    p.add_argument("-o", "--out", default="report.html", metavar="HTML", help="the page to write (default "
                   "report.html)")
    p.add_argument("--title", default="airplay report", help="the page's title")
    p.add_argument("--no-topdown", action="store_true",
                   help="no top-down picture of each scene (drawn where the scene folder named in the results "
                        "is on this machine)")
    p.set_defaults(func=_cmd_report)
