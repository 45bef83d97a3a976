"""The feedback view and the page hardening around it: the weights chart (grader evidence and
its SVG), the hint ladder's markup, server-side highlighting and the Content-Security-Policy."""

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.charts import MAX_MICROBATCHES, weights_chart
from app.i18n import gettext, translations
from app.rendering import highlight_block, markdown
from app.security_headers import policy
from app.templating import env
from gradlab.config import LOCALES, PROJECT_ROOT, Settings
from gradlab.content.loader import Content
from gradlab.results import GradeResult
from tests.conftest import csrf_token
from worker.grading import grade
from worker.pool import run_in_sandbox

CORPUS = Path(__file__).parent / "corpus"
TEMPLATES = PROJECT_ROOT / "templates"
LESSON_URL = "/{locale}/lessons/gradient-accumulation"
RESULT_KEYS = {"status", "score", "error", "diagnosis", "checks", "notes", "output", "device",
               "timings", "locale"}  # fmt: skip


# --- the grader's evidence -----------------------------------------------------------------


@pytest.fixture(scope="module")
def grading_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(data_dir=tmp_path_factory.mktemp("data"), max_wall_s=15, device="cpu")


def _grade(settings: Settings, content: Content, exercise: str, file: str) -> GradeResult:
    code = (CORPUS / exercise.split("/")[1] / file).read_text(encoding="utf-8")
    return grade(
        content=content,
        settings=settings,
        exercise=exercise,
        code=code,
        locale="en",
        runner=run_in_sandbox,
    )


def test_unscaled_loss_weights_are_four_times_the_expected(
    grading_settings: Settings, content: Content
) -> None:
    result = _grade(grading_settings, content, "gradient-accumulation/accumulate", "unscaled.py")
    assert set(result.model_dump()) == RESULT_KEYS  # the contract's keys (notes: additive)
    assert result.diagnosis is not None and result.diagnosis.code == "loss_not_scaled"
    weights = result.diagnosis.evidence["weights"]
    assert set(weights) == {"steps", "expected"}
    steps, expected = weights["steps"], weights["expected"]
    assert len(steps) == len(expected) >= 2
    for mine, right in zip(steps, expected, strict=True):
        assert len(mine) == len(right) <= MAX_MICROBATCHES
        assert sum(right) == pytest.approx(1.0)
        assert mine == pytest.approx([4 * w for w in right], abs=1e-3)
    # the message is formatted from the other evidence keys, as before
    assert result.diagnosis.evidence["ratio"] == 4.0


@pytest.mark.parametrize(
    ("exercise", "file", "code", "pattern"),
    [
        # only the last micro-batch of each window reaches the step
        ("accumulate", "zero_every_microbatch.py", "zeroed_every_microbatch", "last"),
        # the second step still carries the first window's micro-batches
        ("accumulate", "never_cleared.py", "grads_never_cleared", "leak"),
        # the partial window is divided by accum_steps: its weights are too small
        ("last-partial-cycle", "misscaled.py", "partial_cycle_misscaled", "small"),
    ],
)
def test_weight_patterns_of_known_mistakes(
    grading_settings: Settings, content: Content, exercise: str, file: str, code: str, pattern: str
) -> None:
    result = _grade(grading_settings, content, f"gradient-accumulation/{exercise}", file)
    assert result.diagnosis is not None and result.diagnosis.code == code
    steps = result.diagnosis.evidence["weights"]["steps"]
    expected = result.diagnosis.evidence["weights"]["expected"]
    if pattern == "last":
        for mine, right in zip(steps, expected, strict=True):
            used = [j for j, w in enumerate(mine) if abs(w) > 1e-6]
            assert used == [max(j for j, w in enumerate(right) if w > 0)]
    elif pattern == "leak":
        first_window = [j for j, w in enumerate(expected[0]) if w > 0]
        assert all(steps[1][j] > 0.1 for j in first_window)
    else:
        assert sum(steps[-1]) < sum(expected[-1]) - 0.1


def test_a_passed_result_carries_no_chart(grading_settings: Settings, content: Content) -> None:
    result = _grade(grading_settings, content, "gradient-accumulation/accumulate", "canonical.py")
    assert result.status == "passed" and result.diagnosis is None


# --- the chart -------------------------------------------------------------------------------

