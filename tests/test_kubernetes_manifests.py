"""The Kubernetes manifests (deploy/kubernetes/) hold for the service as it
stands, checked without a cluster.

Each overlay is rendered by kustomize (the one built into kubectl) and every
object it gives is validated against the Kubernetes API schemas of the
versions stated below (`kubernetes-validate`, strict: an unknown field
fails), the KEDA ScaledObject against the models generated from KEDA's CRDs
(`cloudcoil-models-keda`; a field they do not know fails too). Then what
the objects name is compared with what the service has: every `TOOLNEXUS_*`
setting is one it reads (a renamed one fails), every command parses with
its role's own parser, every probe path is a route of the front end, every
port the one the settings make it listen on, every query of the scaler
parses by Prometheus' grammar and names metrics it exports with the labels
they carry, each grace period covers its role's drain. docs/kubernetes.md is
read as a newcomer reads it: each kubectl line runs as far as kubectl gets
without a cluster, and names only paths and objects that exist.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import requests
import yaml
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.control import inspect
from cloudcoil.models.keda.v1alpha1 import ScaledObject

from shared import Settings, memory_store
from shared.ops.metrics import METRICS_PATH
from shared.settings import RENAMED
from tests.support.cli_lines import refusal
from tests.support.code_names import SETTING
from tests.support.docs_text import ROOT, code_lines, commands
from tests.support.ports import free_port
from tests.support.promql import metric_labels, problems, syntax_errors
from tests.support.redis_server import RedisServer, ci
from tests.test_web_support import PlayingDispatcher
from web import create_app
from worker.command import PROGRAM
from worker.runtime.health import CHECKS

DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("redis", "postgres", "rabbitmq")
PAGE = ROOT / "docs" / "kubernetes.md"
# The Kubernetes versions every object is validated against: the oldest the
# manifests are for (the first with a preStop `sleep` on by default) and the
# newest whose schemas kubernetes-validate carries.
KUBERNETES_VERSIONS = ("1.30", "1.37")
SECRET = "toolnexus-secrets"
ROLES = {"web", "grpc", "worker", "beat"}
# KEDA's metricType values (the CRD leaves it a string; KEDA refuses others).
METRIC_TYPES = {"AverageValue", "Value", "Utilization"}

Object = dict[str, Any]


# --- rendering --------------------------------------------------------------


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        problem = "NO KUBECTL: the manifests cannot be rendered (kustomize is built into kubectl)"
        if ci():
            pytest.fail(problem)
        pytest.skip(problem)
    return found


def render(directory: Path) -> list[Object]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{directory.relative_to(ROOT)}: {done.stderr}"
    return [thing for thing in yaml.safe_load_all(done.stdout) if thing]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Object]]:
    return {overlay: render(DEPLOY / "overlays" / overlay) for overlay in OVERLAYS}


def each(rendered: dict[str, list[Object]]) -> Iterator[tuple[str, Object]]:
    for overlay, objects in rendered.items():
        for thing in objects:
            yield overlay, thing


def named(objects: list[Object], kind: str, name: str) -> Object:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def of_kind(objects: list[Object], kind: str) -> list[Object]:
    return [o for o in objects if o["kind"] == kind]


def role_of(deployment: Object) -> str:
    return str(deployment["metadata"]["labels"]["app.kubernetes.io/component"])


def containers(thing: Object) -> list[Object]:
    spec = thing["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def main_container(deployment: Object) -> Object:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def settings_of(objects: list[Object], deployment: Object) -> dict[str, str]:
    """The environment a container of the Deployment starts with, but the Secret."""
    env: dict[str, str] = {}
    container = main_container(deployment)
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env |= named(objects, "ConfigMap", source["configMapRef"]["name"])["data"]
    env |= {item["name"]: item["value"] for item in container.get("env", [])}
    return env


def test_every_overlay_renders_the_whole_fleet(rendered: dict[str, list[Object]]) -> None:
    for overlay, objects in rendered.items():
        deployments = of_kind(objects, "Deployment")
        assert {role_of(d) for d in deployments} == ROLES, overlay
        assert {s["metadata"]["name"] for s in of_kind(objects, "Service")} == {
            "toolnexus-web",
            "toolnexus-grpc",
        }
        names = {d["metadata"]["name"] for d in deployments}
        for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
            assert hpa["spec"]["scaleTargetRef"]["name"] in names
        (scaler,) = of_kind(objects, "ScaledObject")
        assert scaler["spec"]["scaleTargetRef"]["name"] == "toolnexus-worker"
        # What an autoscaler sizes has no count of its own, which an apply would put back.
        scaled = {
            o["spec"]["scaleTargetRef"]["name"]
            for o in objects
            if "scaleTargetRef" in o.get("spec", {})
        }
        assert scaled == {"toolnexus-web", "toolnexus-grpc", "toolnexus-worker"}
        for deployment in deployments:
            counted = "replicas" in deployment["spec"]
            assert counted == (deployment["metadata"]["name"] not in scaled), deployment["metadata"]
        for budget in of_kind(objects, "PodDisruptionBudget"):
            selector = budget["spec"]["selector"]["matchLabels"]
            chosen = [
                d
                for d in deployments
                if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(chosen) == 1, f"{overlay}: {budget['metadata']['name']} selects {chosen}"


# --- schemas ----------------------------------------------------------------


def schema_problems(thing: Object) -> list[str]:
    """Why the object is not valid Kubernetes (KEDA's CRD for a ScaledObject)."""
    if thing.get("apiVersion", "").startswith("keda.sh/"):
        return keda_problems(thing)
    wrong = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(thing, version, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            wrong.append(f"Kubernetes {version}: {e}")
    return wrong


def keda_problems(thing: Object) -> list[str]:
    if thing.get("kind") != "ScaledObject" or thing.get("apiVersion") != "keda.sh/v1alpha1":
        return [f"not a keda.sh/v1alpha1 ScaledObject: {thing.get('apiVersion')}"]
    try:
        model = ScaledObject.model_validate(thing)
    except ValueError as error:  # pydantic's ValidationError
        return [str(error)]
    # The models ignore a field they do not know: one lost on the way back is one.
    kept = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    wrong = [f"not in KEDA's schema: {path}" for path in lost(thing, kept)]
    for trigger in thing["spec"]["triggers"]:
        if trigger.get("metricType", "AverageValue") not in METRIC_TYPES:
            wrong.append(f"metricType {trigger['metricType']!r}: KEDA takes {sorted(METRIC_TYPES)}")
    return wrong


def lost(given: Any, kept: Any, path: str = "") -> list[str]:
    """The paths of `given` that `kept` lacks."""
    if isinstance(given, dict):
        if not isinstance(kept, dict):
            return [path or "/"]
        return [
            found
            for key, value in given.items()
            for found in (
                lost(value, kept[key], f"{path}.{key}") if key in kept else [f"{path}.{key}"]
            )
        ]
    if isinstance(given, list):
        if not isinstance(kept, list) or len(kept) != len(given):
            return [path]
        return [
            found for i, item in enumerate(given) for found in lost(item, kept[i], f"{path}[{i}]")
        ]
    return []


def test_every_object_is_valid_for_kubernetes_and_keda(rendered: dict[str, list[Object]]) -> None:
    # An object the overlays share is validated once.
    distinct: dict[str, tuple[str, Object]] = {}
    for overlay, thing in each(rendered):
        distinct.setdefault(json.dumps(thing, sort_keys=True), (overlay, thing))
    wrong = [
        f"{overlay}: {thing['kind']}/{thing['metadata']['name']}: {why}"
        for overlay, thing in distinct.values()
        for why in schema_problems(thing)
    ]
    assert wrong == [], "\n".join(wrong)


def test_a_broken_object_fails_its_schema(rendered: dict[str, list[Object]]) -> None:
    objects = rendered["redis"]
    worker = named(objects, "Deployment", "toolnexus-worker")
    scaler = named(objects, "ScaledObject", "toolnexus-worker")
    assert schema_problems(worker) == [] and schema_problems(scaler) == []
    broken: list[tuple[str, Object]] = []
    for change, target in [
        ("a count that is a word", ("spec", "replicas", "two")),
        ("a field Kubernetes lacks", ("spec", "replica", 2)),
        ("a probe port that is a list", ("probe", "port", [8080])),
    ]:
        thing = copy.deepcopy(worker)
        where, key, value = target
        if where == "probe":
            main = thing["spec"]["template"]["spec"]["containers"][0]
            main["readinessProbe"] = {"httpGet": {"path": "/readyz", key: value}}
        else:
            thing[where][key] = value
        broken.append((change, thing))
    for change, edit in [
        ("no triggers", lambda spec: spec.pop("triggers")),
        ("a count that is a word", lambda spec: spec.update(maxReplicaCount="many")),
        ("a field KEDA lacks", lambda spec: spec.update(maxReplicas=20)),
        ("a trigger field KEDA lacks", lambda spec: spec["triggers"][0].update(query="x")),
        ("a metric type KEDA refuses", lambda spec: spec["triggers"][0].update(metricType="Max")),
    ]:
        thing = copy.deepcopy(scaler)
        edit(thing["spec"])
        broken.append((change, thing))
    passed = [change for change, thing in broken if not schema_problems(thing)]
    assert passed == [], f"validated though broken: {passed}"


# --- what the objects name --------------------------------------------------


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def setting_problems(texts: list[str]) -> list[str]:
    """Each `TOOLNEXUS_*` name in the texts that the service does not read
    (a renamed setting too: the service refuses it, naming the new one)."""
    read = set(Settings.variables())
    return sorted(
        f"{name}: {f'renamed {RENAMED[name]}' if name in RENAMED else 'not a setting'}"
        for text in texts
        for name in SETTING.findall(text)
        if name not in read
    )


def manifest_texts() -> list[str]:
    return [path.read_text() for path in sorted(DEPLOY.rglob("*")) if path.is_file()]


def test_every_setting_named_is_one_the_service_reads(rendered: dict[str, list[Object]]) -> None:
    texts = manifest_texts() + [text for _, thing in each(rendered) for text in strings(thing)]
    assert any("TOOLNEXUS_TIME_LIMIT" in text for text in texts), "no settings found"
    assert setting_problems(texts) == []
    renamed = next(iter(RENAMED))
    assert setting_problems([f"{renamed}=8"]) == [f"{renamed}: renamed {RENAMED[renamed]}"]
    # (Built here, so that no other check of the tests' settings reads it as one.)
    assert setting_problems(["TOOLNEXUS_" + "NOT_A_SETTING=1"]) != []
    # And every value parses as the service parses it.
    for overlay, thing in each(rendered):
        if thing["kind"] == "Deployment":
            Settings.from_env(settings_of(rendered[overlay], thing))


def command_problems(argv: list[str], worker_name: str) -> str | None:
    """Why a container's or probe's command is not one the service has."""
    if argv[:1] == [PROGRAM]:
        return refusal(argv[1:])
    if argv[:3] == ["python", "-m", "worker.runtime.health"]:
        return None if argv[3:] and argv[3] in CHECKS and len(argv) == 4 else f"no check {argv}"
    if argv[:2] == ["sh", "-c"] and len(argv) == 3:
        return command_problems(shlex.split(argv[2]), worker_name)
    if argv[:4] == ["celery", "-A", "worker", "inspect"]:
        context = CLIContext(app=Celery(set_as_current=False), no_color=True, workdir=None)
        try:
            inspect.make_context("celery inspect", argv[4:], obj=context)
        except Exception as error:
            return f"celery inspect: {error}"
        destination = argv[argv.index("--destination") + 1]
        if destination != worker_name.replace("%h", "$HOSTNAME"):
            return f"pings {destination}, the worker is named {worker_name}"
        return None
    return f"not a command of the service: {argv}"


def test_every_command_is_one_the_service_has(rendered: dict[str, list[Object]]) -> None:
    wrong = []
    for overlay, thing in each(rendered):
        if thing["kind"] != "Deployment":
            continue
        worker = main_container(named(rendered[overlay], "Deployment", "toolnexus-worker"))
        worker_name = next(w for w in worker["command"] if w.startswith("--hostname="))
        worker_name = worker_name.removeprefix("--hostname=")
        for container in containers(thing):
            argv = [*container.get("command", []), *container.get("args", [])]
            runs = [argv]
            runs += [
                probe["exec"]["command"]
                for kind in ("livenessProbe", "readinessProbe", "startupProbe")
                if "exec" in (probe := container.get(kind, {}))
            ]
            for run in runs:
                why = command_problems(run, worker_name)
                if why is not None:
                    wrong.append(f"{overlay}: {thing['metadata']['name']}: {run}: {why}")
        role = role_of(thing)
        assert main_container(thing)["command"][:2] == [PROGRAM, role]
    assert wrong == [], "\n".join(wrong)
    assert command_problems(["toolnexus-serve", "worker", "--concurency=2"], "w@%h") is not None
    assert command_problems(["python", "-m", "worker.runtime.health", "web"], "w@%h") is not None


def front_end_routes() -> set[str]:
    store = memory_store()
    try:
        app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store))
        return {rule.rule for rule in app.url_map.iter_rules()}
    finally:
        store.close()


