"""The HTTP+JSON routes of A2A 1.0: which method a verb and a path name.

Each method's route (its verbs and path template) is its row of
`web.core.method_table`, from spec 1.0.1 §11.3 and `specification/a2a.proto`'s
http options; methods that share a path are told apart by the verb. Every
route may also be called under a `/{tenant}/` prefix (the proto's additional
bindings); this agent declares no tenant in its card, so a prefixed call is
refused by name (see `web.rest.binding`), never served as if the prefix were
not there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from shared.quoting import shown
from web.core.errors import RouteNotFound, VerbNotAllowed
from web.core.method_table import METHOD_TABLE, Method

# The order a route's verbs are named in (a refusal's message, `Allow`).
_VERB_ORDER: Final = ("GET", "POST", "DELETE")


@dataclass(frozen=True)
class Route:
    """One route: the method it runs and what its path holds."""

    kind: str  # a method kind of `web.core.method_table` (SEND, GET, ...)
    name: str  # the A2A method, for logs and metrics
    template: str  # the path with its variables named, for metrics
    verbs: tuple[str, ...]
    path_params: dict[str, str] = field(default_factory=dict)
    tenant: str | None = None


@dataclass(frozen=True)
class _Path:
    """One path template and the methods it serves, by verb."""

    template: str
    # Each segment: (its literal text, None) or (the literal text it ends
    # with, the name of the variable holding the rest), as "{id}:cancel" is.
    segments: tuple[tuple[str, str | None], ...]
    by_verb: dict[str, Method]

    @property
    def verbs(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_verb, key=_VERB_ORDER.index))

    def bind(self, segments: list[str]) -> dict[str, str] | None:
        """The path's variables, if `segments` is this path."""
        if len(segments) != len(self.segments):
            return None
        found: dict[str, str] = {}
        for segment, (text, variable) in zip(segments, self.segments, strict=True):
            if variable is None:
                if segment != text:
                    return None
            elif segment.endswith(text):
                found[variable] = segment.removesuffix(text)
            else:
                return None
        return found


def _segment(part: str) -> tuple[str, str | None]:
    if not part.startswith("{"):
        return part, None
    variable, _, suffix = part[1:].partition("}")
    return suffix, variable


def _paths() -> tuple[_Path, ...]:
    """Every path of the table, those with more literal text first, so
    `/tasks/{id}:cancel` is tried before `/tasks/{id}`."""
    by_template: dict[str, dict[str, Method]] = {}
    for method in METHOD_TABLE:
        verbs = by_template.setdefault(method.path, {})
        verbs.update(dict.fromkeys(method.verbs, method))
    paths = [
        _Path(template, tuple(_segment(part) for part in template[1:].split("/")), verbs)
        for template, verbs in by_template.items()
    ]
    return tuple(sorted(paths, key=lambda path: -sum(len(text) for text, _ in path.segments)))


_PATHS: Final = _paths()
# The first segments of the routes: a path starting with anything else has a
# tenant prefix.
_ROOTS: Final = frozenset(path.segments[0][0] for path in _PATHS)
_TASKS: Final = "tasks"

# First path segments that other rooms of the front end serve (the console's
# pages at /console/tasks/<id> would otherwise read as a tenant "console"), so
# they are never taken for a tenant prefix.
NOT_TENANTS: Final = frozenset({"console"})


def is_rest_path(path: str) -> bool:
    """Whether `path` is one this binding answers (its routes, with or without
    a tenant prefix), so the front routes it here rather than to Flask."""
    first, _, rest = path[1:].partition("/")
    if first in _ROOTS or first.startswith(_TASKS + ":"):
        return True
    if first in NOT_TENANTS:
        return False
    return bool(rest) and rest.partition("/")[0] in _ROOTS


def match(verb: str, path: str) -> Route:
    """The route `verb path` names; RouteNotFound or VerbNotAllowed if none."""
    segments = path[1:].split("/")
    tenant = None
    if segments[0] not in _ROOTS and len(segments) > 1:
        tenant, segments = segments[0], segments[1:]
    for candidate in _PATHS:
        path_params = candidate.bind(segments)
        if path_params is not None:
            break
    else:
        raise RouteNotFound(f"no HTTP+JSON route at {shown(path, 200)}")
    verbs = candidate.verbs
    method = candidate.by_verb.get(verb)
    if method is None:
        raise VerbNotAllowed(
            f"{shown(verb, 10)} is not served at {candidate.template}: use {' or '.join(verbs)}",
            allowed=verbs,
        )
    return Route(method.kind, method.name, candidate.template, verbs, path_params, tenant)
