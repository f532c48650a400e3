"""fleet: the thread list pages, sorts and filters in the database (issue 26)

``conversations`` gains the kept-token figures of the thread's last measurement: ``kept_tokens``,
``kept_threshold``, ``kept_window`` (NULL: never measured; an existing thread reads "unknown"
until its status is next computed) and ``pressure_ppm`` (kept × 1,000,000 // threshold, −1 when
unknown: the pressure sort and the over-threshold / hint-line filters). Indexes for the keyset
sorts (``(sort value, id)``), the source filter, the rejected-summary filter (``compaction_events
(kind, conversation_id)``) and the compactions of the last day / per day (``compaction_history
(created_at)``). Downgrade drops them again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 18:10:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

_SORT_INDEXES = (
    ("ix_conversations_updated_at_id", ["updated_at", "id"]),
    ("ix_conversations_pressure_id", ["pressure_ppm", "id"]),
    ("ix_conversations_message_count_id", ["message_count", "id"]),
    ("ix_conversations_title_id", ["title", "id"]),
    ("ix_conversations_source_format_id", ["source_format", "id"]),
)


def upgrade() -> None:
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kept_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('kept_threshold', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('kept_window', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('pressure_ppm', sa.BigInteger(), nullable=False, server_default=sa.text('-1')))
    for name, columns in _SORT_INDEXES:
        op.create_index(name, 'conversations', columns)
    op.create_index('ix_compaction_events_kind_conversation_id', 'compaction_events', ['kind', 'conversation_id'])
    op.create_index('ix_compaction_history_created_at', 'compaction_history', ['created_at'])


def downgrade() -> None:
    op.drop_index('ix_compaction_history_created_at', table_name='compaction_history')
    op.drop_index('ix_compaction_events_kind_conversation_id', table_name='compaction_events')
    for name, _ in reversed(_SORT_INDEXES):
        op.drop_index(name, table_name='conversations')
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.drop_column('pressure_ppm')
        batch_op.drop_column('kept_window')
        batch_op.drop_column('kept_threshold')
        batch_op.drop_column('kept_tokens')
