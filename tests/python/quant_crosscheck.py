#!/usr/bin/env python3
"""Cross-checks for src/quant against gguf-py's numpy (de)quantizers.

Usage: quant_crosscheck.py DIR TYPE...
For every TYPE (a GGMLQuantizationType name):
  DIR/TYPE.blocks (raw blocks)  -> DIR/TYPE.deq   (float32, gguf.quants.dequantize)
  DIR/TYPE.f32    (if present)  -> DIR/TYPE.quant (raw blocks, gguf.quants.quantize)
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, quants


def main() -> int:
    out_dir = sys.argv[1]
    for name in sys.argv[2:]:
        qtype = GGMLQuantizationType[name]
        path = os.path.join(out_dir, name)
        if os.path.exists(path + ".blocks"):
            raw = np.fromfile(path + ".blocks", dtype=np.uint8)
            quants.dequantize(raw, qtype).astype(np.float32).tofile(path + ".deq")
        if os.path.exists(path + ".f32"):
            x = np.fromfile(path + ".f32", dtype=np.float32)
            quants.quantize(x.reshape(1, -1), qtype).tofile(path + ".quant")
    return 0


if __name__ == "__main__":
    sys.exit(main())
