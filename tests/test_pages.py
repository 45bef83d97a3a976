"""HTML pages and the lesson/quiz/exercise-listing API, checked against the YAML sources.

Expectations come from the YAML files (plain PyYAML) and the UI catalogs (app.i18n.gettext);
pages are parsed with a small html.parser tree builder.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from markupsafe import escape

from app.i18n import gettext
from gradlab.config import LOCALES, PROJECT_ROOT, Settings
from tests.conftest import csrf_token

FIXTURES = Path(__file__).parent / "fixtures"
LESSONS = PROJECT_ROOT / "lessons"
LESSON = "gradient-accumulation"
LESSON_URL = "/{locale}/lessons/" + LESSON


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


COURSE = read_yaml(LESSONS / "course.yaml")
SPEC = read_yaml(LESSONS / LESSON / "lesson.yaml")
TEXTS = {loc: read_yaml(LESSONS / LESSON / f"{loc}.yaml") for loc in LOCALES}
NOTICE = "Parts of this lesson are not translated yet and are shown in English."
QUIZ = next(s for s in SPEC["sections"] if s["kind"] == "quiz")


# --- a tiny HTML tree --------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list["Node | str"] = field(default_factory=list)

    def iter(self) -> Iterator["Node"]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(
        self, tag: str | None = None, cls: str | None = None, **attrs: str
    ) -> list["Node"]:
        return [
            node
            for node in self.iter()
            if node is not self
            and (tag is None or node.tag == tag)
            and (cls is None or cls in (node.attrs.get("class") or "").split())
            and all(node.attrs.get(name.replace("_", "-")) == v for name, v in attrs.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> "Node":
        found = self.find_all(tag, cls, **attrs)
        assert len(found) == 1, f"expected one <{tag} class={cls} {attrs}>, found {len(found)}"
        return found[0]

    def by_id(self, element_id: str) -> "Node":
        return self.find(id=element_id)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def words(self) -> str:
        """The text with runs of whitespace collapsed."""
        return " ".join(self.text.split())

    def marked_untranslated(self) -> bool:
        return "data-untranslated" in self.attrs


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


def plain(markdown: str) -> str:
    """Markdown source as the reader sees its text (for the inline markup the lessons use)."""
    return " ".join(markdown.replace("**", "").replace("`", "").split())


def first_paragraph(markdown: str) -> str:
    return plain(markdown.strip().split("\n\n")[0])


def get_page(client: TestClient, url: str) -> tuple[str, Node]:
    response = client.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    return response.text, parse(response.text)


# --- the real lesson in every locale ---------------------------------------------------------


@pytest.fixture(scope="module")
def lesson_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Node]]:
    """The lesson page in every locale, fetched once: the same app as the `client` fixture's,
    built once per module because these tests only read."""
    from app.main import create_app

    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), content_dir=LESSONS,
                        secret_key="test-secret")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        return {loc: get_page(client, LESSON_URL.format(locale=loc)) for loc in LOCALES}


@pytest.fixture(params=LOCALES)
def lesson_page(
    request: pytest.FixtureRequest, lesson_pages: dict[str, tuple[str, Node]]
) -> tuple[str, str, Node]:
    locale = request.param
    html, doc = lesson_pages[locale]
    return locale, html, doc


def test_lesson_page_language(lesson_page: tuple[str, str, Node]) -> None:
    locale, html, doc = lesson_page
    assert f'<html lang="{locale}">' in html
    assert doc.find("html").attrs["lang"] == locale
    assert doc.find("h1").text == TEXTS[locale]["title"]
    assert doc.find("title").text.startswith(TEXTS[locale]["title"])


def test_lesson_page_sections_in_order(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    ids = [s["id"] for s in SPEC["sections"]]
    for section_id in ids:
        section = doc.by_id(section_id)
        assert section.tag == "section"
        title = TEXTS[locale]["sections"][section_id]["title"]
        assert section.find("h2").text == title
    rendered = [node.attrs["id"] for node in doc.find_all("section", cls="section")]
    assert rendered == ids


def test_lesson_page_code_blocks(lesson_page: tuple[str, str, Node]) -> None:
    _, _html, doc = lesson_page
    with_code = [s for s in SPEC["sections"] if s.get("code")]
    assert with_code, "the lesson has code blocks"
    for spec in with_code:
        # highlighted server-side (Pygments spans, escaped): the text is the code, exactly
        assert doc.by_id(spec["id"]).find("code", cls="language-python").text == spec["code"]
    assert len(doc.find_all("pre", cls="code")) == len(with_code)


def test_lesson_page_quiz_form(lesson_page: tuple[str, str, Node]) -> None:
    locale, _html, doc = lesson_page
    text = TEXTS[locale]["sections"][QUIZ["id"]]
    form = doc.by_id(QUIZ["id"]).find("form", cls="quiz")
    assert form.attrs["method"] == "post"
    assert form.attrs["action"] == f"/{locale}/lessons/{LESSON}/quiz"
    radios = form.find_all("input", type="radio")
    assert len(radios) == QUIZ["quiz"]["options"] == len(text["options"])
    assert [r.attrs["name"] for r in radios] == ["answer"] * len(radios)
    assert [r.attrs["value"] for r in radios] == [str(i) for i in range(len(radios))]
    assert [label.words for label in form.find_all("label")] == [
        plain(option) for option in text["options"]
    ]
    assert form.find("legend").words == plain(text["question"])
    # the answer key and the explanation stay on the server until an answer is sent
    assert first_paragraph(text["explanation"]) not in doc.words
    assert not doc.find_all(cls="quiz-outcome")


def test_lesson_page_recap(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    recap = next(s for s in SPEC["sections"] if s["kind"] == "recap")
    points = TEXTS[locale]["sections"][recap["id"]]["points"]
    items = doc.by_id(recap["id"]).find("ul", cls="recap").find_all("li")
    assert [li.words for li in items] == [plain(point) for point in points]


def test_lesson_page_faq(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    faq = doc.by_id("faq")
    assert faq.find("h2").text == gettext(locale, "Frequently asked questions")
    questions = [summary.text for summary in faq.find_all("summary")]
    assert questions == [TEXTS[locale]["faq"][key]["question"] for key in COURSE["faq"]]


def test_lesson_page_position_in_course(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    assert [entry["id"] for entry in COURSE["lessons"]].index(LESSON) == 1
    eyebrow = doc.find("p", cls="eyebrow").words
    assert gettext(locale, "Lesson %(n)s of %(m)s", n=2, m=4) in eyebrow


def test_lesson_page_lesson_list(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    nav = doc.find("aside", cls="course-nav")
    items = nav.find("ol", cls="lesson-list").find_all("li")
    titles = [entry["title"][locale] for entry in COURSE["lessons"]]
    assert len(items) == 4
    assert [(li.find_all("a") or li.find_all("span"))[0].text for li in items] == titles
    current = nav.find("li", aria_current="page")
    assert current.find("a").attrs["href"] == f"/{locale}/lessons/{LESSON}"
    for li, entry in zip(items, COURSE["lessons"], strict=True):
        assert li.find("a").attrs["href"] == f"/{locale}/lessons/{entry['id']}"
        assert gettext(locale, "coming soon") not in li.text


def test_lesson_page_locale_switcher(lesson_page: tuple[str, str, Node]) -> None:
    locale, _, doc = lesson_page
    nav = doc.find("nav", cls="locales")
    for other in LOCALES:
        link = nav.find("a", hreflang=other)
        assert link.attrs["href"] == f"/{other}/lessons/{LESSON}"
        assert link.attrs.get("lang") == other
        assert ("aria-current" in link.attrs) == (other == locale)
    assert len(nav.find_all("a")) == 4


def test_lesson_page_exercise_starter_code(lesson_page: tuple[str, str, Node]) -> None:
    locale, html, doc = lesson_page
    assert len(SPEC["exercises"]) == 3
    for exercise_spec in SPEC["exercises"]:
        english = LESSONS / LESSON / exercise_spec["starter"]
        # the starter with comments in the page's language (exercises/<locale>/<file>.py)
        localized = english if locale == "en" else english.parent / locale / english.name
        starter = localized.read_text(encoding="utf-8")
        assert (starter == english.read_text(encoding="utf-8")) == (locale == "en")
        section = doc.by_id(f"exercise-{exercise_spec['id']}")
        title = TEXTS[locale]["exercises"][exercise_spec["id"]]["title"]
        assert section.find("h2").text == gettext(locale, "Exercise: %(title)s", title=title)
        form = section.find("form", cls="submit-form")
        action = f"/{locale}/lessons/{LESSON}/exercises/{exercise_spec['id']}"
        assert form.attrs["action"] == action
        textarea = form.find("textarea", name="code")
        assert textarea.text == starter
        assert str(escape(starter)) in html
        hints = TEXTS[locale]["exercises"][exercise_spec["id"]]["hints"]
        assert len(section.find(cls="hints").find_all("details")) == len(hints) == 3


def test_lesson_page_is_fully_translated(lesson_page: tuple[str, str, Node]) -> None:
    locale, html, doc = lesson_page
    assert "data-untranslated" not in html
    assert not [node for node in doc.iter() if node.marked_untranslated()]
    assert not doc.find_all(cls="notice")
    assert not doc.find_all(cls="badge")
    assert gettext(locale, NOTICE) not in html


def test_lesson_page_remembers_the_locale(client: TestClient) -> None:
    response = client.get(LESSON_URL.format(locale="tr"))
    assert response.status_code == 200
    assert "gradlab_locale=tr" in response.headers["set-cookie"]
    assert client.cookies.get("gradlab_locale") == "tr"


# --- the partial fixture: English fallback on the page ---------------------------------------

PARTIAL = FIXTURES / "partial"
P_EN = read_yaml(PARTIAL / "warmup" / "en.yaml")
P_DE = read_yaml(PARTIAL / "warmup" / "de.yaml")


@pytest.fixture
def partial_client(tmp_path: Path) -> Iterator[TestClient]:
    from app.main import create_app

    settings = Settings(content_dir=PARTIAL, data_dir=tmp_path, secret_key="x")
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_partial_de_page_marks_exactly_the_english_parts(partial_client: TestClient) -> None:
    html, doc = get_page(partial_client, "/de/lessons/warmup")
    assert '<html lang="de">' in html
    assert doc.find("p", cls="notice").words == " ".join(gettext("de", NOTICE).split())
    h1 = doc.find("h1")
    assert h1.text == P_DE["title"] and not h1.marked_untranslated()

    for section_id in ("schedule", "recap"):  # empty body / missing entirely
        section = doc.by_id(section_id)
        assert section.attrs.get("lang") == "en"
        assert section.marked_untranslated()
        assert section.find("h2").text == P_EN["sections"][section_id]["title"]
        badge = section.find("p", cls="badge")
        assert badge.text == gettext("de", "Not translated yet")
        assert badge.attrs["lang"] == "de"
    assert plain(P_EN["sections"]["schedule"]["body"]) in doc.by_id("schedule").words
    recap_points = [li.words for li in doc.by_id("recap").find_all("li")]
    assert recap_points == P_EN["sections"]["recap"]["points"]

    for section_id in ("why-warmup", "quick-check"):
        section = doc.by_id(section_id)
        assert "lang" not in section.attrs
        assert not section.marked_untranslated()
        assert not section.find_all(cls="badge")
        assert section.find("h2").text == P_DE["sections"][section_id]["title"]
    assert plain(P_DE["sections"]["why-warmup"]["body"]) in doc.by_id("why-warmup").words
    assert [label.words for label in doc.by_id("quick-check").find_all("label")] == (
        P_DE["sections"]["quick-check"]["options"]
    )

    faq = {d.find("summary").text: d for d in doc.by_id("faq").find_all("details")}
    assert list(faq) == [P_DE["faq"]["is-it-free"]["question"], P_EN["faq"]["how-long"]["question"]]
    translated, fallback = faq.values()
    assert not translated.marked_untranslated() and "lang" not in translated.attrs
    assert fallback.marked_untranslated() and fallback.attrs["lang"] == "en"

    exercise = doc.by_id("exercise-linear-warmup")
    assert exercise.marked_untranslated() and exercise.attrs["lang"] == "en"
    title = P_EN["exercises"]["linear-warmup"]["title"]
    assert exercise.find("h2").text == gettext("de", "Exercise: %(title)s", title=title)
    starter = (PARTIAL / "warmup" / "exercises" / "linear_warmup.py").read_text("utf-8")
    assert exercise.find("textarea").text == starter
    assert str(escape(starter)) in html  # `<`, `"` and `&` escaped

    marked = [node for node in doc.iter() if node.marked_untranslated()]
    assert [n.attrs.get("id") or n.tag for n in marked] == [
        "schedule", "recap", "exercise-linear-warmup", "details",
    ]  # fmt: skip
    assert html.count("data-untranslated") == 4


def test_partial_code_block_is_escaped(partial_client: TestClient) -> None:
    html, doc = get_page(partial_client, "/de/lessons/warmup")
    code = read_yaml(PARTIAL / "warmup" / "lesson.yaml")["sections"][0]["code"]
    assert "<" in code and "&" in code and '"' in code
    block = doc.by_id("why-warmup").find("code")
    assert block.text == code  # highlighted (Pygments spans), and every character escaped:
    assert code not in html and "&lt;" in html and "&amp;" in html


def test_partial_en_page_has_no_notice(partial_client: TestClient) -> None:
    html, doc = get_page(partial_client, "/en/lessons/warmup")
    assert "data-untranslated" not in html
    assert not doc.find_all(cls="notice")
    assert not doc.find_all(cls="badge")
    assert gettext("en", NOTICE) not in html


def test_partial_tr_page_is_fully_translated(partial_client: TestClient) -> None:
    html, doc = get_page(partial_client, "/tr/lessons/warmup")
    assert "data-untranslated" not in html
    assert not doc.find_all(cls="notice")
    assert doc.find("h1").text == "Öğrenme oranı ısınması"


def test_partial_es_page_is_english_everywhere(partial_client: TestClient) -> None:
    html, doc = get_page(partial_client, "/es/lessons/warmup")
    assert '<html lang="es">' in html
    assert doc.find("p", cls="notice").words == " ".join(gettext("es", NOTICE).split())
    h1 = doc.find("h1")
    assert h1.text == P_EN["title"] and h1.attrs["lang"] == "en" and h1.marked_untranslated()
    for spec in read_yaml(PARTIAL / "warmup" / "lesson.yaml")["sections"]:
        section = doc.by_id(spec["id"])
        assert section.marked_untranslated() and section.attrs["lang"] == "en"
    assert all(d.marked_untranslated() for d in doc.by_id("faq").find_all("details"))
    # the page chrome is still Spanish
    assert doc.by_id("faq").find("h2").text == gettext("es", "Frequently asked questions")


def test_partial_course_page_lists_coming_soon(partial_client: TestClient) -> None:
    _, doc = get_page(partial_client, "/de/")
    items = doc.find("ol", cls="lesson-list").find_all("li")
    assert len(items) == 2
    assert items[0].find("a").text == "Aufwärmen der Lernrate"
    assert items[0].find("a").attrs["href"] == "/de/lessons/warmup"
    assert not items[1].find_all("a")
    assert items[1].find("span").text == "Abklingen der Lernrate"
    assert gettext("de", "coming soon") in items[1].text


def test_partial_lesson_without_folder_is_404(partial_client: TestClient) -> None:
    assert partial_client.get("/de/lessons/decay").status_code == 404


# --- locale negotiation and errors -----------------------------------------------------------


def redirect_of(response: httpx.Response) -> str:
    assert response.status_code == 307
    return response.headers["location"]


@pytest.mark.parametrize(
    ("accept_language", "expected"),
    [
        (None, "/en/"),
        ("tr;q=0.4, de;q=0.9", "/de/"),
        ("de;q=0.9, tr;q=0.4", "/de/"),
        ("tr", "/tr/"),
        ("es-MX,es;q=0.9,en;q=0.8", "/es/"),
        ("fr-FR, fr;q=0.9, tr;q=0.3, de;q=0.2", "/tr/"),
        ("DE-at", "/de/"),
        ("de;q=0, tr;q=0.1", "/tr/"),
        ("de;q=0", "/en/"),  # q=0 means "not acceptable"
        ("es;q=abc, tr;q=0.2", "/tr/"),
        ("fr, ja", "/en/"),
        ("tr;q=0.5, es;q=0.5", "/tr/"),  # equal quality: first listed wins
    ],
)
def test_root_negotiates_accept_language(
    client: TestClient, accept_language: str | None, expected: str
) -> None:
    client.cookies.clear()
    headers = {"Accept-Language": accept_language} if accept_language else {}
    response = client.get("/", headers=headers, follow_redirects=False)
    assert redirect_of(response) == expected
    assert "Accept-Language" in response.headers["vary"]


def test_root_prefers_remembered_locale(client: TestClient) -> None:
    client.cookies.set("gradlab_locale", "tr")
    response = client.get("/", headers={"Accept-Language": "de"}, follow_redirects=False)
    assert redirect_of(response) == "/tr/"


def test_root_ignores_unknown_cookie_locale(client: TestClient) -> None:
    client.cookies.set("gradlab_locale", "fr")
    response = client.get("/", headers={"Accept-Language": "es"}, follow_redirects=False)
    assert redirect_of(response) == "/es/"


def test_visiting_a_locale_is_remembered_by_root(client: TestClient) -> None:
    assert client.get("/de/").status_code == 200
    response = client.get("/", headers={"Accept-Language": "tr"}, follow_redirects=False)
    assert redirect_of(response) == "/de/"


@pytest.mark.parametrize("url", ["/fr/", "/fr/lessons/" + LESSON, "/EN/", "/english/"])
def test_unknown_locale_is_404(client: TestClient, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert gettext("en", "Page not found") in response.text


def test_unknown_locale_404_page_speaks_the_negotiated_language(client: TestClient) -> None:
    client.cookies.clear()
    response = client.get("/fr/", headers={"Accept-Language": "fr, de;q=0.5"})
    assert response.status_code == 404
    doc = parse(response.text)
    assert doc.find("html").attrs["lang"] == "de"
    assert doc.find("h1").text == gettext("de", "Page not found")


@pytest.mark.parametrize("locale", LOCALES)
def test_unknown_lesson_is_404_page(client: TestClient, locale: str) -> None:
    for lesson in ("no-such-lesson", "Gradient-Accumulation"):
        response = client.get(f"/{locale}/lessons/{lesson}")
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("text/html")
        doc = parse(response.text)
        assert doc.find("html").attrs["lang"] == locale
        assert doc.find("h1").text == gettext(locale, "Page not found")
        assert doc.find("main").find("a").attrs["href"] == f"/{locale}/"


@pytest.mark.parametrize("locale", LOCALES)
def test_course_page_lists_lessons(client: TestClient, locale: str) -> None:
    html, doc = get_page(client, f"/{locale}/")
    assert f'<html lang="{locale}">' in html
    items = doc.find("ol", cls="lesson-list").find_all("li")
    titles = [entry["title"][locale] for entry in COURSE["lessons"]]
    assert [(li.find_all("a") or li.find_all("span"))[0].text for li in items] == titles
    links = doc.find("ol", cls="lesson-list").find_all("a")
    assert [a.attrs["href"] for a in links] == [
        f"/{locale}/lessons/{entry['id']}" for entry in COURSE["lessons"]
    ]
    nav = doc.find("nav", cls="locales")
    assert {a.attrs["hreflang"]: a.attrs["href"] for a in nav.find_all("a")} == {
        loc: f"/{loc}/" for loc in LOCALES
    }


# --- the quick check ---------------------------------------------------------------------------


@pytest.mark.parametrize("locale", LOCALES)
def test_quiz_form_correct_answer_shows_explanation(client: TestClient, locale: str) -> None:
    answer = QUIZ["quiz"]["answer"]
    response = client.post(
        f"/{locale}/lessons/{LESSON}/quiz",
        data={"answer": str(answer), "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"/{locale}/lessons/{LESSON}?quiz=correct#quick-check"

    _, doc = get_page(client, response.headers["location"])
    outcome = doc.find("div", cls="quiz-outcome")
    assert "correct" in outcome.attrs["class"].split()
    assert gettext(locale, "Correct!") in outcome.text
    explanation = TEXTS[locale]["sections"][QUIZ["id"]]["explanation"]
    assert first_paragraph(explanation) in outcome.words


@pytest.mark.parametrize("locale", LOCALES)
def test_quiz_form_wrong_answer_hides_explanation(client: TestClient, locale: str) -> None:
    wrong = (QUIZ["quiz"]["answer"] + 1) % QUIZ["quiz"]["options"]
    response = client.post(
        f"/{locale}/lessons/{LESSON}/quiz",
        data={"answer": str(wrong), "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"/{locale}/lessons/{LESSON}?quiz=wrong#quick-check"

    _, doc = get_page(client, response.headers["location"])
    outcome = doc.find("div", cls="quiz-outcome")
    assert "wrong" in outcome.attrs["class"].split()
    assert gettext(locale, "Not quite. Try another answer.") in outcome.text
    explanation = TEXTS[locale]["sections"][QUIZ["id"]]["explanation"]
    assert first_paragraph(explanation) not in doc.words


def test_quiz_form_every_wrong_option(client: TestClient) -> None:
    for option in range(QUIZ["quiz"]["options"]):
        response = client.post(
            f"/en/lessons/{LESSON}/quiz",
            data={"answer": str(option), "csrf_token": csrf_token(client)},
            follow_redirects=False,
        )
        expected = "correct" if option == QUIZ["quiz"]["answer"] else "wrong"
        assert f"?quiz={expected}#" in response.headers["location"]


def test_unknown_quiz_outcome_is_ignored(client: TestClient) -> None:
    _, doc = get_page(client, f"/en/lessons/{LESSON}?quiz=maybe")
    assert not doc.find_all(cls="quiz-outcome")


@pytest.mark.parametrize("answer", [QUIZ["quiz"]["options"], 99, -1])
def test_quiz_api_rejects_out_of_range_answer(client: TestClient, answer: int) -> None:
    response = client.post(
        f"/api/v1/lessons/{LESSON}/quiz", json={"answer": answer, "locale": "de"}
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")


def test_quiz_form_rejects_out_of_range_answer(client: TestClient) -> None:
    response = client.post(
        f"/de/lessons/{LESSON}/quiz",
        data={"answer": str(QUIZ["quiz"]["options"]), "csrf_token": csrf_token(client)},
        follow_redirects=False,
    )
    assert response.status_code == 422


@pytest.mark.parametrize("locale", LOCALES)
def test_quiz_api_checks_the_answer(client: TestClient, locale: str) -> None:
    url = f"/api/v1/lessons/{LESSON}/quiz"
    explanation = TEXTS[locale]["sections"][QUIZ["id"]]["explanation"].strip()
    right = client.post(url, json={"answer": QUIZ["quiz"]["answer"], "locale": locale})
    assert right.status_code == 200
    assert right.json() == {"correct": True, "explanation": explanation}
    wrong = client.post(url, json={"answer": (QUIZ["quiz"]["answer"] + 1) % 4, "locale": locale})
    assert wrong.status_code == 200
    assert wrong.json()["correct"] is False


def test_quiz_api_unknown_lesson_is_404(client: TestClient) -> None:
    response = client.post("/api/v1/lessons/no-such-lesson/quiz", json={"answer": 0})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")


# --- API listings ------------------------------------------------------------------------------


def test_api_lessons_in_german(client: TestClient) -> None:
    response = client.get("/api/v1/lessons", params={"locale": "de"})
    assert response.status_code == 200
    body = response.json()
    assert body["locale"] == "de"
    assert body["course"] == COURSE["id"]
    assert [item["id"] for item in body["items"]] == [e["id"] for e in COURSE["lessons"]]
    assert [item["title"] for item in body["items"]] == [
        e["title"]["de"] for e in COURSE["lessons"]
    ]
    assert "Gradientenakkumulation für große Batches" in [i["title"] for i in body["items"]]
    assert [item["number"] for item in body["items"]] == [1, 2, 3, 4]
    assert all(item["available"] for item in body["items"])
    for item in body["items"]:
        assert item["url"] == f"/de/lessons/{item['id']}"
        assert item["fully_translated"] is True and 4 <= item["reading_minutes"] <= 12
        assert item["subtitle"]


def test_api_lessons_default_and_unknown_locale(client: TestClient) -> None:
    english = client.get("/api/v1/lessons").json()
    assert english["locale"] == "en"
    assert [item["title"] for item in english["items"]] == [
        e["title"]["en"] for e in COURSE["lessons"]
    ]
    assert client.get("/api/v1/lessons", params={"locale": "fr"}).status_code == 422


def test_api_exercises(client: TestClient) -> None:
    response = client.get("/api/v1/exercises")
    assert response.status_code == 200
    items = {item["id"]: item for item in response.json()["items"]}
    item = items["gradient-accumulation/accumulate"]
    assert (item["lesson"], item["exercise"]) == (LESSON, "accumulate")
    starter = (LESSONS / LESSON / "exercises" / "accumulate.py").read_text(encoding="utf-8")
    assert item["starter_code"] == starter
    assert re.fullmatch(r"auto|cpu|cuda", item["device"])
