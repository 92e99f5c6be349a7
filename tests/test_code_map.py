"""The docs name the code as it stands.

- docs/code-map.md names every shipped module by its path from the
  repository root (`web/core/tasks.py`), and names no module that is gone.
  A package's `__init__.py` counts when it holds code (more than its
  docstring).
- Every `python -m <module>` (or `python3 -m`, or `sys.executable, "-m"`)
  in the compose files, the Dockerfile, the docs, the README, CI, tools/,
  the tests and pyproject runs one of the project's modules that exists and
  runs as a script, or one of the third-party modules listed here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_MAP = ROOT / "docs" / "code-map.md"

SHIPPED = ("shared", "web", "worker", "toolnexus", "examples")
# The project's own top-level packages a `python -m` may name.
OURS = (*SHIPPED, "tests", "bench")
# The third-party modules the docs and scripts run with `python -m`.
THIRD_PARTY = {"pytest", "pip", "celery", "gunicorn", "mkdocs", "venv", "grpc_tools"}


def holds_code(path: Path) -> bool:
    """Whether a file has a statement besides its docstring."""
    body = ast.parse(path.read_text(), str(path)).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def shipped_modules() -> list[str]:
    return [
        path.relative_to(ROOT).as_posix()
        for package in SHIPPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py" or holds_code(path)
    ]


def test_the_code_map_names_every_shipped_module() -> None:
    text = CODE_MAP.read_text()
    assert [module for module in shipped_modules() if f"`{module}`" not in text] == []


def test_the_code_map_names_no_module_that_is_gone() -> None:
    named = re.findall(rf"`((?:{'|'.join(SHIPPED)})/[\w/]*\.py)`", CODE_MAP.read_text())
    assert sorted({path for path in named if not (ROOT / path).is_file()}) == []


# `python -m <module>`, `python3 -m <module>`, either as a list of arguments
# (`"python", "-m", <module>`) and `sys.executable, "-m", <module>`.
RUN_AS_MODULE = re.compile(
    r"""(?:\bpython3?|sys\.executable)["']?\s*,?\s*["']?-m["']?\s*,?\s*["']?([A-Za-z_][\w.]*)"""
)


def where_modules_are_run() -> list[Path]:
    files = [
        *ROOT.glob("compose*.yaml"),
        ROOT / "Dockerfile",
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        ROOT / ".ci" / "run",
        *(path for path in (ROOT / "tools").iterdir() if path.is_file()),
        *ROOT.glob("tests/**/*.py"),
        ROOT / "pyproject.toml",
    ]
    return sorted(files)


def runs_as_a_script(module: str) -> bool:
    """Whether `python -m <module>` finds the project's module and runs something."""
    path = ROOT.joinpath(*module.split("."))
    if (path / "__main__.py").is_file():
        return True
    script = path.with_suffix(".py")
    return script.is_file() and '__name__ == "__main__"' in script.read_text()


def test_every_module_run_with_python_m_exists() -> None:
    wrong = []
    for path in where_modules_are_run():
        for module in RUN_AS_MODULE.findall(path.read_text()):
            top = module.split(".")[0]
            if (top in OURS and runs_as_a_script(module)) or top in THIRD_PARTY:
                continue
            wrong.append(f"{path.relative_to(ROOT)}: python -m {module}")
    assert sorted(set(wrong)) == []
