"""The standalone ``lerobot-dataset`` package (PyPI, its own cached venv) opens datasets made by
``airplay dataset export`` and returns the frames, states and actions of the source bags; and
airplay's reader reads a dataset that lerobot-dataset recorded itself.

bench/verify_lerobot.py does the work (see its docstring); the first run on a machine makes the
venv (pip install of lerobot-dataset 0.4.4 and torchcodec, about 2 minutes; torch is NOT
downloaded: airplay's is used). Skipped only when that venv is not cached and the package
index cannot be reached; any other problem is a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.export_bags import BAG_PLAN, write_bags

from airplay.data.export import export_bags
from airplay.data.keys import GOAL_IMAGE_KEY

REPO = Path(__file__).resolve().parents[1]
EXIT_UNREACHABLE = 77


pytestmark = pytest.mark.slow  # the lerobot package in a separate environment


def test_lerobot_dataset_package_reads_our_export(tmp_path):
    write_bags(tmp_path / "bags", BAG_PLAN)
    export_bags([tmp_path / "bags"], tmp_path / "export", progress=False)
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "verify_lerobot.py"), "--dataset",
                           str(tmp_path / "export"), "--json", str(report)],
                          capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    if proc.returncode == EXIT_UNREACHABLE:
        pytest.skip(f"package index unreachable, lerobot-dataset cannot be installed: {output.strip()[-500:]}")
    assert proc.returncode == 0, output
    reports = json.loads(report.read_text())["reports"]
    assert [Path(r["dataset"]).name for r in reports[:2]] == ["seen", "unseen"]
    native = reports[2]  # a dataset recorded by lerobot-dataset, read with airplay's reader
    assert native["ok"] and "recorded by lerobot-dataset" in native["dataset"], native
    assert sum("frames equal lerobot-dataset's decode" in c["check"] for c in native["checks"]) == 2
    for r in reports[:2]:
        assert r["ok"], [c for c in r["checks"] if not c["ok"]]
        assert r["versions"]["lerobot-dataset"] == "0.4.4"
        assert Path(r["versions"]["torch_from"]).is_relative_to(Path(sys.prefix))  # airplay's torch, not a copy
        assert r["video_backend"] == "torchcodec"
        names = {c["check"] for c in r["checks"]}
        assert "delta_timestamps chunks and padding at episode edges" in names
        assert any(n.endswith("action bit-exact") for n in names)
        assert r["video_error"]["worst_psnr_db"] >= 30.0
    assert reports[0]["frames_checked"] == 21 + 13 + 17  # every frame of the 3 seen episodes
    assert any(GOAL_IMAGE_KEY in c["check"] for c in reports[1]["checks"])  # imagegoal videos too
