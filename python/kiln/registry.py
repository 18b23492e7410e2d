"""Plugin registries: kiln.Registry, the module's default registry, plugin libraries."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from . import _lib
from . import plugin as _plugin
from ._lib import KilnError, check, encode, lib

#: A plugin's identity: (name, version, namespace).
PluginId = Tuple[str, str, str]
#: A path to a plugin library.
LibraryPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
P = TypeVar("P", bound=Type[_plugin.Plugin])


class Registry:
    """A set of plugin creators (from shared libraries, C or Python). Engines keep a reference
    to the registry they were loaded with, so it outlives them."""

    def __init__(self, load_env: bool = False) -> None:
        h = ctypes.c_void_p()
        check(lib.kiln_registry_create(ctypes.byref(h)))
        self._hobj: Optional[_lib.Handle] = _lib.Handle(h, lib.kiln_registry_destroy)
        self._h = h
        # (Plugin.name, version, namespace) -> Plugin subclass
        self._python: Dict[Tuple[Optional[str], str, str], Type[_plugin.Plugin]] = {}
        if load_env:
            self.load_env()

    @property
    def handle(self) -> ctypes.c_void_p:
        return self._h

    @property
    def handle_ref(self) -> Optional[_lib.Handle]:
        """The counted handle (engines and builders hold it while they use the registry)."""
        return self._hobj

    def load_library(self, path: LibraryPath) -> Registry:
        """dlopen a plugin library and register its creators (a library already loaded by this
        registry is skipped). Returns the registry."""
        check(lib.kiln_registry_load_library(self._h, encode(os.fspath(path))))
        return self

    def load_env(self) -> Registry:
        """Load every library named by KILN_PLUGIN_PATH. Returns the registry."""
        check(lib.kiln_registry_load_env(self._h))
        return self

    def register(self, cls: P) -> P:
        """Register a kiln.Plugin subclass. Returns cls (so it also works as a decorator)."""
        creator = _plugin.make_creator(cls)
        check(lib.kiln_registry_register(self._h, ctypes.byref(creator)))
        key = (cls.name, str(cls.version or ""), str(cls.namespace or ""))
        self._python[key] = cls
        return cls

    def has(
        self, name: str, version: Optional[str] = None, namespace: Optional[str] = None
    ) -> bool:
        for n, v, ns in self.plugins():
            if n == name and version in (None, v) and namespace in (None, ns):
                return True
        return False

    def has_class(self, cls: Type[_plugin.Plugin]) -> bool:
        key = (cls.name, str(cls.version or ""), str(cls.namespace or ""))
        return self._python.get(key) is cls

    def python_plugin(
        self, name: str, version: Optional[str] = None, namespace: Optional[str] = None
    ) -> Optional[Type[_plugin.Plugin]]:
        """The Plugin subclass registered under this identity, or None (C plugins)."""
        for (n, v, ns), cls in self._python.items():
            if n == name and version in (None, v) and namespace in (None, ns):
                return cls
        return None

    def deregister(
        self,
        name: Union[str, Type[_plugin.Plugin]],
        version: Optional[str] = None,
        namespace: Optional[str] = None,
    ) -> None:
        if isinstance(name, type) and issubclass(name, _plugin.Plugin):
            cls = name
            ident, version, namespace = cls.name, str(cls.version or ""), str(cls.namespace or "")
        else:
            ident = name
        check(
            lib.kiln_registry_deregister(
                self._h, encode(ident), encode(version), encode(namespace)
            )
        )
        for key in [k for k in self._python if k[0] == ident]:
            if version in (None, key[1]) and namespace in (None, key[2]):
                del self._python[key]

    def plugins(self) -> List[PluginId]:
        """[(name, version, namespace)] of every registered creator."""
        out: List[PluginId] = []
        for i in range(lib.kiln_registry_count(self._h)):
            n, v, ns = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_char_p()
            check(
                lib.kiln_registry_get(
                    self._h, i, ctypes.byref(n), ctypes.byref(v), ctypes.byref(ns)
                )
            )
            n_, v_, ns_ = (x.value.decode("utf-8") if x.value else "" for x in (n, v, ns))
            out.append((n_, v_, ns_))
        return out

    def __len__(self) -> int:
        return lib.kiln_registry_count(self._h)

    def __repr__(self) -> str:
        return f"kiln.Registry({self.plugins()!r})"

    def add(self, plugins: Any) -> Registry:
        """Add library paths and Plugin subclasses (a single one or a list); what this registry
        already holds is skipped."""
        if plugins is None:
            return self
        if isinstance(plugins, (str, bytes, os.PathLike)) or isinstance(plugins, type):
            plugins = [plugins]
        for p in plugins:
            if isinstance(p, type):
                if not self.has_class(p):
                    self.register(p)
            elif isinstance(p, (str, bytes, os.PathLike)):
                self.load_library(p)
            else:
                raise KilnError(
                    _lib.ERR_INVALID_ARGUMENT,
                    f"plugins: {p!r} is neither a library path nor a kiln.Plugin subclass",
                )
        return self

    def __del__(self) -> None:
        h = getattr(self, "_hobj", None)
        if h is not None:
            h.release()
            self._hobj = None


_default: Optional[Registry] = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The module's registry: loads KILN_PLUGIN_PATH on first use; kiln.register_plugin and
    kiln.load_plugin_library add to it, and build/Engine/run use it unless given another."""
    global _default
    with _default_lock:
        if _default is None:
            # set only once KILN_PLUGIN_PATH loaded, so a bad path fails every use alike
            _default = Registry(load_env=True)
        return _default


def load_plugin_library(path: LibraryPath) -> None:
    """Load a plugin library into the default registry."""
    default_registry().load_library(path)


def register_plugin(cls: P) -> P:
    """Register a kiln.Plugin subclass in the default registry (usable as a decorator)."""
    return default_registry().register(cls)


def resolve(plugins: Any) -> Registry:
    """The registry to use for a `plugins=` argument: a Registry as is; otherwise the default
    registry with the given library paths / Plugin subclasses added."""
    if isinstance(plugins, Registry):
        return plugins
    return default_registry().add(plugins)