FOUR_X = {
    "steps": [[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]],
    "expected": [
        [0.25, 0.25, 0.25, 0.25, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.25, 0.25, 0.25, 0.25],
    ],
}


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {},
        {"steps": [[1.0]], "expected": [[1.0, 0.0]]},
        {"steps": [[float("nan")]], "expected": [[1.0]]},
        {"steps": [["1"]], "expected": [[1.0]]},
        {"steps": [[0.0] * (MAX_MICROBATCHES + 1)], "expected": [[0.0] * (MAX_MICROBATCHES + 1)]},
    ],
)
def test_chart_rejects_malformed_evidence(bad: Any) -> None:
    assert weights_chart(bad) is None


def test_chart_geometry() -> None:
    chart = weights_chart(FOUR_X)
    assert chart is not None and len(chart.rows) == 2 and chart.microbatches == 8
    tall = chart.rows[0].yours[0]
    short = chart.rows[0].correct[0]
    assert tall.height == pytest.approx(4 * short.height, rel=0.02)
    assert chart.rows[0].yours[5].height == 0  # micro-batch 6 is not in step 1


def _render_result(locale: str, result: dict[str, Any]) -> str:
    submission = {"id": "abc123", "status": result["status"], "result": result}
    return env.get_template("_result.html").render(
        locale=locale, translations=translations(locale), submission=submission
    )


def _failed_result(locale: str) -> dict[str, Any]:
    return {
        "status": "failed",
        "score": 0.4,
        "error": None,
        "diagnosis": {
            "code": "loss_not_scaled",
            "message": "<b>divide</b>",
            "evidence": {"scenario": 1, "ratio": 4.0, "accum_steps": 4, "weights": FOUR_X},
        },
        "checks": [
            {"id": "runs", "passed": True, "points": 1.0, "max_points": 1.0, "message": "ran"},
            {"id": "gradients", "passed": False, "points": 0.0, "max_points": 2.0, "message": "x"},
        ],
        "output": {"stdout": "hi", "stderr": "", "truncated": True},
        "device": "cpu",
        "timings": {"queued_s": 0.1, "run_s": 0.5, "total_s": 0.6},
        "locale": locale,
    }


@pytest.mark.parametrize("locale", LOCALES)
def test_result_fragment_draws_an_accessible_chart(locale: str) -> None:
    html = _render_result(locale, _failed_result(locale))
    svg = re.search(r"<svg.*?</svg>", html, re.S)
    assert svg is not None
    assert 'role="img"' in svg.group(0)
    assert 'aria-labelledby="weights-abc123-title weights-abc123-desc"' in svg.group(0)
    title = gettext(locale, "Weight of each micro-batch in each optimizer step")
    assert f'<title id="weights-abc123-title">{title}</title>' in svg.group(0)
    assert '<desc id="weights-abc123-desc">' in svg.group(0)
    assert gettext(locale, "Micro-batch") in svg.group(0)  # localized axis label
    assert " style=" not in html and "<style" not in html and "<script" not in html
    assert svg.group(0).count('class="bar-yours"') == 2 * 8 + 1  # + the legend swatch
    # the same numbers as a table for screen readers: one row per step
    table = re.search(r'<div class="visually-hidden"><table>.*?</table></div>', html, re.S)
    assert table is not None and table.group(0).count('<th scope="row">') == 2
    assert "&lt;b&gt;divide&lt;/b&gt;" in html  # messages are text
    assert gettext(locale, "Output was cut short.") in html
    assert html.count('class="visually-hidden"') >= 3  # passed/failed words on the checks


def test_error_line_is_marked_for_the_editor() -> None:
    result = _failed_result("en") | {
        "status": "error",
        "diagnosis": None,
        "error": {"kind": "syntax_error", "message": "invalid syntax", "line": 7},
    }
    html = _render_result("en", result)
    assert '<span class="error-line" data-line="7">line 7</span>' in html
    assert "<svg" not in html


def test_pending_result_is_busy() -> None:
    html = env.get_template("_result.html").render(
        locale="en",
        translations=translations("en"),
        submission={"id": "q", "status": "queued", "result": None},
    )
    assert 'aria-busy="true"' in html and 'class="spinner"' in html


# --- the lesson page: hints, highlighting, CSP ---------------------------------------------


