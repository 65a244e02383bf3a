"""Expert flight collection in-process (the fast path): scenes x sampled tasks -> one rosbag2
MCAP bag per episode, in the layout the ``recorder`` node writes (docs/data.md).

Failed flights (collision, out of bounds, timeout) are flown but not written, unless
``keep_failures``; they are counted with their reason.

A run (:func:`collect`) is resumable: a task whose bag folder is complete (``metadata.yaml``
present) or that the ledger ``OUT/collected.jsonl`` lists as rejected is skipped, and
leftover ``.partial`` folders of an interrupted run are removed first. ``OUT/summary.json``
holds per-scene counts, rejections by reason, frames, durations and flights per second.
``OUT/collection.json`` fixes what makes bags of one collection comparable (camera size,
depth, setting, protocol): a rerun with different values is refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from airplay.data.collect_flight import fly_task
from airplay.data.collect_plan import (EXPERTS, LOCK, SUMMARY, CollectConfig, CollectError, append_ledger,
                                       check_collection, plan, read_ledger, write_atomically)
from airplay.data.collect_workers import run_local, run_ray


class _Lock:
    """An exclusive advisory lock on ``OUT/.collect.lock``: one collector per output folder."""

    def __init__(self, out: Path) -> None:
        self.path = Path(out) / LOCK
        self.file = None

    def __enter__(self):
        import fcntl

        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise CollectError(f"{self.path}: another `airplay collect` is writing into {self.path.parent}") from None
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def summarize(out: Path, splits: dict[str, str], run: dict) -> dict:
    """``summary.json``: per-scene and total counts over the whole collection (the ledger),
    rejections by reason, frames, flown duration (s of sim time); ``run`` = this run's figures."""
    ledger = read_ledger(out)
    scenes: dict[str, dict] = {}
    for name, split in splits.items():
        scenes[name] = {"split": split, "written": 0, "successes": 0, "kept_failures": 0, "rejected": 0,
                        "rejected_by_reason": {}, "frames": 0, "duration_s": 0.0}
    for rec in ledger.values():
        s = scenes.get(rec.get("scene"))
        if s is None:
            continue
        if rec.get("written"):
            s["written"] += 1
            s["successes" if rec.get("success") else "kept_failures"] += 1
            s["frames"] += int(rec.get("frames", 0))
            s["duration_s"] = round(s["duration_s"] + float(rec.get("duration_s", 0.0)), 3)
        else:
            s["rejected"] += 1
            reason = rec.get("reason", rec.get("status", "unknown"))
            s["rejected_by_reason"][reason] = s["rejected_by_reason"].get(reason, 0) + 1
    total = {key: sum(s[key] for s in scenes.values())
             for key in ("written", "successes", "kept_failures", "rejected", "frames")}
    total["duration_s"] = round(sum(s["duration_s"] for s in scenes.values()), 3)
    reasons: dict[str, int] = {}
    for s in scenes.values():
        for r, n in s["rejected_by_reason"].items():
            reasons[r] = reasons.get(r, 0) + n
    total["rejected_by_reason"] = reasons
    by_split = {split: sorted(n for n, s in scenes.items() if s["split"] == split) for split in ("seen", "unseen")}
    return {"scenes": scenes, "total": total, "splits": by_split, "run": run}


