"""Commits to a Hub dataset repository: one file on a branch, and the branch itself.

Reads go through feedline's own client (:mod:`feedline.io.hub`); a commit is the Hub's
multi-step upload protocol (pre-upload, then an NDJSON commit, LFS or Xet for large files), which
huggingface_hub's ``HfApi`` implements and keeps current, so it does the writing, pointed at the
store's endpoint with the store's token (never written anywhere, never echoed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from feedline.io.errors import StoreError
from feedline.io.redact import redact_text

if TYPE_CHECKING:
    from feedline.io.hub import HubStore


def _api(store: HubStore) -> Any:
    try:
        from huggingface_hub import HfApi
    except ImportError:  # pragma: no cover - a dependency of feedline
        raise StoreError(f"{store.root_url}: writing to the Hub needs huggingface_hub") from None
    return HfApi(endpoint=store.endpoint, token=store._token or False)


def _failed(where: str, exc: Exception) -> StoreError:
    detail = redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0])
    return StoreError(f"{where}: {detail}")


def ensure_branch(store: HubStore, branch: str) -> bool:
    """Create ``branch`` from the store's commit when it is missing; whether it was created.
    The store's own branch is never touched."""
    api = _api(store)
    where = f"hf://datasets/{store.repo_id}@{branch}"
    try:
        api.dataset_info(store.repo_id, revision=branch)
        return False
    except Exception as exc:  # huggingface_hub raises many types (offline, auth, HTTP)
        if type(exc).__name__ not in ("RevisionNotFoundError",):
            raise _failed(where, exc) from None
    try:
        api.create_branch(store.repo_id, repo_type="dataset", branch=branch, revision=store.commit,
                          exist_ok=True)
    except Exception as exc:
        raise _failed(where, exc) from None
    return True


def upload_bytes(store: HubStore, path_in_repo: str, data: bytes, message: str,
                 revision: str | None = None) -> str:
    """Commit ``data`` as ``path_in_repo`` on ``revision`` (default: the store's branch); the
    new commit's sha."""
    branch = revision or store.revision or "main"
    where = f"hf://datasets/{store.repo_id}@{branch}/{path_in_repo}"
    try:
        info = _api(store).upload_file(
            path_or_fileobj=data, path_in_repo=path_in_repo, repo_id=store.repo_id,
            repo_type="dataset", revision=branch, commit_message=message,
        )
    except Exception as exc:  # huggingface_hub raises many types (offline, auth, HTTP)
        raise _failed(where, exc) from None
    return str(getattr(info, "oid", "") or "")
