"""The privacy's event kinds (app.privacy.event_kinds): about a person the customer holds scans of,
named by the scans, never by the target."""
from app.events import feed
from app.events import kinds as events
from app.privacy import event_kinds as privacy_kinds


def test_the_subjects_events_are_in_every_feed_and_deliverable():
    names = {kind.name for kind in privacy_kinds.KINDS}
    assert names == {privacy_kinds.SUBJECT_OPTED_OUT, privacy_kinds.SUBJECT_ERASED}
    assert names <= set(feed.DEFAULT_KINDS) and names <= set(events.delivery_events())


def test_a_subjects_event_has_no_personal_field_to_thin():
    assert all(not kind.personal for kind in privacy_kinds.KINDS)
    body = {"event": "subject.erased", "scan_ids": ["scn_1", "scn_2"], "at": "2026-01-02T03:04:05Z"}
    assert events.thin_body(body) == body
    assert feed.thin_body("subject.erased", '{"event":"subject.erased"}') == '{"event":"subject.erased"}'