def collect(cfg: CollectConfig, progress: bool = True, *, make_expert: Callable) -> dict:
    """Run (or resume) a collection into ``cfg.out``, flying the labelling policy that
    ``make_expert(cfg.expert, world)`` returns (``airplay collect`` passes
    :func:`airplay.policies.make_policy`); write the ledger and ``summary.json``; return the
    summary. Raises :class:`CollectError` for bad input, and re-raises a worker's
    error after recording every flight finished before it (a rerun resumes from there)."""
    from tqdm import tqdm

    import airplay

    if cfg.expert not in EXPERTS:
        raise CollectError(f"--expert must be one of {', '.join(EXPERTS)}, got {cfg.expert!r}")
    if not cfg.noise_std >= 0:
        raise CollectError(f"--noise-std must be >= 0, got {cfg.noise_std}")
    if cfg.per_scene < 0:
        raise CollectError(f"--per-scene must be >= 0, got {cfg.per_scene}")
    if cfg.workers < 1:
        raise CollectError(f"--workers must be >= 1, got {cfg.workers}")
    if cfg.protocol is not None:
        from airplay.tasks.protocol import load_protocol

        load_protocol(cfg.protocol)  # ConfigError naming the file and field, before any work
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads < 1:
        raise CollectError(f"--threads must be >= 1, got {cfg.threads}")
    with _Lock(out):
        check_collection(cfg)
        work = plan(cfg)
        work.jobs = [replace(job, make_expert=make_expert) for job in work.jobs]
        engine = f"ray ({cfg.ray_address})" if cfg.ray_address else (
            f"process pool ({cfg.workers} workers)" if cfg.workers > 1 else "in-process")
        run = {"engine": engine, "workers": cfg.workers, "setting": cfg.setting, "seed": cfg.seed,
               "per_scene": cfg.per_scene, "depth": cfg.depth, "image_size": cfg.fixed()["image_size"],
               "keep_failures": cfg.keep_failures, "expert": cfg.expert, "noise_std": float(cfg.noise_std),
               "planned": len(work.jobs),
               "skipped_done": sum(work.skipped.values()), "removed_partials": work.removed_partials,
               "flown": 0, "written": 0, "rejected": 0, "frames": 0, "airplay_version": airplay.__version__}
        timings = {"load": 0.0, "render": 0.0, "sim": 0.0, "write": 0.0, "wall": 0.0, "cpu": 0.0}
        t0 = time.perf_counter()
        bar = tqdm(total=len(work.jobs), unit="flight", disable=not progress, dynamic_ncols=True,
                   desc="collect")
        results = (run_ray(fly_task, work.jobs, cfg.ray_address, cfg.workers, run) if cfg.ray_address
                   else run_local(fly_task, work.jobs, cfg.workers)) if work.jobs else iter(())
        error: BaseException | None = None
        try:
            for rec in results:
                append_ledger(out, rec)
                run["flown"] += 1
                run["written" if rec["written"] else "rejected"] += 1
                run["frames"] += rec["frames"]
                for key in timings:
                    timings[key] += rec["timings"][key]
                elapsed = time.perf_counter() - t0
                bar.update(1)
                bar.set_postfix_str(f"{run['flown'] / max(elapsed, 1e-9):.2f} flights/s, "
                                    f"{run['rejected']} rejected, last {rec['scene']} {rec['status']}")
        except BaseException as exc:  # record what finished, then report
            error = exc
        finally:
            bar.close()
            if hasattr(results, "close"):
                results.close()
        wall = time.perf_counter() - t0
        run["wall_s"] = round(wall, 3)
        run["flights_per_s"] = round(run["flown"] / wall, 4) if wall > 0 and run["flown"] else 0.0
        run["frames_per_s"] = round(run["frames"] / wall, 1) if wall > 0 and run["flown"] else 0.0
        run["worker_time_s"] = {k: round(v, 3) for k, v in timings.items()}
        run["flights_per_cpu_s"] = round(run["flown"] / timings["cpu"], 4) if timings["cpu"] > 0 else 0.0
        run["interrupted"] = error is not None
        if error is not None:
            run["error"] = f"{type(error).__name__}: {error}"
        summary = summarize(out, work.splits, run)
        write_atomically(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
        if error is not None:
            raise error
        return summary


def format_summary(summary: dict) -> str:
    """The readable table of a summary: one row per scene, then the total and this run's rate."""
    head = (f"{'scene':<22}{'split':<8}{'written':>8}{'success':>8}{'rejected':>9}{'frames':>9}{'flown s':>9}"
            "  rejections")
    lines = [head, "-" * len(head)]

    def row(name, split, s):
        why = ", ".join(f"{r} {n}" for r, n in sorted(s["rejected_by_reason"].items())) or "-"
        return (f"{name:<22}{split:<8}{s['written']:>8}{s['successes']:>8}{s['rejected']:>9}{s['frames']:>9}"
                f"{s['duration_s']:>9.1f}  {why}")

    for name, s in summary["scenes"].items():
        lines.append(row(name, s["split"], s))
    lines.append("-" * len(head))
    lines.append(row("all", "", summary["total"]))
    r = summary["run"]
    lines.append(f"\nthis run: {r['flown']} flights ({r['written']} written, {r['rejected']} rejected), "
                 f"{r['skipped_done']} already done, {r['removed_partials']} partial bags removed; "
                 f"{r['wall_s']:.1f} s = {r['flights_per_s']:.2f} flights/s, {r['frames_per_s']:.0f} frames/s "
                 f"({r['engine']}); {r['flights_per_cpu_s']:.2f} flights per CPU-second")
    t = r["worker_time_s"]
    busy = sum(t[k] for k in ("load", "render", "sim", "write"))
    if busy > 0:
        lines.append("worker time: " + ", ".join(f"{k} {100 * t[k] / busy:.0f} %"
                                                  for k in ("load", "render", "sim", "write")))
    return "\n".join(lines)
