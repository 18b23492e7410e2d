"""The public API used as a typed user script would use it. `make test` checks this file with
mypy (so the package's hints are consumable: a wrong hint fails there) and runs it (so what it
does is real: every result is compared with numpy)."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import NDArray

import kiln
import kiln.edit


class TypedScale(kiln.Plugin):
    """y = alpha * x, a Python plugin written against the typed base class."""

    name = "TypedScale"
    fields = {"alpha": kiln.field(kiln.FLOAT32, default=2.0)}

    def output_shapes(self, input_shapes: Sequence[Tuple[int, ...]]) -> Sequence[Any]:
        return [input_shapes[0]]

    def compute(
        self, inputs: Sequence[NDArray[Any]], outputs: Sequence[NDArray[Any]]
    ) -> Optional[NDArray[Any]]:
        np.multiply(inputs[0], np.float32(self.fields["alpha"]), out=outputs[0])
        return None


def network_plan(registry: kiln.Registry, w: NDArray[np.float32]) -> bytes:
    net = kiln.Network(opset=17, registry=registry)
    x: kiln.Tensor = net.add_input("x", np.float32, ("batch", 4))
    y = net.add_matmul(x, w, name="fc")
    y = net.add_activation(y, "relu")
    y = net.add_layer("Identity", [y], name="same")
    scaled: kiln.Tensor = net.add_plugin(TypedScale, [y], fields={"alpha": 3.0})
    net.mark_output(scaled, "y")
    assert net.num_layers >= 3
    shapes: Mapping[str, Any] = {"x": ((1, 4), (2, 4), (8, 4))}
    return net.build(shapes=shapes, threads=1, precision="fp32")


def main() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    want = 3.0 * np.maximum(x @ w, 0.0)

    registry = kiln.Registry()
    registry.register(TypedScale)
    assert registry.has("TypedScale")
    plan = network_plan(registry, w)
    layers: List[Tuple[Optional[str], Optional[str], Optional[str]]] = kiln.plan_layers(plan)
    assert layers

    engine = kiln.Engine(plan, plugins=registry)
    info: kiln.IOInfo = engine.inputs[0]
    assert info.name == "x" and info.dynamic and info.max_shape == (8, 4)
    ctx: kiln.Context = engine.context(threads=1)
    outs: Dict[str, NDArray[Any]] = ctx.run({"x": x})
    np.testing.assert_allclose(outs["y"], want, rtol=1e-5, atol=1e-5)
    ctx.set_input_shape("x", (5, 4))
    assert ctx.output_shape("y") == (5, 3)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net.plan")
        with open(path, "wb") as f:
            f.write(plan)
        options = kiln.SessionOptions()
        options.plugins = registry
        sess = kiln.InferenceSession(path, sess_options=options, providers=None)
        inputs: List[kiln.NodeArg] = sess.get_inputs()
        (y,) = sess.run(None, {inputs[0].name: x.tolist()})
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            kiln.run(path, {"x": x}, plugins=registry)["y"], want, rtol=1e-5, atol=1e-5
        )

    seen: List[Tuple[kiln.LogLevel, str]] = []
    kiln.set_logger(lambda level, msg: seen.append((level, msg)), kiln.LogLevel.INFO)
    kiln.set_logger(None)
    assert kiln.dtype_size(kiln.DType.FLOAT16) == 2 and kiln.dtype_size("int64") == 8
    assert kiln.allocated_bytes() >= 0
    assert os.path.isdir(kiln.get_include())
    try:
        kiln.Engine(b"not a plan")
    except kiln.KilnError as e:
        assert e.status_name == "PLAN" and e.message
    else:
        raise AssertionError("a bad plan loaded")
    print("typed usage: ok")


if __name__ == "__main__":
    main()
