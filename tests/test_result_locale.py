"""A result is shown in the reader's language: its messages keep their source (`i18n`) and are
written again in the page's locale (or the API's `?locale=`), numbers in that locale's format;
old results keep their stored text; the BatchNorm note is a note, not a check."""

import html
import json
import re
from pathlib import Path
from typing import Any, get_args

from fastapi.testclient import TestClient
from sqlmodel import Session

from app.submissions.schemas import Locale
from gradlab import queue
from gradlab.config import LOCALES, Settings
from gradlab.content.loader import Content
from gradlab.models import Submission
from gradlab.result_text import localize_result
from gradlab.results import Check, GradeResult
from worker.graders.kit import Finding, Texts, make_check, make_note, runs_check
from worker.grading import grade, platform_error
from worker.pool import run_in_sandbox

ACCUMULATE = "gradient-accumulation/accumulate"
CORPUS = Path(__file__).parent / "corpus" / "accumulate"


def _es_result(content: Content) -> GradeResult:
    """A failed result written by the grader's own texts in Spanish."""
    texts = Texts(content=content, exercise=ACCUMULATE, locale="es")
    checks = [
        runs_check(texts),
        make_check(
            "gradients",
            passed=False,
            points=2.0,
            message=texts.check("gradients.bad", {"scenario": 1, "error": 0.0065}),
        ),
    ]
    finding = Finding("loss_not_scaled", {"ratio": 4.0, "accum_steps": 4}, 1)
    return GradeResult.from_checks(checks, diagnosis=texts.diagnosis(finding), locale="es")


def _store(client: TestClient, result: GradeResult | dict[str, Any]) -> str:
    """Submit as the client's learner and play the worker that stores `result` (a dict: a
    result as an older worker stored it, written into the row as it is)."""
    item = {"exercise": ACCUMULATE, "code": "x", "locale": "es"}
    sent = client.post("/api/v1/submissions", json=item).json()
    with Session(client.app.state.engine) as session:  # type: ignore[attr-defined]
        job = queue.claim(session=session, worker_id="test", lease_s=30, max_attempts=3)
        assert job is not None
        graded = result if isinstance(result, GradeResult) else GradeResult.model_validate(result)
        assert queue.finish(session=session, job_id=job.job_id, worker_id="test", result=graded)
        if isinstance(result, dict):
            submission = session.get(Submission, sent["id"])
            assert submission is not None
            submission.result_json = json.dumps(result)
            session.add(submission)
            session.commit()
    return sent["id"]


