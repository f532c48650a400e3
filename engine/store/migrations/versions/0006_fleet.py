"""fleet: the thread list pages, sorts and filters in the database (issue 26)

``conversations`` gains the kept-token figures of the thread's last measurement: ``kept_tokens``,
``kept_threshold``, ``kept_window`` (NULL: never measured; an existing thread reads "unknown"
until its status is next computed) and ``pressure_ppm`` (kept × 1,000,000 // threshold, −1 when
unknown: the pressure sort and the over-threshold / hint-line filters), and ``compactions`` (ours
plus the source's, filled from ``compaction_state`` and ``source_compactions`` here, then kept by
the door: the compactions sort). Indexes for the keyset
sorts (``(sort value, id)``), the source filter, the rejected-summary filter (``compaction_events
(kind, conversation_id)``) and the compactions of the last day / per day (``compaction_history
(created_at)``). On PostgreSQL, when the ``pg_trgm`` extension is (or can be) installed, a trigram
GIN index on the search text (key, title, source format and model, one per line:
``engine.store.fleet.search_text``) serves the substring search; without it the search scans the
table (still correct). Downgrade drops the indexes and columns (never the extension).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 18:10:00
"""
import logging

import sqlalchemy as sa
from alembic import op
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)
#: the expression of engine.store.fleet.search_text, as PostgreSQL indexes it
SEARCH_TEXT = "(thread_key || chr(10) || title || chr(10) || coalesce(source_format, '') || chr(10) || coalesce(model, ''))"


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

_SORT_INDEXES = (
    ("ix_conversations_updated_at_id", ["updated_at", "id"]),
    ("ix_conversations_pressure_id", ["pressure_ppm", "id"]),
    ("ix_conversations_compactions_id", ["compactions", "id"]),
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
        batch_op.add_column(sa.Column('compactions', sa.BigInteger(), nullable=False, server_default=sa.text('0')))
    op.execute(
        "UPDATE conversations SET compactions = "
        "coalesce((SELECT compact_count FROM compaction_state s WHERE s.conversation_id = conversations.id), 0) + "
        "(SELECT count(*) FROM source_compactions c WHERE c.conversation_id = conversations.id)"
    )
    for name, columns in _SORT_INDEXES:
        op.create_index(name, 'conversations', columns)
    op.create_index('ix_compaction_events_kind_conversation_id', 'compaction_events', ['kind', 'conversation_id'])
    op.create_index('ix_compaction_history_created_at', 'compaction_history', ['created_at'])
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        try:
            with bind.begin_nested():  # a savepoint: a role that may not create it leaves the migration going
                bind.exec_driver_sql('CREATE EXTENSION IF NOT EXISTS pg_trgm')
        except DBAPIError as exc:
            log.warning("pg_trgm not available (%s): the thread search scans the table", str(exc.orig).splitlines()[0])
            return
        op.execute(f'CREATE INDEX ix_conversations_search_trgm ON conversations USING gin ({SEARCH_TEXT} gin_trgm_ops)')


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP INDEX IF EXISTS ix_conversations_search_trgm')
    op.drop_index('ix_compaction_history_created_at', table_name='compaction_history')
    op.drop_index('ix_compaction_events_kind_conversation_id', table_name='compaction_events')
    for name, _ in reversed(_SORT_INDEXES):
        op.drop_index(name, table_name='conversations')
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.drop_column('compactions')
        batch_op.drop_column('pressure_ppm')
        batch_op.drop_column('kept_window')
        batch_op.drop_column('kept_threshold')
        batch_op.drop_column('kept_tokens')
