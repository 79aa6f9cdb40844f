"""Which code a run ran: the git commit of fast_dqn's own checkout and whether it had changes.

config.json's `code_versions` has an entry for the run's start and one for each resume that
ran other code: {"from_step", "commit", "tree_changed", "changed_files"} (what `git status`
shows under CODE_PATHS), or, where the commit cannot be known, `unknown` saying why. They are
records only: a resume never compares them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

CODE_VERSIONS = "code_versions"  # the key of config.json
PACKAGE_DIR = Path(__file__).resolve().parent
CODE_PATHS = ("fast_dqn", "run_fast_dqn.py", "run_dqn.py")  # relative to the checkout
GIT_TIMEOUT_SECONDS = 5.0
MAX_CHANGED_FILES = 20
# Variables that would point git at another repository than the package's own.
_GIT_LOCATION_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                           "GIT_OBJECT_DIRECTORY", "GIT_CEILING_DIRECTORIES")


class _Unknown(Exception):
    """Why the commit cannot be known (the message)."""


def code_version(from_step: int, package_dir: Path = PACKAGE_DIR,
                 timeout: float = GIT_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The entry of `code_versions` for code that runs from agent step `from_step` on.

    Never raises: whatever goes wrong with git is recorded as the reason in `unknown`.
    """
    entry: dict[str, Any] = {"from_step": int(from_step)}
    try:
        checkout = _checkout_of(package_dir, timeout)
        commit = _git(checkout, timeout, "rev-parse", "--verify", "HEAD").strip()
        status = _git(checkout, timeout, "--no-optional-locks", "status", "--porcelain",
                      "--untracked-files=all", "--", *CODE_PATHS)
    except _Unknown as reason:
        return {**entry, "commit": None, "tree_changed": None, "unknown": str(reason)}
    changed = sorted(line[3:] for line in status.splitlines() if len(line) > 3)
    return {**entry, "commit": commit, "tree_changed": bool(changed),
            "changed_files": changed[:MAX_CHANGED_FILES]}


def with_resume_entry(saved: Sequence[Any] | None, entry: Mapping[str, Any]) -> list[Any]:
    """`code_versions` after a resume whose code is `entry`: the saved list, then `entry`
    unless the code is the last entry's (changed trees always: they cannot be told apart)."""
    versions = list(saved) if isinstance(saved, list) else []
    last = versions[-1] if versions and isinstance(versions[-1], Mapping) else None
    same = (last is not None and entry.get("tree_changed") is not True
            and all(last.get(key) == entry.get(key) for key in ("commit", "tree_changed")))
    return versions if same else [*versions, dict(entry)]


def _checkout_of(package_dir: Path, timeout: float) -> Path:
    """The checkout whose top level holds the package; raises _Unknown otherwise."""
    top = _git(package_dir, timeout, "rev-parse", "--show-toplevel").strip()
    checkout = package_dir.resolve().parent
    if Path(top).resolve() != checkout:
        raise _Unknown(f"{package_dir} is not the package of a git checkout (the repository "
                       f"at {top} holds it elsewhere: an installed copy?)")
    return checkout


def _git(where: Path, timeout: float, *args: str) -> str:
    environment = {key: value for key, value in os.environ.items()
                   if key not in _GIT_LOCATION_VARIABLES}
    try:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                              timeout=timeout, env=environment, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise _Unknown("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise _Unknown(f"git took more than {timeout:g} s") from None
    except OSError as error:
        raise _Unknown(f"git could not run: {error.strerror or error}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        reason = lines[0] if lines else f"exit status {done.returncode}"
        if "not a git repository" in reason.lower():
            raise _Unknown(f"{where} is not in a git checkout (an installed copy?)")
        raise _Unknown(f"git {args[0]} failed: {reason}")
    return done.stdout