@pytest.mark.parametrize("locale", LOCALES)
def test_hint_ladder_markup(client: TestClient, locale: str) -> None:
    html = client.get(LESSON_URL.format(locale=locale)).text
    ladder = re.search(r'<div class="hints" id="hints-accumulate".*?</div>', html, re.S)
    assert ladder is not None
    block = ladder.group(0)
    assert 'data-hint-ladder="gradient-accumulation/accumulate"' in block
    assert f'data-label-first="{gettext(locale, "Show a hint")}"' in block
    assert f'data-label-next="{gettext(locale, "Next hint")}"' in block
    # without JavaScript: one <details> per hint; the ladder's button waits for the script
    assert block.count("<details>") == 3
    assert gettext(locale, "Hint %(n)s of %(m)s", n=1, m=3) in block
    assert re.search(r'<button type="button" class="secondary hint-next" hidden>', block)


def test_lesson_code_is_highlighted(client: TestClient) -> None:
    html = client.get(LESSON_URL.format(locale="en")).text
    pattern = r'<pre class="code highlight"><code class="language-python">(.*?)</code>'
    blocks = re.findall(pattern, html, re.S)
    assert blocks and all('<span class="' in b for b in blocks)
    assert re.search(
        r'<link rel="stylesheet" href="/static/css/highlight\.[0-9a-f]{12}\.css">', html
    )


def test_highlighting_escapes_and_uses_classes_only() -> None:
    out = str(highlight_block('x = "<script>" & 1  # done\n'))
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp;" in out
    assert 'class="s2"' in out and 'class="c1"' in out and "style=" not in out
    fenced = str(markdown("```python\nfor i in range(2):\n    pass\n```\n\n```\n<i>\n```"))
    assert '<code class="language-python"><span class="k">for</span>' in fenced
    assert "<pre><code>&lt;i&gt;\n</code></pre>" in fenced  # no language: plain and escaped


def _contrast(a: str, b: str) -> float:
    def lum(color: str) -> float:
        channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_highlight_stylesheet_is_readable_light_and_dark() -> None:
    css = (PROJECT_ROOT / "static" / "css" / "highlight.css").read_text(encoding="utf-8")
    light, dark = css.split("@media (prefers-color-scheme: dark)")
    for part in (light, dark):
        background = re.search(r"background: (#[0-9a-f]{6})", part).group(1)  # type: ignore[union-attr]
        colors = re.findall(r"(?<!-)color: (#[0-9a-f]{6})", part)
        assert len(colors) > 20
        assert min(_contrast(c, background) for c in colors) >= 4.5


@pytest.mark.parametrize(
    "url",
    ["/en/", LESSON_URL.format(locale="tr"), "/de/no-such-page", "/translations"],
)
def test_html_pages_carry_the_csp(client: TestClient, url: str) -> None:
    response = client.get(url)
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([A-Za-z0-9_-]+)'", csp)
    assert nonce is not None and csp == policy(nonce.group(1))
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ):
        assert directive in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "strict-origin-when-cross-origin"


def test_the_nonce_is_fresh_and_only_on_the_editor_script(client: TestClient) -> None:
    first = client.get(LESSON_URL.format(locale="en"))
    second = client.get(LESSON_URL.format(locale="en"))
    nonces = [re.search(r"'nonce-([^']+)'", r.headers["content-security-policy"]).group(1)  # type: ignore[union-attr]
              for r in (first, second)]  # fmt: skip
    assert nonces[0] != nonces[1] and len(nonces[0]) >= 22
    assert first.text.count(f'nonce="{nonces[0]}"') == 1
    editor_script = (
        rf'<script src="/static/js/exercise\.[0-9a-f]{{12}}\.js" defer nonce="{nonces[0]}">'
    )
    assert re.search(editor_script, first.text)


def test_submission_page_carries_the_csp(client: TestClient) -> None:
    response = client.post(
        "/en/lessons/gradient-accumulation/exercises/accumulate",
        data={"code": "print(1)\n", "csrf_token": csrf_token(client)},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 202
    page = client.get(response.json()["url"])
    assert "script-src 'self'" in page.headers["content-security-policy"]
    fragment = client.get(response.json()["fragment_url"])
    assert "content-security-policy" in fragment.headers


def test_api_responses_are_not_sniffed(client: TestClient) -> None:
    response = client.get("/api/v1/exercises")
    assert response.headers["x-content-type-options"] == "nosniff"


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline <script>"),
    (re.compile(r"<style\b", re.I), "<style> element"),
    (re.compile(r"\sstyle\s*=", re.I), "style= attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "on…= event handler"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
]


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda p: p.name)
def test_templates_have_nothing_inline(template: Path) -> None:
    text = template.read_text(encoding="utf-8")
    for pattern, what in INLINE:
        assert not pattern.search(text), f"{template.name}: {what}"
