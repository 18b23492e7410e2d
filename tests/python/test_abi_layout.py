"""The ctypes structures of python/kiln/_lib.py against the C layouts of include/kiln: every
field's name, offset and the structure's size, from a small C program compiled against the
public headers. A field added, moved or resized on one side only fails here instead of
corrupting memory at run time."""

import ctypes
import os
import shutil
import subprocess

import pytest

from kiln import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Python structure -> its C typedef
STRUCTS = {
    "IoInfo": "kiln_io_info",
    "TensorView": "kiln_tensor_view",
    "Attribute": "kiln_attribute",
    "Allocator": "kiln_allocator",
    "Field": "kiln_field",
    "FieldList": "kiln_field_list",
    "FieldSpec": "kiln_field_spec",
    "TensorDesc": "kiln_tensor_desc",
    "DynamicDesc": "kiln_dynamic_desc",
    "ShapeExpr": "kiln_shape_expr",
    "Stream": "kiln_stream",
    "PluginOps": "kiln_plugin_ops",
    "PluginInstance": "kiln_plugin_instance",
    "PluginCreator": "kiln_plugin_creator",
    "HostApi": "kiln_host_api",
}


def c_layouts(tmp_path):
    """{(c struct, field or None): offset or size} as the C compiler lays them out."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kiln/kiln.h"',
             '#include "kiln/kiln_plugin.h"', "int main(void) {"]
    for py, c in STRUCTS.items():
        lines.append(f'    printf("{c} - %zu\\n", sizeof({c}));')
        for name, *_ in getattr(_lib, py)._fields_:
            lines.append(f'    printf("{c} {name} %zu\\n", offsetof({c}, {name}));')
    lines += ["    return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines) + "\n")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc or gcc) to lay the structures out")
    r = subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o",
                        str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, "a ctypes field has no C member of that name:\n" + r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    layout = {}
    for line in out.splitlines():
        struct, field, value = line.split()
        layout[(struct, None if field == "-" else field)] = int(value)
    return layout


def test_ctypes_structures_match_the_c_headers(tmp_path):
    layout = c_layouts(tmp_path)
    wrong = []
    for py, c in STRUCTS.items():
        cls = getattr(_lib, py)
        if ctypes.sizeof(cls) != layout[(c, None)]:
            wrong.append(f"{py}: {ctypes.sizeof(cls)} bytes, {c} has {layout[(c, None)]}")
        for name, *_ in cls._fields_:
            if getattr(cls, name).offset != layout[(c, name)]:
                wrong.append(f"{py}.{name} at {getattr(cls, name).offset}, "
                             f"{c}.{name} at {layout[(c, name)]}")
    assert not wrong, "\n".join(wrong)
