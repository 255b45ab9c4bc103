"""mkdocs hook: the notebooks of ``notebooks/`` become pages of the site.

The notebooks live at the repository's root (the README and the tests run them
there), so they are added to the site's files here rather than copied into
``docs/``; mkdocs-jupyter then renders them as they are committed (without
outputs, never executed at build time).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File


@event_priority(100)  # before mkdocs-jupyter looks for notebooks among the files
def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        files.append(File(f"notebooks/{path.name}", str(root), config["site_dir"],
                          config["use_directory_urls"]))
    return files
