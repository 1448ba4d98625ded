"""Text drawn on a fixed-size RGB frame: ``render_mode="rgb_array"`` for video recorders and
stable-baselines3's ``make_vec_env``, which asks every env for that mode."""

from __future__ import annotations

import textwrap

import numpy as np

FRAME_WIDTH, FRAME_HEIGHT = 640, 480
_MARGIN, _LINE_HEIGHT = 6, 12


def text_frame(text: str, width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT) -> np.ndarray:
    """The last lines of ``text`` that fit, wrapped to the frame's width, in black on white: a
    ``[height, width, 3]`` uint8 array, the same shape whatever the text (frames of one video agree)."""
    from PIL import Image, ImageDraw, ImageFont  # Pillow comes with matplotlib, a core dependency

    font = ImageFont.load_default()
    char_width = max(1.0, font.getlength("M"))
    columns = max(1, int((width - 2 * _MARGIN) // char_width))
    rows = max(1, (height - 2 * _MARGIN) // _LINE_HEIGHT)
    lines = [piece for line in text.splitlines() for piece in (textwrap.wrap(line, columns) or [""])]
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines[-rows:]):
        draw.text((_MARGIN, _MARGIN + i * _LINE_HEIGHT), line.encode("ascii", "replace").decode(), fill="black", font=font)
    return np.asarray(image, dtype=np.uint8)
