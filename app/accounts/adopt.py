"""When an anonymous learner registers or logs in, their work joins the account: submissions,
progress and drafts owned by `learner:<id>` are re-owned to `user:<id>` in one transaction.
Exercise states follow the submissions (they are derived, and `passed` beats `attempted`);
lesson progress and drafts are merged (app.progress.service.reown, app.drafts.service.reown).
"""

from sqlalchemy import update
from sqlmodel import Session

from app.drafts import service as drafts
from app.progress import service as progress
from gradlab.models import Submission


def adopt(*, session: Session, learner_id: str, user_id: str) -> None:
    source, target = f"learner:{learner_id}", f"user:{user_id}"
    session.execute(
        update(Submission).where(Submission.owner == source).values(owner=target)  # type: ignore[arg-type]
    )
    progress.reown(session=session, source=source, target=target)
    drafts.reown(session=session, source=source, target=target)
    session.commit()
