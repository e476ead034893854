"""The JSON Schema step of the loading pipeline: ``schemas/`` is the contract."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from engine.policy.documents import Document, format_path
from engine.errors import PolicyError

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
POLICY_SCHEMA = "schedulingpolicy-v1alpha1.json"


@lru_cache(maxsize=None)
def validator(name: str = POLICY_SCHEMA) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMA_DIR / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(doc: Document, *, policy: str, schema: str = POLICY_SCHEMA) -> list[PolicyError]:
    """Schema violations of one document, each at the position of the offending field."""
    errors: list[PolicyError] = []
    for err in validator(schema).iter_errors(doc.data):
        for leaf in _leaves(err):
            errors.append(_to_policy_error(doc, leaf, policy))
    return errors


def _leaves(err: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    # anyOf/oneOf wrap the real reasons; show those, unless the wrapper itself is the point.
    if err.validator in ("anyOf", "oneOf") and err.context and err.validator_value and not _is_required_choice(err):
        best = jsonschema.exceptions.best_match(err.context)
        return [best] if best is not None else [err]
    return [err]


def _is_required_choice(err: jsonschema.ValidationError) -> bool:
    return all(set(option) == {"required"} for option in err.validator_value)


def _to_policy_error(doc: Document, err: jsonschema.ValidationError, policy: str) -> PolicyError:
    path = tuple(err.absolute_path)
    message = _message(err)
    if err.validator == "additionalProperties":
        extras = _extra_keys(err)
        if extras:
            child = (*path, extras[0])
            return PolicyError(
                "KPE200",
                message,
                doc.location(child, key=True),
                policy=policy,
                path=format_path(child),
            )
    return PolicyError("KPE200", message, doc.location(path), policy=policy, path=format_path(path))


def _extra_keys(err: jsonschema.ValidationError) -> list[str]:
    allowed = set(err.schema.get("properties", {}))
    instance: Any = err.instance
    return sorted(k for k in instance if k not in allowed) if isinstance(instance, dict) else []


QUOTE_LIMIT = 80  # characters of an offending value a message quotes: a 7 MB expression is not printed back
TOO_LONG = "characters long, more than the"  # in maxLength's message; the loader compiles no such document


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= QUOTE_LIMIT else f"{text[:QUOTE_LIMIT]}… ({len(text):,} characters)"


def _message(err: jsonschema.ValidationError) -> str:
    v = err.validator
    if v == "maxLength" and isinstance(err.instance, str):
        return f"{_quoted(err.instance)} is {len(err.instance):,} {TOO_LONG} {err.validator_value:,} allowed"
    if v == "additionalProperties":
        extras = _extra_keys(err)
        allowed = ", ".join(sorted(err.schema.get("properties", {})))
        names = ", ".join(repr(e) for e in extras)
        return f"unknown field {names}; allowed here: {allowed}"
    if v == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return f"missing required field {missing!r}"
    if v == "anyOf" and _is_required_choice(err):
        options = ", ".join(opt["required"][0] for opt in err.validator_value)
        return f"needs at least one of: {options}"
    if v == "enum":
        return f"must be one of {', '.join(map(str, err.validator_value))}, not {_quoted(err.instance)}"
    if v == "const":
        return f"must be {err.validator_value!r}, not {_quoted(err.instance)}"
    if v == "type":
        return f"must be of type {err.validator_value}, not {_json_type(err.instance)}"
    if v == "pattern":
        return f"{_quoted(err.instance)} does not match the required pattern {err.validator_value}"
    message = str(err.message)
    return message if len(message) <= 4 * QUOTE_LIMIT else f"{message[: 4 * QUOTE_LIMIT]}… ({len(message):,} characters)"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )
