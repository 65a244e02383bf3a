"""``airplay view``: a rerun recording (.rrd) of an episode bag, a LeRobot dataset or eval results.

:mod:`~airplay.view.sources` tells the three inputs apart and reads them into :class:`~airplay.view.sources.Flight`
records (no rerun needed); :mod:`~airplay.view.rrd` logs them with the ``rerun-sdk`` package (imported
inside its functions, so the rest of airplay imports without it); :mod:`~airplay.view.command` is the
command. :mod:`~airplay.view.live` logs a running evaluation with the same functions (``airplay eval
--view``, the ROS graph's ``viewer`` node).
"""
