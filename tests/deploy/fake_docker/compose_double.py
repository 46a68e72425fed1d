"""A test double for the `docker` CLI: runs the project's own compose.yaml as local processes.

There is no Docker engine on the CI machine, so the Compose rehearsal puts `tests/deploy/fake_docker` first
on PATH. This double reads compose.yaml the way Compose does (`${VAR:-default}` interpolation from the
caller's environment, then `.env`; YAML anchors and merge keys; profiles) and runs each requested service's
command as a local process:

- in the role's environment: the image `rcea/<role>:<tag>` puts `.envs/<role>/bin` first on PATH (and
  $FAKE_DOCKER_STANDINS after it: programs the image has and this machine lacks, e.g. `vllm`);
- with exactly the service's environment (plus PATH, HOME, LANG, TMPDIR), and NVIDIA_VISIBLE_DEVICES set
  from the service's device ids, as the NVIDIA runtime does;
- in a per-service root whose `workspace/` holds what the image's Dockerfile COPYs into /workspace, with
  every volume mounted: named volumes are folders under $FAKE_DOCKER_STATE/volumes/, bind mounts the host
  folders; container paths in the environment and the command are mapped to those folders;
- containers share this machine's network, so $FAKE_DOCKER_PORTS (`8000=41234,...`) moves a container port
  to a free host port in the command and health check.

It refuses what the real CLI refuses, with its exit code (1): an unknown subcommand, an unknown service,
a dependency whose profile is not enabled, an unknown option, an unset required variable (`${X:?msg}`).
A service named on the command line enables its own profiles, as in Compose.

Every container start is appended as one JSON line to $FAKE_DOCKER_STATE/starts.jsonl (service, mode,
command, environment as the container sees it, devices), so a test can check what each container saw.

Subcommands: version, build, run, up (attached or -d, --wait), stop, down, ps. Detached services run in
their own session; their pids are kept under $FAKE_DOCKER_STATE/pids/ for stop/down.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class Refused(Exception):
    """What the real CLI refuses: message on stderr, exit code 1."""


# ---------------------------------------------------------------- the project model


def dotenv(path: Path) -> dict[str, str]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip().strip("'\"")
    return out


def interpolate(value, variables: dict[str, str]):
    """Compose's interpolation over every string of the model."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        have = variables.get(name)
        if op in (":-", "-"):
            return arg if have is None or (op == ":-" and have == "") else have
        if op in (":?", "?"):
            if have is None or (op == ":?" and have == ""):
                raise Refused(f"required variable {name} is missing a value: {arg}")
        return have or ""

    return VAR.sub(sub, value)


class Project:
    def __init__(self, directory: Path, profiles: list[str]):
        self.dir = directory
        raw = yaml.safe_load((directory / "compose.yaml").read_text())
        variables = {**dotenv(directory / ".env"), **os.environ}
        model = interpolate(raw, variables)
        self.name = model.get("name") or directory.name
        self.services = model.get("services") or {}
        self.volumes = model.get("volumes") or {}
        self.profiles = set(profiles)
        if not os.environ.get("FAKE_DOCKER_STATE"):
            raise Refused("test double: set FAKE_DOCKER_STATE to a scratch folder (volumes, logs, pids)")
        self.state = Path(os.environ["FAKE_DOCKER_STATE"]).resolve()

    def service(self, name: str) -> dict:
        if name not in self.services:
            raise Refused(f"no such service: {name}")
        return self.services[name]

    def enabled(self, name: str, targeted: set[str]) -> bool:
        profiles = self.service(name).get("profiles") or []
        return not profiles or name in targeted or bool(self.profiles & set(profiles))

    def with_dependencies(self, names: list[str]) -> list[str]:
        """Dependencies first; a dependency must be enabled by the active profiles."""
        targeted, order = set(names), []

        def add(name, wanted_by=None):
            self.service(name)
            if wanted_by and not self.enabled(name, targeted):
                raise Refused(f'service "{name}" was pulled in as dependency of service "{wanted_by}" but is not '
                              f"enabled by the active profiles. You may fix this by adding a common profile to "
                              f'"{wanted_by}" and "{name}".')
            for dep in self.service(name).get("depends_on") or {}:
                add(dep, name)
            if name not in order:
                order.append(name)

        for n in names:
            add(n)
        return order


