"""The layout is the architecture, and these checks hold it to its picture.

The import graph of the shipped packages is read from the source with `ast`:
every import a file makes (at module level, in a function, under
TYPE_CHECKING), `from a.b import c` counted as the module `a.b.c` when that
is a module and as `a.b` otherwise, relative imports resolved. On it:

- no module imports itself round a circle;
- between the folders (each first-level folder of `shared`, `web` and
  `worker`; `toolnexus`; `examples`) there is no circle either, and no
  arrow points back up, from a folder or from a module at the top of a
  package: `shared` imports neither `web` nor `worker`, `web`
  never imports `worker` (it enqueues by task name), only the embedded
  launcher joins the two, and `shared.store` and `shared.push` never import
  the backends of `shared.stores`, which build on them;
- a binding (`web.jsonrpc`, `web.rest`, `web.grpc`) stands on the core, the
  HTTP edge, the auth and the card only, never on another binding, and the
  core and the edge import no binding;
- the engine (`worker.engine`) runs without Celery and without the runtime
  that runs it on Celery;
- the store backends sit behind one seam: only the wiring imports one, and
  importing the store contract loads none of them, nor redis or psycopg;
- the broker code lives in one package (`shared.broker`), and Redis is
  reached only from it, the Redis store and `shared.redis_nodes` (which
  says where Redis is, for both).

The wiring's imports of a backend (`shared/store/resolve.py` sits in
`shared/store`) are left out of the folders' picture: the backend checks
allow exactly those.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The code that ships: where an import across the layers would matter.
SHIPPED = ("shared", "web", "worker", "toolnexus", "examples")

# The packages each shipped package may import, besides itself.
ALLOWED_PACKAGES = {
    "toolnexus": set(),
    "shared": set(),
    "web": {"shared"},
    "worker": {"shared", "toolnexus", "web"},
    "examples": {"shared", "toolnexus"},
}

# The A2A bindings, and what a binding may import among the project's modules.
BINDINGS = ("web.jsonrpc", "web.rest", "web.grpc")
UNDER_A_BINDING = ("web.core", "web.http", "web.auth", "web.card", "shared")

# Every store backend, one folder each; each module under `shared.stores` is in one.
BACKENDS = (
    "shared.stores.memory",
    "shared.stores.file",
    "shared.stores.redis",
    "shared.stores.postgres",
    "shared.stores.sqlite",
)
# What several backends share (the SQL of PostgreSQL and SQLite): not a
# backend itself, it imports none, and only backends import it.
SHARED_BY_BACKENDS = ("shared.stores.sql",)
# The only modules that import a backend: turning a spec into a store, the
# package's public constructors (on first use), and the `db` command, which
# migrates PostgreSQL's schema.
WIRING = {"shared/store/resolve.py", "shared/__init__.py", "worker/cli/db.py"}


def under(name: str, prefixes: Iterable[str]) -> bool:
    """Whether the dotted `name` is one of `prefixes` or inside one."""
    return any(name == prefix or name.startswith(f"{prefix}.") for prefix in prefixes)


@cache
def modules() -> dict[str, Path]:
    """Each shipped module's dotted name -> its file (a package's is its `__init__.py`)."""
    found: dict[str, Path] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def path_of(name: str) -> str:
    return modules()[name].relative_to(ROOT).as_posix()


def resolved(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names one import statement in `module` imports."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if modules()[module].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    for alias in node.names:
        whole = f"{base}.{alias.name}"
        yield whole if whole in modules() else base


def on_import(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements under `body` that run when the module is imported: not
    a function's body, not a TYPE_CHECKING block."""
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            yield from on_import(statement.orelse)
            continue
        yield statement
        for inner in ("body", "orelse", "finalbody"):
            yield from on_import(getattr(statement, inner, []))
        for handler in getattr(statement, "handlers", []):
            yield from on_import(handler.body)


@cache
def imports(module: str, *, eager: bool = False) -> frozenset[str]:
    """The dotted names `module` imports (third-party ones too); with
    `eager`, only those it imports on being imported itself."""
    path = modules()[module]
    tree = ast.parse(path.read_text(), str(path))
    nodes = on_import(tree.body) if eager else ast.walk(tree)
    return frozenset(
        name
        for node in nodes
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in resolved(module, node)
    )


def project_imports(module: str) -> set[str]:
    return {name for name in imports(module) if name in modules()}


