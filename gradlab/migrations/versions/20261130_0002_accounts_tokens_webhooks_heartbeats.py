"""Accounts, progress, drafts, grader tokens, idempotency keys, webhooks, worker heartbeats.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 04:38:18.603298
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "draft",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("exercise", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("code", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "exercise"),
    )
    with op.batch_alter_table("draft", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_draft_owner"), ["owner"], unique=False)

    op.create_table(
        "grader_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("prefix", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("webhook_secret", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("grader_token", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_grader_token_token_hash"), ["token_hash"], unique=True)
        batch_op.create_index(
            "ux_grader_token_active_name",
            ["name"],
            unique=True,
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        )

    op.create_table(
        "idempotency_key",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("request_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("submission_ids", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "key"),
    )
    with op.batch_alter_table("idempotency_key", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_idempotency_key_expires_at"), ["expires_at"], unique=False
        )

    op.create_table(
        "lessonprogress",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("lesson", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("read", sa.Boolean(), nullable=False),
        sa.Column("quiz_passed", sa.Boolean(), nullable=False),
        sa.Column("last_section", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("section_at", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner", "lesson"),
    )
    with op.batch_alter_table("lessonprogress", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lessonprogress_owner"), ["owner"], unique=False)

    op.create_table(
        "user",
        sa.Column("email", sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("password_hash", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("user", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_user_email"), ["email"], unique=True)

    op.create_table(
        "worker_heartbeat",
        sa.Column("worker_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("device", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("stopped_at", sa.Float(), nullable=True),
        sa.Column("last_job_id", sa.Integer(), nullable=True),
        sa.Column("last_submission_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("jobs_done", sa.Integer(), nullable=False),
        sa.Column("stats_json", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id"),
    )
    with op.batch_alter_table("worker_heartbeat", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_worker_heartbeat_last_seen"), ["last_seen"], unique=False
        )

    op.create_table(
        "authtoken",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("user_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_used_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["user.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("authtoken", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_authtoken_token_hash"), ["token_hash"], unique=True)
        batch_op.create_index(batch_op.f("ix_authtoken_user_id"), ["user_id"], unique=False)

    op.create_table(
        "webhook_delivery",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("submission_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("grader_token_id", sa.Integer(), nullable=False),
        sa.Column("url", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=False),
        sa.Column("payload", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
        sa.Column(
            "status",
            sa.Enum("pending", "delivering", "delivered", "failed", name="webhookdeliverystatus"),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("lease_owner", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.Float(), nullable=True),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["grader_token_id"],
            ["grader_token.id"],
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submission.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_delivery_grader_token_id"), ["grader_token_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_webhook_delivery_next_attempt_at"), ["next_attempt_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_webhook_delivery_status"), ["status"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_webhook_delivery_submission_id"), ["submission_id"], unique=False
        )

    op.create_table(
        "webhook_attempt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_delivery.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id", "attempt"),
    )
    with op.batch_alter_table("webhook_attempt", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_attempt_delivery_id"), ["delivery_id"], unique=False
        )

    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("callback_url", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=True)
        )
        batch_op.create_index(
            "ix_submission_owner_created", ["owner", "created_at", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("submission", schema=None) as batch_op:
        batch_op.drop_index("ix_submission_owner_created")
        batch_op.drop_column("callback_url")

    with op.batch_alter_table("webhook_attempt", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_attempt_delivery_id"))

    op.drop_table("webhook_attempt")
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_delivery_submission_id"))
        batch_op.drop_index(batch_op.f("ix_webhook_delivery_status"))
        batch_op.drop_index(batch_op.f("ix_webhook_delivery_next_attempt_at"))
        batch_op.drop_index(batch_op.f("ix_webhook_delivery_grader_token_id"))

    op.drop_table("webhook_delivery")
    with op.batch_alter_table("authtoken", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_authtoken_user_id"))
        batch_op.drop_index(batch_op.f("ix_authtoken_token_hash"))

    op.drop_table("authtoken")
    with op.batch_alter_table("worker_heartbeat", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_worker_heartbeat_last_seen"))

    op.drop_table("worker_heartbeat")
    with op.batch_alter_table("user", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_user_email"))

    op.drop_table("user")
    with op.batch_alter_table("lessonprogress", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lessonprogress_owner"))

    op.drop_table("lessonprogress")
    with op.batch_alter_table("idempotency_key", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_idempotency_key_expires_at"))

    op.drop_table("idempotency_key")
    with op.batch_alter_table("grader_token", schema=None) as batch_op:
        batch_op.drop_index(
            "ux_grader_token_active_name",
            sqlite_where=sa.text("revoked_at IS NULL"),
            postgresql_where=sa.text("revoked_at IS NULL"),
        )
        batch_op.drop_index(batch_op.f("ix_grader_token_token_hash"))

    op.drop_table("grader_token")
    with op.batch_alter_table("draft", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_draft_owner"))

    op.drop_table("draft")
    sa.Enum(name="webhookdeliverystatus").drop(op.get_bind(), checkfirst=True)  # PostgreSQL
