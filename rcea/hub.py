"""Pinned hub revisions: the policy model, the training pool and the judge each have a revision setting
(`model.revision`, `data.train_pool_revision`, `judge.model_revision`; a branch, tag or commit sha).

A hub model is fetched once as a local snapshot of that revision (`pinned_model`), and every role loads
that folder: Transformers, PEFT, the inference vLLM engine and TRL's colocated vLLM (which loads the
policy's `name_or_path`) all see the same files. The commit each revision resolved to is recorded here
and written into every manifest afterwards (`rcea.provenance`), so an artifact says exactly which
weights and data made it. Nothing here runs for the tiny scale (no hub at all).
"""

from __future__ import annotations

import re
from pathlib import Path

_RESOLVED: dict[str, str] = {}
_SHA = re.compile(r"^[0-9a-f]{40}$")


def record(what: str, repo_id: str, commit: str) -> None:
    """Remember that `what` (model, train_pool, judge) came from `repo_id` at `commit`."""
    _RESOLVED[what] = f"{repo_id}@{commit}"


def resolved() -> dict[str, str]:
    """Everything recorded so far in this process: {what: "repo@commit"}."""
    return dict(_RESOLVED)


def cached_commit(repo_id: str, revision: str, repo_type: str = "model") -> str:
    """The commit `revision` names, read from the local Hugging Face cache's refs (no network); a commit
    sha is its own answer; 'unresolved:<revision>' when the cache has no ref for it."""
    if _SHA.match(revision):
        return revision
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return f"unresolved:{revision}"
    ref = Path(HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}" / "refs" / revision
    try:
        sha = ref.read_text().strip()
    except OSError:
        return f"unresolved:{revision}"
    return sha if _SHA.match(sha) else f"unresolved:{revision}"


def pinned_model(repo_id: str, revision: str, what: str = "model") -> str:
    """A local snapshot folder of `repo_id` at `revision` (downloaded on first use, from the cache after;
    HF_HUB_OFFLINE=1 reads only the cache). The folder's name is the commit, which is recorded."""
    from huggingface_hub import snapshot_download

    path = Path(snapshot_download(repo_id, revision=revision,
                                  allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]))
    record(what, repo_id, path.name if _SHA.match(path.name) else cached_commit(repo_id, revision))
    return str(path)


def load_train_pool(name: str, split: str, revision: str):
    """`datasets.load_dataset` of the hub training pool at `revision`, its commit recorded."""
    import datasets

    ds = datasets.load_dataset(name, split=split, revision=revision)
    record("train_pool", name, cached_commit(name, revision, "dataset"))
    return ds
