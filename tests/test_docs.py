"""The README and docs/ pages: every relative link resolves, the environment variables the
package reads are in the table, and the design notes' walks are the code's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runs import CPU_ONLY, REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def without_code(text: str) -> str:
    """The text outside fenced blocks and inline code, where links are links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to
    hyphens, and -1, -2, ... on repeats."""
    found: set[str] = set()
    repeats: dict[str, int] = {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = None if in_code else HEADING.match(line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = repeats.get(slug, 0)
        repeats[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    links = LINK.findall(without_code(page.read_text()))
    return [link for link in links if not re.match(r"^[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_relative_link_resolves(page):
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{link} (no such heading)")
    assert broken == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere) `[code](x.md)`\n")
    assert relative_links(page) == ["#title", "missing.md", "#nowhere"]
    assert anchors(page) == {"title"}




# -- environment variables: one table, docs/environment.md ------------------------------------

ENVIRONMENT_PAGE = REPO / "docs" / "environment.md"


def environment_reads(source: str) -> set[str]:
    """The variables a module reads or sets by name: os.environ[X], os.environ.get(X),
    os.environ.setdefault(X), os.environ.pop(X), os.getenv(X), where X is a string or a
    module-level constant holding one."""
    import ast

    tree = ast.parse(source)
    constants = {target.id: node.value.value for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                 and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    found = set()
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            key = name_of(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            method = node.func
            if (method.attr in ("get", "setdefault", "pop") and is_environ(method.value)) or \
                    method.attr == "getenv":
                key = name_of(node.args[0])
        if key is not None:
            found.add(key)
    return found


def test_the_environment_reader_finds_each_form():
    source = ('import os\nLOGS = "A_LOGS"\nos.environ.get(LOGS)\nos.environ["B"] = "1"\n'
              'os.environ.setdefault("C", "2")\nos.getenv("D")\nos.environ.pop("E", None)\n')
    assert environment_reads(source) == {"A_LOGS", "B", "C", "D", "E"}


def test_every_environment_variable_the_package_reads_is_in_the_table():
    """The variables were scattered (FAST_DQN_TF_LOGS in the README, TF_FORCE_GPU_ALLOW_GROWTH
    in docs/sweeps.md only, CUDA_VISIBLE_DEVICES nowhere): one table holds them now."""
    table = ENVIRONMENT_PAGE.read_text()
    rows = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", table, flags=re.M))
    read = set()
    for module in sorted((REPO / "fast_dqn").glob("*.py")):
        read |= environment_reads(module.read_text())
    assert {"FAST_DQN_TF_LOGS", "TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"} <= read
    assert read - rows == set()
    scripts = "".join(path.read_text() for path in sorted([*(REPO / "scripts").glob("*.sh"),
                                                           *(REPO / "tools").glob("*.sh")]))
    exported = set(re.findall(r"export ([A-Z0-9_]+)=", scripts))
    assert exported - rows == set()
    assert {"TF_FORCE_GPU_ALLOW_GROWTH"} <= rows
    readme = (REPO / "README.md").read_text()
    assert "docs/environment.md" in readme


WALK_LINE = re.compile(r"(?P<name>.+): (?P<entries>\d+) entries, (?P<distinct>\d+) modules: "
                       r"(?P<modules>\w+(?: > \w+)*)")


@pytest.mark.slow  # trains a tiny real run
def test_the_design_notes_walks_are_the_codes():
    """docs/design.md's walk of one round and one update call is what `python
    tools/code_walk.py` reads off a real run: each walk's line appears there as the tool prints
    it, and counts its entries and distinct modules right."""
    result = subprocess.run([sys.executable, str(REPO / "tools" / "code_walk.py")],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, **CPU_ONLY})
    assert result.returncode == 0, result.stderr[-3000:]
    walks = result.stdout.splitlines()
    assert len(walks) == 4, result.stdout
    design = (REPO / "docs" / "design.md").read_text()
    for line in walks:
        match = WALK_LINE.fullmatch(line)
        assert match, f"not a walk's line: {line}"
        modules = match["modules"].split(" > ")
        assert int(match["entries"]) == len(modules)
        assert int(match["distinct"]) == len(set(modules))
        assert line in design, f"docs/design.md lacks the walk as it is:\n{line}"
