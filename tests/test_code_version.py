"""config.json's record of the code a run ran (fast_dqn/code_version.py), issue 36.

The checkouts here are made by the tests in temporary directories, with git; the expected
commit is the one git reports for the commit the test made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fast_dqn.code_version import code_version, with_resume_entry

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed on this machine")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=test",
                           "-c", "user.email=test@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def checkout(root: Path) -> Path:
    """A git checkout laid out as fast_dqn's: the package, a run script, docs; one commit.
    Returns the package directory."""
    package = root / "fast_dqn"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (root / "run_dqn.py").write_text("print('train')\n")
    (root / "docs").mkdir()
    (root / "docs" / "page.md").write_text("# Page\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return package


@pytest.mark.slow  # starts git
@needs_git
def test_a_clean_checkout_gives_its_commit(tmp_path):
    package = checkout(tmp_path / "repo")
    assert code_version(0, package) == {"from_step": 0, "commit": git(package, "rev-parse",
                                                                      "HEAD"),
                                        "tree_changed": False, "changed_files": []}


@pytest.mark.slow
@needs_git
def test_changes_to_the_code_count_and_changes_to_the_docs_do_not(tmp_path):
    package = checkout(tmp_path / "repo")
    root = package.parent
    (root / "docs" / "page.md").write_text("# Page, edited\n")
    (root / "notes.txt").write_text("an untracked file beside the code\n")
    assert code_version(5, package)["tree_changed"] is False
    (package / "__init__.py").write_text("CHANGED = True\n")
    (package / "new_module.py").write_text("")  # untracked, but imported code all the same
    version = code_version(5, package)
    assert version["tree_changed"] is True
    assert version["changed_files"] == ["fast_dqn/__init__.py", "fast_dqn/new_module.py"]
    assert version["commit"] == git(root, "rev-parse", "HEAD")


@pytest.mark.slow
@needs_git
def test_a_copy_inside_another_repository_is_not_taken_for_that_repositorys_code(tmp_path):
    """An installed copy in a venv inside a clone (the README's set-up makes venv/ there):
    the clone's commit is not the installed copy's."""
    package = checkout(tmp_path / "repo")
    installed = package.parent / "venv" / "lib" / "site-packages" / "fast_dqn"
    shutil.copytree(package, installed)
    version = code_version(0, installed)
    assert version["commit"] is None and version["tree_changed"] is None
    assert "is not the package of a git checkout" in version["unknown"]


@pytest.mark.slow
@needs_git
def test_a_directory_outside_any_checkout_is_recorded_as_unknown(tmp_path):
    package = tmp_path / "site-packages" / "fast_dqn"
    package.mkdir(parents=True)
    version = code_version(0, package)
    assert version == {"from_step": 0, "commit": None, "tree_changed": None,
                       "unknown": f"{package} is not in a git checkout (an installed copy?)"}


def test_no_git_is_recorded_as_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no git on the path
    version = code_version(0, tmp_path)
    assert (version["commit"], version["unknown"]) == (None, "git is not installed")


@pytest.mark.slow  # starts a stand-in git
def test_a_git_that_hangs_is_given_up_after_the_timeout(tmp_path, monkeypatch):
    fake_git = tmp_path / "git"
    fake_git.write_text("#!/bin/sh\nexec sleep 30\n")
    fake_git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    version = code_version(0, tmp_path, timeout=0.3)
    assert (version["commit"], version["unknown"]) == (None, "git took more than 0.3 s")


@pytest.mark.slow
@needs_git
def test_git_variables_of_the_caller_do_not_point_it_at_another_repository(tmp_path,
                                                                          monkeypatch):
    package = checkout(tmp_path / "repo")
    other = tmp_path / "other"
    checkout(other)
    git(other, "commit", "-q", "--allow-empty", "-m", "second")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert code_version(0, package)["commit"] == git(package, "--git-dir",
                                                     str(package.parent / ".git"),
                                                     "rev-parse", "HEAD")


CLEAN = {"from_step": 0, "commit": "a" * 40, "tree_changed": False, "changed_files": []}


@pytest.mark.parametrize("saved, entry, expected", [
    # A run written before config.json kept the list: the resume starts it.
    (None, {**CLEAN, "from_step": 400}, [{**CLEAN, "from_step": 400}]),
    # The same clean commit: nothing new to say.
    ([CLEAN], {**CLEAN, "from_step": 400}, [CLEAN]),
    # Another commit: added, with the step it took over at.
    ([CLEAN], {**CLEAN, "from_step": 400, "commit": "b" * 40},
     [CLEAN, {**CLEAN, "from_step": 400, "commit": "b" * 40}]),
    # A changed tree of the same commit: added, each time (two changes cannot be compared).
    ([CLEAN], {**CLEAN, "from_step": 400, "tree_changed": True, "changed_files": ["x"]},
     [CLEAN, {**CLEAN, "from_step": 400, "tree_changed": True, "changed_files": ["x"]}]),
    # Known after unknown: added.
    ([{"from_step": 0, "commit": None, "tree_changed": None, "unknown": "no git"}],
     {**CLEAN, "from_step": 9},
     [{"from_step": 0, "commit": None, "tree_changed": None, "unknown": "no git"},
      {**CLEAN, "from_step": 9}]),
])
def test_a_resume_adds_the_code_it_runs_when_it_differs(saved, entry, expected):
    assert with_resume_entry(saved, entry) == expected
