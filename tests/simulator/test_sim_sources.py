"""The simulated engine's sources (E8): the listing with probe identities, probes, and modes."""
from freezegun import freeze_time

from simulator.sources import PROBE_SECONDS, SLOW_LATENCY_MS

START = "2025-03-01 12:00:00"


def listing(client):
    response = client.get("/v1/sources")
    assert response.status_code == 200
    return {s["id"]: s for s in response.get_json()["sources"]}


def probe(client, source_id, identity, frozen):
    response = client.post("/v1/investigations", json={**identity, "reference": "probe", "sources": [source_id],
                                                       "probe": True})
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["eta_seconds"] == PROBE_SECONDS  # a probe answers sooner than a scan (60 s at least)
    frozen.tick(PROBE_SECONDS + 1)
    done = client.get(f"/v1/investigations/{response.get_json()['id']}").get_json()
    assert done["status"] == "done"
    return {s["id"]: s for s in done["result"]["sources"]}


def test_the_listing_gives_each_source_its_kinds_and_a_known_good_and_known_bad_identity(client):
    sources = listing(client)
    assert 10 <= len(sources) <= 30
    assert sources["carrier_lookup"]["kinds"] == ["phone"]
    for source in sources.values():
        good, bad = source["probes"]["known_good"], source["probes"]["known_bad"]
        assert good["target"] != bad["target"] and good["kind"] in source["kinds"] and bad["kind"] in source["kinds"]


def test_a_probe_finds_its_known_good_and_not_its_known_bad_and_asks_only_that_source(client):
    source = listing(client)["breach_index"]
    with freeze_time(START) as frozen:
        good = probe(client, "breach_index", source["probes"]["known_good"], frozen)
        bad = probe(client, "breach_index", source["probes"]["known_bad"], frozen)
    assert list(good) == ["breach_index"] and good["breach_index"]["status"] == "found"
    assert bad["breach_index"]["status"] == "not_found"


def test_modes_break_a_source_for_every_investigation_that_asks_it_until_ok(client):
    source = listing(client)["gravatar"]
    assert client.post("/_sim/engine/sources/gravatar", json={"mode": "wrong"}).status_code == 200
    shown = {s["id"]: s["mode"] for s in client.get("/_sim/engine/sources").get_json()["sources"]}
    assert shown["gravatar"] == "wrong" and shown["breach_index"] == "ok"
    with freeze_time(START) as frozen:
        good = probe(client, "gravatar", source["probes"]["known_good"], frozen)["gravatar"]
        bad = probe(client, "gravatar", source["probes"]["known_bad"], frozen)["gravatar"]
        assert (good["status"], bad["status"]) == ("not_found", "found")
        client.post("/_sim/engine/sources/gravatar", json={"mode": "error"})
        assert probe(client, "gravatar", source["probes"]["known_good"], frozen)["gravatar"]["status"] == "error"
        client.post("/_sim/engine/sources/gravatar", json={"mode": "slow"})
        slow = probe(client, "gravatar", source["probes"]["known_good"], frozen)["gravatar"]
        assert (slow["status"], slow["latency_ms"]) == ("timeout", SLOW_LATENCY_MS)
        # An ordinary investigation that asks the source answers as its mode says, too.
        scan = client.post("/v1/investigations", json={"target": "jane@example.com", "kind": "email"}).get_json()
        frozen.tick(scan["eta_seconds"] + 1)
        result = client.get(f"/v1/investigations/{scan['id']}").get_json()["result"]
        statuses = {s["id"]: s["status"] for s in result["sources"]}
        if "gravatar" in statuses:
            assert statuses["gravatar"] == "timeout"
        assert all("gravatar" not in e["source_ids"] for e in result["evidence"])
        client.post("/_sim/engine/sources/gravatar", json={"mode": "ok"})
        assert probe(client, "gravatar", source["probes"]["known_good"], frozen)["gravatar"]["status"] == "found"
    client.post("/_sim/engine/sources/gravatar", json={"mode": "error"})
    client.post("/_sim/engine/reset")
    assert all(s["mode"] == "ok" for s in client.get("/_sim/engine/sources").get_json()["sources"])


def test_bad_mode_and_unknown_source_are_refused(client):
    assert client.post("/_sim/engine/sources/gravatar", json={"mode": "broken"}).status_code == 400
    assert client.post("/_sim/engine/sources/nope", json={"mode": "ok"}).status_code == 404
    refused = client.post("/v1/investigations", json={"target": "a@example.com", "kind": "email", "probe": True})
    assert refused.status_code == 400  # a probe names its source
