"""What every source health test starts from: a connection, and no source list kept by the process
from an earlier test (each process keeps one, ``health.forget_cache``)."""
import pytest

from app.extensions import db
from app.sources import health


@pytest.fixture
def conn(app):
    health.forget_cache()
    with db.connection_context():
        yield
    health.forget_cache()
