"""The sections of the report page: each a function of the :class:`Report`, in :data:`SECTIONS`.

A section returns HTML (a string) or None when the loaded runs give it nothing to show, so
that a report of offline results alone has no empty closed-loop tables. A new result kind adds
its section with :func:`register_section`. All text from the inputs is HTML-escaped here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from airplay.episode_status import STATUS_COLOURS
from airplay.report.analysis_sections import render_disturb, render_offline, render_relate, render_sweep
from airplay.report.html import (Report, Section, _finite, _metric_cell, _num, _run_head, _table, esc,
                                 plot_anchor, slug)
from airplay.report.kinds import Run

# (metric, header, scale, decimals, higher is better) for the closed-loop metrics of airplay.eval.metrics.
EVAL_COLUMNS: tuple[tuple[str, str, float, int, bool], ...] = (
    ("sr", "SR %", 100.0, 1, True),
    ("spl", "SPL %", 100.0, 1, True),
    ("cr", "CR %", 100.0, 1, False),
    ("ne", "NE m", 1.0, 2, False),
    ("osr", "OSR %", 100.0, 1, True),
    ("astar_spl", "A*-SPL %", 100.0, 1, True),
    ("ob", "OB %", 100.0, 1, False),
    ("tts", "TTS s", 1.0, 1, False),
)
OPEN_METRICS = ("sr", "spl", "cr", "ne")
"""The metrics of the main table; the others are in a second, folded table (a click opens it)."""
MAX_OPEN_EPISODES = 200
MAX_RAW_CHARS = 20_000


# ---------------------------------------------------------------- problems and inputs

def render_problems(report: Report) -> str | None:
    items = [*report.problems, *(p for r in report.runs for p in r.problems)]
    if not items:
        return None
    lis = "".join(f"<li>{esc(p)}</li>" for p in items)
    return (f'<div class="problems"><p>{len(items)} problem(s) reading the inputs; everything else is shown.</p>'
            f"<ul>{lis}</ul></div>")


def render_inputs(report: Report) -> str | None:
    rows = []
    for i, r in enumerate(report.runs):
        d = r.data
        if r.kind == "eval":
            summary = d.get("summary") or {}
            what = (f"{esc(d.get('setting'))}, {len(d.get('scenes', []))} scene(s), "
                    f"{summary.get('episodes', len(d.get('episodes', [])))} episode(s)")
        elif r.kind == "offline":
            ov = d["result"].get("overall", {})
            what = f"{ov.get('trajectories', '?')} trajectories, {ov.get('anchors', '?')} anchors"
        elif r.kind == "relate":
            what = f"{len(d['result'].get('rows', []))} pairs"
        else:
            what = f"{len(r.figures)} figure(s), {len(r.raw)} other file(s)"
        status = f'<span class="warn">{len(r.problems)} problem(s)</span>' if r.problems else "ok"
        rows.append([_run_head(i, r), esc(r.kind), f"<code>{esc(r.path)}</code>", what, status])
    return _table(["column", "kind", "path", "contents", "read"], rows)


# ---------------------------------------------------------------- closed-loop metrics

def _group_summary(run: Run, scenes: set[str]) -> dict | None:
    """The overall metrics of ``run`` over ``scenes`` only (equal scene weights, the run's bootstrap)."""
    from airplay.eval.aggregate import aggregate

    cache = run.data.setdefault("_groups", {})
    key = tuple(sorted(scenes))
    if key not in cache:
        episodes = [e for e in run.data.get("episodes", []) if e.scene in scenes]
        agg = (run.data.get("summary") or {}).get("aggregation") or {}
        cache[key] = None
        if episodes:
            try:
                cache[key] = aggregate(episodes, success_radius_m=float(agg.get("success_radius_m", 1.0)),
                                       bootstrap=int(agg.get("bootstrap", 1000)),
                                       seed=int(agg.get("bootstrap_seed", 0)))["overall"]
            except (ValueError, TypeError):
                pass
    return cache[key]


def _scene_meta(runs: list[Run], scene: str) -> dict:
    for r in runs:
        info = r.data.get("scene_info", {}).get(scene)
        if info:
            return info
    return {}


def render_metrics(report: Report) -> str | None:
    evals = [(i, r) for i, r in report.of_kind("eval") if r.data.get("summary")]
    if not evals:
        return None
    parts = ['<p class="note">Mean and 95 % bootstrap interval; scenes weighted equally (per scene first, then '
             'the mean over scenes). Scene rows and the "all" row are the runs\' own summary.json; split and '
             'category rows are computed here from episodes.jsonl the same way. The best mean of a row is bold.</p>']
    settings = list(dict.fromkeys(r.data["setting"] for _, r in evals))
    for setting in settings:
        cols = [(i, r) for i, r in evals if r.data["setting"] == setting]
        runs = [r for _, r in cols]
        scenes = list(dict.fromkeys(s for r in runs for s in r.data["summary"].get("per_scene", {})))
        groups: list[tuple[str, str, Callable[[Run], Any]]] = [
            ("all (equal weight)", "all", lambda r: r.data["summary"].get("overall"))]
        for field_name in ("split", "category"):
            values = {s: _scene_meta(runs, s).get(field_name) for s in scenes}
            distinct = sorted({v for v in values.values() if v})
            if len(distinct) > 1 or (distinct and None in values.values()):
                for v in distinct:
                    members = {s for s, val in values.items() if val == v}
                    groups.append((f"{field_name}: {v}", "group",
                                   lambda r, m=members: _group_summary(r, m & set(r.data["summary"]["per_scene"]))))
        for s in scenes:
            info = _scene_meta(runs, s)
            tag = ", ".join(str(info[k]) for k in ("category", "split") if info.get(k))
            label = f'<a href="#scene-{slug(s)}">{esc(s)}</a>' + (f' <span class="ci">{esc(tag)}</span>' if tag else "")
            groups.append((label, "scene", lambda r, s=s: r.data["summary"].get("per_scene", {}).get(s)))
        entries = [[get(r) for r in runs] for _, _, get in groups]
        if len(settings) > 1:
            parts.append(f"<h3>setting: {esc(setting)}</h3>")
        head = [_run_head(i, r) for i, r in cols]
        for metrics, opened in ((OPEN_METRICS, True), (tuple(c[0] for c in EVAL_COLUMNS if c[0] not in OPEN_METRICS),
                                                         False)):
            columns = [c for c in EVAL_COLUMNS if c[0] in metrics]
            top = "<th rowspan=\"2\"></th>" + "".join(
                f'<th colspan="{len(cols)}" class="group">{esc(name)}</th>' for _, name, *_ in columns)
            second = "".join(f'<th class="{"first" if k == 0 else ""}">{h}</th>'
                             for _ in columns for k, h in enumerate(head))
            body = []
            for (label, cls, _), row in zip(groups, entries):
                cells = []
                for metric, _, scale, decimals, higher in columns:
                    means = [e[metric].get("mean") if isinstance(e, dict) and isinstance(e.get(metric), dict)
                             else None for e in row]
                    finite = [m for m in means if _finite(m)]
                    best = (max if higher else min)(finite) if len(finite) > 1 and len(set(finite)) > 1 else None
                    cells += [f'<td class="{"first" if k == 0 else ""}">' + _metric_cell(
                        e.get(metric) if isinstance(e, dict) else None, scale, decimals,
                        best is not None and m == best) + "</td>" for k, (e, m) in enumerate(zip(row, means))]
                name_cell = label if cls == "scene" else f"<i>{esc(label)}</i>"
                body.append(f"<tr><td>{name_cell}</td>{''.join(cells)}</tr>")
            table = (f'<table class="metrics wide"><thead><tr>{top}</tr><tr>{second}</tr></thead>'
                     f"<tbody>{''.join(body)}</tbody></table>")
            if opened:
                parts.append(table)
            else:
                parts.append(f'<details class="metric"><summary>{", ".join(esc(c[1]) for c in columns)}'
                             f"</summary>{table}</details>")
        counts = [[label if cls == "scene" else f"<i>{esc(label)}</i>", *(
            esc(r.data["summary"].get("episodes", "–")) if cls == "all" else
            esc(e.get("episodes", "–")) if isinstance(e, dict) and cls == "scene" else "" for r, e in zip(runs, row))]
            for (label, cls, _), row in zip(groups, entries)]
        parts.append(f'<details class="metric"><summary>episodes</summary>'
                     f'{_table(["", *head], counts, "metrics")}</details>')
    return "\n".join(parts)


# ---------------------------------------------------------------- trajectory plots

def render_plots(report: Report) -> str | None:
    evals = report.of_kind("eval")
    scenes = list(dict.fromkeys(s for _, r in evals for s in r.data.get("scenes", [])))
    if not scenes:
        return None
    parts = ['<p class="note">Executed trajectories over the obstacles of a horizontal slice at mid flight height '
             '(grey), coloured by status: starts as circles, goals as stars with the success radius, ends of '
             'failures as crosses (<code>airplay.eval.plots</code>). Where the scene folder named in summary.json '
             'is on this machine, the first picture is the splat seen from above (<code>airplay.report.topdown</code>).'
             '</p>']
    for scene in scenes:
        figs = []
        folder = next((r.data.get("scene_dirs", {}).get(scene) for _, r in evals
                       if r.data.get("scene_dirs", {}).get(scene)), None)
        if report.topdown and folder is not None:
            from airplay.report.topdown import topdown_png

            try:
                img = report.image_bytes(topdown_png(folder), f"{scene} from above", loading="eager")
                figs.append(f'<figure id="topdown-{slug(scene)}">{img}<figcaption>{esc(scene)} from above'
                            f"</figcaption></figure>")
            except Exception as err:  # noqa: BLE001 - the picture is an extra; its failure is reported
                report.problems.append(f"{folder}: no top-down render ({type(err).__name__}: {err})")
        for i, r in evals:
            if scene not in r.data.get("scenes", []):
                continue
            png = r.data["plots"].get(scene)
            body = (report.image(png, f"{r.label}: {scene}", loading="eager") if png else
                    f'<div class="missing">no plot: <code>{esc(r.path / f"{scene}_trajectories.png")}</code></div>')
            figs.append(f'<figure id="{plot_anchor(i, scene)}">{body}<figcaption>{esc(r.label)}</figcaption></figure>')
        parts.append(f'<h3 id="scene-{slug(scene)}">{esc(scene)}</h3><div class="grid">{"".join(figs)}</div>')
    return "\n".join(parts)


# ---------------------------------------------------------------- episodes

def render_episodes(report: Report) -> str | None:
    from airplay.eval.metrics import episode_metrics

    evals = [(i, r) for i, r in report.of_kind("eval") if r.data.get("episodes")]
    if not evals:
        return None
    parts = []
    head = ["#", "scene", "task", "status", "steps", "path m", "A* m", "straight m", "final dist m", "min dist m",
            "SPL %", "A*-SPL %", "TTS s", "error"]
    for i, r in evals:
        radius = float(((r.data.get("summary") or {}).get("aggregation") or {}).get("success_radius_m", 1.0))
        rows = []
        for k, e in enumerate(r.data["episodes"]):
            m = episode_metrics(e, radius)
            colour = STATUS_COLOURS.get(e.status, "#000")
            scene = esc(e.scene)
            link = (f'<a href="#{plot_anchor(i, e.scene)}">{scene}</a>' if r.data["plots"].get(e.scene) else scene)
            rows.append([str(k), link, esc(e.task_id),
                         f'<span class="status" style="background:{colour}">{esc(e.status)}</span>',
                         str(e.steps), _num(e.path_length_m), _num(e.shortest_length_m), _num(e.euclidean_distance_m),
                         _num(e.final_distance_m), _num(e.min_distance_m), _num(m["spl"], 100, 1),
                         _num(m["astar_spl"], 100, 1), _num(e.time_to_success_s, 1, 2), esc(e.error or "")])
        n = len(rows)
        opened = " open" if n <= MAX_OPEN_EPISODES else ""
        counts: dict[str, int] = {}
        for e in r.data["episodes"]:
            counts[e.status] = counts.get(e.status, 0) + 1
        tally = ", ".join(f"{s} {c}" for s, c in counts.items())
        parts.append(f'<details{opened} id="episodes-{i}"><summary>{esc(r.label)}: {n} episodes ({esc(tally)})'
                     f"</summary>{_table(head, rows, 'episodes')}</details>")
    return "\n".join(parts)


# ---------------------------------------------------------------- offline results


# ---------------------------------------------------------------- sweeps and disturbance tests


# ---------------------------------------------------------------- other figures, raw files, metadata

def render_figures(report: Report) -> str | None:
    figs = [(r, p) for r in report.runs for p in r.figures]
    if not figs:
        return None
    items = "".join(f'<figure id="fig-{slug(str(p))}">{report.image(p, p.name)}<figcaption>{esc(r.label)}: '
                    f"<code>{esc(p.name)}</code></figcaption></figure>" for r, p in figs)
    return f'<div class="grid">{items}</div>'


def render_raw(report: Report) -> str | None:
    files = [(r, p) for r in report.runs for p in r.raw]
    if not files:
        return None
    parts = ['<p class="note">JSON files beside the results that this airplay does not read, as they are.</p>']
    for r, p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            text = f"(not readable: {err})"
        if len(text) > MAX_RAW_CHARS:
            text = text[:MAX_RAW_CHARS] + f"\n... ({len(text) - MAX_RAW_CHARS} more characters in the file)"
        parts.append(f"<details><summary><code>{esc(p)}</code></summary><pre>{esc(text)}</pre></details>")
    return "\n".join(parts)


FIRST_META_KEYS = ("policy", "setting", "checkpoint", "execution_horizon", "seed", "commit", "command",
                   "machine.host", "machine.cpu", "machine.cpus", "machine.os", "machine.python", "runtime",
                   "airplay_version", "results_format", "episodes_per_scene", "scenes", "wall_time_s")
RECORDED_SINCE = {"commit", "command", "machine.host"}
"""Keys older results lack: shown as 'not recorded' rather than blank."""


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and key != "scene_info":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _meta_value(v: Any) -> str:
    if isinstance(v, list):
        return "<br>".join(esc(x) for x in v) if all(not isinstance(x, (dict, list)) for x in v) else esc(
            json.dumps(v))
    if isinstance(v, dict):
        return esc(json.dumps(v))
    if v is None:
        return '<span class="na">none</span>'
    return esc(v)


def render_metadata(report: Report) -> str | None:
    runs = [(i, r) for i, r in enumerate(report.runs) if r.data.get("meta")]
    if not runs:
        return None
    flat = [_flatten(r.data["meta"]) for _, r in runs]
    keys = [k for k in FIRST_META_KEYS if any(k in f for f in flat) or k in RECORDED_SINCE]
    keys += [k for k in dict.fromkeys(k for f in flat for k in f) if k not in keys]
    rows = []
    for k in keys:
        cells = []
        for f in flat:
            if k in f:
                cells.append(_meta_value(f[k]))
            else:
                cells.append('<span class="na">not recorded</span>' if k in RECORDED_SINCE else "")
        rows.append([f"<code>{esc(k)}</code>", *cells])
    return _table(["", *(_run_head(i, r) for i, r in runs)], rows, "meta")


SECTIONS: list[Section] = [
    Section("problems", "Problems", render_problems),
    Section("inputs", "Inputs", render_inputs),
    Section("metrics", "Closed-loop metrics", render_metrics),
    Section("plots", "Trajectories", render_plots),
    Section("episodes", "Episodes", render_episodes),
    Section("sweep", "Execution-interval sweeps", render_sweep),
    Section("disturb", "Disturbance tests", render_disturb),
    Section("offline", "Offline metrics", render_offline),
    Section("relate", "Offline vs closed loop", render_relate),
    Section("figures", "Other figures", render_figures),
    Section("raw", "Other files", render_raw),
    Section("metadata", "Run metadata", render_metadata),
]


def register_section(section: Section, before: str = "figures") -> None:
    """Add a section (replacing one with the same id) before the section ``before``."""
    SECTIONS[:] = [s for s in SECTIONS if s.id != section.id]
    at = next((k for k, s in enumerate(SECTIONS) if s.id == before), len(SECTIONS))
    SECTIONS.insert(at, section)
