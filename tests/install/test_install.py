"""`cmake --install` into a temporary prefix, then an outside C program and an outside plugin
built against that prefix twice: with pkg-config and with find_package(kiln) (shared and
static). The build tree comes from $KILN_BUILD (default build/)."""

import os
import re
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("KILN_BUILD") or os.path.join(REPO, "build"))
CC = os.environ.get("CC") or "cc"


def sh(*cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def header_version():
    text = open(os.path.join(REPO, "include", "kiln", "kiln.h")).read()
    parts = [re.search(rf"#define KILN_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefix")
    sh("cmake", "--install", BUILD, "--prefix", str(root))
    return root


def pc_env(prefix):
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = str(prefix / "lib" / "pkgconfig")
    return env


def test_prefix_holds_headers_libraries_cli_plugins_and_packages(prefix):
    for rel in ("include/kiln/kiln.h", "include/kiln/kiln_plugin.h", "lib/libkiln.so",
                "lib/libkiln.a", "bin/kiln", "lib/kiln/plugins/libswish.so",
                "lib/kiln/plugins/librelu_sigmoid_mul.so", "lib/pkgconfig/kiln.pc",
                "lib/cmake/kiln/kilnConfig.cmake", "lib/cmake/kiln/kilnConfigVersion.cmake"):
        assert (prefix / rel).exists(), rel
    assert sh(str(prefix / "bin" / "kiln"), "--version").strip() == f"kiln {header_version()}"
    # Exported targets must not point back into the source or build tree.
    for f in (prefix / "lib" / "cmake" / "kiln").glob("*.cmake"):
        text = f.read_text()
        assert REPO + "/src" not in text and BUILD not in text, f


def test_pkg_config_builds_an_outside_program_and_plugin(prefix, tmp_path):
    env = pc_env(prefix)
    assert sh("pkg-config", "--modversion", "kiln", env=env).strip() == header_version()
    cflags = sh("pkg-config", "--cflags", "kiln", env=env).split()
    libs = sh("pkg-config", "--libs", "kiln", env=env).split()
    assert [os.path.normpath(f[2:]) for f in cflags if f.startswith("-I")] == [
        str(prefix / "include")]
    plugin = tmp_path / "libtimes_three.so"
    sh(CC, "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
       os.path.join(HERE, "plugin", "times_three.c"), *cflags, "-o", str(plugin))
    app = tmp_path / "app"
    libdir = sh("pkg-config", "--variable=libdir", "kiln", env=env).strip()
    sh(CC, "-Wall", "-Wextra", "-Werror", os.path.join(HERE, "app", "app.c"), *cflags, *libs,
       f"-Wl,-rpath,{libdir}", "-o", str(app))
    assert sh(str(app), str(plugin)).strip() == f"kiln {header_version()} ok"
    linked = sh("ldd", str(app))
    assert os.path.realpath(os.path.join(libdir, "libkiln.so")) in {
        os.path.realpath(p) for p in re.findall(r"=> (\S+libkiln\.so\S*)", linked)}
    # The plugin passes kiln's own checks with the installed CLI.
    sh(str(prefix / "bin" / "kiln"), "plugin-check", str(plugin))


@pytest.mark.parametrize("link", ["kiln::kiln", "kiln::kiln_static"])
def test_find_package_builds_an_outside_program_and_plugin(prefix, tmp_path, link):
    out = tmp_path / "build"
    sh("cmake", "-S", HERE, "-B", str(out), f"-DCMAKE_PREFIX_PATH={prefix}",
       f"-DKILN_LINK={link}", "-DCMAKE_BUILD_TYPE=Release")
    sh("cmake", "--build", str(out), "-j2")
    app, plugin = out / "app", out / "times_three.so"
    if not plugin.exists():
        plugin = out / "libtimes_three.so"
    assert sh(str(app), str(plugin)).strip() == f"kiln {header_version()} ok"
    needs_shared = "libkiln.so" in sh("ldd", str(app))
    assert needs_shared == (link == "kiln::kiln")


def test_cmake_refuses_a_newer_version_than_installed(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(p LANGUAGES C)\n"
        "find_package(kiln 99.0 REQUIRED)\n")
    res = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"),
                          f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True)
    assert res.returncode != 0 and "99.0" in res.stderr


@pytest.fixture(autouse=True, scope="module")
def _tools():
    for tool in ("cmake", "pkg-config", CC):
        assert shutil.which(tool), f"{tool} is needed (make deps installs it)"
