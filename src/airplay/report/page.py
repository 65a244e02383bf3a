"""The report page: one HTML file with inline CSS and ``data:`` images, no script, nothing fetched.

:func:`build_report` loads the inputs (:func:`airplay.report.kinds.load_inputs`, which raises
:class:`~airplay.report.kinds.ReportInputError` before anything is written) and renders the
sections of :data:`airplay.report.sections.SECTIONS`; :func:`write_report` writes the page
through a temporary file in the same folder and ``os.replace``, so that ``-o`` never holds a
half-written page. A section that fails on an input it did not expect becomes a message in the
page naming the section and the error; the other sections still render.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from airplay.report import sections as _sections
from airplay.report.kinds import Run, load_inputs
from airplay.report.html import Report, esc

CSS = """
:root { --fg: #1d2329; --muted: #5d6873; --line: #d5dbe1; --bg-alt: #f4f6f8; --accent: #24598f; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.2rem 1.6rem 3rem; max-width: 1500px; }
h1 { font-size: 1.55rem; margin: 0 0 .2rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .6rem; padding-bottom: .25rem; border-bottom: 2px solid var(--line); }
h3 { font-size: 1.02rem; margin: 1.3rem 0 .4rem; }
a { color: var(--accent); }
nav { margin: .6rem 0 1rem; display: flex; flex-wrap: wrap; gap: .3rem .9rem; }
.sub, .note, .ci { color: var(--muted); }
.note { margin: .2rem 0 .7rem; max-width: 110ch; }
.ci { font-size: .85em; white-space: nowrap; }
.na { color: #a0a8b0; }
table { border-collapse: collapse; margin: .3rem 0 .9rem; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: .22rem .5rem; text-align: left; vertical-align: top; }
thead th { background: var(--bg-alt); position: sticky; top: 0; }
table.metrics td:not(:first-child), table.episodes td { text-align: right; white-space: nowrap; }
table.episodes td:nth-child(2), table.episodes td:nth-child(3), table.episodes td:last-child { text-align: left; }
table.wide th.group { text-align: center; }
table.metrics td:first-child { white-space: nowrap; }
table.wide td:not(:first-child) .ci { display: block; }
table.wide .first { border-left: 2px solid #9aa5b1; }
table.meta td { max-width: 60ch; overflow-wrap: anywhere; }
tbody tr:nth-child(even) { background: #fafbfc; }
details { margin: .25rem 0; }
summary { cursor: pointer; font-weight: 600; padding: .15rem 0; }
details.metric > summary { font-weight: 600; color: var(--accent); }
.status { color: #fff; border-radius: 3px; padding: 0 .35rem; font-size: .85em; }
.problems { border: 1px solid #e0b252; background: #fff8e6; padding: .4rem 1rem; border-radius: 4px; }
.problems li { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .85em; overflow-wrap: anywhere; }
.warn { color: #a35a00; font-weight: 600; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: .8rem; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 4px; padding: .4rem; background: #fff; }
figure img { width: 100%; height: auto; display: block; }
figcaption { text-align: center; color: var(--muted); padding-top: .2rem; }
.missing { padding: 3rem 1rem; text-align: center; background: var(--bg-alt); color: #a35a00; }
pre { background: var(--bg-alt); padding: .6rem; overflow: auto; max-height: 30rem; font-size: .85em; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .9em; overflow-wrap: anywhere; }
:target { outline: 3px solid #e0b252; }
"""


def render_page(runs: list[Run], title: str = "airplay report", topdown: bool = True) -> tuple[str, list[str]]:
    """The page's HTML and every problem it shows (of the inputs and of the sections)."""
    from airplay import __version__

    report = Report(runs, topdown=topdown)
    body, nav = [], []
    for section in _sections.SECTIONS:
        try:
            content = section.render(report)
        except Exception as err:  # noqa: BLE001 - one section's surprise must not lose the page
            report.problems.append(f"section {section.title!r}: not rendered ({type(err).__name__}: {err})")
            content = None
        if content is None:
            continue
        body.append(f'<section id="{section.id}"><h2>{esc(section.title)}</h2>\n{content}\n</section>')
        nav.append(f'<a href="#{section.id}">{esc(section.title)}</a>')
    problems = [*report.problems, *(p for r in runs for p in r.problems)]
    if report.problems:  # a section failed after the problems section was rendered: show them first
        body.insert(0, '<section id="section-problems"><h2>Sections not rendered</h2><ul>'
                       + "".join(f"<li>{esc(p)}</li>" for p in report.problems) + "</ul></section>")
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
<header><h1>{esc(title)}</h1>
<div class="sub">{len(runs)} result(s); made by <code>airplay report</code> (airplay {esc(__version__)})
on {esc(stamp)}</div>
<nav>{''.join(nav)}</nav></header>
{chr(10).join(body)}
</body>
</html>
"""
    return page, problems


def build_report(paths: list[str | Path], title: str = "airplay report",
                 topdown: bool = True) -> tuple[str, list[str]]:
    """Load ``paths`` and render the page; ``ReportInputError`` for a path that holds no results."""
    return render_page(load_inputs(paths), title, topdown)


def write_report(page: str, out: str | Path) -> Path:
    """Write ``page`` to ``out`` atomically (its folder created if needed)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
