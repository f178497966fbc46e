"""JPEG round trip of a uint8 batch with torchvision's codecs.

On the CPU torchvision drives libjpeg(-turbo) with the same settings Pillow and OpenCV use
here (standard tables scaled by quality, 4:2:0, integer DCT, fancy upsampling): measured
bit-identical to ``pipeline.as_stored`` at quality 85 and to the exact
``jpeg_compression`` (tests/test_batched_shifts.py checks it). On CUDA torchvision uses
nvJPEG for both directions, whose DCT and chroma upsampling are its own: close, not
identical (benchmarks/torch_shifts.py --device cuda measures the difference). ``codec``
``"cpu"`` keeps the round trip on the CPU (libjpeg) for CUDA batches too. (torchvision 0.29
marks its image codecs deprecated in favour of TorchCodec; they still work.)
"""

from __future__ import annotations

import torch

CODECS = ("device", "cpu")


def codec_name(device, codec: str = "device") -> str:
    """What encodes the JPEGs of a batch on ``device``: ``libjpeg`` or ``nvjpeg``."""
    if codec not in CODECS:
        raise ValueError(f"unknown JPEG codec choice {codec!r}; use one of {', '.join(CODECS)}")
    return "nvjpeg" if torch.device(device).type == "cuda" and codec == "device" else "libjpeg"


def jpeg_roundtrip(x: torch.Tensor, quality: int, codec: str = "device") -> torch.Tensor:
    """``decode(encode(x, quality))`` of every image of an (N, 3, H, W) uint8 batch."""
    from torchvision.io import decode_jpeg, encode_jpeg

    if codec_name(x.device, codec) == "nvjpeg":
        data = encode_jpeg(list(x.contiguous()), quality=int(quality))
        # the encoded bytes (a few KB each) must be host tensors for the decoder
        return torch.stack(decode_jpeg([d.cpu() for d in data], device=x.device))
    host = x.cpu()
    out = torch.stack(
        [decode_jpeg(encode_jpeg(img.contiguous(), quality=int(quality))) for img in host]
    )
    return out.to(x.device)
