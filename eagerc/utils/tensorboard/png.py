"""PNG bytes of an (H, W, C) uint8 image, C in 1/3/4: with Pillow when it is installed (as PyTorch's
writer does), else with the few lines of zlib below -- one unfiltered IDAT, which every PNG reader
decodes -- so images log without any imaging library."""
import io
import struct
import zlib

import numpy as np

__all__ = ["encode_png", "zlib_png"]

_COLOR_TYPE = {1: 0, 3: 2, 4: 6}  # grey, RGB, RGBA


def encode_png(image):
    try:
        from PIL import Image
    except ImportError:
        return zlib_png(image)
    buf = io.BytesIO()
    Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image).save(buf, format="PNG")
    return buf.getvalue()


def zlib_png(image):
    """The PNG file of `image` (H, W, C uint8): signature, IHDR, one IDAT (filter 0 rows), IEND."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w, c = image.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), image.reshape(h, w * c)], axis=1)
    header = struct.pack(">IIBBBBB", w, h, 8, _COLOR_TYPE[c], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + _chunk(b"IEND", b""))


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
