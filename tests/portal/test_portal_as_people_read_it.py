"""What three people could not make out in the portal (issue 48): an endpoint's form running into
"Add endpoint", a shown secret below the fold, an erased scan's delivery without a word why, the
scan page's counts that did not add up, a batch's rejected target unnamed, the test key picked for
a watch, and an unknown id answered with raw JSON instead of a page."""
from __future__ import annotations

import re

from app.accounts.models import ApiKey
from app.extensions import db
from app.privacy import erasure
from app.webhooks import endpoints, key_settings
from tests import factories
from tests.portal.helpers import csrf, login
from tests.portal.test_portal_pages import complete, create, text
from tests.scans.pages.test_scan_explained import completed

SECRET = "whsec_cG9ydGFsIHJvdW5kIGZpdmUgc2VjcmV0IDAxMjM0NQ=="


def _with_endpoints(account, url):
    with db.connection_context():
        key_settings.set_webhook(account.key.id, account.id, url, SECRET)
        endpoints.create(ApiKey.get_by_id(account.key.id), url=f"{url}?second=1", description="Case <b>system</b>")


def test_each_endpoint_has_a_heading_and_adding_one_has_its_own(client, portal_account, sim_receiver):
    _with_endpoints(portal_account, sim_receiver(SECRET)[0])
    login(client)
    page = text(client.get(f"/app/api-keys/{portal_account.key.id}"))
    section = page[page.index('id="endpoints"'):page.index('id="log-h"')]
    headings = re.findall(r'<h3 id="endpoint-h-(ep_[^"]+)">(.*?)</h3>', section, re.DOTALL)
    assert len(headings) == 2
    assert "Case &lt;b&gt;system&lt;/b&gt;" in headings[1][1] and "<b>" not in section  # escaped
    # "Add an endpoint" is a heading of its own, after the last endpoint's forms, before its form.
    add_heading = section.index('<h3 id="add-endpoint-h">Add an endpoint</h3>')
    assert section.rindex("Save endpoint") < add_heading < section.index('action="/app/api-keys/'
                                                                         f'{portal_account.key.id}/endpoints#revealed"')
    assert section.count('name="csrf_token"') >= 5  # each form keeps its token


def test_show_secret_lands_at_the_secret(client, portal_account, sim_receiver):
    _with_endpoints(portal_account, sim_receiver(SECRET)[0])
    login(client)
    path = f"/app/api-keys/{portal_account.key.id}"
    page = text(client.get(path))
    action = f'action="{path}/secret/reveal#revealed"'
    assert action in page  # the browser keeps the fragment and scrolls to it in the answer
    shown = text(client.post(f"{path}/secret/reveal", data={"csrf_token": csrf(client, path)}))
    box = shown[shown.index('id="revealed"'):]
    assert box.index(SECRET) < box.index("</div>")


def test_an_erased_scans_delivery_says_why_it_cannot_be_redelivered(client, portal_account, sim_receiver, jobs):
    with db.connection_context():
        key_settings.set_webhook(portal_account.key.id, portal_account.id, sim_receiver(SECRET)[0], SECRET)
    kept, erased = create(client, portal_account, "kept@example.com"), create(client, portal_account, "gone@example.com")
    complete(kept)
    complete(erased)
    jobs.run()
    with db.connection_context():
        erasure.erase_scan(customer_id=portal_account.id, scan_id=erased, livemode=True)
    login(client)
    page = text(client.get(f"/app/api-keys/{portal_account.key.id}"))
    rows = {scan_id: page[page.index(f"<code>{scan_id}</code>"):] for scan_id in (kept, erased)}
    rows = {scan_id: row[:row.index('class="detail-row"')] for scan_id, row in rows.items()}
    assert "Redeliver</button>" in rows[kept] and "Cannot be redelivered" not in rows[kept]
    assert "Redeliver</button>" not in rows[erased]
    assert "Cannot be redelivered: its scan was erased" in rows[erased]


def test_the_scan_pages_source_counts_add_up_and_name_the_skipped(client, portal_account):
    scan_id, result = completed(client, portal_account, "kate@example.com")  # one source skipped
    skipped = sum(1 for s in result["sources"] if s["status"] == "skipped")
    assert skipped and result["coverage"]["checked"] + skipped == len(result["sources"])  # the case seen
    login(client)
    page = text(client.get(f"/app/scans/{scan_id}"))
    total, asked = len(result["sources"]), result["coverage"]["checked"]
    assert f"{asked} of {total} sources asked" in page and f"{skipped} skipped (not asked for this target)" in page
    assert f"Sources ({total}: {asked} asked, {skipped} skipped)" in page


def test_the_batch_page_says_where_each_rejected_target_was(client, portal_account):
    body = client.post("/api/v1/scan/bulk", headers=portal_account.headers, json={"targets": [
        {"target": "no"}, {"target": "kate@example.com"}, {"target": "x"}]}).get_json()
    assert [r["index"] for r in body["rejected"]] == [0, 2]
    login(client)
    page = text(client.get(f"/app/batches/{body['bulk_id']}"))
    rejected = page[page.index('id="rejected"'):]
    rejected = rejected[:rejected.index("</section>")]
    assert "Rejected (2)" in rejected
    assert re.findall(r'class="rejected-index">position (\d+) \(<code>index</code> (\d+)\)', rejected) == [
        ("1", "0"), ("3", "2")]
    assert "<code>rejected</code>" in rejected and "error" in rejected  # where the reasons are


def test_the_watch_forms_pick_a_live_key_though_a_test_key_is_newer(client, portal_account):
    with db.connection_context():
        sandbox = factories.sandbox_key(portal_account)  # newest: listed first
    login(client)
    page = text(client.get("/app/watches"))
    for prefix in ("add", "import"):
        select = page[page.index(f'id="{prefix}-key"'):]
        select = select[:select.index("</select>")]
        assert select.index(sandbox.key.id) < select.index(portal_account.key.id)
        assert re.search(rf'<option selected value="{portal_account.key.id}"', select), select
        assert not re.search(rf'<option selected value="{sandbox.key.id}"', select)


def test_an_unknown_id_in_the_portal_is_a_page_in_its_layout(client, portal_account):
    login(client)
    for path in ("/app/scans/scn_unknown", "/app/batches/blk_unknown", "/app/api-keys/key_unknown",
                 "/app/no-such-page"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.mimetype == "text/html", path
        page = text(response)
        assert "<h1" in page and "Not found" in page and "Log out" in page, path  # the layout, logged in
        assert response.headers["Content-Security-Policy"], path


def test_the_apis_404_stays_json(client, portal_account):
    for response in (client.get("/api/v1/scan/scn_unknown", headers=portal_account.headers),
                     client.get("/api/v1/no-such-thing", headers=portal_account.headers),
                     client.get("/nowhere")):
        assert response.status_code == 404
        assert response.mimetype == "application/json"
        assert response.get_json()["error"] == "not_found"
