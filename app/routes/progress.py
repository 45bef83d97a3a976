"""Progress sync and exercise drafts (JSON API), per owner: an account or the anonymous
learner's cookie. Nobody can address another owner's rows: the owner is never in the URL."""

from fastapi import APIRouter, HTTPException, Request, Response

from app.client import client_address
from app.deps import ContentDep, OwnerDep, SessionDep, SettingsDep, enforce_limit
from app.drafts import service as drafts
from app.drafts.schemas import DraftPublic, DraftUpdate
from app.progress import service as progress
from app.progress.schemas import LessonState, ProgressPublic, ProgressUpdate
from app.submissions.service import SubmissionRefused, check_code
from gradlab.content.loader import Content

router = APIRouter(prefix="/api/v1", tags=["progress"])


@router.get("/progress", response_model=ProgressPublic)
def read_progress(session: SessionDep, content: ContentDep, owner: OwnerDep) -> ProgressPublic:
    """Every lesson of the course: read, quick check, reading position, exercise states."""
    return progress.get(session=session, content=content, owner=owner)


@router.put("/progress/{lesson}", response_model=LessonState)
def update_progress(
    lesson: str, data: ProgressUpdate, session: SessionDep, content: ContentDep, owner: OwnerDep
) -> LessonState:
    """Report `read` and/or the section in view (`last_section`, a section id of the lesson or
    `exercise-<id>`). 404: unknown lesson; 422: unknown section."""
    try:
        return progress.update(
            session=session, content=content, owner=owner, lesson=lesson, data=data
        )
    except progress.UnknownLesson:
        raise HTTPException(404, detail=f"unknown lesson {lesson!r}") from None
    except progress.UnknownSection:
        valid = progress.section_ids(content, lesson)
        raise HTTPException(
            422, detail=f"unknown section {data.last_section!r}; one of {valid}"
        ) from None


def _exercise(content: Content, lesson: str, exercise: str) -> str:
    ref = f"{lesson}/{exercise}"
    if ref not in content.exercises:
        raise HTTPException(404, detail=f"unknown exercise {ref!r}")
    return ref


@router.get("/drafts/{lesson}/{exercise}", response_model=DraftPublic)
def read_draft(
    lesson: str, exercise: str, session: SessionDep, content: ContentDep, owner: OwnerDep
) -> DraftPublic:
    """The saved draft, or `{"code": null, "updated_at": null}` when there is none."""
    ref = _exercise(content, lesson, exercise)
    return drafts.get(session=session, owner=owner, exercise=ref)


@router.put("/drafts/{lesson}/{exercise}", response_model=DraftPublic)
def save_draft(
    request: Request,
    lesson: str,
    exercise: str,
    data: DraftUpdate,
    session: SessionDep,
    content: ContentDep,
    settings: SettingsDep,
    owner: OwnerDep,
) -> DraftPublic:
    """Save the editor's code: refused as a submission's would be (413 over the size limit,
    422 for a NUL character or a lone surrogate), so a saved draft can always be sent."""
    ref = _exercise(content, lesson, exercise)
    # by address: a script without cookies is a new learner (and a new row) on every request
    enforce_limit(
        request,
        f"draft:{client_address(request)}",
        limit=settings.draft_rate_limit,
        window_s=settings.rate_window_s,
    )
    try:
        check_code(data.code, settings=settings)
    except SubmissionRefused as refused:
        raise HTTPException(refused.status, detail=refused.detail) from None
    return drafts.put(session=session, owner=owner, exercise=ref, code=data.code)


@router.delete("/drafts/{lesson}/{exercise}", status_code=204)
def delete_draft(
    lesson: str, exercise: str, session: SessionDep, content: ContentDep, owner: OwnerDep
) -> Response:
    """Forget the draft (e.g. the editor's "reset to starter code")."""
    ref = _exercise(content, lesson, exercise)
    drafts.remove(session=session, owner=owner, exercise=ref)
    return Response(status_code=204)
