"""message token counts: what the meter counted for each message, kept with the row

Messages gain ``tokens`` (the message's token count, framing included) and ``tokens_key`` (what
the count depends on besides the message: the encoding and the meter's framing version, e.g.
``cl100k_base/1``). The write door fills both with every row it writes; a cold status of a long
thread then sums them instead of encoding every message again. Both are nullable and existing rows
keep NULL: a row without a count (or with one under another key) is counted when it is read, as
before, so nothing depends on back-filling. The downgrade drops the two columns.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 14:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tokens', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('tokens_key', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_column('tokens_key')
        batch_op.drop_column('tokens')
