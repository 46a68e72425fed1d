"""What `invoke doctor` checks for the Ray engine: Ray's version in the driver, and the head reachable.

`ray_facts` probes (side effects: a TCP connect); `ray_checks` turns facts into (name, level, detail, fix)
tuples, level ok | warn | fail as in the doctor. Pure, so it is unit-tested.
"""

from __future__ import annotations

import re
import socket

from rcea.paths import project_root


def pinned_ray() -> str | None:
    """The Ray version lockfiles/tools.txt pins (the images' locks pin the same, tests/cluster checks it)."""
    m = re.search(r"^ray==([^\s\\]+)", (project_root() / "lockfiles" / "tools.txt").read_text(), re.M)
    return m.group(1) if m else None


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (Ray's GCS port, 6379 by default) -> (host, port); ray:// client addresses too."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid Ray address {address!r}; expected HOST:PORT, e.g. 10.0.0.5:6379")
    return host, int(port)


def ray_facts(address: str | None = None, timeout_s: float = 5.0) -> dict:
    facts = {"address": address, "pinned": pinned_ray(), "version": None, "reachable": None, "error": None}
    try:
        import ray

        facts["version"] = ray.__version__
    except ImportError:
        pass
    if address:
        try:
            host, port = parse_address(address)
            with socket.create_connection((host, port), timeout=timeout_s):
                facts["reachable"] = True
        except (OSError, ValueError) as exc:
            facts["reachable"], facts["error"] = False, str(exc)
    return facts


def ray_checks(facts: dict) -> list[tuple[str, str, str, str]]:
    checks = []
    version, pinned = facts["version"], facts["pinned"]
    if version is None:
        checks.append(("ray", "warn", "Ray is not installed in this environment (the Ray engine cannot drive)",
                       "scripts/bootstrap tools (lockfiles/tools.txt pins ray)"))
    elif pinned and version != pinned:
        checks.append(("ray", "fail", f"Ray {version} here, {pinned} pinned (nodes run {pinned})",
                       "scripts/bootstrap tools rebuilds the environment from lockfiles/tools.txt"))
    else:
        checks.append(("ray", "ok", f"Ray {version} (the images pin the same)", ""))
    if facts["address"]:
        if facts["reachable"]:
            checks.append(("ray head", "ok", f"{facts['address']} accepts connections", ""))
        else:
            checks.append(("ray head", "fail", f"{facts['address']} unreachable: {facts['error']}",
                           "start the head (docker compose up -d ray-head on the head host) and open its port "
                           "to this machine, or pass the right --ray-address HOST:PORT"))
    return checks
