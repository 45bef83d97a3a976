"""Lesson 1's code runs as it is on the machine at hand (a CPU here, a GPU elsewhere), its full
pattern passes the exercise, and no page promises a GPU grader where there may be none.

Each snippet runs in a fresh namespace with warnings as errors: a hard-coded `"cuda"` then fails
on a CPU-only machine (`.cuda()` raises; autocast and GradScaler for "cuda" warn and switch
themselves off), and on any machine a call that names "cuda" itself fails the check. Names a
snippet reads without defining them (the reader's `model`, `loader`...) get small stand-ins on
the same device the lesson picks.
"""

import ast
import builtins
import contextlib
import html
import io
import re
import warnings
from typing import TYPE_CHECKING, Any

import pytest
import torch
import yaml

from gradlab.config import LOCALES, PROJECT_ROOT
from gradlab.content.loader import Content
from tests.inprocess import judge

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

LESSON = "mixed-precision"
EXERCISE = "mixed-precision/amp-step"
SPEC = yaml.safe_load((PROJECT_ROOT / "lessons" / LESSON / "lesson.yaml").read_text())
SNIPPETS = [s["id"] for s in SPEC["sections"] if s.get("code")]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
AMP_DTYPE = torch.float16 if DEVICE == "cuda" else torch.bfloat16
COURSE = yaml.safe_load((PROJECT_ROOT / "lessons" / "course.yaml").read_text())
LESSONS = [entry["id"] for entry in COURSE["lessons"]]

# The honest wording of where code runs, as each locale words it (FAQ and course page).
WHERE_IT_RUNS = {
    "en": "on a GPU if the server has one, otherwise on the CPU",
    "es": "en una GPU si el servidor la tiene y, si no, en la CPU",
    "de": "auf einer GPU, wenn der Server eine hat, sonst auf der CPU",
    "tr": "sunucuda GPU varsa GPU'da, yoksa CPU'da",
}
# What the pages used to promise.
GPU_PROMISES = [
    "GPU grader", "GPU worker", "GPU-Worker", "GPU-Bewerter", "worker con GPU",
    "corrector con GPU", "GPU worker'ı", "GPU'lu bir değerlendirici",
]  # fmt: skip


def snippet(content: Content, section: str) -> str:
    code = {s.id: s.code for s in content.lessons[LESSON].spec.sections}[section]
    assert code
    return code


