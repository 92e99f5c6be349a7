"""Load a `package.module:attr` reference, the one way user code is named."""

from __future__ import annotations

import importlib
import re
from typing import Any

from shared.errors import ConfigError

_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def is_reference(text: str) -> bool:
    return _REFERENCE.fullmatch(text) is not None


def load_object(reference: str, variable: str = "reference") -> Any:
    """Import `package.module:attr` (attr may be dotted).

    Raises ConfigError naming `variable`, so start-up fails with one line
    that says which setting to fix.
    """
    if not is_reference(reference):
        raise ConfigError(f"{variable}: expected 'package.module:attribute', got {reference!r}")
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # any import-time failure is the user's config to fix
        raise ConfigError(f"{variable}: cannot import module {module_name!r}: {error}") from error
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise ConfigError(
                f"{variable}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return target
