"""A throwaway PostgreSQL database, for the benchmarks and the test session alike."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg2


@contextlib.contextmanager
def throwaway_database(admin_url: str, prefix: str) -> Iterator[str]:
    """Create a database with a unique name on the server of ``admin_url``, yield its URL, and drop it afterwards.

    Raises ``psycopg2.OperationalError`` when the server is unreachable.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(admin_url.replace("postgresql://", "postgres://"), connect_timeout=5)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
        finally:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()
