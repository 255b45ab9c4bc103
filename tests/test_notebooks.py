"""The notebooks: committed without outputs, executed in a fresh kernel under a
non-interactive matplotlib backend (``MPLBACKEND=Agg``, as in CI and on most
servers), every figure shown as a PNG output.

A notebook runs in its own folder, as Jupyter and nbmake run it; the LoCoMo
notebook also runs from the repository root. Notebooks that replay real data
from ``../shared/data`` skip without it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: notebooks that replay real data from ../shared/data
NEEDS_DATA = {"06_locomo": ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip"}
#: the data set (memsim data get NAME) each of them names
NEEDS_DATA_SET = {"06_locomo": "locomo"}
#: notebooks that use a data set when it is cached and skip those cells without it
USES_DATA = {"08_advise": (ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip", "locomo")}
#: a call that makes one figure (or shows a saved one) in a code cell
FIGURE_CALL = re.compile(r"\bplt\.(?:subplots|figure)\(|\bdisplay\(Image\(")


def _execute(nb_path: Path, cwd: Path, monkeypatch) -> dict:
    """Run a notebook in a fresh kernel started in ``cwd``; the executed notebook."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    data = NEEDS_DATA.get(nb_path.stem)
    if data is not None and not data.exists():
        pytest.skip(f"{nb_path.name} replays {data}, which is absent")
    name = NEEDS_DATA_SET.get(nb_path.stem)
    if data is None and nb_path.stem in USES_DATA:
        data, name = USES_DATA[nb_path.stem]
        data = data if data.exists() else None
    # a fresh data cache, so that the user's own is never read or written; the
    # notebook names its data data:NAME: the shared copy is registered in it
    from memsim.data import datasets

    cache = Path(tempfile.mkdtemp(prefix="memsim-data-"))
    monkeypatch.setenv(datasets.CACHE_ENV, str(cache))
    if data is not None:
        datasets.register(name, data)
    # the kernel inherits the environment: a non-interactive backend, this checkout
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    nb = nbformat.read(nb_path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _png_outputs(cell) -> int:
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(nb):
    data = json.loads(nb.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, nb.name


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_shows_every_figure_under_agg(nb, monkeypatch):
    """Each figure a code cell makes (``plt.subplots``, ``plt.figure``, or a
    saved PNG shown with ``display(Image(...))``) comes out as an image/png
    output, even though the backend is Agg."""
    executed = _execute(nb, nb.parent, monkeypatch)
    wanted = shown = 0
    for k, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        made = len(FIGURE_CALL.findall(cell.source))
        got = _png_outputs(cell)
        assert got == made, (f"{nb.name}, code cell {k}: {made} figure(s) made, {got} "
                             f"shown as PNG:\n{cell.source[:400]}")
        wanted += made
        shown += got
    assert wanted > 0 and shown == wanted, nb.name


@pytest.mark.slow
def test_locomo_notebook_runs_from_the_repository_root(monkeypatch):
    """The notebook finds the repository (the folder with pyproject.toml) from
    the current folder, not from a fixed ``..``."""
    nb = ROOT / "notebooks" / "06_locomo.ipynb"
    executed = _execute(nb, ROOT, monkeypatch)
    assert sum(_png_outputs(c) for c in executed.cells if c.cell_type == "code") >= 2
