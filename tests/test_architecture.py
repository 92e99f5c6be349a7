"""The package boundaries: shared imports neither web nor worker, and web
never imports worker (it enqueues by task name), so a web process needs
none of the agent's dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_packages(package: str) -> dict[str, set[str]]:
    """Each module of `package` -> the top-level packages it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"), [("shared", {"web", "worker"}), ("web", {"worker"})]
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
