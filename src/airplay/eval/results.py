"""The results format every runtime and policy writes (docs/evaluation.md).

An output directory holds:

- ``episodes.jsonl``: one JSON object per line, one line per episode, in evaluation order;
  the fields of :class:`airplay.eval.metrics.EpisodeResult` (lengths in m, times in s).
- ``summary.json``: the output of :func:`airplay.eval.aggregate.aggregate` (metric names in
  lower case: ne, sr, osr, spl, astar_spl, cr, ob, tts; ``mean`` and ``ci95``; overall and
  per scene) plus ``"meta"`` (policy, runtime, seed, protocol settings, ...), with
  ``"airplay_version"`` and ``"results_format"`` added. Undefined values (NaN, e.g. ``tts``
  without successes) are written as ``null``.

Both files are written atomically (temporary file in the same directory, then
``os.replace``), so a reader never sees a partial file.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from airplay.eval.metrics import METRICS, EpisodeResult

EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
RESULTS_FORMAT = 1


def _jsonable(x: Any) -> Any:
    """Builtin-typed copy of ``x`` for strict JSON: NaN/inf -> None, numpy -> Python, Path -> str."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Path):
        return str(x)
    return x


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_results(
    out_dir: str | Path,
    results: Iterable[EpisodeResult],
    summary: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``episodes.jsonl`` and ``summary.json`` into ``out_dir`` (created if needed).

    Returns the two paths. ``meta`` is stored under ``summary.json["meta"]``.
    """
    from airplay import __version__

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(_jsonable(r.to_dict()), allow_nan=False) for r in results]
    episodes_path = out / EPISODES_FILE
    _write_atomic(episodes_path, "".join(line + "\n" for line in lines))

    meta_out = {"airplay_version": __version__, "results_format": RESULTS_FORMAT, **dict(meta or {})}
    doc = {**dict(summary), "meta": meta_out}
    summary_path = out / SUMMARY_FILE
    _write_atomic(summary_path, json.dumps(_jsonable(doc), indent=2, allow_nan=False) + "\n")
    return episodes_path, summary_path


def read_episodes(path: str | Path) -> list[EpisodeResult]:
    """Read ``episodes.jsonl`` (``path`` is the file or its directory), in file order."""
    p = Path(path)
    if p.is_dir():
        p = p / EPISODES_FILE
    out = []
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(EpisodeResult.from_json(line))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{p}:{lineno}: {e}") from e
    return out


def read_summary(path: str | Path) -> dict[str, Any]:
    """Read ``summary.json`` (``path`` is the file or its directory); nulls stay None."""
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_FILE
    return json.loads(p.read_text(encoding="utf-8"))


# Table columns: (metric, header, scale, decimals).
_COLUMNS: tuple[tuple[str, str, float, int], ...] = (
    ("ne", "NE m", 1.0, 2),
    ("sr", "SR %", 100.0, 1),
    ("osr", "OSR %", 100.0, 1),
    ("spl", "SPL %", 100.0, 1),
    ("astar_spl", "A*-SPL %", 100.0, 1),
    ("cr", "CR %", 100.0, 1),
    ("ob", "OB %", 100.0, 1),
    ("tts", "TTS s", 1.0, 1),
)
assert tuple(c[0] for c in _COLUMNS) == METRICS
OVERALL_LABEL = "all (equal weight)"


def _num(v: Any, scale: float, decimals: int) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    s = f"{float(v) * scale:.{decimals}f}"
    if scale == 100.0 and s == f"{100.0:.{decimals}f}":
        s = "100"  # keep the percentage columns narrow
    return s


def _cell(entry: Mapping[str, Any] | None, scale: float, decimals: int, with_ci: bool) -> str:
    if entry is None:
        return "-"
    s = _num(entry.get("mean"), scale, decimals)
    ci = entry.get("ci95")
    if with_ci and ci is not None and s != "-" and all(c is not None and math.isfinite(c) for c in ci):
        s += f" [{_num(ci[0], scale, decimals)}, {_num(ci[1], scale, decimals)}]"
    return s


def format_table(summary: Mapping[str, Any]) -> str:
    """A fixed-width text table of a summary: one row per scene, then the equal-weight row.

    Columns NE m, SR %, OSR %, SPL %, A*-SPL %, CR %, OB %, TTS s, episodes; the overall row
    shows 95% intervals as ``mean [lo, hi]``; ``-`` marks undefined values.
    """
    header = ["scene"] + [c[1] for c in _COLUMNS] + ["episodes"]
    rows = []
    for scene, entry in summary.get("per_scene", {}).items():
        rows.append(
            [str(scene)]
            + [_cell(entry.get(m), sc, d, with_ci=False) for m, _, sc, d in _COLUMNS]
            + [str(entry.get("episodes", "-"))]
        )
    overall = summary.get("overall", {})
    last = (
        [OVERALL_LABEL]
        + [_cell(overall.get(m), sc, d, with_ci=True) for m, _, sc, d in _COLUMNS]
        + [str(summary.get("episodes", "-"))]
    )
    widths = [max(len(r[i]) for r in [header, *rows, last]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()

    rule = "-" * len(fmt(["-" * w for w in widths]))
    return "\n".join([fmt(header), rule, *(fmt(r) for r in rows), rule, fmt(last)])
