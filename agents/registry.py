"""Role registry: a role name maps to a factory ``(settings) -> Role``.

The four built-in roles register themselves here; other packages add roles through the entry-point
group ``kernelforge.roles`` (``name = "package.module:factory"``), and a run uses them by listing
their names in ``RunConfig.roles``. The graph builder only ever asks this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from agents.base import Role
from tools.errors import ConfigError

ENTRY_POINT_GROUP = "kernelforge.roles"
RoleFactory = Callable[[Any], Role]
_factories: dict[str, RoleFactory] = {}


def register(name: str, factory: RoleFactory, *, replace: bool = False) -> None:
    if name in _factories and not replace:
        raise ConfigError(f"a role named {name!r} is already registered")
    _factories[name] = factory


def _builtin_factories() -> dict[str, RoleFactory]:
    from agents.coder import make_coder
    from agents.critic import make_critic
    from agents.planner import make_planner
    from agents.profiler import make_profiler

    return {"planner": make_planner, "coder": make_coder, "profiler": make_profiler, "critic": make_critic}


def available() -> dict[str, RoleFactory]:
    """Every known role: built-in, registered at run time, and from installed entry points."""
    roles = _builtin_factories()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        roles.setdefault(ep.name, ep.load())
    roles.update(_factories)
    return roles


def create(name: str, settings: Any) -> Role:
    roles = available()
    if name not in roles:
        raise ConfigError(f"unknown role {name!r} (known: {', '.join(sorted(roles))})")
    return roles[name](settings)
