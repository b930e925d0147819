"""``GET /api/v1/scans``: the customer's scans, newest first, filters and cursor pages."""
from freezegun import freeze_time

from tests.api.helpers import balance


def create(client, account, target, **extra):
    answer = client.post("/api/v1/scan", json={"target": target, **extra}, headers=account.headers)
    assert answer.status_code == 202, answer.get_json()
    return answer.get_json()["scan_id"]


def listing(client, account, **params):
    return client.get("/api/v1/scans", query_string=params, headers=account.headers)


def test_newest_first_with_pages_and_a_cursor(client, account):
    ids = []
    with freeze_time("2026-11-21 12:00:00") as frozen:
        for i in range(5):
            ids.append(create(client, account, f"user{i}@example.com"))
            frozen.tick(1)
    first = listing(client, account, limit=2)
    assert first.status_code == 200
    body = first.get_json()
    assert set(body) == {"ok", "data", "has_more"} and body["ok"] is True and body["has_more"] is True
    assert [e["scan_id"] for e in body["data"]] == ids[::-1][:2]
    entry = body["data"][0]
    assert entry["status"] == "queued" and entry["target"] == "user4@example.com" and entry["kind"] == "email"
    assert entry["created_at"] == "2026-11-21T12:00:04Z"
    second = listing(client, account, limit=2, starting_after=ids[3]).get_json()
    third = listing(client, account, limit=2, starting_after=ids[1]).get_json()
    assert [e["scan_id"] for e in second["data"]] == [ids[2], ids[1]] and second["has_more"] is True
    assert [e["scan_id"] for e in third["data"]] == [ids[0]] and third["has_more"] is False
    assert len(listing(client, account).get_json()["data"]) == 5  # default limit 20


def test_a_bulk_batchs_scans_share_a_time_and_still_page_exactly(client, account):
    answer = client.post("/api/v1/scan/bulk", headers=account.headers,
                         json={"targets": [{"target": f"bulk{i}@example.com"} for i in range(7)]}).get_json()
    bulk_ids = {s["scan_id"] for s in answer["scans"]}
    seen, after = [], None
    while True:
        params = {"limit": 3, "bulk_id": answer["bulk_id"]}
        if after:
            params["starting_after"] = after
        page = listing(client, account, **params).get_json()
        seen += [e["scan_id"] for e in page["data"]]
        assert all(e["bulk_id"] == answer["bulk_id"] for e in page["data"])
        if not page["has_more"]:
            break
        after = page["data"][-1]["scan_id"]
    assert len(seen) == 7 and set(seen) == bulk_ids


def test_filters_status_kind_and_time(client, account, jobs):
    with freeze_time("2026-11-21 12:00:00") as frozen:
        email = create(client, account, "jane@example.com")
        frozen.tick(60)
        handle = create(client, account, "janedoe", kind="username")
        failing = create(client, account, "fail.me@example.com")
        frozen.tick(600)
        jobs.run()
    done = listing(client, account, status="completed").get_json()["data"]
    failed = listing(client, account, status="failed").get_json()["data"]
    assert {e["scan_id"] for e in done} == {email, handle} and all("result" in e for e in done)
    assert [e["scan_id"] for e in failed] == [failing] and failed[0]["failure"]["code"] == "engine_failed"
    assert "result" not in failed[0]
    assert [e["scan_id"] for e in listing(client, account, kind="username").get_json()["data"]] == [handle]
    after = listing(client, account, created_after="2026-11-21T12:00:30Z").get_json()["data"]
    assert {e["scan_id"] for e in after} == {handle, failing}
    before = listing(client, account, created_before="2026-11-21T12:00:30Z").get_json()["data"]
    assert [e["scan_id"] for e in before] == [email]
    # an offset is honoured: 13:00:30+01:00 is 12:00:30 UTC
    assert [e["scan_id"] for e in listing(client, account, created_before="2026-11-21T13:00:30+01:00")
            .get_json()["data"]] == [email]


def test_only_the_callers_scans(client, account, make_customer):
    other = make_customer()
    mine = create(client, account, "jane@example.com")
    theirs = create(client, other, "john@example.com")
    assert [e["scan_id"] for e in listing(client, account).get_json()["data"]] == [mine]
    answer = listing(client, account, starting_after=theirs)  # another customer's cursor discloses nothing
    assert answer.status_code == 400 and answer.get_json()["error"] == "invalid_request"
    unknown = listing(client, account, starting_after="scn_nope").get_json()
    assert (unknown["error"], unknown["message"]) == (answer.get_json()["error"], answer.get_json()["message"])


def test_bad_parameters_are_400_with_details_and_charged(client, account):
    before = balance(account)
    for params in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"status": "done"}, {"kind": "fax"},
                   {"created_after": "yesterday"}, {"starting_after": "scn_\x00"}, {"bulk_id": "blk x"},
                   # The calendar's edges with an offset have no UTC equivalent (was a 500).
                   {"created_after": "0001-01-01T00:00:00+01:00"},
                   {"created_before": "9999-12-31T23:59:59-01:00"},
                   # The portal's rule too (time_bounds): past the calendar's end.
                   {"created_before": "99999-01-01"}):
        answer = listing(client, account, **params)
        body = answer.get_json()
        assert answer.status_code == 400, (params, body)
        assert body["ok"] is False, params
        assert body["error"] == "invalid_request", params
        assert body["details"], params
        assert body["request_id"], params
    assert balance(account) == before - 11  # a 400 is a served call


def test_each_page_costs_one_credit_and_needs_a_key(client, account):
    create(client, account, "jane@example.com")
    before = balance(account)
    answer = listing(client, account)
    assert answer.status_code == 200 and answer.headers["X-Credits-Remaining"] == str(before - 1)
    assert "RateLimit" in answer.headers
    assert client.get("/api/v1/scans").status_code == 401
