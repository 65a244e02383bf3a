"""Prove that the standalone ``lerobot-dataset`` package opens airplay's LeRobot v3.0 datasets
and returns the frames, states and actions airplay wrote.

    python bench/verify_lerobot.py                     # a synthetic dataset made here
    python bench/verify_lerobot.py --dataset OUT/      # an export (OUT/seen, OUT/unseen, or one dataset)
    python bench/verify_lerobot.py --quick             # 5 frames an episode; never installs (make test)

lerobot-dataset's pins clash with airplay's (av<16, datasets<4.2, opencv-python-headless...), so
it lives in its own virtual environment, made once and cached under
``~/.cache/airplay/lerobot-dataset-venv/<versions>/`` (``$XDG_CACHE_HOME`` respected). It
imports torch and torchvision without declaring them: pip never installs torch there; a
``.pth`` file APPENDS airplay's site-packages (found at run time) to that venv's sys.path, so
it uses airplay's torch while its own av/datasets/numpy take precedence. Video decoding:
torchvision 0.29 has no VideoReader any more, so lerobot-dataset decodes with torchcodec
(installed in that venv); torchcodec needs FFmpeg shared libraries, taken from the FFmpeg 7
that the venv's PyAV 15 wheel bundles (symlinks with the standard sonames in
``ffmpeg-libs/``, put on LD_LIBRARY_PATH for the probe): no system FFmpeg needed.

The probe (bench/probes/lerobot_compat.py, run with that venv's python) compares up to
--max-frames frames (evenly spaced) of up to --max-episodes episodes per dataset against
the source: for an export, the bags named in the episodes' ``airplay/bag`` column, read
with airplay.data.bag.read_episode. The other direction too (--no-native skips it): a small
dataset recorded BY lerobot-dataset (add_frame/save_episode, its default AV1 video) is read
with airplay's reader, which must return its vectors exactly and the frames lerobot-dataset
itself decodes.
lerobot-dataset 0.4.4 ships no ``lerobot-doctor`` (no console script, no doctor module); the
probe runs the package's own validation instead (see its docstring).

Exit status: 0 all checks passed, 1 a check failed, 77 the venv is not cached and the
package index cannot be reached (nothing could be verified), or with ``--quick`` the venv is
not cached (``--quick`` never goes to the package index: run once without it to make the venv).
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

LEROBOT_DATASET_VERSION = "0.4.4"
TORCHCODEC_VERSION = "0.17.0"  # the torchcodec built for torch 2.14
EXIT_UNREACHABLE = 77
HERE = Path(__file__).resolve().parent
PROBE = HERE / "probes" / "lerobot_compat.py"


class IndexUnreachable(RuntimeError):
    """The package index cannot be reached, so the verification venv cannot be made."""


def main_site_packages() -> Path:
    """The site-packages folder holding airplay's torch (the venv running this script)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch is not installed in this Python; run from airplay's .venv")
    return Path(spec.origin).resolve().parents[1]


def venv_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = (f"lerobot-dataset-{LEROBOT_DATASET_VERSION}_torchcodec-{TORCHCODEC_VERSION}"
           f"_py{sys.version_info.major}{sys.version_info.minor}")
    return cache / "airplay" / "lerobot-dataset-venv" / key


def index_url() -> str:
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                             capture_output=True, text=True, check=False)
        url = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "https://pypi.org/simple"
    return url.rstrip("/")


