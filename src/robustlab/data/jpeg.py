"""The protocol's JPEG round trip of one image, and of a chunk of images in a codec process.

:func:`roundtrip` is the one definition behind ``pipeline.as_stored`` (what a generated
JPEG file holds) and the batched path's host round trip. This module imports only numpy
and OpenCV, so a codec process (:mod:`robustlab.shifts.batched.jpeg`) starts in a fraction
of a second.
"""

from __future__ import annotations

import numpy as np


def roundtrip(x: np.ndarray, quality: int) -> np.ndarray:
    """``decode(encode(x))`` of HxWx3 uint8 RGB ``x`` with libjpeg at ``quality``.

    OpenCV's encoder and decoder straight on numpy arrays; Pillow drives libjpeg(-turbo)
    with the same settings (standard tables scaled by the quality, 4:2:0 chroma, the
    integer DCT, fancy upsampling), so the pixels are Pillow's too (tests/test_pipeline.py
    checks it). The Huffman tables are not optimised: that changes a file's size, not the
    decoded pixels.
    """
    import cv2

    bgr = cv2.cvtColor(x, cv2.COLOR_RGB2BGR)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    decoded = cv2.imdecode(data, cv2.IMREAD_COLOR) if ok else None
    if decoded is None:  # not reachable for HxWx3 uint8, but never return garbage silently
        raise RuntimeError(f"the JPEG round trip failed for an image of shape {x.shape}")
    return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)


def init_codec_process() -> None:
    """A codec process codes one image at a time: the pool's processes are the parallelism."""
    import cv2

    cv2.setNumThreads(1)


def roundtrip_shared(name: str, shape: tuple[int, ...], start: int, stop: int, quality: int) -> int:
    """:func:`roundtrip` of images ``start:stop`` of the (N, 3, H, W) uint8 batch in shared
    memory block ``name``, in place.

    The batch travels in shared memory, not through the pool's pipes: pickling a 256-image
    batch both ways cost more than coding it (0.41 s for 128 images on 2 cores).
    """
    from multiprocessing.shared_memory import SharedMemory

    block = SharedMemory(name)
    try:
        batch = np.ndarray(shape, np.uint8, buffer=block.buf)
        batch[start:stop] = roundtrip_chw(batch[start:stop], quality)
        del batch
    finally:
        block.close()
    return stop - start


def roundtrip_chw(chunk: np.ndarray, quality: int) -> np.ndarray:
    """:func:`roundtrip` of every image of an (N, 3, H, W) uint8 chunk, same layout out."""
    out = np.empty_like(chunk)
    for i, img in enumerate(chunk):
        out[i] = roundtrip(np.ascontiguousarray(img.transpose(1, 2, 0)), quality).transpose(2, 0, 1)
    return out
