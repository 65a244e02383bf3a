"""``airplay view``: a rerun recording (.rrd) of an episode bag, a LeRobot dataset or eval results.

:mod:`~airplay.view.sources` tells the three inputs apart and reads them into :class:`~airplay.view.sources.Flight`
records (no rerun needed); :mod:`~airplay.view.rrd` logs them with the ``rerun-sdk`` package (imported
inside its functions, so the rest of airplay imports without it); :mod:`~airplay.view.command` is the
command. :mod:`~airplay.view.live` logs a running evaluation with the same functions (``airplay eval
--view``, the ROS graph's ``viewer`` node).
"""

import os

RERUN_ANALYTICS_ENV = "FORCE_RERUN_ANALYTICS"
"""rerun's own switch that turns its usage analytics on whatever else says (left to the user)."""


def rerun_analytics_off() -> None:
    """Keep rerun's usage analytics (events its SDK and viewer server send to tel.rerun.io) off in
    this process and the rerun processes it starts: nothing of airplay's sends a packet to anything
    but loopback. rerun turns them off where the ``CI`` environment variable is set (any value), so
    this sets ``CI=1`` unless it is set already or the user asked for analytics with
    ``FORCE_RERUN_ANALYTICS``. The web viewer page that a browser loads from airplay's server may
    still ask outside hosts for fonts and rerun's analytics (docs/data.md)."""
    if not os.environ.get(RERUN_ANALYTICS_ENV):
        os.environ.setdefault("CI", "1")


rerun_analytics_off()  # every module that imports rerun (rrd, live, command) is in this package
