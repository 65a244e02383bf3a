"""Runs INSIDE the lerobot-dataset virtual environment (made by bench/verify_lerobot.py).

Opens an airplay-exported LeRobot v3.0 dataset with the standalone ``lerobot-dataset``
package (``ledataset.datasets.lerobot_dataset.LeRobotDataset``) and compares what it returns
with the reference arrays airplay wrote (reference.npz, made by verify_lerobot.py):
state/action/goal exactly, video frames within a video-codec tolerance. Also exercises the
package's own checks: delta_timestamps queries across episode boundaries, ``validate_frame``
against the features, ``aggregate_stats`` over the per-episode stats, ``get_video_info``.

Usage: python bench/probes/lerobot_compat.py JOBS.json REPORT.json MAIN_SITE_PACKAGES
   or: python bench/probes/lerobot_compat.py --write-native ROOT REFERENCE.npz  (see write_native)
JOBS.json: a list of {"root": dataset folder, "reference": reference .npz}.
Exit status 0 when every check of every dataset passed, 1 otherwise (the report says which).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

MAX_MEAN_ABS = 4.0  # mean |decoded - source| per pixel channel, in 0..255 levels
MIN_PSNR_DB = 30.0


def write_native(root: Path, ref_path: Path) -> None:
    """A dataset recorded by lerobot-dataset itself (add_frame / save_episode, its default AV1
    video), with the source arrays and the package's own decoded frames, for airplay's reader."""
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    h, w, fps = 40, 56, 50
    features = {"observation.images.rgb": {"dtype": "video", "shape": (h, w, 3),
                                           "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": (13,), "names": None},
                "action": {"dtype": "float32", "shape": (4,), "names": None}}
    ds = LeRobotDataset.create("lerobot/native", fps=fps, features=features, root=root)
    rng = np.random.default_rng(11)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    arrays: dict[str, np.ndarray] = {}
    for e, t in enumerate((26, 33)):
        cx = 10 + np.arange(t) * 1.2  # a bright blob drifting right over a gradient
        rgb = np.stack([np.stack([60 + 2 * xx + 150 * np.exp(-((xx - c) ** 2 + (yy - 20) ** 2) / 60),
                                  40 + 3 * yy, np.full_like(xx, 90 + 40 * e)], -1) for c in cx])
        rgb = np.clip(rgb, 0, 255).astype(np.uint8)
        state = rng.normal(size=(t, 13)).astype(np.float32)
        action = rng.normal(size=(t, 4)).astype(np.float32)
        for k in range(t):
            ds.add_frame({"observation.images.rgb": rgb[k], "observation.state": state[k], "action": action[k],
                          "task": f"native task {e}"})
        ds.save_episode()
        arrays.update({f"ep{e}_rgb": rgb, f"ep{e}_state": state, f"ep{e}_action": action})
    ds.finalize()
    reread = LeRobotDataset("lerobot/native", root=root)
    for e in (0, 1):
        row = reread.meta.episodes[e]
        frames = [reread[i]["observation.images.rgb"].numpy() for i in
                  range(int(row["dataset_from_index"]), int(row["dataset_to_index"]))]
        arrays[f"ep{e}_rgb_lerobot"] = np.clip(np.rint(np.stack(frames).transpose(0, 2, 3, 1) * 255), 0, 255
                                               ).astype(np.uint8)
    np.savez(ref_path, **arrays)


def main() -> int:
    if sys.argv[1] == "--write-native":
        write_native(Path(sys.argv[2]), Path(sys.argv[3]))
        return 0
    jobs_path, report_path, main_site = (Path(a) for a in sys.argv[1:4])
    reports = []
    for job in json.loads(jobs_path.read_text()):
        checks: list[dict] = []
        report: dict = {"dataset": job["root"], "checks": checks}

        def check(name: str, ok: bool, detail: str = "", checks=checks) -> None:
            checks.append({"check": name, "ok": bool(ok), "detail": detail})

        try:
            _probe(Path(job["root"]), Path(job["reference"]), main_site, check, report)
        except Exception:  # noqa: BLE001 - a crash is a failed check, reported with its traceback
            check("probe ran to the end", False, traceback.format_exc())
        report["ok"] = all(c["ok"] for c in checks)
        reports.append(report)
    Path(report_path).write_text(json.dumps(reports, indent=2))
    return 0 if all(r["ok"] for r in reports) else 1


def _probe(root: Path, ref_path: Path, main_site: Path, check, report: dict) -> None:
    import importlib.metadata as md

    import torch
    from ledataset.datasets.compute_stats import aggregate_stats
    from ledataset.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset
    from ledataset.datasets.utils import DEFAULT_FEATURES, validate_frame
    from ledataset.datasets.video_utils import get_safe_default_codec, get_video_info

    torch_file = Path(torch.__file__).resolve()
    report["versions"] = {"lerobot-dataset": md.version("lerobot-dataset"), "torch": torch.__version__,
                          "torch_from": str(torch_file.parent), "av": md.version("av"),
                          "datasets": md.version("datasets"), "codebase_version": CODEBASE_VERSION}
    try:
        report["versions"]["torchcodec"] = md.version("torchcodec")
    except md.PackageNotFoundError:
        pass
    check("torch comes from airplay's venv (not re-installed)", main_site.resolve() in torch_file.parents,
          str(torch_file))

    ref = np.load(ref_path, allow_pickle=False)
    episodes = [int(e) for e in ref["episodes"]]
    t0 = time.perf_counter()
    ds = LeRobotDataset("airplay/verify", root=root)
    backend = ds.video_backend
    report["video_backend"] = backend
    report["open_s"] = round(time.perf_counter() - t0, 3)
    check("video backend is a real decoder", backend in ("torchcodec", "pyav"), f"{backend} "
          f"(default {get_safe_default_codec()})")
    info = ds.meta.info
    check("codebase_version", info["codebase_version"] == CODEBASE_VERSION, info["codebase_version"])
    check("fps", ds.fps == int(ref["fps"]), f"{ds.fps}")
    check("total frames", len(ds) == int(ref["total_frames"]), f"{len(ds)} vs {int(ref['total_frames'])}")
    check("total episodes", ds.num_episodes == int(ref["total_episodes"]),
          f"{ds.num_episodes} vs {int(ref['total_episodes'])}")
    expected_keys = [str(k) for k in ref["feature_keys"]]
    check("features", sorted(ds.features) == sorted(expected_keys), f"{sorted(ds.features)}")
    video_keys = ds.meta.video_keys
    vector_keys = [k for k in ("observation.state", "observation.goal", "action") if k in ds.features]

    frames_checked, worst_mean, worst_psnr, ours_max_mean = 0, 0.0, float("inf"), 0.0
    t0 = time.perf_counter()
    for e in episodes:
        ep_row = ds.meta.episodes[e]
        start, length = int(ep_row["dataset_from_index"]), int(ep_row["length"])
        check(f"episode {e} length", length == int(ref[f"ep{e}_length"]), f"{length}")
        task = str(ref[f"ep{e}_task"])
        frames = ref[f"ep{e}_frames"]
        decoded = {k: np.empty((len(frames),) + tuple(ds.features[k]["shape"]), np.uint8) for k in video_keys}
        exact = {k: True for k in vector_keys}
        index_ok = task_ok = True
        for j, k in enumerate(int(v) for v in frames):
            item = ds[start + k]
            index_ok &= (int(item["episode_index"]) == e and int(item["frame_index"]) == k
                         and int(item["index"]) == start + k
                         and abs(float(item["timestamp"]) - k / ds.fps) < 1e-6)
            task_ok &= item["task"] == task
            for key in vector_keys:
                expected = ref[f"ep{e}_{key}"]  # all frames (action) or the compared ones
                exact[key] &= np.array_equal(item[key].numpy(), expected[k if len(expected) == length else j])
            for key in video_keys:
                chw = item[key].numpy()
                decoded[key][j] = np.clip(np.rint(chw.transpose(1, 2, 0) * 255.0), 0, 255).astype(np.uint8)
            frames_checked += 1
        check(f"episode {e} indices and timestamps", index_ok)
        check(f"episode {e} task text", task_ok, task)
        for key in vector_keys:
            check(f"episode {e} {key} bit-exact", exact[key])
        for key in video_keys:
            src = ref[f"ep{e}_{key}"]
            err = np.abs(decoded[key].astype(np.int16) - src.astype(np.int16))
            mean = float(err.mean())
            psnr = float(10 * np.log10(255.0 ** 2 / max(float((err.astype(np.float64) ** 2).mean()), 1e-12)))
            worst_mean, worst_psnr = max(worst_mean, mean), min(worst_psnr, psnr)
            check(f"episode {e} {key} frames match the source (codec tolerance)",
                  mean <= MAX_MEAN_ABS and psnr >= MIN_PSNR_DB, f"mean |err| {mean:.2f}, PSNR {psnr:.1f} dB")
            ours = ref[f"ep{e}_{key}_ours"]
            d = float(np.abs(decoded[key].astype(np.int16) - ours.astype(np.int16)).mean())
            ours_max_mean = max(ours_max_mean, d)
            check(f"episode {e} {key} same frames as airplay's reader", d <= 1.0, f"mean |diff| {d:.3f}")
        # one frame through the package's own feature validation (as if recording it again)
        item = ds[start]
        frame = {k: (item[k].numpy() if k not in video_keys else
                     (item[k].numpy().transpose(1, 2, 0) * 255).astype(np.uint8))
                 for k in ds.features if k not in DEFAULT_FEATURES}
        frame["task"] = item["task"]
        try:
            validate_frame(frame, ds.features)
            check(f"episode {e} validate_frame", True)
        except ValueError as err:
            check(f"episode {e} validate_frame", False, str(err))
    report["frames_checked"] = frames_checked
    report["frames_per_s"] = round(frames_checked / max(time.perf_counter() - t0, 1e-9), 1)
    report["video_error"] = {"worst_mean_abs": round(worst_mean, 3), "worst_psnr_db": round(worst_psnr, 2),
                             "max_mean_abs_vs_airplay_reader": round(ours_max_mean, 3)}

    # delta_timestamps: an action chunk and an image history, padded at episode edges
    deltas = {"action": [0.0, 1 / ds.fps, 2 / ds.fps]}
    if video_keys:
        deltas[video_keys[0]] = [-1 / ds.fps, 0.0]
    dds = LeRobotDataset("airplay/verify", root=root, delta_timestamps=deltas)
    e = episodes[-1]
    ep_row = dds.meta.episodes[e]
    start, length = int(ep_row["dataset_from_index"]), int(ep_row["length"])
    last = dds[start + length - 1]
    first = dds[start]
    acts = ref[f"ep{e}_action"]
    ok = (np.array_equal(last["action"][0].numpy(), acts[-1]) and last["action_is_pad"].tolist() == [False, True, True]
          and np.array_equal(first["action"].numpy(), acts[:3]) and first["action_is_pad"].tolist() == [False] * 3)
    if video_keys:
        ok &= first[f"{video_keys[0]}_is_pad"].tolist() == [True, False]
        ok &= tuple(first[video_keys[0]].shape) == (2, 3) + tuple(dds.features[video_keys[0]]["shape"][:2])
    check("delta_timestamps chunks and padding at episode edges", ok, json.dumps(deltas))

    # stats: the package aggregates our per-episode stats (checking their types and shapes)
    import pyarrow.parquet as pq

    ep_files = sorted((root / "meta/episodes").glob("*/*.parquet"))
    rows = [r for f in ep_files for r in pq.read_table(f).to_pylist()]
    per_episode = []
    for r in rows:
        st: dict = {}
        for col, v in r.items():
            if col.startswith("stats/"):
                _, feat, name = col.split("/", 2)
                st.setdefault(feat, {})[name] = np.asarray(v)
        per_episode.append(st)
    agg = aggregate_stats(per_episode)
    worst = 0.0
    for feat in vector_keys:
        for name in ("min", "max", "mean"):
            a, b = np.asarray(agg[feat][name], np.float64), np.asarray(ds.meta.stats[feat][name], np.float64)
            worst = max(worst, float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6))))
    check("aggregate_stats of the per-episode stats matches meta/stats.json", worst < 1e-4,
          f"worst relative difference {worst:.2e}")
    _check_aggregate(root, ds, episodes, vector_keys, video_keys, check)
    for key in video_keys:
        vid = root / ds.meta.get_video_file_path(episodes[0], key)
        probed = get_video_info(vid)
        stored = info["features"][key].get("info", {})
        same = all(stored.get(k) == v for k, v in probed.items() if k.startswith("video."))
        check(f"{key} info.json video info matches the file", same, json.dumps(probed))


def _check_aggregate(root: Path, ds, episodes: list[int], vector_keys: list[str], video_keys: list[str], check) -> None:
    """The package's own aggregate_datasets merges two copies of our dataset (rewriting parquet,
    concatenating videos, merging stats); the copy's frames must equal the original's."""
    from ledataset.datasets.aggregate import aggregate_datasets
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    out = Path.cwd() / f"aggregate-{root.name}-{abs(hash(str(root))) % 10 ** 8}"
    aggregate_datasets(["airplay/a", "airplay/b"], "airplay/ab", roots=[root, root], aggr_root=out)
    agg = LeRobotDataset("airplay/ab", root=out)
    n = len(ds)
    ok = len(agg) == 2 * n and agg.num_episodes == 2 * ds.num_episodes
    e = episodes[-1]
    ep = ds.meta.episodes[e]
    start = int(ep["dataset_from_index"])
    for k in (0, int(ep["length"]) - 1):
        a, b = ds[start + k], agg[n + start + k]
        ok &= int(b["episode_index"]) == ds.num_episodes + e and int(b["frame_index"]) == k
        for key in vector_keys:
            ok &= np.array_equal(a[key].numpy(), b[key].numpy())
        for key in video_keys:
            ok &= float((a[key] - b[key]).abs().max()) == 0.0
    check("aggregate_datasets merges two copies; the copy reads back identical", ok,
          f"{len(agg)} frames, {agg.num_episodes} episodes")


if __name__ == "__main__":
    sys.exit(main())
