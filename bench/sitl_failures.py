"""The bridge's failure scenarios on real autopilots, looped beside busy loops: is each one SAFE every time?

Each scenario of ``test/sitl_harness.py`` named here runs ``--runs`` times (PX4 SIH and ArduCopter
SITL from ``../shared/tools``, each harness call in a private network namespace) while ``--busy``
processes spin on the CPU beside it, and every run is judged on the simulator's true state by the
same checks the SITL tests make (:data:`SAFETY`: the :class:`sitl_harness.Checks` of each scenario).
A run is SAFE when all of them hold. The table gives, per scenario, the SAFE count, the worst true
excess past the fence while the bridge had control, the time from the fault to the autopilot's
landing mode, and the first unmet check of a failed run. Issue 41's goal: 10 of 10 beside 4 busy
loops.

    .venv/bin/python bench/sitl_failures.py --runs 10 --busy 4 --out out/sitl-failures --json out/sitl-failures.json
    .venv/bin/python bench/sitl_failures.py px4_gps_loss ardupilot_gps_glitch --runs 3
    .venv/bin/python bench/sitl_failures.py --quick        # px4_gps_loss once, nothing beside it

Not part of ``make test`` (the SITL group there runs each scenario once); ``--quick`` is run by
``test/test_px4_sitl.py``. Needs root for ``unshare -n``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

from benchlib import finish_meta, run_meta

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))

import sitl_harness as harness  # the test folder's harness, on the path above


def _estimate_fault(c):
    c.estimate_fault()


def _low_battery(c):
    c.autopilot_takeover()


def _second_bridge(c):
    c.ran()
    c.second_bridge_watched()
    c.landed_disarmed()


def _took_off(c):
    c.ran()
    c.took_off()
    c.landed_disarmed()


SAFETY = {
    "px4_gps_loss": _estimate_fault,
    "ardupilot_gps_loss": _estimate_fault,
    "ardupilot_gps_glitch": _estimate_fault,
    "px4_low_battery": _low_battery,
    "px4_sigkill_bridge": _second_bridge,
    "ardupilot_companion_loss": _second_bridge,
    "px4_nominal": _took_off,
    "ardupilot_nominal": _took_off,
    "ardupilot_fence": lambda c: c.fence(),
}
"""Scenario -> the checks that make a run of it SAFE (issue 41, item 6)."""

QUICK = ("px4_gps_loss",)


def _spin() -> None:
    while True:
        pass


def judge(name: str, verdict: dict) -> dict:
    c = harness.Checks(verdict)
    SAFETY[name](c)
    after = verdict.get("after_action") or {}
    return {"safe": not c.failed, "unmet": c.failed[:1],
            "excess_true_bridge_m": verdict.get("fence_excess_max_true_bridge"),
            "land_mode_after_s": after.get("land_mode_t"), "left_offboard_after_s": after.get("left_offboard_t"),
            "takeoff_end_height_true_m": verdict.get("takeoff_end_height_true"),
            "duration_s": verdict.get("duration_s")}


def _judge_again(folder: Path, names: list[str], results: dict) -> int:
    """Judge the verdicts under ``folder`` (``run-NN-<autopilot>/<scenario>/verdict.json``) into
    ``results``; returns the number of runs found."""
    runs = sorted({p.name.split("-")[1] for p in folder.glob("run-*")})
    for run in runs:
        for name in names:
            found = sorted(folder.glob(f"run-{run}-*/{name}/verdict.json"))
            if not found:
                results[name].append({"safe": False, "unmet": [f"no verdict in run {run}"]})
                continue
            results[name].append(judge(name, json.loads(found[0].read_text())))
    return len(runs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"scenario names (default: {', '.join(SAFETY)})")
    parser.add_argument("--runs", type=int, default=10, help="runs of each scenario (default 10)")
    parser.add_argument("--busy", type=int, default=4, help="busy loops beside the runs (default 4)")
    parser.add_argument("--out", type=Path, default=Path("out/sitl-failures"), help="harness output folder")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK)} once, no busy loops")
    parser.add_argument("--judge", type=Path, metavar="DIR",
                        help="fly nothing: judge again the verdicts of an earlier run's --out DIR (after a check "
                             "changed); give the --busy it ran beside, for the table")
    args = parser.parse_args(argv)
    names = list(QUICK) if args.quick else (args.scenarios or list(SAFETY))
    runs, busy = (1, 0) if args.quick else (args.runs, args.busy)
    unknown = [n for n in names if n not in SAFETY or n not in harness.SCENARIOS]
    if unknown:
        parser.error(f"no safety checks or no scenario for {', '.join(unknown)}; known: "
                     f"{', '.join(n for n in SAFETY if n in harness.SCENARIOS)}")
    if runs < 1 or busy < 0:
        parser.error("--runs must be >= 1 and --busy >= 0")
    results: dict[str, list] = {n: [] for n in names}
    meta = run_meta("sitl_failures")
    t0 = time.monotonic()
    if args.judge is not None:
        runs = _judge_again(args.judge, names, results)
        spinners = []
    else:
        spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    try:
        for i in range(runs if args.judge is None else 0):
            for flavour in ("ardupilot", "px4"):  # one harness call per autopilot: ArduPilot reuses its boot
                group = [n for n in names if harness.SCENARIOS[n].autopilot == flavour]
                if not group:
                    continue
                out = args.out / f"run-{i + 1:02d}-{flavour}"
                g = harness.run_group(group, out)
                for name in group:
                    try:
                        verdict = g.verdict(name)
                    except (FileNotFoundError, KeyError, json.JSONDecodeError) as exc:
                        results[name].append({"safe": False, "unmet": [f"no verdict: {exc}"]})
                        continue
                    results[name].append(judge(name, verdict))
                    r = results[name][-1]
                    print(f"[{time.monotonic() - t0:7.0f} s] run {i + 1}/{runs} {name}: "
                          f"{'SAFE' if r['safe'] else 'NOT SAFE: ' + '; '.join(r['unmet'])}", flush=True)
    finally:
        for p in spinners:
            p.terminate()
    print(f"\n{'scenario':<26} {'SAFE':>7} {'past fence (bridge) max m':>26} {'to land mode s':>15}  first unmet")
    rows = {}
    for name, rs in results.items():
        safe = sum(r["safe"] for r in rs)
        excess = [r.get("excess_true_bridge_m") for r in rs if r.get("excess_true_bridge_m") is not None]
        land = [r.get("land_mode_after_s") for r in rs if r.get("land_mode_after_s") is not None]
        unmet = next((r["unmet"][0] for r in rs if not r["safe"] and r.get("unmet")), "")
        heights = [r.get("takeoff_end_height_true_m") for r in rs if r.get("takeoff_end_height_true_m") is not None]
        rows[name] = {"runs": len(rs), "safe": safe, "excess_true_bridge_max_m": max(excess, default=None),
                      "land_mode_after_s_max": max(land, default=None),
                      "takeoff_end_height_true_min_m": min(heights, default=None), "first_unmet": unmet}
        print(f"{name:<26} {safe:>3}/{len(rs):<3} {max(excess, default=float('nan')):>26.3f} "
              f"{max(land, default=float('nan')):>15.2f}  {unmet[:80]}")
    total = sum(r["safe"] for r in rows.values()), sum(r["runs"] for r in rows.values())
    print(f"\nSAFE {total[0]} of {total[1]} runs ({100.0 * total[0] / max(1, total[1]):.0f} %; goal 100 %) beside "
          f"{busy} busy loop(s), {time.monotonic() - t0:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {**finish_meta(meta), "judged_again": None if args.judge is None else str(args.judge)}
        args.json.write_text(json.dumps({
            "meta": meta, "quick": args.quick, "runs": runs, "busy_loops": busy, "scenarios": rows,
            "safe": total[0], "total": total[1], "detail": results}, indent=1))
    return 0 if total[0] == total[1] else 1


if __name__ == "__main__":
    sys.exit(main())
