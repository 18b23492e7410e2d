"""Print the outputs `kiln run` wrote and compare them with PyTorch's reference outputs.

usage: show_outputs.py OUTPUT_DIR REFERENCE_DIR
"""
import json
import os
import sys

import numpy as np


def main():
    out_dir, ref_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(out_dir, "outputs.json")) as f:
        files = json.load(f)
    worst = 0.0
    for name, fname in files.items():
        got = np.load(os.path.join(out_dir, fname))
        print(f"output {name}: {got.dtype} {list(got.shape)}")
        with np.printoptions(precision=4, suppress=True, threshold=20):
            print(got)
        ref_path = os.path.join(ref_dir, fname)
        if os.path.exists(ref_path):
            ref = np.load(ref_path)
            diff = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
            worst = max(worst, diff)
            print(f"max |kiln - pytorch| = {diff:.3g}")
    if worst > 1e-3:
        print("outputs differ from the reference by more than 1e-3")
        sys.exit(1)


if __name__ == "__main__":
    main()
