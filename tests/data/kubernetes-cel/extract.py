#!/usr/bin/env python3
"""Extract the table cases of Kubernetes' and cel-go's CEL library tests into JSON.

Run by hand (not by the tests), from the repository root:

    python tests/data/kubernetes-cel/extract.py \
        --apiserver /root/go/pkg/mod/k8s.io/apiserver@v0.37.2 \
        --cel-go /root/go/pkg/mod/github.com/google/cel-go@v0.29.2

It reads the Go test files, finds the table literal of each test function named
below, and writes one ``<library>.json`` per library next to this script (format in
README.md). A case whose expected value this script cannot turn into data (a Go
value it does not know, a proto message, a variable bound to something other than
a literal list) is left out and counted under ``skipped`` with the reason, so the
counts stay honest. Nothing of the Go code is copied: only the expressions and
the expected values and error texts, as data.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# (library, repository, file, test function, the kind of table)
TABLES = (
    ("format", "apiserver", "pkg/cel/library/format_test.go", "TestFormat", "k8s"),
    ("quantity", "apiserver", "pkg/cel/library/quantity_test.go", "TestQuantity", "k8s-regex"),
    ("ip", "apiserver", "pkg/cel/library/ip_test.go", "TestIP", "k8s"),
    ("cidr", "apiserver", "pkg/cel/library/cidr_test.go", "TestCIDR", "k8s"),
    ("semver", "apiserver", "pkg/cel/library/semver_test.go", "TestSemver", "k8s-regex"),
    ("sets", "cel-go", "ext/sets_test.go", "TestSets", "celgo-true"),
    ("lists", "cel-go", "ext/lists_test.go", "TestLists", "celgo-true"),
    ("lists", "cel-go", "ext/lists_test.go", "TestListsRuntimeErrors", "celgo-true"),
    ("lists", "cel-go", "ext/lists_test.go", "TestListsVersion", "celgo-versions"),
    ("comprehensions", "cel-go", "ext/comprehensions_test.go", "TestTwoVarComprehensions", "celgo-true"),
    ("comprehensions", "cel-go", "ext/comprehensions_test.go", "TestTwoVarComprehensionsStaticErrors", "celgo-compile"),
    ("comprehensions", "cel-go", "ext/comprehensions_test.go", "TestTwoVarComprehensionsRuntimeErrors", "celgo-true"),
)


class Skip(Exception):
    """A case this script cannot express as data."""


# -- Go source scanning ---------------------------------------------------------------


def _skip_string(src: str, i: int) -> int:
    """The index after the string literal (or rune) starting at ``src[i]``."""
    quote = src[i]
    if quote == "`":
        return src.index("`", i + 1) + 1
    j = i + 1
    while src[j] != quote:
        j += 2 if src[j] == "\\" else 1
    return j + 1


def _matching(src: str, i: int) -> int:
    """The index of the bracket closing the one at ``src[i]``, strings and comments skipped."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[src[i]]]
    j = i + 1
    while stack:
        c = src[j]
        if c in "`\"'":
            j = _skip_string(src, j)
            continue
        if src.startswith("//", j):
            j = src.index("\n", j)
            continue
        if src.startswith("/*", j):
            j = src.index("*/", j) + 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")}]":
            if c != stack.pop():
                raise ValueError(f"unbalanced {c!r} at {j}")
        j += 1
    return j - 1


def _split_top(body: str) -> list[str]:
    """Split at the commas outside brackets, strings and comments."""
    parts, depth, start, j = [], 0, 0, 0
    while j < len(body):
        c = body[j]
        if c in "`\"'":
            j = _skip_string(body, j)
            continue
        if body.startswith("//", j):
            end = body.find("\n", j)
            body = body[:j] + " " * ((end if end >= 0 else len(body)) - j) + body[end if end >= 0 else len(body):]
            continue
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(body[start:j])
            start = j + 1
        j += 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def function_body(src: str, name: str) -> str:
    m = re.search(rf"^func {name}\(", src, re.M)
    if not m:
        raise SystemExit(f"no function {name}")
    open_at = src.index("{", src.index(")", m.end()))
    return src[open_at : _matching(src, open_at) + 1]


def table(body: str) -> list[str]:
    """The elements of the first ``x := []T{...}`` literal of a function body."""
    m = re.search(r":= \[\](struct\s*)?", body)
    if not m:
        raise SystemExit("no table literal")
    i = m.end()
    if m.group(1):
        i = _matching(body, body.index("{", i)) + 1
    open_at = body.index("{", i)
    return _split_top(body[open_at + 1 : _matching(body, open_at)])


