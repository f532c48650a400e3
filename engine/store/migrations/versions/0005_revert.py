"""revert: an offload a revert undid

``tool_offloads`` gains ``reverted_generation`` (nullable): set to the generation of the revert
that brought a pruned tool result back verbatim (its preview no longer shows), cleared again by the
redo that restores the prune. The row itself stays (nothing is ever deleted: the history of every
generation is exact). Every reader of the current surface counts only rows where it is NULL.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 16:05:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('tool_offloads', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reverted_generation', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tool_offloads', schema=None) as batch_op:
        batch_op.drop_column('reverted_generation')
