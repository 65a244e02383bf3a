"""Hardware in the loop: a checkpoint flown on a real autopilot (PX4 SIH or ArduCopter SITL), task by
task, judged on the simulator's true state, beside the in-process evaluation of the same tasks.

For each task index the SITL harness (``test/sitl_harness.py``, in a private network namespace)
boots the autopilot (PX4: afresh for every flight; ArduCopter: once, each flight starting where the
last one landed), starts ``airplay launch fly policy:=P checkpoint:=C render_images:=true`` (the
renderer draws the scene at the autopilot's *estimated* pose), and lets the bridge fly the mission:
tie the map at the task's start, take off, position at the start pose, fly the policy, end by the
task's rules, hold, land. Each flight is judged on the simulator's true state by the simulator's
rules (collision with the scene's mesh, out of bounds, success radius, time limit; the harness lands
the vehicle at once on a true collision), and written as ``OUT/hil/episodes.jsonl`` and
``summary.json``, the format of ``airplay eval``, so that ``airplay report OUT/inprocess OUT/hil``
puts the two side by side. ``OUT/inprocess`` is ``airplay eval`` of the same checkpoint on the same
tasks (and ``OUT/inprocess-profile`` with ``--vehicle PROFILE``: the flight model identified from
the autopilot, ``airplay identify``).

Per flight the table gives the in-process status, the true status, the bridge's own (estimate)
status, the closest true approach to the goal, the command age (odom -> camera -> policy -> bridge)
p50 / p95 / max, the image rate the policy acted at, the estimate's RMS error against the truth
while the policy flew, and the replay: each flight is recorded (the fly graph's ``record:=``, with
SIH's truth on ``/vehicle/truth``) and its bag replayed through the checkpoint (``airplay replay``):
"equal" counts the commands given back bit for bit, of those the policy sent.

    .venv/bin/python bench/hil.py --policy cnn_bc --checkpoint CKPT --scene SCENE --episodes 20 \\
        --seed 100 --tasks 0-19 --out out/hil --vehicle config/vehicles/px4_sih.yaml
    .venv/bin/python bench/hil.py ... --quick          # one task (make test runs it where PX4 SITL is present)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchlib import finish_meta, run_meta

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))


def task_indices(text: str) -> list[int]:
    """``0-4,7`` -> [0, 1, 2, 3, 4, 7]."""
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def in_process(args, out: Path, vehicle: str = "") -> dict[str, str]:
    """``airplay eval`` of the checkpoint on the scene's tasks; {task_id: status}."""
    cmd = [sys.executable, "-m", "airplay.cli", "eval", "--policy", args.policy, "--checkpoint", args.checkpoint,
           "--scenes", args.scene, "--episodes", str(args.episodes), "--seed", str(args.seed), "--out", str(out),
           "--no-progress", "--backend", "cpu", "--policy-backend", args.policy_backend]
    if vehicle:
        cmd += ["--vehicle", vehicle]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return {ep["task_id"]: ep["status"] for ep in episodes}


def fly(args, index: int, out: Path):
    """The harness's ``<autopilot>_policy`` scenario on task ``index``; its verdict and series."""
    import sitl_harness as harness

    policy = f"policy:={args.policy} checkpoint:={Path(args.checkpoint).resolve()} render_images:=true " \
             f"render_backend:=cpu policy_backend:={args.policy_backend}"
    extra = ("--scene", str(Path(args.scene).resolve()), "--index", str(index), "--episodes", str(args.episodes),
             "--seed", str(args.seed), "--policy-args", policy)
    name = f"{args.autopilot}_policy"
    group = harness.run_group([name], out, extra=extra)
    verdict_path, series_path = out / name / "verdict.json", out / name / "series.json"
    if not verdict_path.is_file():
        raise RuntimeError(f"task {index}: no verdict (harness exit {group.returncode})\n{group.output[-3000:]}")
    return json.loads(verdict_path.read_text()), json.loads(series_path.read_text())