def fields(element: str) -> dict[str, str]:
    element = element.strip()
    assert element.startswith("{") and element.endswith("}"), element[:80]
    out = {}
    for part in _split_top(element[1:-1]):
        key, _, value = part.partition(":")
        out[key.strip()] = value.strip()
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def go_string(text: str) -> str:
    text = text.strip()
    if text.startswith("`"):
        return text[1:-1]
    if not text.startswith('"'):
        raise Skip(f"not a string literal: {text[:60]}")
    s, out, j = text[1:-1], [], 0
    while j < len(s):
        if s[j] == "\\":
            c = s[j + 1]
            if c in _ESCAPES:
                out.append(_ESCAPES[c])
                j += 2
            elif c == "x":
                out.append(chr(int(s[j + 2 : j + 4], 16)))
                j += 4
            elif c in "uU":
                n = 4 if c == "u" else 8
                out.append(chr(int(s[j + 2 : j + 2 + n], 16)))
                j += 2 + n
            else:
                raise Skip(f"escape \\{c}")
        else:
            out.append(s[j])
            j += 1
    return "".join(out)


def string_list(text: str) -> list[str]:
    m = re.fullmatch(r"\[\]string\s*\{(.*)\}", text.strip(), re.S)
    if not m:
        raise Skip(f"not a []string: {text[:60]}")
    return [go_string(p) for p in _split_top(m.group(1))]


# -- values ---------------------------------------------------------------------------


def prologue(body: str) -> dict[str, Any]:
    """The local constants test functions define before their table (``trueVal``, ``ipv4Addr``...)."""
    known: dict[str, Any] = {}
    for m in re.finditer(r"^\s*(\w+)(?:, _)? := (.+)$", body, re.M):
        name, expr = m.group(1), m.group(2).strip()
        try:
            known[name] = go_value(expr, {})
        except Skip:
            pass
    return known


def go_value(text: str, known: dict[str, Any]) -> Any:
    """A Go ``ref.Val`` expression as a tagged JSON value (README.md)."""
    text = text.strip()
    if text in known:
        return known[text]
    if text in ("types.True", "types.Bool(true)"):
        return {"bool": True}
    if text in ("types.False", "types.Bool(false)"):
        return {"bool": False}
    if text == "types.OptionalNone":
        return {"optional": None}
    m = re.fullmatch(r"types\.(Int|Uint|Double)\((-?[\d.e+]+)\)", text)
    if m:
        kind = m.group(1).lower()
        return {kind: float(m.group(2)) if kind == "double" else int(m.group(2))}
    m = re.fullmatch(r"types\.String\((.*)\)", text, re.S)
    if m:
        return {"string": go_string(m.group(1))}
    m = re.fullmatch(r"types\.OptionalOf\(types\.NewStringList\(types\.DefaultTypeAdapter, (.*)\)\)", text, re.S)
    if m:
        return {"optional": {"list": [{"string": s} for s in string_list(m.group(1))]}}
    m = re.fullmatch(r"netip\.ParseAddr\((.*)\)", text)
    if m:
        return {"cel": f"ip({json.dumps(go_string(m.group(1)))})"}
    m = re.fullmatch(r"netip\.ParsePrefix\((.*)\)", text)
    if m:
        return {"cel": f"cidr({json.dumps(go_string(m.group(1)))})"}
    m = re.fullmatch(r"resource\.MustParse\((.*)\)", text)
    if m:
        return {"cel": f"quantity({json.dumps(go_string(m.group(1)))})"}
    m = re.fullmatch(r"apiservercel\.(IP|CIDR)\{(?:Addr|Prefix): (\w+)\}", text)
    if m and m.group(2) in known:
        return known[m.group(2)]
    m = re.fullmatch(r"apiservercel\.Quantity\{Quantity: &(\w+)\}", text)
    if m and m.group(1) in known:
        return known[m.group(1)]
    m = re.fullmatch(r"apiservercel\.Semver\{Version: semver\.MustParse\((.*)\)\}", text)
    if m:
        return {"cel": f"semver({json.dumps(go_string(m.group(1)))})"}
    m = re.fullmatch(r"apiservercel\.CIDR\{Prefix: netip\.PrefixFrom\((\w+), (\d+)\)\}", text)
    if m and m.group(1) in known and "cel" in known[m.group(1)]:
        addr = known[m.group(1)]["cel"][len("ip(") : -1]
        return {"cel": f"cidr({json.dumps(json.loads(addr) + '/' + m.group(2))})"}
    raise Skip(f"expected value not expressible as data: {text[:80]}")


