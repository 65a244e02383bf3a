"""AeroGround-style aerial/ground dual-view QA benchmark built from airplay scenes (issue 23).

A UAV and a ground agent observe the same place; questions ask a model to relate the two
views (object alignment, spatial understanding, spatial reasoning: the 11 tasks of
:mod:`airplay.aeroground.tasks`). The pipeline, one module per job:

* :mod:`.cameras` - aerial (nadir / oblique) and ground camera poses and projections;
* :mod:`.ground` - the ground agent: walkable-ground probing and pose sampling on the mesh;
* :mod:`.instances` - object instances (scene landmarks) and their per-view pixel masks;
* :mod:`.capture` - observation groups: rendered views plus ground truth (``capture``);
* :mod:`.generators` / :mod:`.draw` / :mod:`.build` - QA items with marked images (``build``);
* :mod:`.checker` - recomputes every item's answer from its stored evidence;
* :mod:`.parsing` / :mod:`.scoring` / :mod:`.prompts` / :mod:`.evaluate` - model evaluation (``eval``);
* :mod:`.pages` - the results table and the human-evaluation page.

Frames and units follow DESIGN.md section 3: ``map`` is ENU in metres, yaw counter-clockwise
from east in radians, camera optical frame OpenCV (z forward, x right, y down). No rclpy here.
"""