def index_reachable(timeout_s: float = 15.0) -> tuple[bool, str]:
    url = f"{index_url()}/lerobot-dataset/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status == 200, f"{url}: HTTP {r.status}"
    except Exception as err:  # noqa: BLE001 - DNS, refused, timeout, TLS: all mean "cannot reach"
        return False, f"{url}: {type(err).__name__}: {err}"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _venv_site(venv: Path) -> Path:
    out = subprocess.run([str(_venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _link_ffmpeg(site: Path, links: Path) -> list[str]:
    """Symlinks ``libavutil.so.59`` etc. to the FFmpeg libraries bundled in PyAV's wheel."""
    libs = site / "av.libs"
    links.mkdir(exist_ok=True)
    made = []
    for lib in sorted(libs.glob("lib*.so*")):
        stem = lib.name.split("-")[0].split(".")[0]
        if not stem.startswith(("libav", "libsw")):
            continue
        major = lib.name.split(".so.")[1].split(".")[0]
        dst = links / f"{stem}.so.{major}"
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(lib)
        made.append(dst.name)
    if not made:
        raise RuntimeError(f"{libs}: no FFmpeg libraries found in the PyAV wheel")
    return made


def _point_at_main_torch(site: Path) -> None:
    """The .pth line that APPENDS airplay's site-packages: the venv's own av/numpy/datasets win,
    torch and torchvision are airplay's."""
    pth = site / "zz_airplay_main_site_packages.pth"
    line = f"{main_site_packages()}\n"
    if not pth.is_file() or pth.read_text() != line:
        pth.write_text(line)


def ensure_venv(log=print) -> Path:
    """The cached verification venv (made now if missing); returns its folder."""
    venv = venv_dir()
    ready = venv / ".airplay-ready.json"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (tests may run concurrently)
        if ready.is_file():
            _point_at_main_torch(_venv_site(venv))  # this checkout's venv may differ from the builder's
            return venv
        ok, why = index_reachable()
        if not ok:
            raise IndexUnreachable(why)
        if venv.exists():
            shutil.rmtree(venv)  # an earlier build that did not finish
        t0 = time.perf_counter()
        log(f"making {venv} (lerobot-dataset=={LEROBOT_DATASET_VERSION}, torchcodec=={TORCHCODEC_VERSION}; "
            f"torch comes from {main_site_packages()})")
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        py = str(_venv_python(venv))
        pip = subprocess.run([py, "-m", "pip", "install", "--no-input", "--progress-bar", "off",
                              f"lerobot-dataset=={LEROBOT_DATASET_VERSION}", f"torchcodec=={TORCHCODEC_VERSION}"],
                             capture_output=True, text=True, check=False)
        if pip.returncode != 0:
            ok, why = index_reachable()
            if not ok:
                raise IndexUnreachable(why)
            raise RuntimeError(f"pip install into {venv} failed:\n{pip.stdout[-3000:]}\n{pip.stderr[-3000:]}")
        site = _venv_site(venv)
        torch_dists = sorted(p.name for p in site.glob("torch-*.dist-info")) + \
            sorted(p.name for p in site.glob("torchvision-*.dist-info"))
        if torch_dists or (site / "torch").exists():
            raise RuntimeError(f"{site}: pip installed {torch_dists}; torch must come from airplay's venv")
        _point_at_main_torch(site)
        links = _link_ffmpeg(site, venv / "ffmpeg-libs")
        ready.write_text(json.dumps({"lerobot-dataset": LEROBOT_DATASET_VERSION, "torchcodec": TORCHCODEC_VERSION,
                                     "main_site_packages": str(main_site_packages()), "ffmpeg_links": links,
                                     "build_s": round(time.perf_counter() - t0, 1)}, indent=2))
        log(f"made {venv} in {time.perf_counter() - t0:.0f} s")
    return venv


# -- datasets and references ----------------------------------------------------------------------
def smooth_frames(t: int, h: int, w: int, phase: float) -> np.ndarray:
    """Camera-like frames: smooth colour gradients drifting with time (compressible like renders)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    k = np.arange(t, dtype=np.float32)[:, None, None]
    r = 128 + 100 * np.sin((xx + 2 * k) / 11.0 + phase)
    g = 128 + 100 * np.cos((yy - k) / 9.0 + phase)
    b = 128 + 60 * np.sin((xx + yy + 3 * k) / 17.0)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def make_synthetic_dataset(root: Path) -> dict[int, dict]:
    """A 3-episode dataset with both video keys, goals and 2 tasks; returns its source arrays."""
    from airplay.data.lerobot import TASK_TEXT, LeRobotWriter

    rng = np.random.default_rng(7)
    h, w = 48, 64
    sources = {}
    with LeRobotWriter(root, image_shape=(h, w), goal_image=True) as writer:
        for e, t in enumerate((37, 60, 23)):
            src = {"rgb": smooth_frames(t, h, w, phase=e), "state": rng.normal(size=(t, 13)),
                   "action": rng.normal(size=(t, 4)).astype(np.float32), "goal": rng.normal(size=(t, 3)),
                   "goal_image": smooth_frames(1, h, w, phase=5 + e)[0],
                   "task": TASK_TEXT["imagegoal" if e % 2 else "pointgoal"]}
            writer.add_episode(src["rgb"], src["state"], src["action"], goal=src["goal"],
                               goal_image=src["goal_image"], task=src["task"], meta={"synthetic": True})
            sources[e] = src
    return sources


def source_from_bag(bag: str, task: str) -> dict:
    from airplay.data.bag import read_episode
    from airplay.data.export import goal_vectors

    ep = read_episode(bag)
    return {"rgb": ep.rgb, "state": ep.state, "action": ep.action,
            "goal": goal_vectors(ep.state, ep.goal_position) if ep.goal_position is not None else None,
            "goal_image": ep.goal_image, "task": task}


def write_reference(root: Path, sources: dict[int, dict], out: Path, max_frames: int = 150) -> None:
    """reference.npz: what the probe must get back (as written: float32) plus airplay's own decode,
    for up to ``max_frames`` evenly spaced frames per episode (first and last included)."""
    from airplay.data.keys import ACTION_KEY, GOAL_IMAGE_KEY, GOAL_KEY, RGB_KEY, STATE_KEY
    from airplay.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(root)
    arrays: dict[str, np.ndarray] = {
        "episodes": np.array(sorted(sources), np.int64), "fps": np.array(ds.fps),
        "total_frames": np.array(len(ds)), "total_episodes": np.array(ds.num_episodes),
        "feature_keys": np.array(list(ds.features)),
    }
    for e, src in sources.items():
        ours = ds.episode(e)
        t = len(src["action"])
        k = np.unique(np.linspace(0, t - 1, min(t, max_frames)).round().astype(np.int64))
        arrays[f"ep{e}_length"] = np.array(t)
        arrays[f"ep{e}_frames"] = k
        arrays[f"ep{e}_task"] = np.array(src["task"])
        arrays[f"ep{e}_{STATE_KEY}"] = np.asarray(src["state"], np.float64)[:t][k].astype(np.float32)
        arrays[f"ep{e}_{ACTION_KEY}"] = np.asarray(src["action"]).astype(np.float32)  # all: chunk checks
        if GOAL_KEY in ds.features:
            arrays[f"ep{e}_{GOAL_KEY}"] = np.asarray(src["goal"], np.float64)[:t][k].astype(np.float32)
        arrays[f"ep{e}_{RGB_KEY}"] = src["rgb"][:t][k]
        arrays[f"ep{e}_{RGB_KEY}_ours"] = ours[RGB_KEY][k]
        if GOAL_IMAGE_KEY in ds.features:
            arrays[f"ep{e}_{GOAL_IMAGE_KEY}"] = np.broadcast_to(src["goal_image"], (len(k),) + src["goal_image"].shape)
            arrays[f"ep{e}_{GOAL_IMAGE_KEY}_ours"] = ours[GOAL_IMAGE_KEY][k]
    np.savez(out, **arrays)


def export_sources(root: Path, max_episodes: int) -> dict[int, dict]:
    from airplay.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(root)
    chosen = np.unique(np.linspace(0, ds.num_episodes - 1, min(max_episodes, ds.num_episodes)).round().astype(int))
    sources = {}
    for e in chosen:
        info = ds.episodes[int(e)]
        if "bag" not in info.meta:
            raise SystemExit(f"{root}: episode {e} has no airplay/bag column (not an airplay export)")
        sources[int(e)] = source_from_bag(info.meta["bag"], info.tasks[0])
    return sources


def _probe(venv: Path, args: list[str], workdir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(venv / "ffmpeg-libs"), env.get("LD_LIBRARY_PATH")]))
    env["HF_HUB_OFFLINE"] = "1"  # local datasets only: nothing may go to the hub
    env["HF_DATASETS_CACHE"] = str(workdir / "hf-cache")
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(_venv_python(venv)), str(PROBE), *args], capture_output=True, text=True, env=env,
                          cwd=workdir, check=False)


def run_probe(venv: Path, jobs: list[dict], workdir: Path) -> tuple[int, list[dict], str]:
    jobs_path, report_path = workdir / "jobs.json", workdir / "report.json"
    jobs_path.write_text(json.dumps(jobs))
    proc = _probe(venv, [str(jobs_path), str(report_path), str(main_site_packages())], workdir)
    reports = json.loads(report_path.read_text()) if report_path.is_file() else []
    return proc.returncode, reports, proc.stdout[-4000:] + proc.stderr[-4000:]


def check_native(venv: Path, workdir: Path) -> dict:
    """The other direction: a dataset recorded BY lerobot-dataset (its default AV1 video) read with
    airplay's reader must give its vectors exactly and the frames lerobot-dataset itself decodes."""
    from airplay.data.keys import ACTION_KEY, RGB_KEY, STATE_KEY
    from airplay.data.lerobot import LeRobotDataset

    root, ref_path = workdir / "native", workdir / "native.npz"
    proc = _probe(venv, ["--write-native", str(root), str(ref_path)], workdir)
    checks: list[dict] = []
    report = {"dataset": f"{root} (recorded by lerobot-dataset)", "checks": checks}
    if proc.returncode != 0:
        checks.append({"check": "lerobot-dataset records a dataset", "ok": False, "detail": proc.stderr[-3000:]})
    else:
        ref = np.load(ref_path)
        ds = LeRobotDataset(root)
        for e in range(ds.num_episodes):
            ep = ds.episode(e)
            for key, name in ((ACTION_KEY, "action"), (STATE_KEY, "state")):
                checks.append({"check": f"native episode {e} {key} bit-exact", "detail": "",
                               "ok": bool(np.array_equal(ep[key], ref[f"ep{e}_{name}"]))})
            diff = float(np.abs(ep[RGB_KEY].astype(np.int16) - ref[f"ep{e}_rgb_lerobot"]).mean())
            codec = ds.info["features"][RGB_KEY].get("info", {}).get("video.codec")
            checks.append({"check": f"native episode {e} frames equal lerobot-dataset's decode", "ok": diff <= 1.0,
                           "detail": f"mean |diff| {diff:.3f} ({codec} video)"})
            checks.append({"check": f"native episode {e} task", "ok": ep["task"] == f"native task {e}",
                           "detail": ep["task"]})
    report["ok"] = all(c["ok"] for c in checks)
    return report


def format_reports(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        v = r.get("versions", {})
        lines.append(f"dataset {r['dataset']}: {'PASS' if r['ok'] else 'FAIL'}  (lerobot-dataset "
                     f"{v.get('lerobot-dataset')}, torch {v.get('torch')} from {v.get('torch_from')}, "
                     f"decoder {r.get('video_backend')}, torchcodec {v.get('torchcodec')})")
        if "video_error" in r:
            ve = r["video_error"]
            lines.append(f"  {r['frames_checked']} frames compared ({r['frames_per_s']} frames/s): video worst mean "
                         f"|err| {ve['worst_mean_abs']} levels, worst PSNR {ve['worst_psnr_db']} dB, vs airplay's "
                         f"reader {ve['max_mean_abs_vs_airplay_reader']}; state/action/goal bit-exact")
        bad = [c for c in r["checks"] if not c["ok"]]
        lines.append(f"  {len(r['checks']) - len(bad)}/{len(r['checks'])} checks passed")
        for c in bad:
            lines.append(f"  FAILED {c['check']}: {c['detail']}")
    return "\n".join(lines)


def verify(dataset: Path | None, max_episodes: int = 6, max_frames: int = 150, native: bool = True,
           workdir: Path | None = None, log=print, install: bool = True) -> tuple[int, list]:
    """Run the whole verification; returns (exit status, per-dataset reports). ``install`` False:
    never make the venv (nor ask the package index); exit :data:`EXIT_UNREACHABLE` without it."""
    if not install and not (venv_dir() / ".airplay-ready.json").is_file():
        log(f"SKIP: the lerobot-dataset venv is not cached at {venv_dir()}, and --quick does not install it "
            "(run bench/verify_lerobot.py once without --quick to make it)")
        return EXIT_UNREACHABLE, []
    try:
        venv = ensure_venv(log)
    except IndexUnreachable as err:
        log(f"SKIP: the package index cannot be reached, so lerobot-dataset cannot be installed: {err}")
        return EXIT_UNREACHABLE, []
    tmp = Path(tempfile.mkdtemp(prefix="airplay-lerobot-verify-")) if workdir is None else Path(workdir)
    try:
        jobs = []
        if dataset is None:
            root = tmp / "synthetic"
            sources = make_synthetic_dataset(root)
            roots = [(root, sources)]
        else:
            from airplay.data.stats import dataset_roots

            roots = [(r, export_sources(r, max_episodes)) for r in dataset_roots(dataset)]
        for i, (root, sources) in enumerate(roots):
            ref = tmp / f"reference-{i}.npz"
            write_reference(root, sources, ref, max_frames)
            jobs.append({"root": str(root), "reference": str(ref)})
        rc, reports, output = run_probe(venv, jobs, tmp)
        if not reports:
            log(f"the probe wrote no report (exit {rc}):\n{output}")
            return 1, []
        if native:
            reports.append(check_native(venv, tmp))
        log(format_reports(reports))
        return (0 if all(r["ok"] for r in reports) and rc == 0 else 1), reports
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, help="an exported dataset (or a folder of them); "
                        "default: a synthetic dataset made here")
    parser.add_argument("--max-episodes", type=int, default=6, help="episodes compared per dataset")
    parser.add_argument("--max-frames", type=int, default=None,
                        help="frames compared per episode (evenly spaced; default 150, quick 5)")
    parser.add_argument("--no-native", action="store_true",
                        help="skip reading a dataset recorded by lerobot-dataset with airplay's reader")
    parser.add_argument("--json", type=Path, help="also write the reports here")
    parser.add_argument("--quick", action="store_true",
                        help="seconds (what make test runs): 5 frames per episode; never installs the venv "
                             "(exit 77 where it is not cached)")
    args = parser.parse_args(argv)
    max_frames = args.max_frames or (5 if args.quick else 150)
    rc, reports = verify(args.dataset, args.max_episodes, max_frames, native=not args.no_native,
                         install=not args.quick)
    if args.json:
        args.json.write_text(json.dumps({"exit": rc, "reports": reports}, indent=2))
    return rc


if __name__ == "__main__":
    sys.exit(main())
