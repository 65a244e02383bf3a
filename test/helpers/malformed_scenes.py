"""Malformed scene inputs: each case of :data:`CASES` breaks a valid scene folder one way (its
scene.yaml, splat or collision mesh) and names the file and the words the error must give
(test_scene_validation, test_world_lazy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from airplay.scene.ply_io import read_ply_vertices


def write_raw_ply(path: Path, props: dict[str, np.ndarray], fmt: str = "binary_little_endian") -> None:
    n = len(next(iter(props.values())))
    header = f"ply\nformat {fmt} 1.0\nelement vertex {n}\n"
    header += "".join(f"property float {k}\n" for k in props) + "end_header\n"
    table = np.zeros(n, dtype=[(k, "<f4") for k in props])
    for k, v in props.items():
        table[k] = v
    path.write_bytes(header.encode() + table.tobytes())


def edit_splat(folder: Path, edit) -> None:
    """Read the valid splat.ply's properties, let ``edit`` change the dict, write it back."""
    props = read_ply_vertices(folder / "splat.ply")
    props = {k: v.copy() for k, v in props.items()}
    edit(props)
    write_raw_ply(folder / "splat.ply", props)


def edit_yaml(folder: Path, edit) -> None:
    data = yaml.safe_load((folder / "scene.yaml").read_text())
    edit(data)
    (folder / "scene.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def _truncate(folder: Path) -> None:
    raw = (folder / "splat.ply").read_bytes()
    (folder / "splat.ply").write_bytes(raw[: len(raw) - 100])


def _rename(props, old, new):
    props[new] = props.pop(old)


def _degenerate_mesh(folder: Path) -> None:
    (folder / "collision.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 1 1\n2 2 2\n3 0 1 2\n"
    )


def _empty_mesh(folder: Path) -> None:
    (folder / "collision.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 0\nproperty list uchar int vertex_indices\nend_header\n"
    )


def far_mesh(folder: Path) -> None:
    import trimesh

    mesh = trimesh.creation.box(extents=(4.0, 4.0, 4.0))
    mesh.apply_translation((500.0, 0.0, 2.0))
    mesh.export(folder / "collision.ply")


def _set(path: list[str], value):
    def edit(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _delete(path: list[str]):
    def edit(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


# (id, how to break the scene, file expected in the message, words expected in the message)
CASES = [
    ("missing scene.yaml", lambda f: (f / "scene.yaml").unlink(), "scene.yaml", "file not found"),
    ("bad yaml syntax", lambda f: (f / "scene.yaml").write_text("name: [unclosed\ncategory: indoor\n"),
     "scene.yaml", "invalid YAML at line"),
    ("empty yaml", lambda f: (f / "scene.yaml").write_text(""), "scene.yaml", "empty"),
    ("yaml not a mapping", lambda f: (f / "scene.yaml").write_text("- a\n- b\n"), "scene.yaml", "mapping"),
    ("missing navigable", lambda f: edit_yaml(f, _delete(["navigable"])), "scene.yaml", "navigable: required field"),
    ("unknown category", lambda f: edit_yaml(f, _set(["category"], "desert")), "scene.yaml", "category: must be one of"),
    ("z band inverted", lambda f: edit_yaml(f, _set(["navigable", "z_max"], 0.2)), "scene.yaml", "navigable.z_max"),
    ("polygon of two points", lambda f: edit_yaml(f, _set(["navigable", "polygon"], [[0, 0], [1, 1]])),
     "scene.yaml", "navigable.polygon"),
    ("collinear polygon", lambda f: edit_yaml(f, _set(["navigable", "polygon"], [[0, 0], [1, 1], [2, 2]])),
     "scene.yaml", "zero area"),
    ("negative scale", lambda f: edit_yaml(f, _set(["splat", "transform"], {"scale": -1.0})),
     "scene.yaml", "splat.transform.scale"),
    ("non-unit rotation", lambda f: edit_yaml(f, _set(["splat", "transform"], {"rotation_xyzw": [0, 0, 0, 2]})),
     "scene.yaml", "unit length"),
    ("unknown convention", lambda f: edit_yaml(f, _set(["splat", "convention"], "y_sideways")),
     "scene.yaml", "splat.convention"),
    ("wrong splat suffix", lambda f: edit_yaml(f, _set(["splat", "file"], "splat.xyz")), "scene.yaml", "suffix"),
    ("missing splat file", lambda f: (f / "splat.ply").unlink(), "splat.ply", "file not found"),
    ("missing mesh file", lambda f: (f / "collision.ply").unlink(), "collision.ply", "file not found"),
    ("not a ply", lambda f: (f / "splat.ply").write_bytes(b"GIF89a not a ply"), "splat.ply", "not a PLY"),
    ("truncated ply", _truncate, "splat.ply", "truncated"),
    ("header without end", lambda f: (f / "splat.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\n"),
     "splat.ply", "end_header"),
    ("missing opacity", lambda f: edit_splat(f, lambda p: p.pop("opacity")), "splat.ply", "missing PLY properties ['opacity']"),
    ("misnamed scale", lambda f: edit_splat(f, lambda p: _rename(p, "scale_0", "scale0")), "splat.ply", "scale_0"),
    ("wrong f_rest count", lambda f: edit_splat(f, lambda p: p.update({f"f_rest_{i}": p["x"] * 0 for i in range(10)})),
     "splat.ply", "10 f_rest_* properties"),
    ("gap in f_rest numbering",
     lambda f: edit_splat(f, lambda p: p.update({f"f_rest_{i if i < 8 else 9}": p["x"] * 0 for i in range(9)})),
     "splat.ply", "numbered"),
    ("nan position", lambda f: edit_splat(f, lambda p: p["x"].__setitem__(5, np.nan)), "splat.ply", "NaN or infinite x/y/z"),
    ("infinite scale", lambda f: edit_splat(f, lambda p: p["scale_1"].__setitem__(3, np.inf)), "splat.ply", "scale_*"),
    ("nan opacity", lambda f: edit_splat(f, lambda p: p["opacity"].__setitem__(0, np.nan)), "splat.ply", "opacity"),
    ("zero quaternion",
     lambda f: edit_splat(f, lambda p: [p[f"rot_{i}"].__setitem__(7, 0.0) for i in range(4)]),
     "splat.ply", "zero norm (first: index 7)"),
    ("empty vertex element", lambda f: write_raw_ply(f / "splat.ply", {"x": np.zeros(0)}), "splat.ply", "0 entries"),
    ("degenerate mesh", _degenerate_mesh, "collision.ply", "degenerate"),
    ("empty mesh", _empty_mesh, "collision.ply", "empty"),
    ("splat and mesh apart", far_mesh, "splat.ply", "do not overlap"),
    ("truncated .splat", lambda f: (edit_yaml(f, _set(["splat", "file"], "s.splat")),
                                    (f / "s.splat").write_bytes(b"\0" * 33)), "s.splat", "multiple of 32"),
]