def free_names(code: str) -> set[str]:
    """The names `code` reads but never binds (builtins aside)."""
    names = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)]
    bound = {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    return {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound - set(dir(builtins))


def stand_ins() -> dict[str, Any]:
    """The reader's own objects, small, on the device the lesson picks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 10).to(DEVICE)
    x = torch.randn(64, 512, device=DEVICE)
    y = torch.randint(0, 10, (64,), device=DEVICE)
    loss_fn = torch.nn.functional.cross_entropy
    with torch.autocast(device_type=DEVICE, dtype=AMP_DTYPE):
        loss = loss_fn(model(x), y)
    batches = [(torch.randn(16, 512), torch.randint(0, 10, (16,))) for _ in range(3)]
    return {
        "device": DEVICE, "amp_dtype": AMP_DTYPE, "model": model, "x": x, "y": y,
        "loss_fn": loss_fn, "loss": loss, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "scaler": torch.amp.GradScaler(DEVICE), "MyModel": lambda: torch.nn.Linear(512, 10),
        "loader": batches,
    }  # fmt: skip


def hard_coded_cuda(code: str) -> list[str]:
    """Calls in `code` that name CUDA themselves: `.cuda()`, or "cuda" as an argument."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        values = [*node.args, *(keyword.value for keyword in node.keywords)]
        named = any(isinstance(v, ast.Constant) and v.value == "cuda" for v in values)
        if named or (isinstance(node.func, ast.Attribute) and node.func.attr == "cuda"):
            found.append(ast.unparse(node))
    return found


def run_snippet(code: str) -> tuple[dict[str, Any], list[str]]:
    """Run `code` in a fresh namespace, warnings as errors: its namespace and printed lines."""
    available = stand_ins()
    missing = free_names(code) - set(available) - {"torch"}
    assert not missing, f"the snippet reads names that have no stand-in here: {missing}"
    namespace: dict[str, Any] = {"torch": torch}
    namespace.update({name: available[name] for name in free_names(code) & set(available)})
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out):
        warnings.simplefilter("error")
        exec(compile(code, "<snippet>", "exec"), namespace)  # our own lesson's code
    return namespace, out.getvalue().splitlines()


def check_snippet(code: str) -> None:
    """It runs here, and it picks its device rather than assuming CUDA (which a GPU runs)."""
    run_snippet(code)
    assert hard_coded_cuda(code) == []


@pytest.mark.parametrize("section", SNIPPETS)
def test_every_snippet_runs_on_this_machine(content: Content, section: str) -> None:
    check_snippet(snippet(content, section))


@pytest.mark.parametrize(
    "code",
    [
        'with torch.autocast(device_type="cuda", dtype=torch.float16):\n    y = x * 2\n',
        'scaler = torch.amp.GradScaler("cuda")\n',
        "model = torch.nn.Linear(4, 2).cuda()\n",
    ],
)
def test_a_snippet_that_assumes_cuda_fails_the_check(code: str) -> None:
    """On a CPU machine it fails to run (a warning counts); on a GPU machine, statically."""
    with pytest.raises((AssertionError, UserWarning, RuntimeError)):
        check_snippet(code)


@pytest.mark.parametrize("section", SNIPPETS)
def test_printed_values_are_those_in_the_comments(content: Content, section: str) -> None:
    """Every `print(...)  # tensor(...)` or `# torch.<dtype>` comment is what prints here."""
    code = snippet(content, section)
    prints = [line for line in code.splitlines() if line.startswith("print(")]
    if not prints:
        return
    _, printed = run_snippet(code)
    assert len(printed) == len(prints)
    for line, shown in zip(prints, printed, strict=True):
        comment = line.partition("#")[2].strip()
        if comment.startswith("tensor("):
            expected = re.match(r"tensor\(.*\)", comment).group(0)  # type: ignore[union-attr]
            assert shown.replace(" ", "") == expected.replace(" ", ""), line
        elif comment.startswith("torch."):
            assert shown == comment, line


def test_autocast_snippet_casts_on_this_device(content: Content) -> None:
    namespace, printed = run_snippet(snippet(content, "autocast"))
    assert (namespace["device"], namespace["amp_dtype"]) == (DEVICE, AMP_DTYPE)
    assert namespace["logits"].dtype == AMP_DTYPE  # autocast really ran
    assert printed == [str(AMP_DTYPE), "torch.float32", "torch.float32"]


def test_full_pattern_adapted_to_the_exercise_passes(content: Content) -> None:
    """The lesson's loop with the exercise's names (`device_type` for `device`, `max_norm`) and
    without the setup the exercise does itself passes the grader."""
    code = snippet(content, "full-pattern")
    loop = code[code.index("for x, y in loader:") :]
    for old, new, count in [
        ("device_type=device", "device_type=device_type", 1),
        (".to(device)", ".to(device_type)", 2),
        ("max_norm=1.0", "max_norm", 1),
    ]:
        assert loop.count(old) == count, old
        loop = loop.replace(old, new)
    judgement = judge(EXERCISE, loop, content)
    assert [c.id for c in judgement.checks if not c.passed] == []
    assert judgement.diagnosis is None


def test_autocast_for_another_device_is_diagnosed_with_the_device(content: Content) -> None:
    """A loop that names "cuda" itself, graded on the CPU: the feedback names the device."""
    loop = (
        "for x, y in loader:\n"
        "    optimizer.zero_grad()\n"
        '    with torch.autocast(device_type="cuda", dtype=torch.float16):\n'
        "        loss = loss_fn(model(x), y)\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.unscale_(optimizer)\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "CUDA is not available" on a CPU machine
        judgement = judge(EXERCISE, loop, content, device="cpu", locale="de")
    assert judgement.diagnosis is not None
    assert judgement.diagnosis.code == "autocast_not_used"
    assert judgement.diagnosis.evidence["device"] == "cpu"
    assert 'Der Gerätetyp dieses Laufs ist "cpu"' in judgement.diagnosis.message


def page_text(client: "TestClient", path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, path
    text = re.sub(r"<[^>]+>", " ", response.text)
    return " ".join(html.unescape(text).split())


@pytest.mark.parametrize("locale", LOCALES)
def test_no_page_promises_a_gpu_grader(client: "TestClient", locale: str) -> None:
    """The course page and every lesson's FAQ say where code runs, honestly, in each locale."""
    pages = [f"/{locale}/"] + [f"/{locale}/lessons/{lesson}" for lesson in LESSONS]
    assert len(pages) == 5
    for path in pages:
        text = page_text(client, path)
        assert WHERE_IT_RUNS[locale] in text, path
        for promise in GPU_PROMISES:
            assert promise not in text, (path, promise)
