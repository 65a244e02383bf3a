"""The pieces every section of the report page is made of: :class:`Report` (what a section
sees), :class:`Section`, HTML escaping and anchors, number and table cells. All text from the
inputs goes through :func:`esc`."""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airplay.report.kinds import Run


@dataclass
class Report:
    """What the sections see: the runs, and the embedded-image cache."""

    runs: list[Run]
    topdown: bool = True
    """Render each scene from above where its folder is on this machine (:mod:`airplay.report.topdown`)."""
    problems: list[str] = field(default_factory=list)
    _images: dict[Path, str] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[tuple[int, Run]]:
        return [(i, r) for i, r in enumerate(self.runs) if r.kind == kind]

    def image(self, path: Path, alt: str, **attrs: str) -> str:
        """An ``<img>`` with the PNG embedded as a data: URI."""
        if path not in self._images:
            self._images[path] = base64.b64encode(path.read_bytes()).decode("ascii")
        return self.image_bytes(self._images[path], alt, **attrs)

    @staticmethod
    def image_bytes(data: bytes | str, alt: str, **attrs: str) -> str:
        """An ``<img>`` of PNG ``data`` (bytes, or already base64 text)."""
        b64 = data if isinstance(data, str) else base64.b64encode(data).decode("ascii")
        extra = "".join(f' {k}="{esc(v)}"' for k, v in attrs.items())
        return f'<img src="data:image/png;base64,{b64}" alt="{esc(alt)}"{extra}>'


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    render: Callable[[Report], str | None]


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(text)).strip("-") or "x"


def plot_anchor(run_index: int, scene: str) -> str:
    return f"plot-{run_index}-{slug(scene)}"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _num(v: Any, scale: float = 1.0, decimals: int = 2) -> str:
    return f"{float(v) * scale:.{decimals}f}" if _finite(v) else "–"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """An HTML table; cells are already HTML."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _run_head(i: int, run: Run) -> str:
    return f'<span title="{esc(run.path)}">{esc(run.label)}</span>'


def _metric_cell(entry: Any, scale: float, decimals: int, best: bool) -> str:
    if not isinstance(entry, dict) or not _finite(entry.get("mean")):
        return '<span class="na">–</span>'
    s = _num(entry["mean"], scale, decimals)
    ci = entry.get("ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_finite(c) for c in ci):
        s += f' <span class="ci">[{_num(ci[0], scale, decimals)}, {_num(ci[1], scale, decimals)}]</span>'
    return f"<b>{s}</b>" if best else s
