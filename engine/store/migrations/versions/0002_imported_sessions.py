"""imported sessions: what real transcripts carry, and where a thread came from

Messages gain the developer role, ``parts`` (reasoning blocks and attachments), ``is_error``,
``meta_kind`` and ``source_key`` (unique per conversation); conversations their source columns;
model requests the reported cache / reasoning tokens, response id, context window, ``origin``,
``message_id`` and ``source_key``; a new ``source_compactions`` table holds a source's own
compactions. Nothing is lost: every new column is nullable, or NOT NULL with a server default
(``is_error`` false, ``origin`` 'engine') that fills the existing rows and keeps a program written
for 0001 that inserts rows itself working. The downgrade drops what was
added; a ``developer`` message becomes a ``system`` message (the old schema has no such role).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:20:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
OLD_ROLES = "role IN ('system','user','assistant','tool')"
NEW_ROLES = "role IN ('system','developer','user','assistant','tool')"


def upgrade() -> None:
    with op.batch_alter_table('conversations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('source_format', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('source_file', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('source_session_id', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('source_cwd', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('reported_context_window', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('parent_source_session_id', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('source_meta', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('follow_offset', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('follow_line', sa.BigInteger(), nullable=True))

    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('parts', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('is_error', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('meta_kind', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('source_key', sa.String(length=300), nullable=True))
        batch_op.drop_constraint('ck_messages_role', type_='check')
        batch_op.create_check_constraint('ck_messages_role', NEW_ROLES)
        batch_op.create_unique_constraint('uq_messages_conversation_source_key', ['conversation_id', 'source_key'])

    with op.batch_alter_table('model_requests', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reported_cache_read_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('reported_cache_creation_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('reported_reasoning_tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('response_id', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('context_window', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('origin', sa.String(length=16), nullable=False, server_default=sa.text("'engine'")))
        batch_op.add_column(sa.Column('message_id', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('source_key', sa.String(length=300), nullable=True))
    with op.batch_alter_table('model_requests', schema=None) as batch_op:
        batch_op.create_check_constraint('ck_model_requests_origin', "origin IN ('engine','imported')")
        batch_op.create_unique_constraint('uq_model_requests_conversation_source_key', ['conversation_id', 'source_key'])

    op.create_table('source_compactions',
    sa.Column('id', BigId, autoincrement=True, nullable=False),
    sa.Column('conversation_id', BigId, nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('trigger', sa.String(length=32), nullable=True),
    sa.Column('tokens_before', sa.Integer(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('after_message_id', sa.BigInteger(), nullable=True),
    sa.Column('replaced_first_id', sa.BigInteger(), nullable=True),
    sa.Column('replaced_last_id', sa.BigInteger(), nullable=True),
    sa.Column('source_id', sa.String(length=300), nullable=False),
    sa.Column('source_timestamp', sa.String(length=64), nullable=True),
    sa.Column('kept', sa.JSON(), nullable=True),
    sa.Column('forgotten', sa.JSON(), nullable=True),
    sa.Column('details', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('summary','prune')", name='ck_source_compactions_kind'),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('conversation_id', 'source_id', name='uq_source_compactions_conversation_source_id')
    )
    with op.batch_alter_table('source_compactions', schema=None) as batch_op:
        batch_op.create_index('ix_source_compactions_conversation_id_id', ['conversation_id', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('source_compactions', schema=None) as batch_op:
        batch_op.drop_index('ix_source_compactions_conversation_id_id')
    op.drop_table('source_compactions')

    with op.batch_alter_table('model_requests', schema=None) as batch_op:
        batch_op.drop_constraint('uq_model_requests_conversation_source_key', type_='unique')
        batch_op.drop_constraint('ck_model_requests_origin', type_='check')
        for name in ('source_key', 'message_id', 'origin', 'context_window', 'response_id',
                     'reported_reasoning_tokens', 'reported_cache_creation_tokens', 'reported_cache_read_tokens'):
            batch_op.drop_column(name)

    op.execute(sa.text("UPDATE messages SET role = 'system' WHERE role = 'developer'"))
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_constraint('uq_messages_conversation_source_key', type_='unique')
        batch_op.drop_constraint('ck_messages_role', type_='check')
        batch_op.create_check_constraint('ck_messages_role', OLD_ROLES)
        for name in ('source_key', 'meta_kind', 'is_error', 'parts'):
            batch_op.drop_column(name)

    with op.batch_alter_table('conversations', schema=None) as batch_op:
        for name in ('follow_line', 'follow_offset', 'source_meta', 'parent_source_session_id', 'reported_context_window',
                     'source_cwd', 'source_session_id', 'source_file', 'source_format'):
            batch_op.drop_column(name)
