"""The include graph follows the layers (docs/design-notes.md, "The layers"): no folder of src/
includes a folder above it, no file-level include circle in src/, and no import circle among
python/kiln's modules."""

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(REPO, "src")

# Lower number = lower layer. A folder may include its own layer and any lower one.
RANK = {"core": 0, "ir": 1, "onnx": 2, "ops": 2, "plan": 2, "backend": 3, "plugin": 4,
        "shape": 5, "passes": 6, "builder": 7, "runtime": 7, "triton": 9, "edit": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def src_files():
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                yield os.path.join(root, f)


def includes(path):
    with open(path, errors="replace") as f:
        return INCLUDE.findall(f.read())


def layer(rel):
    return rel.split("/")[0]


def test_no_include_from_a_lower_layer_to_a_higher_one():
    bad = []
    for path in src_files():
        rel = os.path.relpath(path, SRC)
        me = layer(rel)
        assert me in RANK, f"src/{me}/ has no layer in this test's table: add it"
        for inc in includes(path):
            other = layer(inc)
            if other in ("kiln",) or "/" not in inc or other not in RANK:
                continue
            if RANK[other] > RANK[me] or (RANK[other] == RANK[me] and other != me):
                bad.append(f"src/{rel} includes {inc}")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_no_include_circle_in_src():
    graph = {}
    for path in src_files():
        rel = os.path.relpath(path, SRC)
        here = os.path.dirname(rel)
        deps = set()
        for inc in includes(path):
            for cand in (inc, os.path.normpath(os.path.join(here, inc))):
                if os.path.exists(os.path.join(SRC, cand)):
                    deps.add(cand)
                    break
        graph[rel] = deps
    # A .c file and its own header form one unit: fold x.c into x.h.
    def unit(f):
        return f[:-2] + ".h" if f.endswith(".c") and (f[:-2] + ".h") in graph else f
    units = {}
    for f, deps in graph.items():
        units.setdefault(unit(f), set()).update(unit(d) for d in deps if unit(d) != unit(f))
    state, stack = {}, []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for d in units.get(u, ()):
            if state.get(d) == 1:
                raise AssertionError("include circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[u] = 2
    for u in sorted(units):
        if u not in state:
            visit(u)


def test_no_import_circle_in_python_package():
    pkg = os.path.join(REPO, "python", "kiln")
    mods = {f[:-3] for f in os.listdir(pkg) if f.endswith(".py")}
    deps = {}
    for m in mods:
        with open(os.path.join(pkg, m + ".py")) as f:
            tree = ast.parse(f.read())
        d = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    d.add(node.module.split(".")[0])
                else:
                    d.update(a.name for a in node.names)
        deps[m] = {x for x in d if x in mods and x != m and m != "__init__"}
    state = {}

    def visit(u, stack):
        state[u] = 1
        for d in deps.get(u, ()):
            if state.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack + [u, d]))
            if d not in state:
                visit(d, stack + [u])
        state[u] = 2
    for u in sorted(deps):
        if u not in state:
            visit(u, [])
