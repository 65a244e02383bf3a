"""The pages of docs/results/ are what ``docs/results/make.sh`` makes from the figures in
docs/results/data/ (the benchmarks' ``--json`` output): no page edited by hand, none out of date,
and every figures file used by a page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"


def test_make_sh_gives_back_every_committed_page(tmp_path):
    done = subprocess.run(["bash", str(RESULTS / "make.sh"), str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PY": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    made = sorted(p.name for p in tmp_path.glob("*.md"))
    committed = sorted(p.name for p in RESULTS.glob("*.md"))
    assert made == committed, f"pages made {made}, committed {committed}"
    for name in made:
        assert (tmp_path / name).read_text() == (RESULTS / name).read_text(), (
            f"docs/results/{name} differs from what docs/results/make.sh makes: run docs/results/make.sh")


def test_every_figures_file_has_a_page_and_a_header():
    script = (RESULTS / "make.sh").read_text()
    data = sorted(p.name for p in (RESULTS / "data").glob("*.json"))
    unused = [name for name in data if name not in script]
    assert not unused, f"figures files no page is made from: {unused}"
    for page in RESULTS.glob("*.md"):
        text = page.read_text()
        runs = text.count("\n## ")
        assert runs >= 1, page
        assert len(re.findall(r"^- date \d{4}-\d\d-\d\d [\d:]+ UTC, commit `[0-9a-f]{7,40}", text, re.M)) == runs, (
            f"{page.name}: every run names its date and commit")
        assert text.count("\n- machine: ") == runs and text.count("\n- command: `") == runs, page.name
