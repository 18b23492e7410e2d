"""Export a PyTorch model with a custom op (Swish) to ONNX for kiln's Swish plugin.

The op is a torch.autograd.Function with forward, backward and a `symbolic` that emits the
generic ONNX node `custom::Plugin` with name="Swish" and a JSON `info` attribute; the bias is a
parameter, so it reaches the plugin as an initializer input. The script checks the backward
with torch.autograd.gradcheck (float64), exports with dynamic batch and spatial dims, and saves
sample inputs with PyTorch's outputs at several shapes (data/), so the tests need no torch.

    python3 examples/swish/export.py            # writes examples/swish/swish.onnx and data/
"""

import argparse
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))

# Sample input shapes (N, C, H, W): batch and spatial dims vary, channels are fixed at 3.
SHAPES = [(1, 3, 8, 8), (2, 3, 16, 24), (3, 3, 5, 7), (1, 3, 1, 1), (4, 3, 32, 17)]


class SwishFunction(torch.autograd.Function):
    """y = x * sigmoid(x) + bias, bias broadcast along `bias_axis`."""

    @staticmethod
    def forward(ctx, x, bias, bias_axis):
        ctx.save_for_backward(x, bias)
        ctx.bias_axis = bias_axis
        return x * torch.sigmoid(x) + SwishFunction._along(bias, x.dim(), bias_axis)

    @staticmethod
    def backward(ctx, grad_y):
        x, bias = ctx.saved_tensors
        s = torch.sigmoid(x)
        grad_x = grad_y * (s + x * s * (1 - s))
        axis = ctx.bias_axis % x.dim()
        other = [d for d in range(x.dim()) if d != axis]
        grad_bias = grad_y.sum(dim=other) if other else grad_y
        return grad_x, grad_bias.reshape(bias.shape), None

    @staticmethod
    def symbolic(g, x, bias, bias_axis):
        info = json.dumps({"bias_axis": bias_axis}, separators=(",", ":"))
        y = g.op("custom::Plugin", x, bias, name_s="Swish", info_s=info)
        y.setType(x.type())
        return y

    @staticmethod
    def _along(bias, rank, axis):
        shape = [1] * rank
        shape[axis % rank] = bias.numel()
        return bias.reshape(shape)


class Swish(torch.nn.Module):
    def __init__(self, channels, bias_axis=1):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.linspace(-0.5, 0.5, channels))
        self.bias_axis = bias_axis

    def forward(self, x):
        return SwishFunction.apply(x, self.bias, self.bias_axis)


class Net(torch.nn.Module):
    """A convolution (a built-in kiln op) feeding the custom op."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.swish = Swish(8)

    def forward(self, x):
        return self.swish(self.conv(x))


def check_gradients():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    ok = torch.autograd.gradcheck(lambda x, b: SwishFunction.apply(x, b, 1), (x, b))
    x2 = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    b2 = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ok = ok and torch.autograd.gradcheck(lambda x, b: SwishFunction.apply(x, b, -1), (x2, b2))
    print("gradcheck:", "passed" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=HERE, help="folder for swish.onnx and data/")
    args = ap.parse_args()
    if not check_gradients():
        raise SystemExit(1)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.conv.weight.mul_(0.5)
    model = os.path.join(args.out, "swish.onnx")
    dims = {0: "N", 2: "H", 3: "W"}
    torch.onnx.export(
        net,
        torch.randn(*SHAPES[0]),
        model,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": dims, "y": dims},
        opset_version=17,
        custom_opsets={"custom": 1},
    )
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    gen = torch.Generator().manual_seed(1)
    for i, shape in enumerate(SHAPES):
        x = torch.randn(*shape, generator=gen) * 2
        with torch.no_grad():
            y = net(x)
        np.save(os.path.join(data, f"input_{i}.npy"), x.numpy())
        np.save(os.path.join(data, f"output_{i}.npy"), y.numpy())
    print(f"wrote {model} and {len(SHAPES)} input/output pairs in {data}")


if __name__ == "__main__":
    main()
