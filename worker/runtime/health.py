"""Health checks for the compose services that have no HTTP check of their own.

    python -m worker.runtime.health beat      the reaper ran within 3 x TOOLNEXUS_REAP_EVERY
    python -m worker.runtime.health flower    Flower answers /healthcheck, with its login

Each prints one line and exits 0 when healthy, 1 when not, as Docker wants.

Beat records the time of every reaper run in the task store (the record
/readyz reads), so "beat is healthy" means the reaper ran lately, not merely
that the process exists: a beat that hangs, or cannot reach the store, is
unhealthy too.
"""

from __future__ import annotations

import base64
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence

from shared.errors import Unsupported
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import open_store

Verdict = tuple[bool, str]


def beat_verdict(store: Store, overdue_after: float, now: float) -> Verdict:
    try:
        last = store.last_beat()
    except Unsupported:
        return False, "this store keeps no record of beat's runs; cannot tell"
    if last is None:
        return False, "the reaper has not run yet: is beat running?"
    age = now - last
    if age > overdue_after:
        return False, f"the reaper last ran {age:.0f} s ago (allowed {overdue_after:g} s)"
    return True, f"the reaper ran {age:.1f} s ago"


def check_beat(env: Mapping[str, str]) -> Verdict:
    settings = Settings.from_env(env)
    return beat_verdict(open_store(settings), settings.beat_overdue_after, time.time())


def check_flower(env: Mapping[str, str]) -> Verdict:
    """GET /healthcheck on this container's Flower, which asks for the login
    like every other Flower page (worker.runtime.flower_login)."""
    port = env.get("FLOWER_PORT") or "5555"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthcheck")
    # FLOWER_BASIC_AUTH may list several user:password pairs; any one will do.
    login = (env.get("FLOWER_BASIC_AUTH") or "").split(",")[0]
    if login:
        request.add_header("Authorization", f"Basic {base64.b64encode(login.encode()).decode()}")
    try:
        with urllib.request.urlopen(request, timeout=4) as reply:
            body = reply.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as error:
        return False, f"flower answered {error.code}"
    except OSError as error:
        return False, f"flower does not answer on port {port}: {error}"
    return body == "OK", f"flower answered {body[:40]!r}"


CHECKS: dict[str, Callable[[Mapping[str, str]], Verdict]] = {
    "beat": check_beat,
    "flower": check_flower,
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    usage = f"usage: python -m worker.runtime.health {{{','.join(CHECKS)}}}"
    if args in (["-h"], ["--help"]):
        print(f"{usage}\n\n{(__doc__ or '').strip()}")
        return 0
    if len(args) != 1 or args[0] not in CHECKS:
        print(usage, file=sys.stderr)
        return 1
    try:
        healthy, reason = CHECKS[args[0]](os.environ if env is None else env)
    except Exception as error:
        # A health check answers in one line whatever went wrong (a bad
        # setting, a store refusing the password), never with a traceback.
        healthy, reason = False, str(error) or type(error).__name__
    print(f"{args[0]}: {'healthy' if healthy else 'unhealthy'}: {reason}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
