"""Alembic environment: runs against the connection the store hands over (no ini file)."""

from alembic import context

from engine.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # pragma: no cover - the store always passes a connection
        raise RuntimeError("engine.store migrations must be run through engine.store.migrate()")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():  # pragma: no cover
    raise RuntimeError("offline SQL generation is not supported")
run_migrations_online()
