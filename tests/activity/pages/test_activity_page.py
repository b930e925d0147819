"""The portal and the activity log (D20): every portal action is an entry (recorded in one
place, after the request), and the Activity page lists the account's entries with the API's
filters and exports them as CSV, escaped."""
from __future__ import annotations

import csv
import io

import pytest

from app.activity import entries as activity
from app.activity.models import ActivityEntry
from app.extensions import db
from tests.portal.helpers import csrf, login

HOSTILE = "<script>alert(1)</script>"


def entries(account) -> list[ActivityEntry]:
    with db.connection_context():
        return list(ActivityEntry.select().where(ActivityEntry.customer_id == account.id)
                    .order_by(ActivityEntry.created_at, ActivityEntry.id))


def text(response) -> str:
    return response.get_data(as_text=True)


def test_portal_actions_are_entries_and_pages_are_not(client, portal_account):
    key_id = portal_account.key.id
    assert login(client, password="wrong wrong wrong").status_code == 401  # nobody to name: no entry
    assert login(client).status_code == 302
    client.get("/app/api-keys")
    client.get(f"/app/api-keys/{key_id}")
    token = csrf(client, f"/app/api-keys/{key_id}")
    saved = client.post(f"/app/api-keys/{key_id}/webhook", data={"csrf_token": token, "url": "", "secret": "",
                                                                 "payload": "thin"})
    assert saved.status_code == 302
    client.post(f"/app/api-keys/{key_id}/test-event", data={})  # no CSRF token: refused, still an action
    client.get("/app/usage/ledger.csv?start=2026-01-01&end=2026-01-02")
    client.post("/app/logout", data={"csrf_token": csrf(client, "/app/api-keys")})
    rows = entries(portal_account)
    assert [(r.action, r.resource_id) for r in rows] == [
        ("portal.login", None), ("key.webhook_update", key_id), ("key.test_event", key_id),
        ("usage.ledger_export", None), ("portal.logout", None)]
    assert {(r.user_id, r.user_email, r.key_id, r.livemode, r.client_address) for r in rows} == {
        (portal_account.user.id, "ops@acme.example", None, True, "127.0.0.1")}
    assert [r.status for r in rows] == [302, 302, 400, 200, 302]
    assert all(r.request_id and r.request_id.startswith("req_") for r in rows)


def test_the_activity_page_lists_filters_and_escapes(client, portal_account):
    created = client.post("/api/v1/scan", json={"target": "jane@example.com", "purpose": "other",
                                                "case_ref": HOSTILE}, headers=portal_account.headers).get_json()
    client.get("/api/v1/scans", headers=portal_account.headers)
    login(client)
    page = client.get("/app/activity")
    assert page.status_code == 200
    body = text(page)
    assert 'href="/app/activity"' in body and 'aria-current="page">Activity' in body  # in the navigation
    assert "scans.list" in body and created["scan_id"] in body and "portal.login" in body
    assert HOSTILE not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "jane@example.com" not in body.replace('placeholder="jane@example.com"', "")
    # The filter offers every action, the API's (as their views declare them) and the portal's, called or not.
    assert '<option value="watch.run"' in body and '<option value="endpoint.recover"' in body
    assert '<option value="user.invite"' in body
    by_action = text(client.get("/app/activity?action=scan.create"))
    assert created["scan_id"] in by_action and "scans.list</code>" not in by_action
    by_target = text(search(client, target="jane@EXAMPLE.com"))
    assert created["scan_id"] in by_target and "portal.login</code>" not in by_target
    nobody = text(search(client, target="joe@example.com"))
    assert created["scan_id"] not in nobody and "No activity matches these filters." in nobody
    assert text(client.get(f"/app/activity?key={portal_account.key.id}&mode=live")).count("<tr>") == 3  # head + 2


def search(client, path="/app/activity", **filters):
    """The activity page's search form, posted as a browser does."""
    return client.post(path, data={"csrf_token": csrf(client, "/app/activity"), **filters})


@pytest.mark.parametrize("filters, message", [
    ({"target": "jane@"}, "not a valid e-mail address"),
    ({"created_after": "yesterday"}, "not a date and time"),
    # The API's rule (time_bounds), said as a form error: never a 500 nor a silent empty page.
    ({"created_after": "99999-01-01T00:00"}, "not a date and time"),
    ({"created_before": "0000-00-00"}, "not a date and time"),
    ({"created_after": "0001-01-01T00:00+01:00"}, "between 0001-01-01 and 9999-12-31"),
    ({"created_before": "9999-12-31T23:59-01:00"}, "between 0001-01-01 and 9999-12-31"),
    ({"resource": "scn x"}, "not a valid id"),
])
def test_a_bad_filter_is_a_400_page_that_says_why(client, portal_account, filters, message):
    login(client)
    response = search(client, **filters)
    assert response.status_code == 400 and message in text(response)