def port_number(container: Object, port: int | str) -> int:
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports", []) if p["name"] == port]
    assert len(numbers) == 1, f"no port named {port}"
    return int(numbers[0])


def flag(container: Object, name: str, otherwise: int) -> int:
    """The number a `--name N` flag of the container's command gives, else `otherwise`."""
    argv = container["command"]
    return int(argv[argv.index(name) + 1]) if name in argv else otherwise


def test_ports_and_paths_are_the_service_s(rendered: dict[str, list[Object]]) -> None:
    routes = front_end_routes()
    assert {"/healthz", "/readyz", METRICS_PATH} <= routes
    for objects in rendered.values():
        for deployment in of_kind(objects, "Deployment"):
            settings = Settings.from_env(settings_of(objects, deployment))
            container = main_container(deployment)
            role = role_of(deployment)
            listens = {"web": settings.port, "grpc": flag(container, "--port", settings.grpc_port)}
            for kind in ("livenessProbe", "readinessProbe"):
                probe = container.get(kind)
                if probe is None:
                    assert role == "worker" or kind == "readinessProbe", f"{role}: no {kind}"
                    continue
                if "httpGet" in probe:
                    assert probe["httpGet"]["path"] in routes
                    assert port_number(container, probe["httpGet"]["port"]) == listens[role]
                if "tcpSocket" in probe:
                    assert port_number(container, probe["tcpSocket"]["port"]) == listens[role]
            if role in ("web", "grpc"):
                assert (
                    container["readinessProbe"].get("httpGet", {}).get("path", "/readyz")
                    == "/readyz"
                )
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            scraped = settings.port if role == "web" else settings.metrics_port
            assert annotations["prometheus.io/path"] == METRICS_PATH
            assert int(annotations["prometheus.io/port"]) == scraped, role
            assert scraped in {p["containerPort"] for p in container["ports"]}, role
            assert settings.host == "0.0.0.0", "the pod's port must be reachable from outside it"
        for service in of_kind(objects, "Service"):
            selected = [
                d
                for d in of_kind(objects, "Deployment")
                if service["spec"]["selector"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert len(selected) == 1
            for port in service["spec"]["ports"]:
                port_number(main_container(selected[0]), port["targetPort"])


def prestop_seconds(container: Object) -> int:
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    return int(pre_stop.get("sleep", {}).get("seconds", 0))


def test_each_grace_period_covers_its_role_s_drain(rendered: dict[str, list[Object]]) -> None:
    for overlay, objects in rendered.items():
        for deployment in of_kind(objects, "Deployment"):
            settings = Settings.from_env(settings_of(objects, deployment))
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            pause = prestop_seconds(main_container(deployment))
            needed = {
                # Celery's warm shutdown waits for runs on their last attempt
                # up to the hard time limit; the drain hands back the others.
                "worker": max(settings.hard_time_limit, settings.drain_timeout),
                # gunicorn's graceful_timeout (web/http/gunicorn_conf.py).
                "web": pause + int(settings.blocking_timeout) + 5,
                "grpc": pause + settings.grpc_grace,
                "beat": 5,
            }[role_of(deployment)]
            assert grace >= needed, f"{overlay}: {role_of(deployment)}: {grace} s < {needed} s"


def test_beat_runs_exactly_once(rendered: dict[str, list[Object]]) -> None:
    for objects in rendered.values():
        beat = named(objects, "Deployment", "toolnexus-beat")
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}
        targets = {
            o["spec"]["scaleTargetRef"]["name"]
            for o in objects
            if "scaleTargetRef" in o.get("spec", {})
        }
        assert "toolnexus-beat" not in targets
        for deployment in of_kind(objects, "Deployment"):
            if deployment is not beat:
                assert deployment["spec"].get("strategy", {}).get("type") != "Recreate"


def test_every_pod_is_locked_down(rendered: dict[str, list[Object]]) -> None:
    for overlay, thing in each(rendered):
        if thing["kind"] != "Deployment":
            continue
        pod = thing["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for container in containers(thing):
            where = f"{overlay}: {thing['metadata']['name']}: {container['name']}"
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert container["image"].startswith("toolnexus-serve"), where
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), where
            assert "memory" in container["resources"]["limits"], where
            refs = [s.get("secretRef", {}).get("name") for s in container.get("envFrom", [])]
            assert SECRET in refs, where


# --- the worker scaler ------------------------------------------------------


def test_the_worker_scaler_queries_what_the_service_exports(
    rendered: dict[str, list[Object]],
) -> None:
    known = metric_labels()
    for overlay, objects in rendered.items():
        scaler = named(objects, "ScaledObject", "toolnexus-worker")
        worker = named(objects, "Deployment", "toolnexus-worker")
        settings = Settings.from_env(settings_of(objects, worker))
        queries = {}
        for trigger in scaler["spec"]["triggers"]:
            assert trigger["type"] == "prometheus"
            query = trigger["metadata"]["query"]
            assert problems(query, known) == [], f"{overlay}: {query}"
            assert re.findall(r'queue="([^"]*)"', query) == [settings.queue], query
            queries[trigger.get("metricType", "AverageValue")] = trigger["metadata"]
        servers = {trigger["metadata"]["serverAddress"] for trigger in scaler["spec"]["triggers"]}
        assert len(servers) == 1, f"{overlay}: the triggers ask different servers: {servers}"
        # Replicas = depth / threshold: one pod's concurrency per replica.
        depth = queries["AverageValue"]
        assert "toolnexus_queue_depth" in depth["query"]
        assert int(depth["threshold"]) == settings.concurrency
        # Only a broker that shows a message's age gets the age trigger.
        ages = "Value" in queries
        assert ages == (overlay != "rabbitmq"), overlay
        if ages:
            assert "toolnexus_queue_oldest_age_seconds" in queries["Value"]["query"]
    every = [
        trigger["metadata"]["query"]
        for objects in rendered.values()
        for trigger in named(objects, "ScaledObject", "toolnexus-worker")["spec"]["triggers"]
    ]
    assert syntax_errors(every) == []
    assert problems('max(toolnexus_queue_depths{queue="toolnexus"})', known) != []
    assert problems('max(toolnexus_queue_depth{queues="toolnexus"})', known) != []


# --- the page ---------------------------------------------------------------


def kubectl_lines() -> Iterator[tuple[str, list[str]]]:
    for spot in code_lines(PAGE):
        if "kubectl" in spot.text:
            for argv in commands(spot.text, "kubectl"):
                yield str(spot), argv


@pytest.fixture(scope="module")
def no_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An environment whose kubeconfig names a loopback port nobody listens
    on: kubectl parses a line and gets as far as asking the cluster."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        config = tmp_path_factory.mktemp("kube") / "config"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "none", "cluster": {"server": f"http://127.0.0.1:{port}"}}
                    ],
                    "users": [{"name": "none", "user": {}}],
                    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                    "current-context": "none",
                }
            )
        )
        # Held bound but not listening: a connection is refused at once.
        yield {**os.environ, "KUBECONFIG": str(config), "HOME": str(config.parent)}


