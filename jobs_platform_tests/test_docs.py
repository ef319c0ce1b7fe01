"""The documentation: the MkDocs site builds clean, and the README stays short and linked.

The site (mkdocs.yml, docs/) is built with `--strict`, so a broken link, a missing anchor
or a docstring the API reference cannot render fails here, not on a reader's screen.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 300
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
BENCHMARKS_MAX_LINES = 300


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def public_names() -> list[str]:
    """`jobs_platform.__all__`, read from the source without importing the package."""
    tree = ast.parse((ROOT / "jobs_platform" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError("jobs_platform/__init__.py has no __all__")


def test_the_site_builds_with_no_warning(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "reference" / "index.html").exists()


def test_the_readme_is_at_most_300_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the guides go in docs/"


def test_the_benchmarks_page_is_at_most_300_lines():
    lines = len(BENCHMARKS.read_text().splitlines())
    assert lines <= BENCHMARKS_MAX_LINES, f"docs/BENCHMARKS.md has {lines} lines"


def test_every_row_of_the_benchmarks_targets_names_its_command():
    """Each figure of the Targets table can be measured again: its row gives the command
    (or points at the run of the row before it)."""
    section = BENCHMARKS.read_text().split("## Targets", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= 10, "the Targets table has its rows"
    commandless = [
        row.split(" | ")[0]
        for row in rows
        if not re.search(r"`(bin/bench|pytest) [^`]+`|same run", row)
    ]
    assert commandless == []


def test_every_relative_link_of_the_readme_is_a_file_of_the_repo():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    relative = [target for target in targets if "://" not in target]
    assert relative, "the README links to its docs pages"
    missing = [target for target in relative if not (ROOT / target).is_file()]
    assert missing == []


def test_the_readme_code_location_is_the_one_own_project_shows():
    """The README's `acme/defs.py` is a copy of docs/own-project.md's, which tests run."""
    readme = README.read_text().split("## Use it in your own project", 1)[1]
    page = (ROOT / "docs" / "own-project.md").read_text()
    assert python_blocks(readme)[0] == python_blocks(page)[0]


def test_the_api_reference_lists_exactly_the_public_api():
    reference = (ROOT / "docs" / "reference.md").read_text()
    members = re.findall(r"^\s+- (\w+)$", reference, flags=re.M)
    resources = re.findall(r"^::: jobs_platform\.(\w+)$", reference, flags=re.M)
    assert sorted(members + resources) == sorted(public_names())
