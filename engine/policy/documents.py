"""YAML files to plain data, remembering where every value came from.

PyYAML's composer keeps start marks on nodes; kpe builds plain dicts and lists
from them and records ``path → position`` so schema and CEL errors can point
at a line and column. Duplicate mapping keys, which PyYAML silently
overwrites, are reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from engine.errors import Location, PolicyError

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based
    style: str | None = None  # scalar style: None plain, "'" '"' "|" ">"


@dataclass
class Document:
    """One YAML document of a file."""

    file: str
    index: int
    data: Any
    positions: dict[Path, Position] = field(default_factory=dict)
    key_positions: dict[Path, Position] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list, repr=False)

    def location(self, path: Path, *, key: bool = False) -> Location:
        """The closest recorded position of ``path`` (walking up to its parents); just the
        file for a document that has none (a Kubernetes object: ``engine.policy.objects``)."""
        if not self.positions:
            return Location(self.file)
        table = self.key_positions if key else self.positions
        probe = path
        while True:
            pos = table.get(probe) or self.positions.get(probe)
            if pos is not None:
                return Location(self.file, pos.line, pos.column)
            if not probe:
                return Location(self.file, 1, 1)
            probe = probe[:-1]


def format_path(path: Path) -> str:
    """``("spec", "filters", 2, "expression")`` → ``spec.filters[2].expression``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_FAST: Any = getattr(yaml, "CSafeLoader", None)

# The most one document may hold: etcd's limit for one object (1.5 MiB), so no policy file holds a
# document that could not be applied as an object. A bigger one is refused before it is parsed.
DOCUMENT_LIMIT = 1536 * 1024
_MARKER = re.compile(r"^(?:---|\.\.\.)(?=[ \t\r\n]|$)", re.M)


def _without_oversized(text: str, file: str) -> tuple[str, list[PolicyError]]:
    """``text`` with each document over ``DOCUMENT_LIMIT`` blanked out (its lines kept as empty
    lines, so the others' lines and columns stay right), and a KPE104 for each."""
    if len(text) <= DOCUMENT_LIMIT:
        return text, []
    bounds = [0] + [m.start() for m in _MARKER.finditer(text)] + [len(text)]
    parts: list[str] = []
    errors: list[PolicyError] = []
    for start, end in zip(bounds, bounds[1:]):
        chunk = text[start:end]
        size = len(chunk.encode())
        if size > DOCUMENT_LIMIT:
            line = text.count("\n", 0, start) + 1
            shown = f"{size / 1048576:.1f} MiB" if size >= 1048576 else f"{size / 1024:.0f} KiB"
            errors.append(PolicyError(
                "KPE104",
                f"document of {shown}, over the {DOCUMENT_LIMIT // 1024} KiB one object may be (etcd's limit): not parsed; "
                "split it into several policies",
                Location(file, line, 1),
            ))
            first_newline = chunk.find("\n")
            marker = chunk[: first_newline + 1] if chunk.startswith(("---", "...")) and first_newline >= 0 else ""
            chunk = marker + "\n" * chunk.count("\n", len(marker))
        parts.append(chunk)
    return "".join(parts), errors


def load_documents(text: str, file: str) -> tuple[list[Document], list[PolicyError]]:
    """Every non-empty document in ``text``; YAML errors are returned, not raised."""
    docs: list[Document] = []
    text, errors = _without_oversized(text, file)
    try:
        # libyaml's parser when PyYAML has it: the same nodes and marks, about 80 times faster
        # (a 7.9 MB file: 0.16 s against 13.6 s). A file it refuses is parsed again in Python,
        # whose messages are the ones kpe has always shown.
        nodes = list(yaml.compose_all(text, Loader=_FAST)) if _FAST is not None else None
    except yaml.YAMLError:
        nodes = None
    try:
        if nodes is None:
            nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        return [], errors + [PolicyError("KPE101", f"invalid YAML: {problem}", loc)]
    except yaml.YAMLError as exc:
        return [], errors + [PolicyError("KPE101", f"invalid YAML: {exc}", Location(file, 1, 1))]
    # One list of the file's lines, shared by its documents (read only, for error carets): a
    # copy each made a file of N policies cost memory with N squared (1,000 in one file, 1 GB).
    lines = text.split("\n")
    for index, node in enumerate(nodes):
        if node is None:
            continue
        doc = Document(file=file, index=index, data=None, lines=lines)
        builder = _Builder(doc, errors)
        doc.data = builder.build(node, ())
        if doc.data is None:
            continue
        docs.append(doc)
    return docs, errors


class _Builder:
    def __init__(self, doc: Document, errors: list[PolicyError]) -> None:
        self.doc = doc
        self.errors = errors
        self.constructor = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: Path) -> Any:
        style = getattr(node, "style", None) or None  # libyaml says '' for plain, PyYAML None
        self.doc.positions[path] = Position(node.start_mark.line + 1, node.start_mark.column + 1, style)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.constructor.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    key = str(key)
                key = key if isinstance(key, str) else str(key)
                child = (*path, key)
                key_pos = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in out:
                    self.errors.append(
                        PolicyError(
                            "KPE102",
                            f"duplicate key {key!r} (YAML would silently keep only the last)",
                            Location(self.doc.file, key_pos.line, key_pos.column),
                            path=format_path(child),
                        )
                    )
                self.doc.key_positions[child] = key_pos
                out[key] = self.build(value_node, child)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        # Dates and times stay text: policies compare them with CEL, not PyYAML's types.
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            return str(node.value)
        return value