def importers(prefixes: tuple[str, ...], *, outside: tuple[str, ...] = ()) -> set[str]:
    """The paths of the shipped modules not under `outside` (paths) that import
    something under `prefixes` (dotted names)."""
    return {
        path_of(module)
        for module in modules()
        if not path_of(module).startswith(outside)
        and any(under(name, prefixes) for name in imports(module))
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` with a circle in them
    (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return found


def describe(components: list[list[str]], edges: dict[tuple[str, str], list[str]]) -> str:
    """Each circle, with the imports that close it."""
    lines = []
    for component in components:
        lines.append(" <-> ".join(component))
        members = set(component)
        for a, b in sorted(edges):
            if a in members and b in members:
                hows = sorted(edges[a, b])
                more = f" (and {len(hows) - 3} more)" if len(hows) > 3 else ""
                lines.append(f"    {a} -> {b}: {', '.join(hows[:3])}{more}")
    return "\n".join(lines)


def test_the_import_graph_has_no_circle() -> None:
    graph = {module: project_imports(module) - {module} for module in modules()}
    edges = {(a, b): [f"{path_of(a)} imports {b}"] for a in graph for b in graph[a]}
    found = circles(graph)
    assert found == [], "import circles:\n" + describe(found, edges)


def folder(module: str) -> str:
    """The node a module is in the picture of the packages: the first-level
    folder of `shared`, `web` or `worker` it is in, or itself when it sits at
    the top of one (a package's `__init__.py` is the package); `toolnexus`
    and `examples` are one node each."""
    parts = module.split(".")
    if parts[0] in ("toolnexus", "examples"):
        return parts[0]
    if len(parts) > 2 or (len(parts) == 2 and modules()[module].name == "__init__.py"):
        return ".".join(parts[:2])
    return module


@cache
def folder_edges() -> dict[tuple[str, str], list[str]]:
    """(folder, folder) -> the imports that draw that arrow; the wiring's
    imports of a backend left out."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module in modules():
        for name in project_imports(module):
            if path_of(module) in WIRING and under(name, ("shared.stores",)):
                continue
            if folder(module) != folder(name):
                edges.setdefault((folder(module), folder(name)), []).append(
                    f"{path_of(module)} imports {name}"
                )
    return edges


def is_folder(node: str) -> bool:
    """Whether a node of the picture is a folder rather than a module at the
    top of a package."""
    return node in ("toolnexus", "examples") or (
        node.count(".") == 1 and modules()[node].name == "__init__.py"
    )


def test_no_circle_between_the_folders() -> None:
    folders = {folder(module) for module in modules() if is_folder(folder(module))}
    graph: dict[str, set[str]] = {node: set() for node in folders}
    for a, b in folder_edges():
        if a in folders and b in folders:
            graph[a].add(b)
    found = circles(graph)
    assert found == [], "circles between folders:\n" + describe(found, folder_edges())


def test_no_package_imports_one_above_it() -> None:
    crossings = sorted(
        how
        for (a, b), hows in folder_edges().items()
        if a.split(".")[0] != b.split(".")[0]
        and b.split(".")[0] not in ALLOWED_PACKAGES[a.split(".")[0]]
        for how in hows
    )
    assert crossings == []


def test_only_the_embedded_launcher_joins_web_and_worker() -> None:
    joining = sorted(importers(("web",), outside=("web/", "shared/", "toolnexus/", "examples/")))
    assert joining == ["worker/embedded.py"]


@pytest.mark.parametrize("package", ["shared.store", "shared.push"])
def test_the_store_contract_and_push_import_no_backend(package: str) -> None:
    crossings = sorted(
        how
        for (a, b), hows in folder_edges().items()
        if a == package and b == "shared.stores"
        for how in hows
    )
    assert crossings == []


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_binding_stands_on_the_core_the_edge_the_auth_and_the_card(binding: str) -> None:
    allowed = (*UNDER_A_BINDING, binding)
    crossings = {
        path_of(module): sorted(
            name for name in project_imports(module) if not under(name, allowed)
        )
        for module in modules()
        if under(module, (binding,))
    }
    assert {path: names for path, names in crossings.items() if names} == {}


@pytest.mark.parametrize("package", ["web.http", "web.core"])
def test_the_edge_and_the_core_import_no_binding(package: str) -> None:
    crossings = {
        path_of(module): sorted(name for name in project_imports(module) if under(name, BINDINGS))
        for module in modules()
        if under(module, (package,))
    }
    assert {path: names for path, names in crossings.items() if names} == {}


def test_the_engine_runs_without_celery() -> None:
    crossings = {
        path_of(module): sorted(
            name
            for name in imports(module)
            if under(name, ("celery", "kombu", "billiard", "worker.runtime"))
        )
        for module in modules()
        if under(module, ("worker.engine",))
    }
    assert {path: names for path, names in crossings.items() if names} == {}


def test_a_web_process_loads_no_worker_code() -> None:
    code = (
        "import sys; from shared import Settings; from web import create_app;"
        " create_app(Settings(store='memory'));"
        " print(sorted(m for m in sys.modules if m == 'worker' or m.startswith('worker.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_embedded_server_loads_no_celery() -> None:
    # Its work runs in-process: the broker's client is loaded only where a
    # process queues through it (web.assembly.celery_dispatcher).
    code = (
        "import sys; from shared import Settings; from web import create_app;"
        " from worker.engine.inprocess import InProcessDispatcher; import worker.embedded;"
        " from worker.engine.agent import load_agent; s = Settings(store='memory');"
        " from shared.store.wiring import open_store; store = open_store(s);"
        " d = InProcessDispatcher(store, load_agent(s), s);"
        " create_app(s, store=store, dispatcher=d); d.close(timeout=0);"
        " print(sorted({m.split('.')[0] for m in sys.modules} & {'celery', 'kombu', 'billiard'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_backend_list_names_every_backend() -> None:
    stores = [module for module in modules() if under(module, ("shared.stores",))]
    assert sorted(set(BACKENDS) - set(stores)) == []
    others = (*BACKENDS, *SHARED_BY_BACKENDS)
    assert [m for m in stores if m != "shared.stores" and not under(m, others)] == []


def test_what_the_backends_share_imports_no_backend_and_only_they_import_it() -> None:
    shared = [m for m in modules() if under(m, SHARED_BY_BACKENDS)]
    assert shared
    assert [(m, n) for m in shared for n in imports(m) if under(n, BACKENDS)] == []
    assert importers(SHARED_BY_BACKENDS, outside=("shared/stores/",)) == set()


def test_only_the_wiring_imports_a_store_backend() -> None:
    # Everything else holds a store through the contract (shared.store.contract),
    # so a new backend changes these modules and no caller.
    assert importers(BACKENDS, outside=("shared/stores/",)) == WIRING


def test_the_wiring_imports_backends_as_it_says() -> None:
    # The package's constructors load their backend on first use; the `db`
    # command imports PostgreSQL's and no other.
    assert sorted(name for name in imports("shared", eager=True) if under(name, BACKENDS)) == []
    assert (
        sorted(
            name
            for name in imports("worker.cli.db")
            if under(name, BACKENDS) and not under(name, ("shared.stores.postgres",))
        )
        == []
    )


def test_the_store_contract_loads_no_backend() -> None:
    code = (
        "import sys, shared.store.contract;"
        " print(sorted(m for m in sys.modules if m == 'shared.stores'"
        " or m.startswith('shared.stores.')"
        " or m.split('.')[0] in ('redis', 'psycopg', 'psycopg_pool')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_broker_code_lives_only_in_the_broker_package() -> None:
    # The worker is a Celery worker (its app, pools, signals) and may use
    # Celery; the front end and the domain reach a broker only through
    # shared.broker, so a second broker changes one package.
    talking = importers(("celery", "kombu", "billiard"), outside=("shared/broker/", "worker/"))
    assert talking == set()
    # Where Redis is (one server, or Sentinel's master) is said in one place
    # that both use; its URL half imports no redis, since settings use it.
    outside = ("shared/broker/", "shared/stores/redis/", "shared/redis_nodes/")
    assert importers(("redis",), outside=outside) == set()
    assert not any(under(name, ("redis",)) for name in imports("shared.redis_nodes.url"))
    assert importers(
        ("shared.broker.redis", "shared.broker.redis_queue"), outside=("shared/broker/",)
    ) == {"worker/runtime/app.py"}


# Where a store's, a turn book's or a dispatcher's abilities are read: the
# wiring of each, once (and the spec's check that an object it loaded is a
# store, not a factory to call).
ABILITIES_READ = {
    "shared/store/wiring.py",
    "shared/broker/wiring.py",
    "shared/store/resolve.py",
}
# What names a store, a book, a limiter or a dispatcher in a probe's first argument.
_PROBED = ("store", "book", "limiter", "dispatcher", "broker", "inner")
# Protocols whose isinstance check is a probe of an ability.
_ABILITY_PROTOCOLS = {"ReadsOnLoop", "BacklogSource"}


def probes(path: Path) -> Iterator[str]:
    """Each `getattr`/`hasattr` on a store, a book or a dispatcher in the
    file, and each isinstance check against an ability's protocol."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or not node.args:
            continue
        first = ast.unparse(node.args[0])
        if node.func.id in ("getattr", "hasattr") and any(word in first for word in _PROBED):
            yield f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        if node.func.id == "isinstance" and len(node.args) == 2:
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if named & _ABILITY_PROTOCOLS:
                yield f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"


def test_abilities_are_read_only_at_the_wiring() -> None:
    """What a store or a dispatcher can do is decided once, at wiring
    (`shared.store.wiring.abilities_of`, `shared.broker.wiring.
    dispatcher_abilities`); nothing else asks them by name."""
    found = [
        line
        for name, path in modules().items()
        if path.relative_to(ROOT).as_posix() not in ABILITIES_READ
        for line in probes(path)
    ]
    assert found == [], "abilities probed outside the wiring:\n" + "\n".join(found)
