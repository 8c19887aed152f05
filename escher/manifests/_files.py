"""Reading YAML and JSON files of Kubernetes objects (multi-document YAML, folders)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from escher.manifests._workloads import ManifestError, Workloads, merge, workloads_from_objects

#: File endings read when a folder is given.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_documents(path: Path) -> list[Any]:
    """The documents of one file: JSON (one document) or YAML (one or more).

    Raises:
        ManifestError: the file cannot be read or parsed, naming it and the line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read it ({exc}).") from None
    if path.suffix == ".json":
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise ManifestError(
                f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}."
            ) from None
    try:
        return list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"{path}: not valid YAML{where}: {problem}.") from None


def manifest_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files to read: each file given, and the YAML/JSON files under each folder
    (recursively, sorted).

    Raises:
        ManifestError: a path that does not exist, or a folder without manifests.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
            if not found:
                raise ManifestError(
                    f"{p}: no manifest files (*.yaml, *.yml, *.json) in this folder."
                )
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise ManifestError(
                f"-f {str(p)!r}: no such file or folder; give manifest files or folders."
            )
    return files


def load_manifests(paths: Sequence[str | Path]) -> Workloads:
    """The workloads of manifest files and folders (``kubectl apply -f`` input).

    Multi-document YAML, JSON and ``List`` objects are read; kinds escher does not check
    are listed in `Workloads.skipped`.

    Raises:
        ManifestError: an unreadable file or object, naming the file and the place.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    if not paths:
        raise ManifestError("no manifests given; pass files or folders (-f PATH).")
    return merge(workloads_from_objects(read_documents(f), str(f)) for f in manifest_files(paths))
