"""What a trusted grader provides: the hidden scenarios, and a judgement of the observations."""

from dataclasses import dataclass, field
from typing import Any, Protocol

from gradlab.content.loader import Content
from gradlab.results import Check, Diagnosis
from worker.observations import BadObservations, Observations


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


class ScenarioGrader:
    """Shared by the graders: a fixed list of hidden scenarios (JSON for the sandbox), and the
    observations' per-scenario records, checked to line up with them."""

    harness: str
    messages: dict[str, frozenset[str]]

    def __init__(self, scenarios: list[dict[str, Any]]) -> None:
        self._scenarios = scenarios

    def scenarios(self) -> list[dict[str, Any]]:
        return self._scenarios

    def scenario_records(self, observations: Observations) -> list[tuple[dict[str, Any], Any]]:
        """(scenario, its untrusted record) pairs; BadObservations unless one record each."""
        metas = observations.meta.get("scenarios")
        if not isinstance(metas, list) or len(metas) != len(self._scenarios):
            raise BadObservations("one record per scenario expected")
        return list(zip(self._scenarios, metas, strict=True))
