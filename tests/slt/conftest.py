from __future__ import annotations

import warnings

import pytest

from tests import pg


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for the whole run, or None where none can be started (the files then run
    on millpond only, with a warning saying why)."""
    reason = pg.unavailable()
    if reason:
        warnings.warn(f"sqllogictest: {reason}; the files run on millpond only, not checked against PostgreSQL "
                      "(make setup installs it where apt-get works)", stacklevel=1)
        yield None
        return
    with pg.server() as server:
        yield server
