"""steering: pins, per-thread policy and the audit log

New tables:

- ``message_pins``: a message of a thread an operator pinned (kept verbatim through compaction;
  the engine widens a pin to its whole tool round when it reads them). One row per
  (conversation, message); both foreign keys cascade.
- ``thread_policies``: one row per thread holding its policy overrides (JSON: ``threshold_ratio``,
  ``context_window``, ``retained_tail_tokens`` …, and the standing ``instructions``).
- ``audit_log``: one row per operator action (compact, revert, redo, pin, unpin, instructions,
  policy): who (the database role or OS user, plus an optional display name), when, why, and the
  state before and after. ``conversation_id`` is a foreign key with ON DELETE SET NULL: a deleted
  thread leaves its audit rows (with the ``thread_key`` they name) instead of taking them with it.

``compaction_state`` gains ``pins_version`` (NOT NULL, server default 0): every pin change bumps
it, a compaction reads it with its snapshot and compares it when it writes (the CAS).

The downgrade drops all of it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 15:50:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
AUDIT_ACTIONS = "action IN ('compact','revert','redo','pin','unpin','instructions','policy')"


def upgrade() -> None:
    op.create_table('message_pins',
    sa.Column('id', BigId, autoincrement=True, nullable=False),
    sa.Column('conversation_id', BigId, nullable=False),
    sa.Column('message_id', BigId, nullable=False),
    sa.Column('pinned_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('pinned_by', sa.String(length=200), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['message_id'], ['messages.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('conversation_id', 'message_id', name='uq_message_pins_conversation_message'),
    )
    op.create_table('thread_policies',
    sa.Column('conversation_id', BigId, nullable=False),
    sa.Column('overrides', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_by', sa.String(length=200), nullable=True),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('conversation_id'),
    )
    op.create_table('audit_log',
    sa.Column('id', BigId, autoincrement=True, nullable=False),
    sa.Column('conversation_id', BigId, nullable=True),
    sa.Column('thread_key', sa.String(length=200), nullable=True),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('operator', sa.String(length=200), nullable=False),
    sa.Column('display_name', sa.String(length=200), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('before', sa.JSON(), nullable=True),
    sa.Column('after', sa.JSON(), nullable=True),
    sa.CheckConstraint(AUDIT_ACTIONS, name='ck_audit_log_action'),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.create_index('ix_audit_log_conversation_id_id', ['conversation_id', 'id'], unique=False)
    with op.batch_alter_table('compaction_state', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pins_version', sa.BigInteger(), nullable=False, server_default=sa.text('0')))


def downgrade() -> None:
    with op.batch_alter_table('compaction_state', schema=None) as batch_op:
        batch_op.drop_column('pins_version')
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_index('ix_audit_log_conversation_id_id')
    op.drop_table('audit_log')
    op.drop_table('thread_policies')
    op.drop_table('message_pins')