def bindings(f: dict[str, str]) -> dict[str, Any]:
    """``in: map[string]any{"x": []int64{1, 2}}`` as JSON (only literal int lists)."""
    raw = f.get("in")
    if raw is None:
        return {}
    out: dict[str, Any] = {}
    m = re.fullmatch(r"map\[string\](?:any|interface\{\})\s*\{(.*)\}", raw, re.S)
    if not m:
        raise Skip(f"bindings: {raw[:60]}")
    for part in _split_top(m.group(1)):
        key, _, value = part.partition(":")
        lm = re.fullmatch(r"\[\]int(?:64)?\s*\{(.*)\}", value.strip(), re.S)
        if not lm:
            raise Skip(f"binding value: {value[:60]}")
        out[go_string(key)] = [{"int": int(x)} for x in _split_top(lm.group(1))]
    return out


# -- per test kind --------------------------------------------------------------------


def k8s_case(f: dict[str, str], known: dict[str, Any], regex: bool) -> dict[str, Any]:
    expr = go_string(f["expr"])
    value_key = next((k for k in ("expectValue", "expectResult") if k in f), None)
    runtime = next((f[k] for k in ("expectedRuntimeErr", "expectRuntimeErr") if k in f), None)
    compile_errs = next((f[k] for k in ("expectedCompileErr", "expectCompileErrs") if k in f), None)
    case: dict[str, Any] = {"expr": expr}
    if "version" in f:
        case["library_version"] = int(f["version"])
    if compile_errs is not None:
        case["error"] = {"stage": "compile", "match": "regex", "texts": string_list(compile_errs)}
    elif runtime is not None:
        case["error"] = {"stage": "runtime", "match": "regex" if regex else "exact", "texts": [go_string(runtime)]}
    elif value_key is not None:
        case["value"] = go_value(f[value_key], known)
    else:
        raise Skip("no expectation")
    return case


def celgo_case(f: dict[str, str], stage: str) -> dict[str, Any]:
    if "vars" in f and "in" not in f:
        raise Skip("declares variables without values")
    case: dict[str, Any] = {"expr": go_string(f["expr"])}
    b = bindings(f)
    if b:
        case["bindings"] = b
    if "out" in f:
        raise Skip("expects a value other than true")
    if f.get("err"):
        case["error"] = {"stage": stage, "match": "substring", "texts": [go_string(f["err"])]}
    else:
        case["value"] = {"bool": True}
    return case


def format_loop_cases(apiserver: Path) -> list[tuple[str, dict[str, Any]]]:
    """TestFormat also builds cases in a loop over library.ConstantFormats (format.go)."""
    src = (apiserver / "pkg/cel/library/format.go").read_text()
    start = src.index("var ConstantFormats")
    block = src[start : _matching(src, src.index("{", src.index("]apiservercel.Format", start))) + 1]
    names = re.findall(r'^\t"(\w+)": \{', block, re.M)
    cases = []
    for lhs in names:
        cases.append(("lookup and comparison", {"expr": f'format.named("{lhs}").hasValue()', "value": {"bool": True}}))
        cases.append(("comparison with lookup succeeds", {"expr": f'format.named("{lhs}").value() == format.{lhs}()', "value": {"bool": True}}))
        for rhs in names:
            if rhs != lhs:
                cases.append((f"compare_{lhs}_{rhs}", {"expr": f"format.{lhs}() == format.{rhs}()", "value": {"bool": False}}))
    return cases