def test_the_target_search_is_posted_and_never_put_in_an_address(client, portal_account):
    """A target in an address ends up in server logs, browser history and Referer headers: the form
    posts it, paging and export keep posting it, and a target in the query string is refused."""
    with db.connection_context():
        for i in range(55):
            activity.record(customer_id=portal_account.id, livemode=True, action="scan.create", status=202,
                            subject=activity.Subject(f"scn_{i:03d}", activity.hashes_of([("email",
                                                                                           "jane@example.com")])))
    login(client)
    form = text(client.get("/app/activity")).split('aria-label="Filter activity"')[0].rsplit("<form", 1)[1]
    assert 'method="post"' in form
    first = search(client, target="jane@example.com")
    body = text(first)
    assert first.status_code == 200 and "scn_054" in body and "scn_005" in body and "scn_004" not in body
    assert "target=" not in body and "jane%40" not in body  # no link or address carries it
    assert 'value="jane@example.com"' in body  # posted again by the pager and the export
    after = body.split('name="after" value="')[1].split('"')[0]
    second = text(search(client, target="jane@example.com", after=after))
    assert "scn_000" in second and "scn_005" not in second and "← Newest" in second
    exported = search(client, "/app/activity.csv", target="jane@example.com")
    assert exported.status_code == 200 and len(list(csv.DictReader(io.StringIO(text(exported))))) == 55
    refused = client.get("/app/activity?target=jane@example.com")
    assert refused.status_code == 400 and "search with the form" in text(refused)
    assert "scn_0" not in text(refused)


def test_a_posted_search_only_shows_and_is_not_an_action(client, portal_account):
    """The activity and scans searches post (to keep targets out of addresses) but change nothing:
    like the pages they show, they are not entries; the export stays one."""
    login(client)
    assert search(client, target="jane@example.com").status_code == 200
    assert search(client, "/app/scans", q="jane").status_code == 200
    assert search(client, "/app/activity.csv", target="jane@example.com").status_code == 200
    assert [r.action for r in entries(portal_account)] == ["portal.login", "activity.export"]


def test_the_csv_export_has_the_filtered_entries_and_is_an_action(client, portal_account):
    client.post("/api/v1/scan", json={"target": "jane@example.com", "case_ref": "=HYPERLINK(\"http://evil\")"},
                headers=portal_account.headers)
    client.post("/api/v1/scan", json={"target": "joe@example.com"}, headers=portal_account.headers)
    client.get("/api/v1/scans", headers=portal_account.headers)
    login(client)
    response = search(client, "/app/activity.csv", action="scan.create", target="jane@example.COM")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    assert "attachment" in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(text(response))))
    assert len(rows) == 1 and rows[0]["action"] == "scan.create" and rows[0]["mode"] == "live"
    assert rows[0]["case_ref"].startswith("'=")  # a formula is neutralised
    assert rows[0]["key_id"] == portal_account.key.id and rows[0]["status"] == "202" and rows[0]["credits"] == "1"
    assert "jane" not in text(response)
    everything = list(csv.DictReader(io.StringIO(text(client.get("/app/activity.csv")))))
    # This export's own entry is written before its rows are read: it is in them.
    assert [r["action"] for r in everything] == ["activity.export", "activity.export", "portal.login", "scans.list",
                                                 "scan.create", "scan.create"]
    exports = [r for r in entries(portal_account) if r.action == "activity.export"]
    assert len(exports) == 2 and exports[0].user_email == "ops@acme.example"
    refused = search(client, "/app/activity.csv", target="ab", action="scan.create")
    assert refused.status_code == 302 and refused.headers["Location"].endswith("/app/activity?action=scan.create")


def test_the_page_pages_by_cursor(client, portal_account):
    with db.connection_context():
        for i in range(55):
            activity.record(customer_id=portal_account.id, livemode=True, action="scan.read", status=200,
                            resource_id=f"scn_{i:03d}")
    login(client)
    first = text(client.get("/app/activity"))  # 50 a page: the login and the 49 newest reads
    assert "Older →" in first and "scn_054" in first and "scn_006" in first and "scn_005" not in first
    nxt = first.split('/app/activity?after=')[1].split('"')[0]
    second = text(client.get(f"/app/activity?after={nxt}"))
    assert "scn_005" in second and "scn_000" in second and "scn_006" not in second
    assert "Older →" not in second and "← Newest" in second


def test_another_customers_entries_never_show(client, portal_account, make_customer):
    stranger = make_customer()
    client.get("/api/v1/deliveries", headers=stranger.headers)
    login(client)
    assert "<code>deliveries.list</code>" not in text(client.get("/app/activity"))
    assert "deliveries.list" not in text(client.get("/app/activity.csv"))


def test_the_pages_need_a_login(client, portal_account):
    for path in ("/app/activity", "/app/activity.csv"):
        response = client.get(path)
        assert response.status_code == 302 and "/app/login" in response.headers["Location"]


def test_the_target_filter_finds_case_variants_and_phone_spellings(client, portal_account):
    mixed = client.post("/api/v1/scan", json={"target": "Jane.Doe@Example.com"},
                        headers=portal_account.headers).get_json()
    phone = client.post("/api/v1/scan", json={"target": "+1 (415) 555-0199"},
                        headers=portal_account.headers).get_json()
    login(client)
    for spelling in ("jane.doe@example.com", "JANE.DOE@EXAMPLE.COM"):
        found = text(search(client, target=spelling))
        assert mixed["scan_id"] in found and phone["scan_id"] not in found, spelling
    for spelling in ("+1.415.555.0199", "+14155550199", "+1-415-555-0199"):
        found = text(search(client, target=spelling))
        assert phone["scan_id"] in found and mixed["scan_id"] not in found, spelling