def replay(args, verdict: dict) -> dict | None:
    """The flight's bag replayed through the checkpoint (:mod:`airplay.policies.replay`): steps,
    commands equal bit for bit, the largest difference, observations the bag lacks; None without a bag."""
    from airplay.policies.replay import replay_bag

    bags = verdict.get("bags") or []
    if not bags:
        return None
    return replay_bag(bags[0], args.policy, args.checkpoint).to_dict()


def hil_episode(verdict: dict, series: dict, task, scene_name: str, policy: str, seed: int):
    """The flight as an :class:`airplay.eval.metrics.EpisodeResult`: the true trajectory (resampled to
    50 Hz) from the hand-over to the true status's moment, with that status."""
    from airplay.eval.metrics import episode_result

    judged = verdict.get("truth_judgement") or {}
    phases = verdict["phase_changes"]
    flying = next((t for t, p in phases if p == "flying"), None)
    status = judged.get("status") or "no_command"
    end = judged.get("t") if judged.get("t") is not None else (phases[-1][0] if phases else None)
    truth = np.asarray([row[:4] for row in series.get("true_map", [])], np.float64).reshape(-1, 4)
    if flying is not None and end is not None and len(truth):
        window = truth[(truth[:, 0] >= flying) & (truth[:, 0] <= end)]
    else:
        window = truth[:0]
    if len(window) >= 2:
        times = np.arange(window[0, 0], window[-1, 0] + 1e-9, 0.02)
        trajectory = np.stack([np.interp(times, window[:, 0], window[:, i]) for i in (1, 2, 3)], axis=1)
    else:
        trajectory = np.asarray([task.start_position], np.float64)
    return episode_result(scene=scene_name, task_id=task.task_id, setting="pointgoal", start=task.start_position,
                          goal=task.goal_position, astar_length_m=task.astar_length_m, trajectory=trajectory,
                          status=status, seed=seed, policy=policy)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="cnn_bc")
    ap.add_argument("--policy-backend", choices=("torch", "onnxruntime"), default="torch",
                    help="what runs the learned policy in process and on the vehicle (onnxruntime: the checkpoint's "
                         "`airplay export --onnx` export); the bag's replay runs torch")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--scene", required=True, help="the scene folder the tasks are sampled in")
    ap.add_argument("--episodes", type=int, default=20, help="tasks sampled (as airplay eval --episodes)")
    ap.add_argument("--seed", type=int, default=100, help="task seed (as airplay eval --seed)")
    ap.add_argument("--tasks", default="", help="task indices to fly, e.g. 0-19 (default: all)")
    ap.add_argument("--autopilot", choices=("px4", "ardupilot"), default="px4")
    ap.add_argument("--vehicle", default="", help="also evaluate in process with this vehicle profile")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="one task (the first of --tasks)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    meta = run_meta("hil")

    import sitl_harness as harness

    from airplay.eval.aggregate import aggregate
    from airplay.eval.results import write_results
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World

    if not (harness.SHARED_TOOLS / f"{args.autopilot}-sitl").is_dir() or not harness.unshare_permitted():
        print(f"hil: needs {harness.SHARED_TOOLS / (args.autopilot + '-sitl')} and `unshare -n`: skipped")
        return 0
    out = Path(args.out)
    world = World.load(args.scene)
    tasks = sample_tasks(world.scene, world.grid, args.episodes, args.seed, "pointgoal", world.protocol)
    indices = task_indices(args.tasks) if args.tasks else list(range(len(tasks)))
    if args.quick:
        indices = indices[:1]
    t0 = time.monotonic()
    print(f"hil: in-process evaluation of {args.episodes} tasks", flush=True)
    base = in_process(args, out / "inprocess")
    profile = in_process(args, out / "inprocess-profile", args.vehicle) if args.vehicle else {}
    rows, results = [], []
    for n, k in enumerate(indices):
        task = tasks[k]
        print(f"hil: task {k} ({n + 1}/{len(indices)}) on {args.autopilot} SITL", flush=True)
        verdict, series = fly(args, k, out / "runs" / f"task_{k:03d}")
        result = hil_episode(verdict, series, task, world.name, args.policy, args.seed)
        results.append(result)
        age = verdict.get("command_age_ms") or {}
        rows.append({"task": k, "task_id": task.task_id, "in_process": base.get(task.task_id),
                     "in_process_profile": profile.get(task.task_id), "hil_true": result.status,
                     "hil_estimate": (verdict.get("mission_result") or {}).get("status"),
                     "closest_true_m": (verdict.get("truth_judgement") or {}).get("closest_m"),
                     "command_age_ms": age, "image_rate_hz": verdict.get("image_rate_hz"),
                     "frames_skipped": verdict.get("frames_skipped"),
                     "estimate_error_rms": verdict.get("est_error_rms_flying"), "replay": replay(args, verdict),
                     "error": verdict.get("error")})
    summary = aggregate(results, success_radius_m=world.protocol.success_radius_m, seed=args.seed)
    write_results(out / "hil", results, summary, meta={"command": " ".join(sys.argv), "autopilot": args.autopilot,
                                                        "flights": rows})
    subset = {tasks[k].task_id for k in indices}

    def rate(statuses: dict, which: str) -> float | None:
        values = [statuses[t] == which for t in subset if t in statuses]
        return round(100.0 * float(np.mean(values)), 1) if values else None

    hil = {r["task_id"]: r["hil_true"] for r in rows}
    figures = {"tasks": len(rows), "wall_s": round(time.monotonic() - t0, 1),
               "sr_in_process": rate(base, "success"), "cr_in_process": rate(base, "collision"),
               "sr_in_process_profile": rate(profile, "success") if profile else None,
               "cr_in_process_profile": rate(profile, "collision") if profile else None,
               "sr_hil": rate(hil, "success"), "cr_hil": rate(hil, "collision"),
               "sr_hil_ci95": summary["overall"]["sr"].get("ci95"),
               "replay_equal_flights": sum(1 for r in rows if r["replay"] and r["replay"]["equal"] == r["replay"]["steps"]
                                           and r["replay"]["steps"] > 0),
               "command_age_p95_ms_max": max((r["command_age_ms"].get("p95", 0) for r in rows if r["command_age_ms"]),
                                             default=None), "flights": rows}
    print(f"\n{'task':>4} {'in process':<12} {'+profile':<12} {'HIL (truth)':<14} {'bridge (est.)':<14} "
          f"{'closest m':>9} {'cmd age p50/p95/max ms':>23} {'img Hz':>6} {'est err xy/z m':>15} {'replay =':>9}")
    for r in rows:
        a, e, p = r["command_age_ms"] or {}, r["estimate_error_rms"] or {}, r["replay"]
        print(f"{r['task']:>4} {r['in_process']!s:<12} {r['in_process_profile'] or '-'!s:<12} "
              f"{r['hil_true']!s:<14} {r['hil_estimate']!s:<14} {r['closest_true_m']!s:>9} "
              f"{a.get('p50', '-'):>7}/{a.get('p95', '-')}/{a.get('max', '-'):<7} {r['image_rate_hz']!s:>6} "
              f"{e.get('xy_m', '-')}/{e.get('z_m', '-'):>6} "
              f"{(str(p['equal']) + '/' + str(p['steps'])) if p else '-':>9}")
    print(f"\nSR in process {figures['sr_in_process']} %, with the profile {figures['sr_in_process_profile']} %, "
          f"on {args.autopilot} SITL {figures['sr_hil']} % {figures['sr_hil_ci95']}; CR {figures['cr_in_process']} / "
          f"{figures['cr_in_process_profile']} / {figures['cr_hil']} %  ({len(rows)} tasks, {figures['wall_s']:.0f} s)")
    print(f"results: {out / 'hil'} (airplay report {out / 'inprocess'} {out / 'hil'} -o report.html)")
    figures["meta"] = {**finish_meta(meta), "autopilot": args.autopilot, "scene": Path(args.scene).name,
                       "episodes": args.episodes, "seed": args.seed, "policy": args.policy,
                       "policy_backend": args.policy_backend,
                       "checkpoint": str(args.checkpoint), "vehicle": args.vehicle}
    (out / "figures.json").write_text(json.dumps(figures, indent=1))
    print(f"figures: {out / 'figures.json'} (python docs/results/pages.py {out / 'figures.json'} > docs/results/hil.md)")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
