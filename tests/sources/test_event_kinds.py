"""The sources' event kinds (app.sources.event_kinds): about the service's sources, so only where
they are asked for."""
import pytest

from app.events import feed
from app.events import kinds as events
from app.plumbing.errors import InvalidRequest
from app.sources import event_kinds as source_kinds


def test_a_source_event_is_in_no_feed_that_names_no_kind_but_in_one_that_names_it():
    names = [kind.name for kind in source_kinds.KINDS]
    assert names == [source_kinds.SOURCE_DEGRADED, source_kinds.SOURCE_RECOVERED]
    unasked, _ = feed.check_filters()
    assert unasked.kinds and not set(names) & set(unasked.kinds)
    asked, _ = feed.check_filters(events_filter=",".join(names))
    assert asked.kinds == tuple(names)
    assert set(names) <= set(events.delivery_events())


def test_a_source_event_carries_no_personal_data_so_its_thin_body_is_its_own():
    body = {"event": "source.degraded", "source_id": "src_mail", "name": "Mail", "status": "degraded",
            "previous_status": "healthy", "at": "2026-01-02T03:04:05Z"}
    assert events.thin_body(body) == body
    with pytest.raises(InvalidRequest):
        feed.check_filters(events_filter="source.vanished")
