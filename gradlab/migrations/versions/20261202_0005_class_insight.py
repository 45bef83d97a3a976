"""Class insight (app/insights): the diagnosis code and error kind of each graded submission as
columns (backfilled from result_json); an index of each learner's submissions per exercise;
hints opened per learner, exercise and hint; the instructor role of accounts; the summary tables
the insight queries read (`insight_count`, `insight_learner`: gradlab/insight_counts.py), filled
from the existing submissions and hints.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

from gradlab.insight_counts import rebuild_statements

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSIGHT_COLUMNS = ["exercise", "owner", "created_at", "status", "locale"]
BACKFILL = {
    "sqlite": "UPDATE submission SET "
    "diagnosis_code = json_extract(result_json, '$.diagnosis.code'), "
    "error_kind = json_extract(result_json, '$.error.kind') "
    "WHERE result_json IS NOT NULL",
    "postgresql": "UPDATE submission SET "
    "diagnosis_code = result_json::jsonb -> 'diagnosis' ->> 'code', "
    "error_kind = result_json::jsonb -> 'error' ->> 'kind' "
    "WHERE result_json IS NOT NULL",
}


def upgrade() -> None:
    with op.batch_alter_table("user", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("instructor", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("diagnosis_code", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True)
        )
        batch_op.add_column(
            sa.Column("error_kind", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True)
        )
    op.execute(BACKFILL[op.get_bind().dialect.name])
    op.create_index("ix_submission_insights", "submission", INSIGHT_COLUMNS, unique=False)
    op.create_table(
        "hint_open",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("exercise", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("hint", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "exercise", "hint"),
    )
    op.create_index(
        "ix_hint_open_exercise_owner", "hint_open", ["exercise", "owner", "opened_at"], unique=False
    )
    op.create_table(
        "insight_count",
        sa.Column("metric", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("exercise", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("day", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("locale", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "exercise", "day", "locale", "key"),
    )
    op.create_table(
        "insight_learner",
        sa.Column("exercise", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("first_at", sa.Float(), nullable=False),
        sa.Column("locale", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("passed_at", sa.Float(), nullable=True),
        sa.Column("attempts_to_pass", sa.Integer(), nullable=True),
        sa.Column("hints_before_pass", sa.Integer(), nullable=True),
        sa.Column("seconds_to_pass", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("exercise", "owner"),
    )
    op.create_index("ix_insight_learner_owner", "insight_learner", ["owner"], unique=False)
    op.create_index(
        "ix_insight_learner_seconds",
        "insight_learner",
        ["exercise", "seconds_to_pass", "first_at", "locale"],
        unique=False,
    )
    for statement in rebuild_statements(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    op.drop_index("ix_insight_learner_seconds", table_name="insight_learner")
    op.drop_index("ix_insight_learner_owner", table_name="insight_learner")
    op.drop_table("insight_learner")
    op.drop_table("insight_count")
    op.drop_index("ix_hint_open_exercise_owner", table_name="hint_open")
    op.drop_table("hint_open")
    op.drop_index("ix_submission_insights", table_name="submission")
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_column("error_kind")
        batch_op.drop_column("diagnosis_code")
    with op.batch_alter_table("user", schema=None) as batch_op:
        batch_op.drop_column("instructor")
