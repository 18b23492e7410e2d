"""The dtype table knows every kiln dtype: the 8- and 4-bit storage types go in and come out of
a model as ml_dtypes arrays with the same bytes, and their values match ml_dtypes' own
conversion (an independent oracle); the table round-trips each dtype."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from pykiln_helpers import make_model

import kiln
from kiln import _dtypes

NARROW = [
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
    (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
    (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
    (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
    (TensorProto.UINT4, ml_dtypes.uint4),
    (TensorProto.INT4, ml_dtypes.int4),
    (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn),
]


def test_every_kiln_dtype_has_a_numpy_form_that_maps_back():
    for dt in kiln.DType:
        if dt in (kiln.DType.UNDEFINED, kiln.DType.STRING):
            continue
        nd = _dtypes.to_numpy(dt)
        back = _dtypes.from_any(nd)
        if dt == kiln.DType.BFLOAT16:
            assert back == kiln.DType.UINT16  # bfloat16 travels as uint16 bit patterns
        else:
            assert back == dt, dt
    assert _dtypes.narrow_as_numpy()


def test_strings_are_refused_with_a_clear_error():
    with pytest.raises(kiln.KilnError, match="string"):
        _dtypes.to_numpy(kiln.DType.STRING)


@pytest.mark.parametrize("onnx_type,np_type", NARROW, ids=lambda v: getattr(v, "__name__", ""))
def test_narrow_types_pass_through_a_model_and_cast_like_ml_dtypes(onnx_type, np_type):
    model = make_model(
        [
            helper.make_node("Identity", ["x"], ["same"]),
            helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.FLOAT),
        ],
        [("x", onnx_type, [2, 3])],
        [("same", onnx_type, [2, 3]), ("wide", TensorProto.FLOAT, [2, 3])],
        opsets=(("", 21),),
    )
    x = np.array([[0.5, -1.0, 2.0], [3.0, -0.0, 1.5]], dtype=np.float32).astype(np_type)
    if np_type in (ml_dtypes.uint4,):
        x = np.array([[0, 1, 2], [7, 15, 9]]).astype(np_type)
    if np_type in (ml_dtypes.int4,):
        x = np.array([[0, -1, 2], [7, -8, -3]]).astype(np_type)
    out = kiln.run(model, {"x": x})
    assert out["same"].dtype == np.dtype(np_type)
    assert out["same"].view(np.uint8).tolist() == x.view(np.uint8).tolist()
    np.testing.assert_array_equal(out["wide"], x.astype(np.float32))
