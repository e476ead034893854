"""The cyclic garbage collector waits while a verb is answered, and runs again afterwards,
whatever the answer: a request's objects are gone before it looks (``server.verbs.endpoints``)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.decisions.deadline import Deadline
from server.app import create_app
from server.http.responses import HTTPProblem, parse_json
from server.verbs.answer import Answer
from server.settings import Settings
from server.state import ServerState
from server.verbs.endpoints import VerbDispatch


def call(dispatch: VerbDispatch, app: Any, body: bytes) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/scheduler/filter", "headers": [], "app": app}
    asyncio.run(dispatch(scope, receive, send))
    return sent[0]["status"], orjson.loads(sent[1]["body"])


@pytest.mark.parametrize(
    ("outcome", "status"),
    [("answer", 200), ("refusal", 422), ("bug", 500), ("bad body", 400)],
)
def test_the_collector_is_paused_while_a_verb_is_answered_and_running_after_it(tmp_path: Path, outcome: str, status: int) -> None:
    (tmp_path / "p.yaml").write_text("")
    app = create_app(Settings(policies=str(tmp_path / "p.yaml"), cluster="off", allow_empty_policies=True))
    seen: list[bool] = []

    async def handler(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
        seen.append(gc.isenabled())
        parse_json(raw)  # as every verb does first: the bad body's 400
        if outcome == "refusal":
            raise HTTPProblem(422, "no")
        if outcome == "bug":
            raise RuntimeError("a bug")
        return Answer({"Error": ""})

    dispatch = VerbDispatch(app, prefix="/scheduler", verbs={"filter": handler})
    assert gc.isenabled()
    answered, _ = call(dispatch, app, b"{not json" if outcome == "bad body" else b"{}")
    assert answered == status
    assert seen == [False]
    assert gc.isenabled()


def test_a_verb_answered_while_the_collector_is_off_leaves_it_off(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("")
    app = create_app(Settings(policies=str(tmp_path / "p.yaml"), cluster="off", allow_empty_policies=True))

    async def handler(raw: bytes, deadline: Deadline, state: ServerState) -> Answer:
        return Answer({"Error": ""})

    dispatch = VerbDispatch(app, prefix="/scheduler", verbs={"filter": handler})
    gc.disable()
    try:
        assert call(dispatch, app, b"{}")[0] == 200
        assert not gc.isenabled(), "someone else paused it: theirs to resume"
    finally:
        gc.enable()