PATH_FLAGS = ("-k", "-f", "--kustomize", "--filename")
VALUED_FLAGS = (*PATH_FLAGS, "-n", "--namespace")


def without_valued_flags(argv: list[str]) -> list[str]:
    """The words of a kubectl line but the namespace and path flags and their values."""
    words: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in VALUED_FLAGS:
            skip = True
        else:
            words.append(word)
    return words


REFUSED = re.compile(r"connection refused|was refused|dial tcp", re.I)


def test_every_kubectl_line_of_the_page_is_real(
    rendered: dict[str, list[Object]], no_cluster: dict[str, str]
) -> None:
    everything = {
        (o["kind"].lower(), o["metadata"]["name"]) for objects in rendered.values() for o in objects
    }
    secret_refs = {
        source["secretRef"]["name"]
        for _, thing in each(rendered)
        if thing["kind"] == "Deployment"
        for container in containers(thing)
        for source in container.get("envFrom", [])
        if "secretRef" in source
    }
    wrong = []
    seen = 0
    for spot, argv in kubectl_lines():
        seen += 1
        for flag, value in itertools.pairwise(argv):
            if flag in PATH_FLAGS and not (ROOT / value).exists():
                wrong.append(f"{spot}\n    no {value}")
        words = without_valued_flags(argv)
        for ref in words:
            kind, slash, name = ref.partition("/")
            if slash and re.fullmatch(r"[a-z]+", kind) and (kind, name) not in everything:
                wrong.append(f"{spot}\n    no {ref} in the rendered manifests")
        if words[:3] == ["create", "secret", "generic"] and words[3] not in secret_refs:
            wrong.append(f"{spot}\n    the pods read the Secret {sorted(secret_refs)}")
        done = subprocess.run(
            [kubectl(), *argv, "--request-timeout=5s"],
            capture_output=True,
            text=True,
            timeout=60,
            env=no_cluster,
            cwd=ROOT,
        )
        said = done.stderr + done.stdout
        if done.returncode != 0 and not REFUSED.search(said):
            wrong.append(f"{spot}\n    {said.strip()[-300:]}")
    assert seen >= 8, "the page's kubectl lines were not found"
    assert wrong == [], "\n".join(wrong)


