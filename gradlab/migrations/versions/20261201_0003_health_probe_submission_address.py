"""Health probes (the row each web process rewrites on /healthz, app/health.py) and the client
address of each submission (the per-address caps of app/submissions/service.py).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "health_probe",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("written_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("client_address", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
        batch_op.create_index(
            batch_op.f("ix_submission_client_address"), ["client_address"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_submission_client_address"))
        batch_op.drop_column("client_address")
    op.drop_table("health_probe")
