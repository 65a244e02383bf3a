"""A results page (markdown, for docs/results/) from a benchmark's figures file (its ``--json`` output,
e.g. ``OUT/figures.json`` of ``bench/hil.py``): a header with the date, the commit, the machine and
the command, then the benchmark's table. Several files of one benchmark make one page, run by run.

    python docs/results/pages.py out/hil-px4/figures.json out/hil-ardupilot/figures.json > docs/results/hil.md
    python docs/results/pages.py out/hil-px4/figures.json --note "how the checkpoint was made" > docs/results/hil.md

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
    rows = figures["flights"]
    lines = [(f"## {meta['autopilot']} SITL, {figures['tasks']} tasks of {meta['scene']} "
              f"(episodes {meta['episodes']}, seed {meta['seed']}){': ' + title if title else ''}"), "",
             *_header(meta),
             (f"- policy {meta['policy']}"
              f"{' (' + meta['policy_backend'] + ')' if meta.get('policy_backend', 'torch') != 'torch' else ''}, checkpoint `{meta['checkpoint']}`; in-process profile: "
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
    lines = [(f"## {figures['runs']} run(s) of each scenario beside {figures['busy_loops']} busy loop(s)"
              f"{': ' + title if title else ''}"), "",
             *_header(meta), "", *([note, ""] if note else []),
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


def _header(meta: dict) -> list[str]:
    """The run's provenance lines (benchlib.run_meta): date, commit, machine and load, command."""
    machine = meta.get("machine") or {}
    load = (f"load average {meta['load_average_at_start']} at the start, {meta.get('load_average_at_end')} at the "
            f"end" if "load_average_at_start" in meta else f"load average at the end {meta.get('load_average')}")
    return [f"- date {meta['date']}, commit `{meta.get('commit')}`" + (f", {meta['wall_s']:.0f} s" if meta.get(
                "wall_s") else ""),
            f"- machine: {machine.get('cpu')}, {machine.get('cpus')} CPUs, {machine.get('os')}; {load}",
            f"- command: `{meta.get('command')}`"]


