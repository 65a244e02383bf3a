"""The shared command-line flags: one parser for each, the same in every subcommand."""

from __future__ import annotations

import argparse

import pytest

from airplay.cli import build_parser
from airplay.cli_flags import image_size


def test_image_size_is_width_x_height():
    assert image_size("64x48") == (64, 48)
    for bad in ("64", "56 56", "0x4", "axb", "64x"):
        with pytest.raises(argparse.ArgumentTypeError, match="WIDTHxHEIGHT"):
            image_size(bad)


@pytest.mark.parametrize("argv", [
    ["eval", "--scenes", "s", "--image-size", "56x40"],
    ["collect", "--scenes", "s", "--image-size", "56x40", "out"],
    ["dagger", "--checkpoint", "c", "--dataset", "d", "--scenes", "s", "--out", "o", "--image-size", "56x40"],
    ["vln", "sft-export", "s", "--out", "o", "--image-size", "56x40"],
])
def test_every_image_size_flag_takes_the_one_syntax(argv):
    args = build_parser().parse_args(argv)
    assert tuple(args.image_size) == (56, 40)
    with pytest.raises(SystemExit):
        build_parser().parse_args([a if a != "56x40" else "56" for a in argv])


def test_seed_and_episodes_keep_each_subcommands_default():
    parser = build_parser()
    assert parser.parse_args(["eval", "--scenes", "s"]).seed == 0
    assert parser.parse_args(["eval", "--scenes", "s"]).episodes == 10
    dagger = parser.parse_args(["dagger", "--checkpoint", "c", "--dataset", "d", "--scenes", "s", "--out", "o"])
    assert dagger.seed == 1000 and dagger.episodes == 10
    assert parser.parse_args(["vln", "episodes", "--seed", "7"]).seed == 7
