"""Frames and rows that say where they come from: ``(camera, episode, frame)`` in the pixels.

The synthetic writer paints each frame as an 8 x 6 grid of big dark/light cells carrying the
camera, episode and frame numbers plus a checksum, so any decoded frame can be identified after
lossy compression (yuv420p, crf 30) and a wrong or corrupted frame is caught, not misread.
State and action rows carry ``(episode, frame)`` in exactly representable float32 values.
"""

from __future__ import annotations

import zlib

import numpy as np

from feedline.episodes.errors import SynthError

GRID_COLUMNS = 8  # the identity grid: 8 x 6 cells, one bit each
GRID_ROWS = 6
CAMERA_BITS = 4
EPISODE_BITS = 14
FRAME_BITS = 16
CHECK_BITS = GRID_COLUMNS * GRID_ROWS - CAMERA_BITS - EPISODE_BITS - FRAME_BITS  # 14
DARK, LIGHT = 40, 215  # far apart so yuv420p + crf 30 never flips a cell
STATE_DIM = 6


# --------------------------------------------------------------------------------------------
# Identity pixels
# --------------------------------------------------------------------------------------------


def _check_word(payload: int) -> int:
    return zlib.crc32(payload.to_bytes(5, "little")) & ((1 << CHECK_BITS) - 1)


def _identity_bits(camera: int, episode: int, frame: int) -> np.ndarray:
    if not (
        0 <= camera < 1 << CAMERA_BITS
        and 0 <= episode < 1 << EPISODE_BITS
        and 0 <= frame < 1 << FRAME_BITS
    ):
        raise SynthError(
            f"identity ({camera}, {episode}, {frame}) does not fit: at most {1 << CAMERA_BITS} cameras, "
            f"{1 << EPISODE_BITS} episodes, {1 << FRAME_BITS} frames per episode"
        )
    payload = camera | episode << CAMERA_BITS | frame << (CAMERA_BITS + EPISODE_BITS)
    word = payload | _check_word(payload) << (CAMERA_BITS + EPISODE_BITS + FRAME_BITS)
    return np.array([(word >> i) & 1 for i in range(GRID_COLUMNS * GRID_ROWS)], dtype=np.uint8)


def _cell_bounds(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    ys = np.linspace(0, height, GRID_ROWS + 1).round().astype(int)
    xs = np.linspace(0, width, GRID_COLUMNS + 1).round().astype(int)
    return ys, xs


def _texture(camera: int, height: int, width: int, shift: int) -> np.ndarray:
    """A camera's fixed zero-mean texture (amplitude ~24), moved ``shift`` pixels right and down."""
    rng = np.random.default_rng([camera, height, width])
    coarse = rng.integers(-24, 25, size=(height // 8 + 2, width // 8 + 2)).astype(np.float32)
    smooth = np.kron(coarse, np.ones((8, 8), dtype=np.float32))[:height, :width]
    fine = rng.integers(-6, 7, size=(height, width)).astype(np.float32)
    field = (smooth + fine).astype(np.int16)
    return np.roll(field, (shift, shift), axis=(0, 1))


def identity_frame(
    camera: int, episode: int, frame: int, *, height: int = 48, width: int = 64, noise: int = 10,
    motion: int = 0,
) -> np.ndarray:
    """RGB uint8 ``[H, W, 3]`` picture encoding ``(camera, episode, frame)``; noise keeps codecs honest.

    ``motion``: pixels per frame a fixed texture moves across the picture (0: none), so an
    encoder sees camera motion, as in real robot footage; the cells' means stay readable.
    """
    bits = _identity_bits(camera, episode, frame)
    ys, xs = _cell_bounds(height, width)
    img = np.empty((height, width), dtype=np.int16)
    for r in range(GRID_ROWS):
        for c in range(GRID_COLUMNS):
            img[ys[r] : ys[r + 1], xs[c] : xs[c + 1]] = (
                LIGHT if bits[r * GRID_COLUMNS + c] else DARK
            )
    if motion:
        img += _texture(camera, height, width, (episode * 1000 + frame) * motion)
    if noise:
        rng = np.random.default_rng([camera, episode, frame])
        img += rng.integers(-noise, noise + 1, size=img.shape, dtype=np.int16)
    gray = np.clip(img, 0, 255).astype(np.uint8)
    return np.repeat(gray[:, :, None], 3, axis=2)


def decode_identity(rgb: np.ndarray | object) -> tuple[int, int, int]:
    """Read ``(camera, episode, frame)`` back from a decoded frame.

    Accepts uint8 HWC/CHW arrays or tensors, or float images in [0, 1]. Each cell's inner half is
    averaged (codecs blur the edges), thresholded, and the checksum must agree: a frame from the
    wrong place or a corrupted decode raises :class:`SynthError` instead of passing silently.
    """
    arr = np.asarray(rgb.numpy() if hasattr(rgb, "numpy") else rgb)
    if arr.ndim != 3:
        raise SynthError(f"decode_identity needs one HWC or CHW image, got shape {arr.shape}")
    if arr.shape[0] in (1, 3) and arr.shape[2] not in (1, 3):
        arr = np.moveaxis(arr, 0, 2)
    arr = arr.astype(np.float64)
    if arr.max() <= 1.0 + 1e-6:
        arr = arr * 255.0
    gray = arr.mean(axis=2)
    height, width = gray.shape
    ys, xs = _cell_bounds(height, width)
    word = 0
    for r in range(GRID_ROWS):
        for c in range(GRID_COLUMNS):
            y0, y1, x0, x1 = ys[r], ys[r + 1], xs[c], xs[c + 1]
            dy, dx = (y1 - y0) // 4, (x1 - x0) // 4
            mean = gray[y0 + dy : y1 - dy, x0 + dx : x1 - dx].mean()
            if mean > (DARK + LIGHT) / 2:
                word |= 1 << (r * GRID_COLUMNS + c)
    payload_bits = CAMERA_BITS + EPISODE_BITS + FRAME_BITS
    payload = word & ((1 << payload_bits) - 1)
    if word >> payload_bits != _check_word(payload):
        raise SynthError("decoded frame carries no valid identity (checksum mismatch)")
    camera = payload & ((1 << CAMERA_BITS) - 1)
    episode = (payload >> CAMERA_BITS) & ((1 << EPISODE_BITS) - 1)
    frame = payload >> (CAMERA_BITS + EPISODE_BITS)
    return camera, episode, frame


def state_vector(episode: int, frame: int, dim: int = STATE_DIM) -> np.ndarray:
    """``observation.state`` of a row: ``episode*1000 + frame + j/8`` (exact in float32)."""
    return (episode * 1000 + frame + np.arange(dim) / 8).astype(np.float32)


def action_vector(episode: int, frame: int, dim: int = STATE_DIM) -> np.ndarray:
    """``action`` of a row: the state plus one half, so both columns are identifiable."""
    return state_vector(episode, frame, dim) + np.float32(0.5)


def row_identity(vector: np.ndarray | object) -> tuple[int, int]:
    """``(episode, frame)`` from a state or action row written by this module."""
    arr = np.asarray(vector.numpy() if hasattr(vector, "numpy") else vector, dtype=np.float64)
    value = int(np.floor(arr[..., 0]))
    return value // 1000, value % 1000