def _num(value, digits: int = 1, thousands: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if thousands else f"{value:.{digits}f}"


def render_section(figures: dict, note: str = "", title: str = "") -> str:
    """bench/render.py: frame rates and CPU time per frame, the reference, LOD rows, the profile."""
    meta = figures["meta"]
    rows, lod = figures["scenes"], figures.get("lod") or []
    size = rows[0]["resolution"] if rows else (lod[0]["resolution"] if lod else "?")
    lines = [f"## {size}, {', '.join(r['scene'] for r in rows)}{': ' + title if title else ''}", "",
             *_header(meta),
             (f"- CPU backend, {figures['threads']} numba threads ({figures['threading_layer']}), kernels "
              f"{figures['kernels']}"), "", *([note, ""] if note else []),
             ("FPS is wall time, so it falls with whatever else runs on the machine; CPU ms is the process's CPU "
              "time per frame (all threads), which moves much less with load. Targets: at least "
              f"{figures['target_fps']:g} FPS and {figures['target_ratio']:g} times the plain per-pixel reference."),
             "", "| scene | Gaussians | FPS mean / median | CPU ms per frame | reference FPS | ratio | "
                 "max RGB diff vs reference |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        ref = r.get("reference_fps")
        lines.append(f"| {r['scene']} | {r['gaussians']:,} | {r['cpu_fps']:.1f} / {r['cpu_fps_median']:.1f} | "
                     f"{r['process_cpu_ms_per_frame']:.2f} | {'-' if ref is None else f'{ref:.3f}'} | "
                     f"{'-' if 'ratio' not in r else format(r['ratio'], ',.0f') + 'x'} | "
                     f"{'-' if 'max_rgb_diff_vs_reference_255' not in r else format(r['max_rgb_diff_vs_reference_255'], '.2f') + '/255'} |")
    staged = [r for r in rows if "stages_ms" in r]
    if staged:
        keys = list(staged[0]["stages_ms"])
        lines += ["", "Where an exact frame's time goes (`--profile`, ms per frame):", "",
                  "| scene | " + " | ".join(keys) + " | visible Gaussians |",
                  "|---|" + "---:|" * (len(keys) + 1)]
        for r in staged:
            lines.append(f"| {r['scene']} | " + " | ".join(f"{r['stages_ms'][k]:.2f}" for k in keys)
                         + f" | {r['visible_gaussians']:,} |")
    if lod:
        lines += ["", ("Level of detail: the same frames from each view's LOD cut; speed-up over the exact row of "
                       "the same run, PSNR of each view against its exact render (mean / min)."), "",
                  "| scene | Gaussians | lod px | FPS | ms per frame | x exact | PSNR dB mean / min |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for e in rows:
            lines.append(f"| {e['scene']} | {e['gaussians']:,} | exact | {e['cpu_fps']:.1f} | {e['cpu_ms_mean']:.2f} "
                         f"| 1.0 | - |")
            for r in sorted((r for r in lod if r["scene"] == e["scene"]), key=lambda r: r["lod_px"]):
                lines.append(f"| {r['scene']} | {r['gaussians']:,} | {r['lod_px']:g} | {r['cpu_fps']:.1f} | "
                             f"{r['cpu_ms_mean']:.2f} | {r['speedup_vs_exact']:.1f} | {r['psnr_db_mean']:.1f} / "
                             f"{r['psnr_db_min']:.1f} |")
    for skipped in figures.get("skipped") or []:
        lines += ["", f"{skipped['scene']} skipped: {skipped['reason']}"]
    return "\n".join(lines) + "\n"


def sim_section(figures: dict, note: str = "", title: str = "") -> str:
    """bench/sim.py: vehicle-steps per second, airplay against pybullet on the same workload."""
    meta, sc = figures["meta"], figures["scene"]
    lines = [f"## {sc['scene']}, {figures['vehicle']['control_rate_hz']:g} Hz control{': ' + title if title else ''}",
             "", *_header(meta), f"- {figures['threads']} numba threads ({figures['threading_layer']})", "",
             *([note, ""] if note else []),
             (f"Dynamics, collision and bounds per control step; rates are the median over the timed runs (best in "
              f"brackets). Targets: one vehicle at least {figures['target_ratio']:g} times pybullet, batched at least "
              f"{figures['target_batch_rate']:,.0f} vehicle-steps/s."), "",
             "| engine | vehicles | vehicle-steps/s (best) | µs per vehicle-step |", "|---|---:|---:|---:|"]
    for r in figures["rows"]:
        engine = "airplay" if r["engine"] == "ours" else r["engine"]
        lines.append(f"| {engine} | {r['vehicles']:,} | {r['rate']:,.0f} ({r['rate_best']:,.0f}) | "
                     f"{r['us_per_vehicle_step']:.2f} |")
    a = figures.get("agreement")
    lines += ["", (f"One vehicle: {_num(figures['ratio_single'])} times pybullet; batched: "
                   f"{_num(figures['best_batch_rate'], 0, True)} vehicle-steps/s at N = {figures['best_batch_vehicles']:,}."
                   + (f" Both engines fly the same commands to within {a['max_velocity_diff_m_s']} m/s "
                      f"({a['steps']} steps)." if a and a.get("steps") else "")
                   + (f" pybullet: {figures['pybullet_error']}" if figures.get("pybullet_error") else ""))]
    return "\n".join(lines) + "\n"


def vector_env_section(figures: dict, note: str = "", title: str = "") -> str:
    """bench/vector_env.py: AirPlayVectorEnv against N sequential AirPlayEnvs."""
    meta = figures["meta"]
    lines = [f"## AirPlayVectorEnv, {figures['cores']} cores{': ' + title if title else ''}", "", *_header(meta),
             f"- free cores (two threads of compiled code against one) {figures['free_cores_at_start']:.2f} at the "
             f"start, {figures['free_cores_at_end']:.2f} at the end", "", *([note, ""] if note else []),
             ("Random actions, PointGoal, the CPU renderer. ms are per batch step of the vector environment; CPU is "
              "the process's CPU time per batch step; ref is the single frame's render time x N / cores, ref CPU the "
              "single frame's CPU time x N."), "",
             "| observation | N | sequential env-steps/s | vector env-steps/s | x sequential | render ms | total ms | "
             "CPU ms | cores used | ref ms | ref CPU ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in figures["rows"]:
        v = r["vector"]
        lines.append(f"| {r['config']} | {r['n']} | {r['sequential']:,.0f} | {v['rate']:,.0f} | {r['ratio']:.1f} | "
                     f"{v['ms']['render']:.2f} | {v['ms_total']:.2f} | {v['cpu_ms']:.2f} | {v['cores_used']:.2f} | "
                     f"{r['reference_ms']:.2f} | {r['reference_cpu_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def graph_section(figures: dict, note: str = "", title: str = "") -> str:
    """bench/graph.py: the ROS graph's control steps per second against in-process, image latency."""
    meta, t = figures["meta"], figures.get("throughput")
    lines = [f"## The ROS graph{': ' + title if title else ''}", "", *_header(meta), f"- {figures['rmw']}, loopback",
             "", *([note, ""] if note else [])]
    if t:
        ip, g = t["inprocess"], t["graph"]
        lines += [(f"{t['episodes']} PointGoal episodes of the expert on {t['scene']} ({t['gaussians_per_m2']} "
                   f"Gaussians/m², camera {t.get('camera_px', 'default')} px, "
                   f"{'RGB + depth rendered every step' if t['render_images'] else 'no images rendered'}), in lockstep; "
                   f"the same per-episode outcomes in both runtimes: {t['same_outcomes']}."), "",
                  "| runtime | control steps | time s | steps/s |", "|---|---:|---:|---:|",
                  f"| in process | {ip['control_steps']} | {ip['time_s']:.2f} | {ip['steps_per_s']:.0f} |",
                  f"| ROS graph ({g['executor']} executor) | {g['control_steps']} | {g['time_s']:.2f} | "
                  f"{g['steps_per_s']:.0f} |", "",
                  f"Graph / in process: {t['ratio']:.2f} (target at least {t['target_ratio']:g})."]
    lines += ["", "Image latency, 224x224 rgb8 between two processes at 50 Hz (receive − send wall time):", "",
              "| QoS | sent | received | dropped | p50 ms | p95 ms | p99 ms | max ms |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in figures["latency"]:
        lines.append(f"| {r['qos']} | {r['sent']} | {r['received']} | {r['dropped']} | {_num(r['p50_ms'], 3)} | "
                     f"{_num(r['p95_ms'], 3)} | {_num(r['p99_ms'], 3)} | {_num(r['max_ms'], 3)} |")
    return "\n".join(lines) + "\n"


def policy_section(figures: dict, note: str = "", title: str = "") -> str:
    """bench/policy.py: inference latency per call and per control, batch 1; torch and, where the run
    has it, onnxruntime beside it (the ratio ORT / torch of the same run)."""
    meta = figures["meta"]
    ort = f", onnxruntime {figures['onnxruntime']}" if figures.get("onnxruntime") else ""
    lines = [f"## {figures['threads']} CPU thread(s), batch 1{': ' + title if title else ''}", "", *_header(meta),
             f"- torch {figures['torch']}{ort}, {figures['calls']} timed calls per policy", "",
             *([note, ""] if note else []),
             (f"Per call: one chunk prediction on a fresh observation. Per control: `select_action` over three "
              f"chunks of controls, the mean (what the loop pays on average) and the largest step (what a "
              f"synchronous loop must fit in its {figures['control_period_ms']:g} ms period). Fits: every step, on "
              f"average only, or no."), ""]
    with_ort = any("onnxruntime" in r for r in figures["rows"])
    if with_ort:
        lines += [("onnxruntime: the policy exported by `airplay export --onnx`'s code (checked against torch: the "
                   "largest command difference, m/s or rad/s) and timed on the same threads, interleaved with torch "
                   "call by call; ORT / torch is the ratio of the per-call p50s."), ""]
    head = ("| policy | configuration | device | image px | params M | chunk K | H | call p50 / p95 / max ms | "
            "control mean / max ms | fits 20 ms |")
    rule = "|---|---|---|---:|---:|---:|---:|---|---|---|"
    if with_ort:
        head += " ORT call p50 / p95 / max ms | ORT control mean / max ms | ORT fits 20 ms | ORT / torch | ORT error |"
        rule += "---|---|---|---:|---:|"
    lines += [head, rule]

    def fits(b: dict) -> str:
        return "every step" if b["fits_period_every_step"] else ("on average" if b["fits_period_mean"] else "no")

    for r in figures["rows"]:
        c, k = r["per_call_ms"], r["per_control_ms"]
        line = (f"| {r['policy']} | {r['config']} | {r['device']} | {r['image_size']} | {r['params_M']:.2f} | "
                f"{r['chunk']} | {r['H']} | {c['p50']:.1f} / {c['p95']:.1f} / {c['max']:.1f} | "
                f"{k['mean']:.2f} / {k['max']:.1f} | {fits(r)} |")
        if with_ort:
            o = r.get("onnxruntime")
            if o is None:
                line += " — | — | — | — | — |"
            else:
                oc, ok = o["per_call_ms"], o["per_control_ms"]
                line += (f" {oc['p50']:.1f} / {oc['p95']:.1f} / {oc['max']:.1f} | {ok['mean']:.2f} / {ok['max']:.1f} | "
                         f"{fits(o)} | {r['ort_over_torch']['call_p50']:.2f} | {o['max_abs_error']:.1e} |")
        lines.append(line)
    return "\n".join(lines) + "\n"


SECTIONS = {"hil": hil_section, "sitl_failures": sitl_failures_section, "render": render_section,
            "sim": sim_section, "vector_env": vector_env_section, "graph": graph_section,
            "policy": policy_section}
TITLES = {"hil": ("Hardware in the loop: learned policies on SITL autopilots (bench/hil.py)",
                  "vehicle.md#hardware-in-the-loop-benchhilpy"),
          "sitl_failures": ("The bridge's failure scenarios on SITL autopilots (bench/sitl_failures.py)",
                            "vehicle.md#the-autopilots-estimate"),
          "render": ("The CPU splat renderer (bench/render.py)", "benchmarks.md#rendering-benchrenderpy"),
          "sim": ("Flight simulation against pybullet (bench/sim.py)", "benchmarks.md#flight-simulation-benchsimpy"),
          "vector_env": ("The vector environment (bench/vector_env.py)",
                         "benchmarks.md#vector-environment-benchvector_envpy"),
          "graph": ("The ROS graph against in-process evaluation (bench/graph.py)",
                    "benchmarks.md#the-ros-graph-benchgraphpy"),
          "policy": ("Learned policies' inference latency (bench/policy.py)",
                     "benchmarks.md#policy-inference-latency-benchpolicypy")}


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
    sys.stdout.write(f"# {title}\n\nMade by `python docs/results/pages.py` from the benchmark's figures files; "
                     f"how the benchmark works: [{anchor.split('#')[0]}](../{anchor}).\n\n")
    notes = args.note + [""] * (len(docs) - len(args.note))
    titles = args.title + [""] * (len(docs) - len(args.title))
    for doc, note, title in zip(docs, notes, titles):
        sys.stdout.write(SECTIONS[kind](doc, note, title) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
