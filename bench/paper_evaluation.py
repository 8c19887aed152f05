"""The paper's evaluation on escher's simulator (same as `escher bench`).

Usage: python bench/paper_evaluation.py [NAME|all|list] [--quick] [--seed N] [--out DIR]
Each workload prints a table with the paper's number beside ours (baselines from the same
run, same seed) and writes <name>.png / <name>.json (default: docs/img/evaluation).
"""

from __future__ import annotations

import sys

from escher.cli.bench import bench

if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        args = ["all", *args]
    if "--out" not in args:
        args += ["--out", "docs/img/evaluation"]
    bench.main(args=args, prog_name="paper_evaluation.py")
