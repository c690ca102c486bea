"""Anti-cheat, static: where a dotted name leads once modules' own attributes are followed.

A module's attributes include the modules it imported: ``os.sys`` *is* ``sys``, so is ``collections._sys``,
and ``os.sys.modules`` holds the worker's own modules (its comparison, its timer, its findings). A check that
only knows ``sys.modules`` by that spelling misses every such route, so ``tools.checks`` reads each name as
written *and* as ``canonical`` resolves it here.

``canonical`` walks the real module objects this process has already loaded (``vars(module)``: it never
imports a module and never runs an attribute hook, so reading a candidate's source runs nothing). Where a
link cannot be resolved that way (a module not loaded here), a link named like one of the ``GATEWAY_MODULES``
is taken to be that module: no legitimate kernel reaches ``sys`` as ``something.sys``.
"""

from __future__ import annotations

import ast
import functools
import sys
import types

# Modules that hand out any other module, frame or object (sys.modules, builtins.__import__,
# importlib.import_module, gc.get_objects, inspect.currentframe): a candidate reaching one of them by a route
# other than its own import statement has stepped outside what the static checks can follow.
GATEWAY_MODULES = frozenset({"sys", "builtins", "importlib", "gc", "inspect"})
# Links that read a module's namespace by a computed key: ``os.__dict__["sys"]`` is ``os.sys``.
NAMESPACE_LINKS = frozenset({"__dict__", "__getattribute__", "__getattr__"})
# Calls that return a module (or, the last two, any object) named by a string: an import by another spelling.
IMPORT_CALLS = frozenset(
    {"builtins.__import__", "importlib.import_module", "importlib.__import__", "pkgutil.resolve_name", "pydoc.locate"}
)


@functools.lru_cache(maxsize=4096)
def resolve(name: str) -> tuple[str, tuple[str, ...]]:
    """``name`` (rooted at an imported module) as (the real module its longest module prefix is, the rest).

    ``os.sys.modules`` -> ("sys", ("modules",)); ``torch.nn.functional.softmax`` -> ("torch.nn.functional",
    ("softmax",)); an unknown root stays as written: ("mylib", ("f",)).
    """
    parts = name.split(".")
    module = sys.modules.get(parts[0])
    prefix, rest = parts[0], parts[1:]
    while rest:
        link = rest[0]
        value = vars(module).get(link) if isinstance(module, types.ModuleType) else None
        if isinstance(value, types.ModuleType):
            module, prefix = value, value.__name__
        elif value is None and link in GATEWAY_MODULES:
            module, prefix = sys.modules.get(link), link  # not resolvable here: taken by its name
        else:
            break
        rest = rest[1:]
    return prefix, tuple(rest)


def canonical(name: str) -> str:
    """``name`` with its module links followed: ``os.sys.modules`` -> ``sys.modules``."""
    prefix, rest = resolve(name)
    return ".".join((prefix, *rest))


def gateway_route(name: str) -> str | None:
    """The gateway module ``name`` reaches through another module's attribute (``os.sys`` -> "sys"), else None.

    A gateway reached by its own import (``sys.modules`` after ``import sys``) is not a route: the checks see it.
    """
    prefix, rest = resolve(name)
    top = prefix.split(".")[0]
    if top not in GATEWAY_MODULES:
        return None
    written = name.split(".")
    # Written as the module itself (sys, importlib.util ...): its own import, which the checks follow.
    return None if written[: len(written) - len(rest)] == prefix.split(".") else top


def namespace_read(name: str) -> str | None:
    """The module whose namespace ``name`` reads by a computed key (``os.__dict__`` -> "os"), else None."""
    prefix, rest = resolve(name)
    return prefix if rest and rest[0] in NAMESPACE_LINKS else None


def import_call(call: ast.Call, callee: str | None) -> tuple[bool, str | None, str | None]:
    """Whether ``call`` (to ``callee``, canonical) imports by name, and, for a literal name, the module it
    imports and the dotted name of what it returns (``__import__("a.b")`` imports a.b but returns a)."""
    if callee not in IMPORT_CALLS:
        return False, None, None
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("name", "path")), None)
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return True, None, None
    imported, _, attribute = arg.value.partition(":")  # pkgutil.resolve_name("pkg.mod:obj")
    returned = f"{imported}.{attribute}" if attribute else imported
    if callee.endswith(".__import__"):
        keyword = next((k.value for k in call.keywords if k.arg == "fromlist"), None)
        fromlist = call.args[3] if len(call.args) > 3 else keyword
        empty = fromlist is None or (isinstance(fromlist, ast.Constant) and not fromlist.value)
        if empty or (isinstance(fromlist, ast.List | ast.Tuple) and not fromlist.elts):
            returned = imported.split(".")[0]
    return True, imported, returned
