"""The webhooks' event kind (app.webhooks.event_kinds): about the key's endpoints, its body its own."""
from app.events import kinds as events
from app.webhooks import event_kinds as webhook_kinds


def test_endpoint_disabled_is_deliverable_and_its_own_thin_body():
    assert [kind.name for kind in webhook_kinds.KINDS] == [webhook_kinds.ENDPOINT_DISABLED]
    assert "endpoint.disabled" in events.delivery_events()
    body = {"event": "endpoint.disabled", "endpoint_id": "ep_1", "livemode": True}
    assert events.thin_body(body) == body
