"""Stand-in work units for the engine tests: seconds of sleep, then deterministic outputs written like
the real units write theirs (temp + rename, manifest last). They also note the CUDA_VISIBLE_DEVICES their
process saw (beside the outputs, not part of them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rcea.store import is_complete

SCRIPT = r"""
import hashlib, json, os, sys, time
root, seconds, barrier, exit_code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5:]
seen = os.path.join(root, "seen")
os.makedirs(seen, exist_ok=True)
for n in names:
    with open(os.path.join(seen, n + "." + str(os.getpid())), "w") as fh:
        fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "-"))
deadline = time.time() + 90
while len(os.listdir(seen)) < barrier and time.time() < deadline:   # wait until `barrier` units run at once
    time.sleep(0.1)
time.sleep(seconds)
if exit_code:
    sys.exit(exit_code)
os.makedirs(os.path.join(root, "standin"), exist_ok=True)
for n in names:
    out = os.path.join(root, "standin", n + ".txt")
    tmp = out + ".tmp" + str(os.getpid())
    with open(tmp, "w") as fh:
        fh.write(hashlib.sha256(n.encode()).hexdigest() * 4)
    os.replace(tmp, out)
    with open(out + ".manifest.json", "w") as fh:
        json.dump({"artifact": n}, fh)
"""


@dataclass(frozen=True)
class StandIn:
    name: str
    role: str = "infer"
    seconds: float = 2.0
    share: str | None = None   # units with the same `share` run as one batch
    barrier: int = 0           # start the sleep only once this many units have started (concurrency proof)
    exit_code: int = 0         # exit with it instead of writing outputs (75: transient)

    @property
    def key(self) -> str:
        return f"standin:{self.name}"

    @property
    def group(self) -> str:
        return f"standin-group:{self.share}" if self.share else self.key

    def output(self, data_root) -> Path:
        return Path(data_root) / "standin" / f"{self.name}.txt"

    def done(self, data_root) -> bool:
        return is_complete(self.output(data_root))

    @staticmethod
    def command(batch, python, data_root, spec_dir) -> list[str]:
        return [python, "-c", SCRIPT, str(data_root), str(batch[0].seconds), str(batch[0].barrier), str(batch[0].exit_code), *[u.name for u in batch]]


def expected(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest() * 4
