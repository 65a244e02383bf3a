"""A results page (markdown, for docs/results/) from a benchmark's figures file (its ``--json`` output,
e.g. ``OUT/figures.json`` of ``bench/hil.py``): a header with the date, the commit, the machine and
the command, then the benchmark's table. Several files of one benchmark make one page, run by run.

    python bench/results.py out/hil-px4/figures.json out/hil-ardupilot/figures.json > docs/results/hil.md
    python bench/results.py out/hil-px4/figures.json --note "how the checkpoint was made" > docs/results/hil.md

``--note`` and ``--title`` (once per figures file, in their order) add a paragraph under that run's
header and a few words to its heading: what the figures cannot say themselves, such as how the
checkpoint was trained. The page's own command is kept in ``docs/results/make.sh``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _status_counts(rows: list[dict], key: str) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[str(row.get(key))] = counts.get(str(row.get(key)), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _ci(ci) -> str:
    """A 95 % interval of a rate as percent: [lo, hi] (fractions are scaled)."""
    if not ci:
        return ""
    lo, hi = ci
    scale = 100.0 if max(abs(lo), abs(hi)) <= 1.0 else 1.0
    return f"[{lo * scale:.0f}, {hi * scale:.0f}]"


def _replay(r: dict) -> str:
    p = r.get("replay")
    return "-" if not p else f"{p['equal']} / {p['steps']}"


def hil_section(figures: dict, note: str = "", title: str = "") -> str:
    meta = figures["meta"]
    machine = meta.get("machine") or {}
    rows = figures["flights"]
    lines = [(f"## {meta['autopilot']} SITL, {figures['tasks']} tasks of {meta['scene']} "
              f"(episodes {meta['episodes']}, seed {meta['seed']}){': ' + title if title else ''}"), "",
             f"- date {meta['date']}, commit `{meta.get('commit')}`",
             (f"- machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, {machine.get('os')}; load average at "
              f"the end {meta.get('load_average')}"),
             f"- command: `{meta.get('command')}`",
             (f"- policy {meta['policy']}, checkpoint `{meta['checkpoint']}`; in-process profile: "
              f"`{meta.get('vehicle') or '-'}`"), "", *([note, ""] if note else []),
             "| | in process | in process, autopilot's profile | SITL (judged on the truth) |",
             "|---|---:|---:|---:|",
             (f"| SR % | {figures['sr_in_process']} | {figures['sr_in_process_profile']} | {figures['sr_hil']} "
              f"{_ci(figures.get('sr_hil_ci95'))} |"),
             f"| CR % | {figures['cr_in_process']} | {figures['cr_in_process_profile']} | {figures['cr_hil']} |",
             "", (f"SITL statuses: {_status_counts(rows, 'hil_true')}; the bridge's own (on the estimate): "
                  f"{_status_counts(rows, 'hil_estimate')}. Largest command age p95: "
                  f"{figures['command_age_p95_ms_max']} ms. {figures['wall_s']:.0f} s in all. The bridge's "
                  "`interrupted`: the harness landed the vehicle on a true collision before the bridge's own rules, "
                  "on the estimate, saw one. Replay: the flight's bag replayed through the checkpoint, commands "
                  "given back bit for bit of those sent (`-`: not recorded)."), "",
             ("| task | in process | + profile | SITL (truth) | bridge (estimate) | closest m | command age p50 / p95 / "
              "max ms | images Hz | estimate RMS xy / z m | replay |"),
             "|---:|---|---|---|---|---:|---|---:|---|---|"]
    for r in rows:
        a, e = r.get("command_age_ms") or {}, r.get("estimate_error_rms") or {}
        lines.append(f"| {r['task']} | {r['in_process']} | {r.get('in_process_profile') or '-'} | {r['hil_true']} | "
                     f"{r['hil_estimate']} | {r['closest_true_m']} | {a.get('p50', '-')} / {a.get('p95', '-')} / "
                     f"{a.get('max', '-')} | {r['image_rate_hz']} | {e.get('xy_m', '-')} / {e.get('z_m', '-')} | "
                     f"{_replay(r)} |")
    return "\n".join(lines) + "\n"


def sitl_failures_section(figures: dict, note: str = "", title: str = "") -> str:
    meta = figures["meta"]
    machine = meta.get("machine") or {}
    lines = [(f"## {figures['runs']} run(s) of each scenario beside {figures['busy_loops']} busy loop(s)"
              f"{': ' + title if title else ''}"), "",
             f"- date {meta['date']}, commit `{meta.get('commit')}`",
             (f"- machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, {machine.get('os')}; load average at "
              f"the end {meta.get('load_average')}"),
             f"- command: `{meta.get('command')}`", "", *([note, ""] if note else []),
             (f"SAFE in {figures['safe']} of {figures['total']} runs"
              + (f", {meta.get('wall_s', 0):.0f} s in all" if not meta.get("judged_again") else
                 " (the verdicts of an earlier run, judged again)") + ". A run is "
              "SAFE when every check of its scenario holds on the simulator's truth (bench/sitl_failures.py "
              "`SAFETY`). Past the fence: the true position's largest excess while the bridge had control; to "
              "land mode: seconds from the fault to the autopilot's landing mode; take-off: the lowest true height "
              "when offboard control began."), "",
             "| scenario | SAFE | past the fence, max m | to land mode, max s | take-off, min m | first unmet check |",
             "|---|---:|---:|---:|---:|---|"]
    for name, row in figures["scenarios"].items():
        def fmt(value, digits):
            return "-" if value is None else f"{value:.{digits}f}"

        lines.append(f"| {name} | {row['safe']} / {row['runs']} | {fmt(row['excess_true_bridge_max_m'], 3)} | "
                     f"{fmt(row['land_mode_after_s_max'], 2)} | {fmt(row.get('takeoff_end_height_true_min_m'), 2)} | "
                     f"{row['first_unmet'] or '-'} |")
    return "\n".join(lines) + "\n"


SECTIONS = {"hil": hil_section, "sitl_failures": sitl_failures_section}
TITLES = {"hil": ("Hardware in the loop: learned policies on SITL autopilots (bench/hil.py)",
                  "vehicle.md#hardware-in-the-loop-benchhilpy"),
          "sitl_failures": ("The bridge's failure scenarios on SITL autopilots (bench/sitl_failures.py)",
                            "vehicle.md#the-autopilots-estimate")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figures", nargs="+", type=Path, help="figures files (a benchmark's --json output)")
    ap.add_argument("--note", action="append", default=[],
                    help="a paragraph under a run's header (once per figures file, in their order)")
    ap.add_argument("--title", action="append", default=[],
                    help="what tells a run apart, after its heading (once per figures file, in their order)")
    args = ap.parse_intermixed_args(argv)
    for name in ("note", "title"):
        if len(getattr(args, name)) > len(args.figures):
            raise SystemExit(f"error: {len(getattr(args, name))} --{name} for {len(args.figures)} figures files")
    docs = [json.loads(p.read_text()) for p in args.figures]
    kinds = {d["meta"]["benchmark"] for d in docs}
    if len(kinds) != 1:
        raise SystemExit(f"error: one benchmark per page, got {sorted(kinds)}")
    kind = kinds.pop()
    title, anchor = TITLES[kind]
    sys.stdout.write(f"# {title}\n\nMade by `python bench/results.py` from the benchmark's figures files; "
                     f"how the benchmark works: [{anchor.split('#')[0]}](../{anchor}).\n\n")
    notes = args.note + [""] * (len(docs) - len(args.note))
    titles = args.title + [""] * (len(docs) - len(args.title))
    for doc, note, title in zip(docs, notes, titles):
        sys.stdout.write(SECTIONS[kind](doc, note, title) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