def _messages(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", page))


def test_the_api_locale_type_is_the_sites_locales() -> None:
    assert set(get_args(Locale)) == set(LOCALES)


def test_a_spanish_result_on_the_german_page_is_german(
    client: TestClient, content: Content
) -> None:
    sent = _store(client, _es_result(content))
    for url in (f"/de/submissions/{sent}", f"/de/submissions/{sent}?fragment=1"):
        page = _messages(client.get(url).text)
        assert "Szenario 1: Die Gradienten weichen von der Full-Batch-Referenz ab" in page
        assert "(relativer Unterschied 0,0065)" in page  # German number format
        assert "Der Loss wird nie durch accum_steps geteilt" in page and "4,0-mal" in page
        assert "Dein Code lief in jedem Szenario ohne Fehler." in page  # a platform message
        assert "diferencia relativa" not in page and "Escenario" not in page
    english = _messages(client.get(f"/en/submissions/{sent}?fragment=1").text)
    assert "(relative difference 0.0065)" in english
    assert "4.0" in english and "Szenario" not in english
    spanish = _messages(client.get(f"/es/submissions/{sent}?fragment=1").text)
    assert "(diferencia relativa 0,0065)" in spanish  # as stored


def test_the_api_writes_messages_in_the_requested_locale(
    client: TestClient, content: Content
) -> None:
    sent = _store(client, _es_result(content))
    stored = client.get(f"/api/v1/submissions/{sent}").json()
    assert stored["locale"] == stored["result"]["locale"] == "es"
    assert "diferencia relativa 0,0065" in stored["result"]["checks"][1]["message"]
    german = client.get(f"/api/v1/submissions/{sent}?locale=de").json()
    assert german["locale"] == "es"  # the submission's own, unchanged
    result = german["result"]
    assert result["locale"] == "de"
    assert "relativer Unterschied 0,0065" in result["checks"][1]["message"]
    assert "4,0-mal" in result["diagnosis"]["message"]
    assert result["checks"][1]["i18n"] == {
        "group": "checks",
        "key": "gradients.bad",
        "values": {"scenario": 1, "error": 0.0065},
        "detail": None,
    }
    listed = client.get("/api/v1/submissions?locale=tr").json()["items"][0]["result"]
    assert listed["locale"] == "tr" and "0,0065" in listed["checks"][1]["message"]
    assert "Senaryo" in listed["checks"][1]["message"]
    for url in (f"/api/v1/submissions/{sent}?locale=xx", "/api/v1/submissions?locale=EN"):
        assert client.get(url).status_code == 422


def test_results_without_sources_keep_their_stored_text(client: TestClient) -> None:
    old = GradeResult.from_checks(
        [
            Check(id="runs", passed=True, points=1, max_points=1, message="Tu código se ejecutó."),
            Check(id="gradients", passed=False, points=0, max_points=2, message="diferencia 0.5"),
        ],
        locale="es",
    ).model_dump()
    for check in old["checks"]:
        del check["i18n"]  # as stored before sources existed
    del old["notes"]
    sent = _store(client, old)
    page = _messages(client.get(f"/de/submissions/{sent}?fragment=1").text)
    assert "Tu código se ejecutó." in page and "diferencia 0.5" in page
    result = client.get(f"/api/v1/submissions/{sent}?locale=de").json()["result"]
    assert result["locale"] == "es"  # nothing could be written in German
    assert [c["message"] for c in result["checks"]] == ["Tu código se ejecutó.", "diferencia 0.5"]


def test_a_source_that_does_not_fit_keeps_the_stored_text(content: Content) -> None:
    def check(source: Any) -> dict[str, Any]:
        return {"id": "gradients", "passed": False, "points": 0, "max_points": 2,
                "message": "stored", "i18n": source}  # fmt: skip

    sources = [
        {"group": "checks", "key": "gradients.gone", "values": {}},  # unknown key
        {"group": "templates", "key": "gradients.bad", "values": {}},  # unknown group
        {"group": "checks", "key": "gradients.bad", "values": {"scenario": 1}},  # a value short
        {"group": "checks", "key": "gradients.bad", "values": {"scenario": [1], "error": 1.0}},
        {"group": "platform", "key": "error.timeout", "values": {"limit": {"x": 1}}},
        "gradients.bad",
    ]
    result = {"status": "failed", "locale": "es", "checks": [check(s) for s in sources]}
    shown = localize_result(result, content=content, exercise=ACCUMULATE, locale="de")
    assert [c["message"] for c in shown["checks"]] == ["stored"] * len(sources)
    assert shown["locale"] == "es" and result["checks"][0]["message"] == "stored"
    # values are data: a format string among them is shown as it is, never formatted
    values = {"scenario": "{error.__class__}", "error": 0.25}
    data = {"group": "checks", "key": "gradients.bad", "values": values}
    shown = localize_result(
        {"status": "failed", "locale": "es", "checks": [check(data)]},
        content=content,
        exercise=ACCUMULATE,
        locale="en",
    )
    assert shown["checks"][0]["message"] == (
        "Scenario {error.__class__}: the gradients differ from the full-batch reference "
        "(relative difference 0.25)."
    )


def test_platform_errors_are_written_again_with_their_detail(content: Content) -> None:
    error = platform_error("memory_limit", "es", "error.memory_limit", detail="Trace", limit=512)
    timeout = platform_error("timeout", "es", "error.timeout", limit=7.5)
    assert timeout.message.startswith("Tu código no terminó en 7,5 segundos.")
    for stored, expected in (
        (error, "Dein Code hat mehr als die erlaubten 512 MB Speicher belegt.\n\nTrace"),
        (timeout, "Dein Code ist nicht innerhalb von 7,5 Sekunden fertig geworden."),
    ):
        result = GradeResult.failure(stored, locale="es").model_dump()
        shown = localize_result(result, content=content, exercise=ACCUMULATE, locale="de")
        assert shown["error"]["message"].startswith(expected)
        assert shown["locale"] == "de"


def test_the_batchnorm_note_is_a_note_not_a_check(client: TestClient, content: Content) -> None:
    texts = Texts(content=content, exercise=ACCUMULATE, locale="es")
    note = make_note("batchnorm_note", texts.check("batchnorm.note", {"error": 37}))
    passed = GradeResult.from_checks([runs_check(texts)], notes=[note], locale="es")
    assert passed.status == "passed" and passed.score == 1.0
    sent = _store(client, passed)
    page = client.get(f"/de/submissions/{sent}?fragment=1").text
    checks = page.split('<ul class="checks">', 1)[1].split("</ul>", 1)[0]
    assert "batchnorm" not in checks and "0/0" not in page
    notes = page.split('<ul class="result-notes">', 1)[1].split("</ul>", 1)[0]
    assert 'data-note="batchnorm_note"' in notes and "Hinweis:" in notes
    assert "um 37 % vom Full Batch ab" in _messages(notes)
    # a result stored when the note was a 0-point check shows it as a note all the same
    old = passed.model_dump()
    old["checks"].append({**old.pop("notes")[0], "passed": True, "points": 0, "max_points": 0})
    page = client.get(f"/es/submissions/{_store(client, old)}?fragment=1").text
    assert 'data-note="batchnorm_note"' in page and 'data-check="batchnorm_note"' not in page


def test_an_off_by_one_loop_reads_its_pattern(content: Content, tmp_path: Path) -> None:
    """The one real grading here: steps on the first micro-batch of each cycle."""
    result = grade(
        content=content,
        settings=Settings(data_dir=tmp_path / "data", max_wall_s=15, device="cpu"),
        exercise=ACCUMULATE,
        code=(CORPUS / "step_on_first.py").read_text(encoding="utf-8"),
        locale="es",
        runner=run_in_sandbox,
    )
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.code == "step_off_by_one", result
    assert diagnosis.i18n is not None
    observed, expected = diagnosis.i18n.values["observed"], diagnosis.i18n.values["expected"]
    # update by update, how many micro-batches each took in, next to a correct loop's
    assert re.fullmatch(r"\d+(, \d+)+", observed) and re.fullmatch(r"\d+(, \d+)+", expected)
    assert observed.count(",") == expected.count(",") and observed != expected
    assert f"reunieron {observed} micro-batches en lugar de {expected}." in diagnosis.message
    shown = localize_result(
        result.model_dump(mode="json"), content=content, exercise=ACCUMULATE, locale="en"
    )
    assert (
        f"counted update by update, they took in {observed} micro-batches instead of {expected}."
        in shown["diagnosis"]["message"]
    )
    assert shown["locale"] == "en"
    assert all(check["i18n"] is not None for check in shown["checks"])
