"""The watches' event kinds (app.watches.event_kinds): declared in the watches' package, in the
registry, the document and the feed, and thin without the person."""
from app.events import feed
from app.events import kinds as events
from app.watches import event_kinds as watch_kinds


def test_the_watch_events_are_in_the_registry_and_the_document(client):
    spec = client.get("/api/v1/openapi.json").get_json()
    schemas = spec["components"]["schemas"]
    assert watch_kinds.WATCH_EVENTS == ("watch.changed", "watch.paused", "watch.ended")
    for kind in watch_kinds.WATCH_KINDS:
        full, thin = schemas[kind.schema], schemas[kind.schema + "Thin"]
        assert full["properties"]["event"]["enum"] == [kind.name]
        assert list(full["properties"]) == ["event", *kind.fields]
        # watch.ended has no target: the watch forgot it when the person opted out
        assert ("target" in full["properties"]) == (kind.name != "watch.ended")
        assert "kind" in full["properties"] and not {"target", "kind", "added_items"} & set(thin["properties"])
    callback = spec["paths"]["/api/v1/watches"]["post"]["callbacks"]["watchEvents"]
    operation = next(iter(callback.values()))["post"]
    body = operation["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["discriminator"]["mapping"]) == set(watch_kinds.WATCH_EVENTS)
    example = body["examples"]["watch.changed"]["value"]
    assert list(example) == ["event", *watch_kinds.WATCH_KINDS[0].fields]
    [header] = [p for p in operation["parameters"] if p["name"] == "X-Service-Event"]
    assert header["schema"]["enum"] == list(watch_kinds.WATCH_EVENTS)
    # The events list and stream take and show them.
    assert set(watch_kinds.WATCH_EVENTS) <= set(schemas["Event"]["properties"]["event"]["enum"])
    listing = spec["paths"]["/api/v1/events"]["get"]["parameters"]
    [kinds] = [p for p in listing if p["name"] == "events"]
    assert "watch\\.changed" in kinds["schema"]["pattern"] and "watch.paused" in kinds["description"]
    assert all(f"`{name}`" in spec["info"]["description"] for name in watch_kinds.WATCH_EVENTS)


def test_a_watch_events_thin_body_leaves_the_person_out():
    changed = {"event": "watch.changed", "watch_id": "wch_1", "livemode": True, "purpose": None, "case_ref": None,
               "scan_id": "scn_2", "previous_scan_id": "scn_1", "changes": [], "target": "a@example.com",
               "kind": "email", "added_items": []}
    thin = events.thin_body(changed)
    assert not set(watch_kinds.WATCH_PERSONAL_FIELDS) & set(thin)
    assert list(thin) == ["event", *watch_kinds.WATCH_KINDS[0].body_fields(thin=True)]
    assert set(watch_kinds.WATCH_EVENTS) <= set(feed.DEFAULT_KINDS)
