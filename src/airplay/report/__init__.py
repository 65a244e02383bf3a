"""``airplay report RESULTS... -o report.html``: one self-contained HTML page from results folders.

- :mod:`airplay.report.kinds`: what a path holds. Each result kind (``eval``, ``sweep`` and ``disturb``
  folders, ``eval-offline`` JSON files and ``offline-vs-closed`` relate.json files, folders of result folders) is a
  :class:`~airplay.report.kinds.Kind` in :data:`~airplay.report.kinds.KINDS`, recognised by its files;
  a new kind is one more entry there (:func:`~airplay.report.kinds.register_kind`).
- :mod:`airplay.report.sections`: the page's sections, each a function of all loaded runs in
  :data:`~airplay.report.sections.SECTIONS`; a section with nothing to show is left out. The
  analysis commands' sections (offline, offline vs closed loop, sweeps, disturbance tests) are in
  :mod:`airplay.report.analysis_sections`, and what every section is made of (the
  :class:`~airplay.report.html.Report` it sees, escaping, cells, tables) in :mod:`airplay.report.html`.
- :mod:`airplay.report.page`: the page (inline CSS, images as ``data:`` URIs, no script, nothing
  fetched at view time), written atomically.

Problems with an input (another results format version, a missing plot, an empty run, an
unreadable line) are shown at the top of the page, each naming its file, and printed on stderr;
the rest still renders. A path that holds no recognised results is an error and nothing is written.
"""
