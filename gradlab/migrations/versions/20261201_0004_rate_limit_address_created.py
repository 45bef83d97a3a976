"""Rate limits shared by every web process (app/security/ratelimit.py), and submissions indexed
by (client address, time) for the caps on waiting submissions and recent worker time.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 20:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_limit",
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("hits", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index(op.f("ix_rate_limit_expires_at"), "rate_limit", ["expires_at"], unique=False)
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_submission_client_address"))
        batch_op.create_index(
            "ix_submission_address_created", ["client_address", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_index("ix_submission_address_created")
        batch_op.create_index(
            batch_op.f("ix_submission_client_address"), ["client_address"], unique=False
        )
    op.drop_index(op.f("ix_rate_limit_expires_at"), table_name="rate_limit")
    op.drop_table("rate_limit")
