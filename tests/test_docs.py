"""The documentation site (docs/, mkdocs.yml) holds together without building it.

`.ci/run` builds the site with `mkdocs build --strict`; these checks need no
mkdocs and say which page and which link is wrong: links between pages and
their anchors, the navigation, the repository files a page names, the
modules the API reference renders, and the README pointing at the docs
instead of a design document a clone does not have.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
# the notebooks of notebooks/ are pages of the site under notebooks/ (docs/hooks/notebooks.py)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.M)
# a repository path a page names in backticks: it must exist
REPO_PATH = re.compile(r"`((?:experiments|notebooks|tests|benchmarks|memsim|docs|results)/"
                       r"[\w./-]*\.(?:toml|ipynb|py|jsonl|md|json))`")
API_ENTRY = re.compile(r"^:::\s+(\S+)\s*$", flags=re.M)


def _text(page: Path) -> str:
    """A page without its fenced code blocks (a link in code is not a link)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def _slug(title: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading."""
    title = re.sub(r"`([^`]*)`", r"\1", title)
    title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    title = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return re.sub(r"[-\s]+", "-", title)


def _site_files() -> set[str]:
    """Every source path of the site, relative to docs/."""
    files = {p.relative_to(DOCS).as_posix() for p in PAGES}
    return files | {f"notebooks/{p.name}" for p in NOTEBOOKS}


def _links() -> list[tuple[str, str, str]]:
    """(page, target file relative to docs/, anchor) of every internal link."""
    out = []
    for page in PAGES:
        for target in LINK.findall(_text(page)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            if path:
                resolved = (page.parent / path).resolve()
                rel = resolved.relative_to(DOCS.resolve()).as_posix() if \
                    resolved.is_relative_to(DOCS.resolve()) else "../" + path
            else:
                rel = page.relative_to(DOCS).as_posix()
            out.append((page.relative_to(DOCS).as_posix(), rel, anchor))
    return out


def _nav_files(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for v in nav.values() for f in _nav_files(v)]
    return []


def _mkdocs_config() -> dict:
    yaml = pytest.importorskip("yaml", reason="reading mkdocs.yml needs PyYAML")
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_the_site_has_pages_and_links():
    assert (ROOT / "mkdocs.yml").is_file()
    assert len(PAGES) >= 10
    assert len(_links()) >= 20  # the checks below see the links


def test_every_internal_link_names_a_page_of_the_site():
    files = _site_files()
    broken = [f"{page}: link to {target}" for page, target, _ in _links() if target not in files]
    assert not broken, "\n".join(broken)


def test_every_anchor_names_a_heading_of_its_page():
    broken = []
    for page, target, anchor in _links():
        if not anchor or not target.endswith(".md") or not (DOCS / target).is_file():
            continue
        slugs = {_slug(h) for h in HEADING.findall(_text(DOCS / target))}
        if anchor not in slugs:
            broken.append(f"{page}: #{anchor} is no heading of {target} ({sorted(slugs)})")
    assert not broken, "\n".join(broken)


def test_the_navigation_lists_every_page_and_only_pages_that_exist():
    nav = _nav_files(_mkdocs_config()["nav"])
    files = _site_files()
    assert not [f for f in nav if f not in files], "nav names a missing page"
    assert not sorted(files - set(nav)), "a page is left out of the navigation"
    assert len(nav) == len(set(nav))


def test_every_notebook_is_rendered_without_execution():
    config = _mkdocs_config()
    nav = set(_nav_files(config["nav"]))
    assert NOTEBOOKS and all(f"notebooks/{p.name}" in nav for p in NOTEBOOKS)
    jupyter = [p["mkdocs-jupyter"] for p in config["plugins"]
               if isinstance(p, dict) and "mkdocs-jupyter" in p]
    assert jupyter and jupyter[0]["execute"] is False


def test_every_repository_file_a_page_names_exists():
    missing = [f"{page.relative_to(DOCS)}: {path}" for page in PAGES
               for path in REPO_PATH.findall(page.read_text(encoding="utf-8"))
               if not (ROOT / path).exists()]
    assert not missing, "\n".join(missing)


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_the_api_reference_renders_modules_that_exist():
    entries = [e for p in PAGES for e in API_ENTRY.findall(p.read_text(encoding="utf-8"))]
    assert "memsim.evaluation.metrics" in entries and "memsim.data.stream" in entries
    missing = [e for e in entries if _module_file(e) is None]
    assert not missing, f"API entries without a module: {missing}"


def test_the_api_reference_covers_every_layer_module():
    # the layers of pyproject.toml name every top-level package: each has a
    # page entry of its own, or one for every module in it
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    names = {m.strip() for layer in layers for m in layer.split("|")} - {"memsim.cli"}
    assert {"memsim.data", "memsim.core", "memsim.engine"} <= names
    entries = {e for p in PAGES for e in API_ENTRY.findall(p.read_text(encoding="utf-8"))}
    uncovered = []
    for name in sorted(names):
        folder = ROOT.joinpath(*name.split("."))
        if name in entries or not folder.is_dir():
            uncovered += [] if name in entries else [name]
            continue
        modules = [f"{name}.{f.stem}" for f in sorted(folder.glob("*.py")) if f.stem != "__init__"]
        uncovered += [m for m in modules if m not in entries]
    assert not uncovered, f"modules without an API reference entry: {uncovered}"


def test_the_readme_points_at_the_docs_not_at_a_design_document():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "DESIGN section" not in readme and "DESIGN.md" not in readme
    assert 'pip install -e ".[docs]" && mkdocs serve' in readme
    targets = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert targets and all((ROOT / t).is_file() for t in targets)


def test_the_code_names_no_design_document():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "memsim").rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if "DESIGN" in line]
    assert not hits, hits


def test_the_docs_extra_and_the_build_in_ci():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    docs = " ".join(config["project"]["optional-dependencies"]["docs"])
    for package in ("mkdocs", "mkdocstrings[python]", "mkdocs-jupyter"):
        assert package in docs
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r'pip install .*-e "\.\[[^\]]*\bdocs\b', ci)
    assert re.search(r"mkdocs build --strict .*--site-dir \"\$site\"", ci)


def test_docstring_rest_habits_become_markdown():
    pytest.importorskip("griffe", reason="the docs extension needs griffe (the docs extra)")
    import importlib.util

    spec = importlib.util.spec_from_file_location("griffe_rst", DOCS / "hooks" / "griffe_rst.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = ("Built by :func:`make_stream` into a :class:`~memsim.data.stream.Stream`, for example::\n"
            "\n    read_stream(path)\n\n"
            "===== =====\nname  value\n===== =====\na     1\n===== =====\n")
    out = module.to_markdown(text)
    assert "`make_stream`" in out and "`Stream`" in out and ":class:" not in out
    assert "for example:\n" in out and "::" not in out
    assert "```text\n===== =====\nname  value" in out and out.rstrip().endswith("```")
