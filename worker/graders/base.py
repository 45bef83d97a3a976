"""What a trusted grader provides: the hidden scenarios, and a judgement of the observations."""

from dataclasses import dataclass, field
from typing import Any, Protocol

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.observations import Observations


@dataclass
class Judgement:
    checks: list[Check]
    diagnosis: Diagnosis | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Grader(Protocol):
    harness: str  # module in worker.harness that sets up the learner's names
    # The texts it takes from the lesson files ("diagnoses.<code>", "checks.<key>") and the
    # placeholders each must use; every locale is checked against this by the tests.
    messages: dict[str, frozenset[str]]

    def scenarios(self) -> list[dict[str, Any]]: ...

    def judge(
        self, observations: Observations, *, exercise: str, locale: str, content: Content
    ) -> Judgement: ...
