"""Level of detail for large splats: a tree of merged Gaussians and a per-view cut.

In the spirit of "A Hierarchical 3D Gaussian Representation for Real-Time Rendering of Very
Large Datasets" (Kerbl et al., SIGGRAPH 2024). At the small images the vehicle camera is
rendered at (64x64, focal ~32 px) nearly every Gaussian beyond a few metres is sub-pixel;
drawing one merged Gaussian for a cluster of them costs a fraction and looks the same.

**Hierarchy** (:func:`build_hierarchy`, once per splat, cached on disk by
:func:`hierarchy_for`): a binary k-d tree over the means (median split along the longest
axis of each cell's box), its ``2N - 1`` nodes numbered in depth-first preorder; the leaves
are the original Gaussians, and each internal node holds one Gaussian merged from its two
children by moment matching with weights ``w`` = coverage = opacity x mean projected area:

* ``w_p = w_a + w_b``; mean ``mu_p = (w_a mu_a + w_b mu_b) / w_p``;
* covariance ``Sigma_p = sum_c w_c (Sigma_c + (mu_c - mu_p)(mu_c - mu_p)^T) / w_p``;
* SH coefficients ``sh_p = sum_c w_c sh_c / w_p``;
* opacity chosen so that coverage is kept: ``o_p = min(OPACITY_CAP, w_p / A(Sigma_p))``.
  Above 1 is allowed (the renderer caps alpha at 0.99): a cluster of overlapping leaves is
  then drawn solid in its core; capping at 1 leaves see-through seams between neighbouring
  merged Gaussians (measured: 23 vs 33 dB at 2 px on the 64x64 vegetation scene).

Child weights are their subtrees' total weights, so a node's moments are exactly the
weighted moments of all the leaves under it. ``A`` is the mean over view directions of the
projected area of the ellipsoid of standard deviations (a, b, c), by Knud Thomsen's formula
for the surface area / 4: ``pi ((ab^p + ac^p + bc^p) / 3)^(1/p)``, p = 1.6 (flat disk:
pi ab / 2, sphere: pi r^2). The merged covariance is turned back into scales + a unit
quaternion by eigendecomposition. Each node also has a bounding sphere of the means under
it, the largest leaf scale under it (for culling) and a *size*: 2 x the largest standard
deviation of its merged Gaussian, or of any node below if larger (so sizes shrink going down).

**Cut** (per view, numba): from the root, a node whose bounding sphere (grown by its
leaves' 3-sigma extents and the renderer's pixel margins, conservatively) lies outside the
view frustum or the near/far range is skipped with all below it; a node whose size
projected at its nearest point, ``fx * size / (distance to its sphere)``, is at most
``lod_px`` pixels is drawn as its merged Gaussian; otherwise its children are visited.
Leaves reached are drawn. The selected Gaussians are gathered, leaves in splat order first
(depth ties then break as in the exact renderer), and rendered by the exact CPU pipeline,
whose own cull drops the few it would drop anyway. With ``lod_px`` tiny the cut is exactly
the Gaussians the exact renderer keeps and the image is the exact image, bit for bit.

**Pose cells** (:func:`render_lod_cell_cpu`; protocol.yaml ``render: lod_cell_m`` /
``lod_cell_deg``, 0.5 m x 15 deg as shipped, 0 = off): the vehicle camera is gimbal-stabilised
(only position and heading change) and moves a few cm per frame, so one cut can serve many
frames. The cut is made per cell (floor(x / c), floor(y / c), floor(z / c), floor(yaw / b)) and
valid for every pose in it: the traversal runs from the camera at the cell's centre and central
heading, each node's sphere grown, for the frustum test, by how far mapping any camera of the
cell onto that one can move a point (the cell's half-diagonal plus the mount offset's sweep,
plus 2 sin(b / 4) x the point's horizontal distance, for the heading), and the LOD test measures
the distance from the nearest point of the box of the cell's camera centres. No node is then
coarser than ``lod_px`` from any pose of the cell (so the image may be finer than the per-view
cut's, never coarser) and nothing any of them would draw is culled; each frame draws the cell's
cut from its exact view through the exact pipeline. The cut depends on the cell alone, so the
image is a function of the pose, whatever was rendered before; each thread keeps the gathered
cuts of its last :data:`CELL_CACHE_SIZE` cells.

Modules: :mod:`~airplay.render.lod.hierarchy` (the tree, its disk cache),
:mod:`~airplay.render.lod.cut` (the per-view cut, :func:`render_lod_cpu`),
:mod:`~airplay.render.lod.cells` (pose cells, :func:`render_lod_cell_cpu`, :class:`CellRenderer`);
this package exports their public names.
"""


from airplay.render.lod.cells import (CELL_CACHE_SIZE, CellRenderer, CellSettings, SharedCellCache,
                                      cell_cut_arrays, cell_view, check_cell, clear_cell_cache, pose_cell,
                                      render_lod_cell_cpu)
from airplay.render.lod.cut import check_lod_px, cut_arrays, render_lod_cpu, select
from airplay.render.lod.hierarchy import (CACHE_VERSION, OPACITY_CAP, ROW_FLOATS, GaussianHierarchy, area_proxy,
                                          build_hierarchy, covariances, hierarchy_for, row_width, splat_key)

__all__ = ["CACHE_VERSION", "CELL_CACHE_SIZE", "OPACITY_CAP", "ROW_FLOATS", "CellRenderer", "CellSettings",
           "SharedCellCache", "GaussianHierarchy", "area_proxy", "build_hierarchy", "cell_cut_arrays", "cell_view",
           "check_cell", "check_lod_px", "clear_cell_cache", "covariances", "cut_arrays", "hierarchy_for", "pose_cell",
           "render_lod_cell_cpu", "render_lod_cpu", "row_width", "select", "splat_key"]
