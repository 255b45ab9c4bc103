"""Evidence recall on LoCoMo turns, per embedder (a script, not a test).

For every answerable question (categories 1-4, with resolved evidence),
ranks the turns of its conversation by cosine of the embedder's vectors and
prints, per embedder, the share of questions with **all** of their evidence
turns in the top k (all-evidence@k) and with at least one (any@k), for k = 5
and 10, and the mean share of the evidence found::

    python benchmarks/locomo_embedders.py [PATH] [--embedders bm25,wordllama]

``PATH`` defaults to ``../shared/data/locomo/locomo10.zip`` beside the
repository. ``wordllama`` needs the ``[embed]`` extra; its vectors are cached
(:mod:`memsim.data.embed`). Runs in about ten seconds on two cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from memsim.data.importers.locomo import evidence_in_top, import_locomo

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.zip"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=str(DEFAULT), help="locomo10.zip or .json")
    ap.add_argument("--embedders", default="bm25,wordllama", help="comma-separated")
    args = ap.parse_args(argv)
    if not Path(args.path).exists():
        print(f"LoCoMo data not found: {args.path}", file=sys.stderr)
        return 2
    print(f"{'embedder':10} {'questions':>9} {'all@5':>7} {'all@10':>7} {'any@5':>7} "
          f"{'any@10':>7} {'share@5':>8}")
    for name in args.embedders.split(","):
        stream = import_locomo(args.path, embedder=name.strip())
        f5, need = evidence_in_top(stream, 5)
        f10, _ = evidence_in_top(stream, 10)
        print(f"{name:10} {len(need):9d} {(f5 == need).mean():7.4f} {(f10 == need).mean():7.4f} "
              f"{(f5 > 0).mean():7.4f} {(f10 > 0).mean():7.4f} {(f5 / need).mean():8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
