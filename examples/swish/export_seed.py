"""Export the first seed document's Swish module exactly as it was written there, for kiln's
Swish plugin: the op is emitted as the generic `custom::Plugin` node with name_s="Swish" and a
free-form `info_s` description ({"size": 555, "shape": [6, 7, 8], "module": "abcdefg"}) that
names no key Swish uses, after a 3x3 convolution whose weight is the identity on channels (the
kernel's diagonal set to 1 for each channel's own input, so the conv sums three diagonal
neighbours). The bias is a parameter of 3.15 per channel. Batch, H and W are dynamic.

It writes OUT/swish_seed.onnx and OUT/data/ (inputs and PyTorch's outputs at several shapes).
examples/swish/seed/ is its output from torch 2.11 (checked in, so the tests need no torch);
tests/plugins/test_swish_seed.py runs it against PyTorch's outputs:

    python3 examples/swish/export_seed.py --out examples/swish/seed
"""

import argparse
import json
import os

import numpy as np
import torch

SHAPES = [(1, 3, 8, 8), (2, 3, 13, 21), (4, 3, 5, 7)]


class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x) + bias.view(1, -1, 1, 1)

    @staticmethod
    def symbolic(g, x, bias):
        return g.op("custom::Plugin", x, bias, name_s="Swish",
                    info_s=json.dumps({"size": 555, "shape": [6, 7, 8], "module": "abcdefg"}))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, kernel_size=3, padding=1, bias=False)
        with torch.no_grad():
            self.conv.weight.zero_()
            for c in range(3):
                self.conv.weight[c, c] = torch.eye(3)
        self.bias = torch.nn.Parameter(torch.full((3,), 3.15))

    def forward(self, x):
        return Swish.apply(self.conv(x), self.bias)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(os.path.join(args.out, "data"), exist_ok=True)
    model = Model().eval()
    dims = {0: "batch", 2: "height", 3: "width"}
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    torch.onnx.export(model, torch.randn(*SHAPES[0]), os.path.join(args.out, "swish_seed.onnx"),
                      input_names=["image"], output_names=["output"],
                      dynamic_axes={"image": dims, "output": dims}, opset_version=11, **kwargs)
    gen = torch.Generator().manual_seed(7)
    for i, shape in enumerate(SHAPES):
        x = torch.randn(*shape, generator=gen)
        with torch.no_grad():
            y = model(x)
        np.save(os.path.join(args.out, "data", f"input_{i}.npy"), x.numpy())
        np.save(os.path.join(args.out, "data", f"output_{i}.npy"), y.numpy())
    print(f"wrote {args.out}: torch {torch.__version__}")


if __name__ == "__main__":
    main()
