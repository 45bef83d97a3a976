"""When an anonymous learner registers or logs in, their work joins the account: submissions,
progress, drafts and hints opened by `learner:<id>` are re-owned to `user:<id>` in one
transaction. Exercise states follow the submissions (they are derived, and `passed` beats
`attempted`); lesson progress, drafts and hints are merged (app.progress.service.reown,
app.drafts.service.reown, app.insights.hints.reown), and class insight's summaries with them
(gradlab.insight_counts.reown).
"""

from sqlalchemy import update
from sqlmodel import Session

from app.drafts import service as drafts
from app.insights import hints
from app.progress import service as progress
from gradlab import insight_counts
from gradlab.models import Submission


def adopt(*, session: Session, learner_id: str, user_id: str) -> None:
    source, target = f"learner:{learner_id}", f"user:{user_id}"

    def move() -> None:
        session.execute(
            update(Submission).where(Submission.owner == source).values(owner=target)  # type: ignore[arg-type]
        )
        hints.reown(session=session, source=source, target=target)

    insight_counts.reown(session, source, target, move)  # class insight's summaries follow
    progress.reown(session=session, source=source, target=target)
    drafts.reown(session=session, source=source, target=target)
    session.commit()
