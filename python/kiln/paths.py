"""Where the installed pieces are: headers for plugin authors, the CLI, the example plugins."""

import os

from ._lib import LIBRARY_PATH, REPO_DIR, installed


def get_include() -> str:
    """The folder holding kiln/kiln.h and kiln/kiln_plugin.h: compile plugins with
    -I$(python -c "import kiln; print(kiln.get_include())")."""
    return installed("include") or os.path.join(REPO_DIR, "include")


def get_library() -> str:
    """The path of the libkiln.so these bindings use."""
    return LIBRARY_PATH


def get_cli() -> str:
    """The path of the kiln command-line tool that comes with these bindings."""
    return installed("bin", "kiln") or os.path.join(REPO_DIR, "build", "bin", "kiln")


def get_plugin_dir() -> str:
    """The folder of the example plugins (libswish.so, librelu_sigmoid_mul.so)."""
    return installed("lib", "kiln", "plugins") or os.path.join(REPO_DIR, "build", "plugins")