# ---------------------------------------------------------------- one container


def role_of(svc: dict) -> str:
    m = re.fullmatch(r"rcea/([a-z]+):.*", svc.get("image", ""))
    if not m or not (ROOT / ".envs" / m.group(1)).is_dir():
        raise Refused(f"image {svc.get('image')!r}: no local environment .envs/<role> stands in for it")
    return m.group(1)


def image_copies(project: Project, svc: dict) -> list[tuple[str, str]]:
    """(source in the project, destination) of every COPY of the Dockerfile that builds this image."""
    builder = next((s for s in project.services.values() if s.get("image") == svc.get("image") and s.get("build")),
                   None)
    if builder is None:
        raise Refused(f"no service builds image {svc.get('image')!r}")
    copies = []
    for line in (project.dir / builder["build"]["dockerfile"]).read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "COPY" and not any(p.startswith("--from") for p in parts):
            args = [p for p in parts[1:] if not p.startswith("--")]
            copies += [(src, args[-1]) for src in args[:-1]]
    return copies


def volume_source(project: Project, spec: str) -> tuple[Path, str]:
    src, target = spec.split(":")[:2]
    if src.startswith((".", "/", "~")):
        path = (project.dir / os.path.expanduser(src)).resolve()
        if not path.exists():  # the engine creates a missing bind source (as root; we as this user)
            path.mkdir(parents=True)
        return path, target
    if src not in project.volumes:
        raise Refused(f"service refers to undefined volume {src}: invalid compose project")
    path = project.state / "volumes" / f"{project.name}_{src}"
    path.mkdir(parents=True, exist_ok=True)
    return path, target