# --- the pods, run as their manifests start them (opt-in) -------------------

# A mount namespace of the process's own, whose root is read-only but for
# /tmp: what `readOnlyRootFilesystem` and the pods' /tmp emptyDir give.
READ_ONLY_ROOT = 'mount --bind /tmp /tmp && mount -o remount,bind,ro / && exec "$@"'


def on_a_read_only_root(argv: list[str]) -> list[str]:
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", READ_ONLY_ROOT, "sh", *argv]


def read_only_root_problem() -> str | None:
    """Why this machine cannot run a process on a read-only root, or None."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "NOT ROOT OR NO unshare: the pods' read-only root cannot be made"
    probe = subprocess.run(
        on_a_read_only_root(["sh", "-c", "touch /tmp/.k8s-probe-$$ && ! touch /.k8s-probe-$$"]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"NO READ-ONLY ROOT: unshare and mount refused: {probe.stderr.strip()[-200:]}"
    return None


@pytest.mark.slow
def test_the_roles_run_on_a_read_only_root_as_their_manifests_start_them(
    rendered: dict[str, list[Object]], tmp_path: Path
) -> None:
    """Each role of the Redis overlay, with its manifest's command, settings
    and environment, on a read-only root with a writable /tmp: it starts, a
    task completes through the front end, every probe passes, and each stops
    on SIGTERM within its grace. Loopback addresses and free ports stand in
    for the pod's own."""
    problem = read_only_root_problem()
    if problem is not None:
        if ci():
            pytest.fail(problem)
        pytest.skip(problem)
    objects = rendered["redis"]
    binaries = str(Path(sys.executable).parent)
    redis = RedisServer().start()
    web_port, grpc_port = free_port(), free_port()
    started: dict[str, tuple[subprocess.Popen[bytes], Object, dict[str, str]]] = {}
    try:
        for deployment in of_kind(objects, "Deployment"):
            role = role_of(deployment)
            container = main_container(deployment)
            env = {
                "PATH": f"{binaries}:/usr/bin:/bin",
                "HOME": "/home/no-such-user",
                "PYTHONDONTWRITEBYTECODE": "1",
                "HOSTNAME": socket.gethostname(),  # a pod's: its name, as Celery's %h
                **settings_of(objects, deployment),
                "TOOLNEXUS_STORE": f"{redis.url}/1",
                "TOOLNEXUS_BROKER_URL": f"{redis.url}/0",
                "TOOLNEXUS_HOST": "127.0.0.1",
                "TOOLNEXUS_PORT": str(web_port),
                "TOOLNEXUS_METRICS_PORT": str(free_port()),
            }
            argv = [
                {"0.0.0.0": "127.0.0.1", "50051": str(grpc_port), "/tmp/beat": str(tmp_path)}.get(
                    word, word
                )
                for word in container["command"]
            ]
            argv[0] = str(Path(binaries) / argv[0])
            with (tmp_path / f"{role}.log").open("wb") as log:
                process = subprocess.Popen(
                    on_a_read_only_root(argv),
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd="/",
                )
            started[role] = (process, deployment, env)
        ready_by = time.monotonic() + 120
        while True:
            assert all(p.poll() is None for p, _, _ in started.values()), logs(tmp_path)
            try:
                if requests.get(f"http://127.0.0.1:{web_port}/readyz", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < ready_by, "not ready in 120 s\n" + logs(tmp_path)
            time.sleep(0.5)
        sent = requests.post(
            f"http://127.0.0.1:{web_port}/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": "k8s-1",
                        "role": "ROLE_USER",
                        "parts": [{"text": "hi"}],
                    },
                    "configuration": {"blocking": True},
                },
            },
            headers={"A2A-Version": "1.0"},
            timeout=60,
        ).json()
        assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent
        for role, (_, deployment, env) in started.items():
            probe = main_container(deployment).get("livenessProbe", {})
            if "exec" in probe:
                done = subprocess.run(
                    on_a_read_only_root(probe["exec"]["command"]),
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd="/",
                )
                assert done.returncode == 0, f"{role}'s probe: {done.stdout}{done.stderr}"
        socket.create_connection(("127.0.0.1", grpc_port), timeout=5).close()
    finally:
        for process, _, _ in started.values():
            process.terminate()
        for role, (process, deployment, _) in started.items():
            grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                pytest.fail(f"{role} outlived its grace of {grace} s\n" + logs(tmp_path))
        redis.close()
    said = logs(tmp_path)
    whole = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    # JSON logs (TOOLNEXUS_LOG_FORMAT in the ConfigMap): a clean run logs no error.
    assert "Read-only file system" not in whole and '"level": "ERROR"' not in whole, said
    assert all(p.returncode == 0 for p, _, _ in started.values()), (
        {role: p.returncode for role, (p, _, _) in started.items()},
        said,
    )


def logs(directory: Path) -> str:
    return "\n".join(
        f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(directory.glob("*.log"))
    )
