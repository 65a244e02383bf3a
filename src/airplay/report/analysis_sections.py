"""The report page's sections of the analysis commands' results: offline metrics
(``airplay eval-offline``), offline against closed loop (``airplay offline-vs-closed``),
execution-interval sweeps (``airplay sweep``) and disturbance tests (``airplay disturb``)."""

from __future__ import annotations

from typing import Any

from airplay.report.html import Report, _finite, _metric_cell, _num, _run_head, _table, esc


OFFLINE_UNITS = {"ade_cm": "ADE cm", "fde_cm": "FDE cm", "p95_cm": "P95 cm", "yaw_err_deg": "yaw err deg",
                 "motion_dir_err_deg": "motion dir deg", "dtw_cm": "DTW cm", "lateral_dir_err_pct": "lat dir err %",
                 "yaw_dir_err_pct": "yaw dir err %", "corner_fde_cm": "corner FDE cm", "lag_ade_cm": "lag ADE cm"}
"""The figures of an ``airplay eval-offline`` result (:mod:`airplay.eval.offline`), as its table names them."""


def render_offline(report: Report) -> str | None:
    runs = report.of_kind("offline")
    if not runs:
        return None
    head = ["", *(_run_head(i, r) for i, r in runs)]
    keys = [*OFFLINE_UNITS, "trajectories", "anchors"]
    overall = [[esc(OFFLINE_UNITS.get(k, k)), *(
        _num(r.data["result"].get("overall", {}).get(k)) if k in OFFLINE_UNITS else
        esc(r.data["result"].get("overall", {}).get(k, "–")) for _, r in runs)] for k in keys]
    baselines = list(dict.fromkeys(b for _, r in runs for b in (r.data["result"].get("baselines") or {})))
    for b in baselines:
        for m in ("ade", "fde"):
            cells = []
            for _, r in runs:
                skill = ((r.data["result"].get("baselines") or {}).get(b) or {}).get("skill") or {}
                cells.append(f"{float(skill[m]):+.2f}" if _finite(skill.get(m)) else "–")
            overall.append([f"skill vs {esc(b)}, {m.upper()}", *cells])
    parts = ['<p class="note">Open-loop errors of <code>airplay eval-offline</code> over the 0.2 s horizon, scenes '
             'weighted equally; skill = 1 − policy / baseline (&gt; 0: the policy is better).</p>',
             _table(head, overall, "metrics")]
    for i, r in runs:
        per_scene = r.data["result"].get("per_scene") or {}
        if not isinstance(per_scene, dict) or not per_scene:
            continue
        rows = [[esc(s), *(_num(d.get(k)) if isinstance(d, dict) else "–" for k in OFFLINE_UNITS)]
                for s, d in per_scene.items()]
        parts.append(f"<details><summary>{esc(r.label)} per scene</summary>"
                     f"{_table(['scene', *map(esc, OFFLINE_UNITS.values())], rows, 'metrics')}</details>")
    return "\n".join(parts)


def render_relate(report: Report) -> str | None:
    runs = report.of_kind("relate")
    if not runs:
        return None
    parts = []
    for _, r in runs:
        doc = r.data["result"]
        rows = [[esc(x.get("policy", "")), f"<code>{esc(x.get('offline', ''))}</code>",
                 f"<code>{esc(x.get('eval', ''))}</code>", _num(x.get("ade_cm")), _num(x.get("fde_cm")),
                 _num(x.get("sr"), 100, 1), _num(x.get("cr"), 100, 1)]
                for x in doc.get("rows", []) if isinstance(x, dict)]
        parts.append(f"<h3>{esc(r.label)}</h3>" + _table(["policy", "offline", "closed loop", "ADE cm", "FDE cm",
                                                           "SR %", "CR %"], rows))
        corr = doc.get("correlations") or {}
        closed = list(dict.fromkeys(c for v in corr.values() if isinstance(v, dict) for c in v))
        crow = []
        for off, by in corr.items():
            cells = []
            for c in closed:
                e = by.get(c) if isinstance(by, dict) else None
                if isinstance(e, dict) and _finite(e.get("rho")):
                    ci = e.get("ci95") or [None, None]
                    cells.append(f"{e['rho']:+.2f} <span class='ci'>[{_num(ci[0])}, {_num(ci[1])}]</span>")
                else:
                    cells.append('<span class="na">–</span>')
            crow.append([esc(off), *cells])
        parts.append("<p>Spearman ρ [95 % bootstrap interval over the pairs]:</p>"
                     + _table(["offline figure", *(esc(c) for c in closed)], crow, "metrics"))
    return "\n".join(parts)


def _ci_cell(e: Any, scale: float, decimals: int) -> str:
    return _metric_cell(e, scale, decimals, best=False)


def render_sweep(report: Report) -> str | None:
    runs = report.of_kind("sweep")
    if not runs:
        return None
    parts = ['<p class="note">SR and CR against the execution horizon H (each H\'s summary.json: 95 % bootstrap '
             'interval, scenes weighted equally in "all"); the per-H runs are columns of the tables above, the '
             'sweep\'s figures are under "Other figures".</p>']
    for _, r in runs:
        metrics = r.data["result"].get("metrics") or {}
        names = list(dict.fromkeys(n for n in ("all", *metrics) if n in metrics))
        horizons = r.data["result"].get("horizons") or []
        head = ["H", *(f"{esc(n)} {m}" for n in names for m in ("SR %", "CR %"))]
        rows = []
        for h in horizons:
            cells = []
            for n in names:
                for m in ("sr", "cr"):
                    entry = next((e for e in (metrics.get(n) or {}).get(m, []) if isinstance(e, dict)
                                  and e.get("horizon") == h), None)
                    cells.append(_ci_cell(entry, 100.0, 1))
            rows.append([esc(h), *cells])
        parts.append(f"<h3>{esc(r.label)} <span class='ci'>{esc(r.path)}</span></h3>" + _table(head, rows, "metrics"))
    return "\n".join(parts)


def render_disturb(report: Report) -> str | None:
    runs = report.of_kind("disturb")
    if not runs:
        return None
    parts = ['<p class="note">Local disturbance tests (<code>airplay disturb</code>): CR_ref and d_min_ref in the '
             'observation region after a push at anchors on the policy\'s clean flights, by clearance group and '
             'condition, with 95 % task-bootstrap intervals, scenes weighted equally.</p>']
    for _, r in runs:
        doc = r.data["result"]
        groups = doc.get("clearance_groups_m") or {}
        table = doc.get("table") if isinstance(doc.get("table"), dict) else {}
        rows = []
        for group, conds in table.items():
            bounds = groups.get(group) if isinstance(groups, dict) else None
            glabel = esc(group)
            if isinstance(bounds, list) and len(bounds) == 2:
                hi = "∞" if bounds[1] is None else bounds[1]
                glabel += f" <span class='ci'>[{esc(bounds[0])}, {esc(hi)}) m</span>"
            for cond, e in (conds or {}).items():
                e = e if isinstance(e, dict) else {}
                rows.append([glabel, esc(cond), _ci_cell(e.get("cr"), 100.0, 1), _ci_cell(e.get("d_min"), 1.0, 3),
                             "" if cond == "clean" else _ci_cell(e.get("delta_cr"), 100.0, 1),
                             esc(e.get("anchors", "–")), esc(e.get("scenes", "–"))])
        parts.append(f"<h3>{esc(r.label)} <span class='ci'>{esc(r.path)}</span></h3>" + _table(
            ["clearance group", "condition", "CR_ref %", "d_min_ref m", "ΔCR vs clean %", "anchors", "scenes"],
            rows, "metrics"))
    return "\n".join(parts)
