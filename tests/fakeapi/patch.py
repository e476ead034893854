"""RFC 6902 JSON Patch and RFC 7386 merge patch, with the failure cases of the
evanphx/json-patch library kube-apiserver uses (any failure is one PatchError;
the server answers every one of them with the same 422 body)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    pass


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, size: int, *, for_add: bool) -> int:
    if for_add and token == "-":
        return size
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    i = int(token)
    if i > size or (i == size and not for_add):
        raise PatchError(f"array index {i} out of bounds")
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError(f"doc is missing path: {t}")
            cur = cur[t]
        elif isinstance(cur, list):
            cur = cur[_index(t, len(cur), for_add=False)]
        else:
            raise PatchError(f"doc is missing path: {t}")
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise KeyError(path)
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(last, len(parent), for_add=False)]
    raise PatchError(f"doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), for_add=True), value)
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(last, len(parent), for_add=False)]
    else:
        raise PatchError(f"remove operation does not apply: doc is missing path: {path}")
    return doc


def apply_json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise TypeError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError("operation is not an object")
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation missing path: {op}")
        value = copy.deepcopy(op.get("value"))
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{kind} operation missing value")
        if kind == "add":
            doc = _add(doc, path, value)
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            try:
                _get(doc, path)
            except KeyError:
                raise PatchError(f"replace operation does not apply: doc is missing key: {path}") from None
            doc = _add(_remove(doc, path), path, value) if _tokens(path) else value
        elif kind == "test":
            try:
                current = _get(doc, path)
            except KeyError:
                current = None
                if value is not None:
                    raise PatchError(f"testing value {path} failed: test failed") from None
            if current != value or type(current) is bool and type(value) is not bool:
                raise PatchError(f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"{kind} operation missing from")
            try:
                moved = copy.deepcopy(_get(doc, source))
            except KeyError:
                raise PatchError(f"{kind} operation does not apply: doc is missing from path: {source}") from None
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, moved)
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out
