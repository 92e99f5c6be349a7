"""The package boundaries: shared imports neither web nor worker, and web
never imports worker (it enqueues by task name), so a web process needs
none of the agent's dependencies. The store backends sit behind one seam
(shared.stores, reached through the wiring) and the broker code in one
package (shared.broker)."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# The code that ships: where a backend or broker import would matter.
SHIPPED = ("shared", "web", "worker", "toolnexus", "examples")


@cache
def imported_modules(package: str) -> dict[str, set[str]]:
    """Each module under `package` (a folder) -> the dotted names it imports,
    `from a.b import c` counted as both `a.b` and `a.b.c` (c may be a module)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def imported_packages(package: str) -> dict[str, set[str]]:
    """Each module under `package` -> the top-level packages it imports."""
    return {
        module: {name.split(".")[0] for name in names}
        for module, names in imported_modules(package).items()
    }


def importers(prefixes: tuple[str, ...], *, outside: tuple[str, ...]) -> set[str]:
    """The shipped modules not under `outside` that import a module under `prefixes`."""
    return {
        module
        for package in SHIPPED
        for module, names in imported_modules(package).items()
        if not module.startswith(outside)
        and any(name == p or name.startswith(f"{p}.") for name in names for p in prefixes)
    }


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("shared", {"web", "worker"}),
        ("shared/stores", {"web", "worker"}),
        ("shared/broker", {"web", "worker"}),
        ("web", {"worker"}),
    ],
)
def test_package_boundaries(package: str, forbidden: set[str]) -> None:
    crossings = {
        module: names & forbidden
        for module, names in imported_packages(package).items()
        if names & forbidden
    }
    assert crossings == {}


def test_only_the_embedded_launcher_joins_web_and_worker() -> None:
    joining = [module for module, names in imported_packages("worker").items() if "web" in names]
    assert joining == ["worker/embedded.py"]


def test_a_web_process_loads_no_worker_code() -> None:
    code = (
        "import sys; from shared import Settings; from web import create_app;"
        " create_app(Settings(store='memory'));"
        " print(sorted(m for m in sys.modules if m == 'worker' or m.startswith('worker.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


BACKENDS = (
    "shared.stores.memory.store",
    "shared.stores.memory.push",
    "shared.stores.file.store",
    "shared.stores.file.log",
    "shared.stores.file.push",
    "shared.stores.redis",
)


def test_only_the_wiring_imports_a_store_backend() -> None:
    # Everything else holds a store through the contract (shared.store.contract), so a
    # new backend changes these modules and no caller. shared/__init__ is the
    # public import path of the stores' constructors.
    wiring = {"shared/__init__.py", "shared/store/resolve.py"}
    assert importers(BACKENDS, outside=("shared/stores/",)) == wiring


def test_broker_code_lives_only_in_the_broker_package() -> None:
    # The worker is a Celery worker (its app, pools, signals) and may use
    # Celery; the front end and the domain reach a broker only through
    # shared.broker, so a second broker changes one package.
    talking = importers(("celery", "kombu"), outside=("shared/broker/", "worker/"))
    assert talking == set()
    on_redis = importers(("redis",), outside=("shared/broker/", "shared/stores/redis/"))
    assert on_redis == set()
    assert importers(
        ("shared.broker.redis", "shared.broker.redis_queue"), outside=("shared/broker/",)
    ) == {"worker/runtime/app.py"}
