"""The video files of a LeRobot dataset: H.264 yuv420p mp4 written, probed and decoded with PyAV.

Each file holds the episodes of one video key back to back at a constant frame rate; frame k
of the file is presented at k / fps seconds. The same frames give the same file, byte for byte,
in any process (``X264_OPTIONS``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from airplay.data.lerobot.schema import DatasetError


# x264 settings of every video. mbtree=0: x264's macroblock-tree rate control (on by default) reads
# heap memory it has not written at some image sizes (seen at 64x48, 224x224 and 320x240, not at
# 128x96), so the quantizers it picks, hence the bytes of whole GOPs, depend on what the process
# freed before; without it the encoder's output is a function of its input
# (test_lerobot_export.py::test_export_twice_gives_byte_identical_files). Cost: 10-35 % more
# bytes at the same crf (synthetic frames; collected 224x224 flights), at a 0.1-0.5 dB higher PSNR.
X264_OPTIONS = {"preset": "fast", "x264-params": "mbtree=0"}


class VideoFileWriter:
    """One growing mp4 of one video key: H.264, yuv420p, constant fps, pts = frame number.

    crf: quality (0 lossless); gop: key-frame interval (frames); other settings: ``X264_OPTIONS``.
    """

    def __init__(self, path: Path, fps: int, width: int, height: int, crf: int, gop: int) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream("libx264", rate=fps)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.stream.codec_context.time_base = Fraction(1, fps)
        self.stream.options = {"crf": str(crf), "g": str(gop), **X264_OPTIONS}
        self.frames = 0
        self.bytes = 0  # encoded bytes muxed so far (the file on disk lags behind: buffered)

    def add(self, rgb: np.ndarray, keyframe: bool) -> None:
        from av.video.frame import PictureType, VideoFrame

        frame = VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        if keyframe:  # episodes start on a key frame, so that seeking to one decodes only it
            frame.pict_type = PictureType.I
        for packet in self.stream.encode(frame):
            self.bytes += packet.size
            self.container.mux(packet)
        self.frames += 1

    def size_mb(self) -> float:
        return self.bytes / 2 ** 20

    def close(self) -> None:
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()


def probe_video(path: Path) -> dict[str, Any]:
    """The ``info`` block LeRobot keeps per video feature in info.json."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.name,
                "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": int(s.base_rate),
                "video.channels": 3, "has_audio": False}


def decode_frames(path: Path, from_s: float, count: int, fps: int) -> np.ndarray:
    """``count`` RGB frames (count, H, W, 3) uint8 of ``path`` from ``from_s`` seconds on.

    Frames are matched by presentation time (tolerance a quarter frame); a missing frame is
    an error naming the file and the time.
    """
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        out: np.ndarray | None = None
        got = np.zeros(count, dtype=bool)
        container.seek(max(0, int(math.floor(from_s / stream.time_base))), stream=stream, backward=True,
                       any_frame=False)
        for frame in container.decode(stream):
            k = int(round((float(frame.pts * stream.time_base) - from_s) * fps))
            if abs(float(frame.pts * stream.time_base) - from_s - k / fps) > 0.25 / fps:
                raise DatasetError(f"{path}: frame at {float(frame.pts * stream.time_base):.4f} s is off the "
                                   f"{fps} fps grid")
            if k < 0:
                continue
            if k >= count:
                break
            img = frame.to_ndarray(format="rgb24")
            if out is None:
                out = np.empty((count,) + img.shape, dtype=np.uint8)
            out[k] = img
            got[k] = True
    if out is None or not got.all():
        missing = int(np.argmin(got)) if out is not None else 0
        raise DatasetError(f"{path}: no video frame at {from_s + missing / fps:.4f} s "
                           f"(frame {missing} of an episode of {count})")
    return out
