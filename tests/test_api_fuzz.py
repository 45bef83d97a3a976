"""Schemathesis against /openapi.json, in process (ASGI), with a grader token: no request the
schema allows, or nearly allows, gets a 5xx; the submissions API also answers with the status
codes, headers and bodies its schema documents. Bounded: a few examples per operation."""

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlmodel import Session

from gradlab import tokens
from gradlab.config import Settings

MAX_EXAMPLES = 15
BUDGET_S = 45.0  # the whole run; CI's budget is 60 s
OWN = ("/api/v1/submissions",)  # documented fully (app/routes/submissions.py)
_started: list[float] = []


def _target() -> tuple[object, dict[str, str], Path]:
    """The app (its database in a temporary directory) and a grader token's header; built at
    import, because the schema parametrizes the test at collection."""
    from app.main import create_app

    data_dir = Path(tempfile.mkdtemp(prefix="gradlab-fuzz-"))
    settings = Settings(
        data_dir=data_dir,
        secret_key="fuzz-secret",
        login_rate_limit=1000,
        submission_rate_limit=10_000,
        grader_rate_limit=10_000,
        content_reload_s=0,
    )
    app = create_app(settings)
    with Session(app.state.engine) as session:
        grader = tokens.create(session=session, name="fuzz")
    return app, {"Authorization": f"Bearer {grader.token}"}, data_dir


APP, HEADERS, DATA_DIR = _target()
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).include(path_regex="^/api/")


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    APP.state.engine.dispose()  # type: ignore[attr-defined]
    shutil.rmtree(DATA_DIR, ignore_errors=True)


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same cases every run: CI failures reproduce
    phases=[Phase.explicit, Phase.generate],  # no shrinking: it would blow the time budget
    suppress_health_check=list(HealthCheck),
)
def test_api_never_answers_5xx(case: schemathesis.Case) -> None:
    if not _started:
        _started.append(time.monotonic())
    if time.monotonic() - _started[0] > BUDGET_S:
        pytest.skip("fuzzing time budget spent")
    if case.query and "wait" in case.query:
        case.query["wait"] = 0  # a valid wait holds the request up to 60 s: not the point here
    own = case.path.startswith(OWN)
    checks = [not_a_server_error]
    if own:
        checks += [
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
        ]
    case.call_and_validate(headers={**(case.headers or {}), **HEADERS}, checks=checks)
