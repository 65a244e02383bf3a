"""``airplay scene check``: validate a scene folder and summarise it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from airplay.scene.scene import Scene, overlap_fraction


@dataclass(frozen=True)
class SceneSummary:
    """Figures a user checks before flying in a scene (metres, map frame)."""

    name: str
    category: str
    split: str
    gaussians: int
    sh_degree: int
    splat_bounds: tuple[list[float], list[float]]
    mesh_vertices: int
    mesh_faces: int
    mesh_bounds: tuple[list[float], list[float]]
    mesh_watertight: bool
    mesh_components: int
    mesh_watertight_components: int
    overlap_fraction: float
    navigable_area_m2: float
    height_band_m: tuple[float, float]

    def as_rows(self) -> list[tuple[str, str]]:
        fmt = lambda b: f"[{', '.join(f'{v:.2f}' for v in b[0])}] .. [{', '.join(f'{v:.2f}' for v in b[1])}]"  # noqa: E731
        return [
            ("scene", f"{self.name} ({self.category}, {self.split})"),
            ("gaussians", f"{self.gaussians:,}"),
            ("SH degree", str(self.sh_degree)),
            ("splat bounds (m)", fmt(self.splat_bounds)),
            ("mesh", f"{self.mesh_vertices:,} vertices, {self.mesh_faces:,} faces"),
            ("mesh bounds (m)", fmt(self.mesh_bounds)),
            ("mesh watertight", f"{'yes' if self.mesh_watertight else 'no'} "
                                f"({self.mesh_watertight_components}/{self.mesh_components} components closed)"),
            ("splat within mesh bounds", f"{self.overlap_fraction:.1%}"),
            ("navigable area (m^2)", f"{self.navigable_area_m2:.1f}"),
            ("flight height band (m)", f"{self.height_band_m[0]:.2f} .. {self.height_band_m[1]:.2f}"),
        ]

    def format_table(self) -> str:
        width = max(len(k) for k, _ in self.as_rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.as_rows())


def summarize(scene: Scene) -> SceneSummary:
    """Summary of a loaded scene (mesh component analysis included)."""
    mesh = scene.mesh
    parts = mesh.split(only_watertight=False)
    g_lo, g_hi = scene.gaussians.bounds()
    nav = scene.spec.navigable
    return SceneSummary(
        name=scene.spec.name,
        category=scene.spec.category,
        split=scene.spec.split,
        gaussians=len(scene.gaussians),
        sh_degree=scene.gaussians.sh_degree,
        splat_bounds=(g_lo.tolist(), g_hi.tolist()),
        mesh_vertices=len(mesh.vertices),
        mesh_faces=len(mesh.faces),
        mesh_bounds=(mesh.bounds[0].tolist(), mesh.bounds[1].tolist()),
        mesh_watertight=bool(mesh.is_watertight),
        mesh_components=len(parts),
        mesh_watertight_components=int(sum(p.is_watertight for p in parts)),
        overlap_fraction=overlap_fraction(scene.gaussians, mesh.bounds),
        navigable_area_m2=nav.area_m2,
        height_band_m=(nav.z_min, nav.z_max),
    )


def check_scene(folder: str | Path) -> SceneSummary:
    """Load (validating everything) and summarise; raises SceneError on any defect."""
    return summarize(Scene.load(folder))


def summary_json(summary: SceneSummary) -> dict:
    """JSON-friendly dict of a summary."""
    out = asdict(summary)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in out.items()}