class Container:
    def __init__(self, project: Project, name: str, extra_volumes=(), extra_env=()):
        self.project, self.name = project, name
        self.svc = svc = project.service(name)
        self.role = role_of(svc)
        self.root = project.state / "containers" / name
        workdir = svc.get("working_dir", "/")
        self.mounts = {target: src for src, target in
                       (volume_source(project, v) for v in [*(svc.get("volumes") or []), *extra_volumes])}
        ws = self.root / "workspace"
        ws.mkdir(parents=True, exist_ok=True)
        for src, dest in image_copies(project, svc):
            if dest.startswith("/workspace/"):
                self._link(ws / dest[len("/workspace/"):].rstrip("/"), project.dir / src)
        for target, src in self.mounts.items():
            if target.startswith("/workspace/"):
                self._link(ws / target[len("/workspace/"):], src)
        self.paths = sorted([*self.mounts.items(), ("/workspace", ws)], key=lambda kv: -len(kv[0]))
        self.cwd = self.map(workdir)
        self.container_env = self._environment(extra_env)
        self.ports = dict(p.split("=") for p in os.environ.get("FAKE_DOCKER_PORTS", "").split(",") if "=" in p)

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.resolve() == Path(target).resolve():
                return
            link.unlink()
        link.symlink_to(target)

    def map(self, value: str) -> str:
        """A container path (or a string starting with one) as the host folder mounted there."""
        for target, src in self.paths:
            if value == target or value.startswith(target + "/"):
                return str(src) + value[len(target):]
        return value

    def _environment(self, extra_env) -> dict[str, str]:
        env = self.svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        env = {k: "" if v is None else str(v) for k, v in env.items()}
        env.update(e.split("=", 1) for e in extra_env)
        devices = [d for r in self.svc.get("deploy", {}).get("resources", {}).get("reservations", {})
                   .get("devices", []) for d in r.get("device_ids", [])]
        if devices:
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(devices)
        return env

    def port(self, text: str) -> str:
        for inside, outside in self.ports.items():
            text = re.sub(rf"(?<![0-9]){inside}(?![0-9])", outside, text)
        return text

    def process_env(self) -> dict[str, str]:
        path = [str(ROOT / ".envs" / self.role / "bin")]
        if os.environ.get("FAKE_DOCKER_STANDINS"):
            path.append(os.environ["FAKE_DOCKER_STANDINS"])
        base = {"PATH": os.pathsep.join(path + [os.environ.get("PATH", "")]), "HOME": os.environ.get("HOME", "/"),
                "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
        return {**base, **{k: self.map(v) for k, v in self.container_env.items()}}

    def argv(self, command=None) -> list[str]:
        cmd = command or self.svc.get("command") or []
        if isinstance(cmd, str):
            cmd = cmd.split()
        return [self.port(self.map(a)) for a in cmd]

    def log(self, mode: str, argv: list[str]) -> None:
        entry = {"service": self.name, "mode": mode, "command": argv, "env": self.container_env,
                 "devices": self.container_env.get("NVIDIA_VISIBLE_DEVICES", ""), "role": self.role,
                 "profiles": self.svc.get("profiles") or [], "time": time.time()}
        with (self.project.state / "starts.jsonl").open("a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def start(self, command=None, mode="run", **popen) -> subprocess.Popen:
        argv = self.argv(command)
        self.log(mode, argv)
        return subprocess.Popen(argv, cwd=self.cwd, env=self.process_env(), **popen)

    def healthy(self) -> bool:
        test = (self.svc.get("healthcheck") or {}).get("test")
        if not test:
            return True
        argv = test[1:] if test[0] == "CMD" else ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test
        try:
            return subprocess.run([self.port(a) for a in argv], cwd=self.cwd, env=self.process_env(),
                                  capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


# ---------------------------------------------------------------- subcommands


def take_options(args: list[str], flags: set[str], valued: set[str]) -> tuple[dict, list[str]]:
    """Options before the first positional argument; an unknown option is refused."""
    opts: dict = {}
    while args and args[0].startswith("-") and args[0] != "-":
        a = args.pop(0)
        key, _, val = a.partition("=")
        if key in flags:
            opts[key] = True
        elif key in valued:
            opts.setdefault(key, []).append(val if val else args.pop(0))
        else:
            raise Refused(f"unknown flag: {key}")
    return opts, args


def pid_file(project: Project, name: str) -> Path:
    return project.state / "pids" / f"{name}.pid"


def running(project: Project, name: str) -> int | None:
    f = pid_file(project, name)
    if f.exists():
        pid = int(f.read_text())
        try:
            os.kill(pid, 0)
            return pid
        except OSError:
            f.unlink()
    return None


def cmd_run(project: Project, args: list[str]) -> int:
    opts, rest = take_options(args, {"--rm", "--no-deps", "-T", "--service-ports", "-d", "--detach", "-i"},
                              {"-v", "--volume", "-e", "--env", "-p", "--publish", "-u", "--user", "--name", "-w"})
    if not rest:
        raise Refused('"docker compose run" requires at least 1 argument.')
    name, command = rest[0], rest[1:]
    order = [name] if "--no-deps" in opts else project.with_dependencies([name])
    for dep in order[:-1]:
        start_detached(project, dep)
    box = Container(project, name, opts.get("-v", []) + opts.get("--volume", []), opts.get("-e", []) + opts.get("--env", []))
    return box.start(command or None, mode="run").wait()


def start_detached(project: Project, name: str) -> None:
    if running(project, name):
        print(f" Container {project.name}-{name}-1  Running", file=sys.stderr)
        return
    box = Container(project, name)
    (project.state / "logs").mkdir(parents=True, exist_ok=True)
    with (project.state / "logs" / f"{name}.log").open("ab") as log:
        proc = box.start(mode="up -d", stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    pid_file(project, name).parent.mkdir(parents=True, exist_ok=True)
    pid_file(project, name).write_text(str(proc.pid))
    print(f" Container {project.name}-{name}-1  Started", file=sys.stderr)


def _prefix(name: str, stream, width: int) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.write(f"{name:<{width}} | {line.decode(errors='replace')}")
        sys.stdout.flush()


def cmd_up(project: Project, args: list[str]) -> int:
    opts, names = take_options(args, {"-d", "--detach", "--wait", "--no-deps", "--build", "--no-build",
                                      "--remove-orphans", "--force-recreate", "--abort-on-container-exit"},
                               {"--wait-timeout", "--exit-code-from"})
    if not names:
        names = [n for n in project.services if project.enabled(n, set())]
    order = names if "--no-deps" in opts else project.with_dependencies(names)
    if "-d" in opts or "--detach" in opts or "--wait" in opts:
        for n in order:
            start_detached(project, n)
        if "--wait" in opts:
            deadline = time.time() + float((opts.get("--wait-timeout") or [os.environ.get("FAKE_DOCKER_WAIT_S", 120)])[0])
            for n in order:
                box = Container(project, n)
                while not box.healthy():
                    if not running(project, n) or time.time() > deadline:
                        print(f"container {project.name}-{n}-1 is unhealthy", file=sys.stderr)
                        return 1
                    time.sleep(0.5)
                print(f" Container {project.name}-{n}-1  Healthy", file=sys.stderr)
        return 0
    width = max(len(n) for n in order)
    procs = [(n, Container(project, n).start(mode="up", stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
             for n in order]
    threads = [threading.Thread(target=_prefix, args=(n, p.stdout, width)) for n, p in procs]
    for t in threads:
        t.start()
    codes = {n: p.wait() for n, p in procs}
    for t in threads:
        t.join()
    for n, code in codes.items():
        print(f"{n} exited with code {code}")
    if "--abort-on-container-exit" in opts or "--exit-code-from" in opts:
        return next((c for c in codes.values() if c), 0)
    return 0  # attached `up` returns 0 when its containers have stopped, whatever their exit codes


def cmd_stop(project: Project, args: list[str], remove: bool = False) -> int:
    _, names = take_options(args, {"-v", "--volumes", "--remove-orphans"}, {"-t", "--timeout"})
    for n in names:
        project.service(n)
    for n in names or [p.stem for p in (project.state / "pids").glob("*.pid")]:
        pid = running(project, n)
        if pid:
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):
                if running(project, n) is None:
                    break
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    pass
                time.sleep(0.1)
            pid_file(project, n).unlink(missing_ok=True)
            print(f" Container {project.name}-{n}-1  {'Removed' if remove else 'Stopped'}", file=sys.stderr)
    return 0


def cmd_build(project: Project, args: list[str]) -> int:
    _, names = take_options(args, {"--pull", "--no-cache", "-q", "--quiet"}, {"--build-arg"})
    for n in names or [n for n, s in project.services.items() if s.get("build")]:
        svc = project.service(n)
        if not svc.get("build"):
            continue
        dockerfile = project.dir / svc["build"]["dockerfile"]
        if not dockerfile.exists():
            raise Refused(f"failed to solve: failed to read dockerfile: open {dockerfile}: no such file or directory")
        for src, _ in image_copies(project, svc):
            if not (project.dir / src).exists():
                raise Refused(f'failed to compute cache key: "/{src}": not found')
        role_of(svc)
        print(f" Image {svc['image']}  Built (test double: the local .envs/{role_of(svc)} stands in)")
    return 0


def cmd_ps(project: Project, args: list[str]) -> int:
    for p in sorted((project.state / "pids").glob("*.pid")) if (project.state / "pids").exists() else []:
        if running(project, p.stem):
            print(f"{project.name}-{p.stem}-1  running")
    return 0


def compose(args: list[str]) -> int:
    opts, rest = take_options(args, set(), {"--profile", "-f", "--file", "--project-directory", "-p",
                                            "--project-name", "--env-file"})
    if not rest:
        raise Refused('"docker compose" requires a subcommand')
    sub, rest = rest[0], rest[1:]
    if sub == "version":
        print("Docker Compose version v2.40.0 (test double)")
        return 0
    directory = Path((opts.get("--project-directory") or ["."])[0]).resolve()
    profiles = [p for v in opts.get("--profile", []) for p in v.split(",")]
    profiles += [p for p in os.environ.get("COMPOSE_PROFILES", "").split(",") if p]
    handlers = {"run": cmd_run, "up": cmd_up, "stop": cmd_stop, "build": cmd_build, "ps": cmd_ps,
                "down": lambda pr, a: cmd_stop(pr, a, remove=True)}
    if sub not in handlers:
        raise Refused(f'unknown docker command: "compose {sub}"')
    return handlers[sub](Project(directory, profiles), rest)


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["info"]:
            print("27.0.0-test-double")
            return 0
        if argv[:1] != ["compose"]:
            raise Refused(f"docker: '{argv[0] if argv else ''}' is not a docker command (test double: only "
                          "compose and info)")
        return compose(argv[1:])
    except Refused as exc:
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