def extract(roots: dict[str, Path]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for library, repo, rel, func, kind in TABLES:
        path = roots[repo] / rel
        src = path.read_text()
        body = function_body(src, func)
        doc = out.setdefault(library, {"library": library, "sources": [], "cases": [], "skipped": []})
        doc["sources"].append(f"{repo_label(repo, roots[repo])}/{rel}:{func}")
        known = prologue(body.split(":= []", 1)[0])
        rows: list[tuple[str, dict[str, Any] | str]] = []
        if kind == "celgo-versions":
            for name, expr in re.findall(r'"(\w+)":\s*("(?:[^"\\]|\\.)*")', body):
                rows.append((name, {"expr": go_string(expr), "value": {"bool": True}}))
        else:
            for element in table(body):
                f = fields(element)
                name = go_string(f["name"]) if "name" in f else ""
                try:
                    if kind.startswith("k8s"):
                        row: dict[str, Any] | str = k8s_case(f, known, regex=kind == "k8s-regex")
                    else:
                        row = celgo_case(f, "compile" if kind == "celgo-compile" else "runtime")
                except Skip as exc:
                    row = str(exc)
                rows.append((name, row))
        if func == "TestFormat":
            rows.extend(format_loop_cases(roots["apiserver"]))
        for i, (name, row) in enumerate(rows):
            cid = f"{func}/{i}" + (f" {name}" if name else "")
            if isinstance(row, str):
                doc["skipped"].append({"id": cid, "reason": row})
            else:
                doc["cases"].append({"id": cid, **row})
    return out


def repo_label(repo: str, root: Path) -> str:
    return {"apiserver": "k8s.io/apiserver", "cel-go": "github.com/google/cel-go"}[repo] + "@" + root.name.split("@")[-1]


# Kubernetes' cost tests (cost_test.go) build most of their cases in loops and closures, so
# rather than read the Go, --costs runs them: in a scratch copy of the module, the test's
# own helper testCost first records (test name, expression, expected estimate, expected
# run-time cost) and then checks as before. Only those records are kept.
COST_TESTS = "Cost|TestStringLibrary|TestAuthzLibrary"
_RECORDER = """package library

import (
	"encoding/json"
	"os"
)

func recordCost(name, expr string, lo, hi, rt uint64) {
	f, err := os.OpenFile(os.Getenv("KPE_COST_RECORD"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	b, _ := json.Marshal(map[string]any{"test": name, "expr": expr, "min": lo, "max": hi, "runtime": rt})
	f.Write(append(b, 10))
}
"""
_HELPER = "func testCost(t *testing.T, expr string, expectEsimatedCost checker.CostEstimate, expectRuntimeCost uint64) {"


def extract_costs(apiserver: Path) -> dict[str, Any]:
    """The cases of apiserver's pkg/cel/library cost tests, by running them (needs Go and
    the module's dependencies in the Go module cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "apiserver"
        shutil.copytree(apiserver, module)
        library = module / "pkg/cel/library"
        for test in library.glob("*_test.go"):
            os.chmod(test, 0o644)
            if test.name != "cost_test.go":
                test.unlink()  # only the cost tests run; the others need more modules
        source = (library / "cost_test.go").read_text()
        if _HELPER not in source:
            raise SystemExit("cost_test.go's testCost has changed; update extract.py")
        wrapped = _HELPER + "\n\trecordCost(t.Name(), expr, expectEsimatedCost.Min, expectEsimatedCost.Max, expectRuntimeCost)\n\ttestCostAsIs(t, expr, expectEsimatedCost, expectRuntimeCost)\n}\n\n"
        (library / "cost_test.go").write_text(source.replace(_HELPER, wrapped + _HELPER.replace("testCost(", "testCostAsIs(")))
        (library / "zz_record_test.go").write_text(_RECORDER)
        record = Path(tmp) / "record.jsonl"
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "KPE_COST_RECORD": str(record)}
        subprocess.run(["go", "test", "-count=1", "-run", COST_TESTS, "./pkg/cel/library/"], cwd=module, env=env, check=True)
        rows = [json.loads(line) for line in record.read_text().splitlines()]
    cases = [
        {"id": row["test"], "expr": row["expr"], "estimate": [row["min"], row["max"]], "runtime": row["runtime"]}
        for row in rows
    ]
    version = apiserver.name.split("@")[-1]
    return {"library": "cost", "sources": [f"k8s.io/apiserver@{version}/pkg/cel/library/cost_test.go"], "cases": cases, "skipped": []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apiserver", type=Path, default=Path("/root/go/pkg/mod/k8s.io/apiserver@v0.37.2"))
    parser.add_argument("--cel-go", type=Path, default=Path("/root/go/pkg/mod/github.com/google/cel-go@v0.29.2"))
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--costs", action="store_true", help="extract only cost.json, by running the cost tests (needs Go)")
    args = parser.parse_args(argv)
    if args.costs:
        doc = extract_costs(args.apiserver)
        (args.out / "cost.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        print(f"cost            {len(doc['cases']):4} cases", file=sys.stderr)
        return 0
    docs = extract({"apiserver": args.apiserver, "cel-go": args.cel_go})
    for library, doc in docs.items():
        (args.out / f"{library}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        print(f"{library:15} {len(doc['cases']):4} cases, {len(doc['skipped']):3} skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
