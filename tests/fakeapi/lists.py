"""Lists: resourceVersion / resourceVersionMatch semantics, limit and continue tokens, as kube-apiserver
1.25 serves them (etcd for exact, paged and continued reads; the watch cache for the rest)."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from .selectors import selector
from .wire import (
    CONTINUE_EXPIRED, LIST_EXPIRED, ApiError, FieldError, Obj, Resource, bad_request, expired, invalid, list_item, status,
)

if TYPE_CHECKING:
    from .state import State


def encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError(f"continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        return int(data["rv"]), str(data["start"])
    except ValueError as exc:
        raise bad_request(f"invalid continue token: {exc}") from None
    except Exception:  # noqa: BLE001
        raise bad_request("invalid continue token: continue key is not valid: illegal base64 data") from None


def too_large(want: int, have: int) -> ApiError:
    return ApiError(status(504, "Timeout", f"Too large resource version: {want}, current: {have}",
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1}))


def list_response(state: State, res: Resource, namespace: str | None, params: dict[str, str]) -> Obj:
    """The NodeList/PodList/... a GET on a collection answers, or the ApiError it raises."""
    rv_param, match = params.get("resourceVersion", ""), params.get("resourceVersionMatch", "")
    cont = params.get("continue", "")
    errs = []
    if match:
        if not rv_param:
            errs.append(FieldError("resourceVersionMatch", "Forbidden", "resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if cont:
            errs.append(FieldError("resourceVersionMatch", "Forbidden", "resourceVersionMatch is forbidden when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            errs.append(FieldError("resourceVersionMatch", "NotSupported", value=match, supported=("Exact", "NotOlderThan", "")))
        if match == "Exact" and rv_param == "0":
            errs.append(FieldError("resourceVersionMatch", "Forbidden", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if errs:
        raise invalid("ListOptions.meta.k8s.io", "", errs, group="meta.k8s.io", kind="ListOptions")
    try:
        limit = int(params.get("limit") or 0)
    except ValueError:
        raise bad_request(f"limit: Invalid value: {params['limit']!r}") from None
    if rv_param not in ("", "0") and not rv_param.isdigit():
        raise bad_request(f'invalid resource version "{rv_param}": strconv.ParseUint: parsing "{rv_param}": invalid syntax')
    pred, everything = selector(params, res)
    with state.lock:
        start = ""
        if cont:
            if rv_param not in ("", "0"):
                raise bad_request("specifying resource version is not allowed when using continue")
            at, start = decode_continue(cont)
            if at == -1:
                at = state.revision
            elif at < state.compacted:
                st = expired(CONTINUE_EXPIRED)
                st["metadata"] = {"continue": encode_continue(-1, start)}
                raise ApiError(st)
        elif match == "Exact" or (not match and limit > 0 and rv_param not in ("", "0")):
            at = int(rv_param)
            if at < state.compacted:
                raise ApiError(expired(LIST_EXPIRED))
            if at > state.revision:
                raise too_large(at, state.revision)
        else:
            if rv_param not in ("", "0") and int(rv_param) > state.revision:
                raise too_large(int(rv_param), state.revision)
            at = state.revision
        if rv_param == "0":
            limit = 0  # served from the watch cache: no paging
        objs = state.snapshot(res, at)
        rel = (lambda k: k[1]) if (not res.namespaced or namespace is not None) else (lambda k: f"{k[0]}/{k[1]}")
        keys = sorted((k for k in objs if namespace is None or k[0] == namespace), key=rel)
        keys = [k for k in keys if not start or rel(k) >= start]
        chosen = [k for k in keys if pred(objs[k])]
        meta: Obj = {"resourceVersion": str(at)}
        if limit > 0 and len(chosen) > limit:
            page, rest = chosen[:limit], chosen[limit:]
            meta["continue"] = encode_continue(at, rel(page[-1]) + "\u0000")
            if everything:
                meta["remainingItemCount"] = len(rest)
            chosen = page
        items = [list_item(objs[k]) for k in chosen]
    return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}

