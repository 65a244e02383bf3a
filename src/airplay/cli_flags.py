"""The command-line flags that several ``airplay`` subcommands share, each declared once.

``--seed N``, ``--image-size WxH`` (the one syntax of an image size: width x height in pixels),
``--scenes DIR...``, ``--episodes N``, ``--no-progress``: each subcommand adds the ones it
takes with the function here, with its own default or help text where its meaning is narrower.
"""

from __future__ import annotations

import argparse
import re


def image_size(text: str) -> tuple[int, int]:
    """``WxH`` (e.g. ``64x48``) -> (width, height) in pixels; an argparse error otherwise."""
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not match or int(match.group(1)) <= 0 or int(match.group(2)) <= 0:
        raise argparse.ArgumentTypeError(f"image size must be WIDTHxHEIGHT in pixels, e.g. 64x64, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def add_image_size(parser, help: str) -> None:
    """``--image-size WxH`` (default None: the subcommand's own size)."""
    parser.add_argument("--image-size", type=image_size, default=None, metavar="WxH", help=help)


def add_seed(parser, default: int = 0, help: str = "seed of the task sampling") -> None:
    """``--seed N``."""
    parser.add_argument("--seed", type=int, default=default, help=f"{help} (default {default})")


def add_scenes(parser, required: bool = True) -> None:
    """``--scenes DIR [DIR ...]``: scene folders, or folders holding scene folders."""
    parser.add_argument("--scenes", nargs="+", required=required,
                        help="scene folders, or folders holding scene folders")


def add_episodes(parser, default: int = 10, help: str = "episodes per scene") -> None:
    """``--episodes N``."""
    parser.add_argument("--episodes", type=int, default=default, help=f"{help} (default {default})")


def add_no_progress(parser) -> None:
    """``--no-progress``: no progress bar."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_batch(parser, what: str = "episodes") -> None:
    """``--batch N``: a learned policy flies N episodes of a scene at a time, one forward pass per
    control step for all (:mod:`airplay.eval.batched`); the same results as one at a time."""
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help=f"a learned policy (act, dp, cnn_bc) flies N {what} of a scene at a time on the "
                             "vector environment, one forward pass per control step for all, with the same results "
                             "as one at a time (default 16; 1: one at a time; each --workers process batches its "
                             "share; wind, a position-estimate error, --policy-budget-ms and --no-images fly one at "
                             "a time)")


def wind(text: str) -> str:
    """A ``--wind`` text (:mod:`airplay.sim.disturbance`), checked; an argparse error naming the item."""
    from airplay.sim.disturbance import Disturbance, DisturbanceError

    try:
        Disturbance.parse(text)
    except DisturbanceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_wind(parser) -> None:
    """``--wind SPEC``: wind, gusts or a velocity impulse acting on the vehicle (default: none)."""
    parser.add_argument("--wind", type=wind, default="", metavar="SPEC",
                        help="external velocity disturbance: wind=VX:VY[:VZ],gust=STD,gust_tau=S,drag_tau=S,"
                             "impulse=VX:VY[:VZ]@STEP (map ENU m/s; a bare VX:VY is the mean wind; seeded by "
                             "--seed and each task; default: none; docs/simulation.md)")


def vehicle_profile(text: str) -> str:
    """A vehicle file (``config/vehicle.yaml``'s fields; an identified profile of config/vehicles/),
    checked now: an argparse error names the file and the field that is wrong."""
    from airplay.sim.estimate_error import load_vehicle_file
    from airplay.yaml_config import ConfigError

    if not text:
        return ""  # the default: config/vehicle.yaml
    try:
        load_vehicle_file(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_vehicle(parser) -> None:
    """``--vehicle FILE``: the flight model's parameters (default config/vehicle.yaml)."""
    parser.add_argument("--vehicle", type=vehicle_profile, default="", metavar="FILE",
                        help="the flight model's parameters: a vehicle file, e.g. an autopilot's profile identified "
                             "by `airplay identify` (config/vehicles/px4_sih.yaml), whose estimate_error the policy "
                             "then sees; default config/vehicle.yaml")
