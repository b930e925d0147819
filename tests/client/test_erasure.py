"""The client's erasure calls and commands, against the real service."""
import io
import json

import pytest
from scan_api_client import Conflict, ScanClient
from scan_api_client.cli import main

from app.extensions import db
from app.tracking import states


def test_erase_a_scan_and_a_batch(served_app, make_customer):
    acct = make_customer(tier="enterprise", credits=50)
    api = ScanClient(served_app.url, acct.api_key, sleep=lambda s: None)
    scan = api.create("jane.doe@example.com")
    with pytest.raises(Conflict) as caught:
        api.erase(scan.scan_id)
    assert caught.value.code == "scan_in_flight"
    with db.connection_context():
        states.complete(scan.scan_id, {"risk": {"score": 5, "band": "low"}})
    erased = api.erase(scan.scan_id)
    assert erased["ok"] is True and erased["scan_id"] == scan.scan_id
    read = api.get(scan.scan_id)
    assert (read.erased_at, read.target, read.result) == (erased["erased_at"], None, None)
    batch = api.bulk(["a.person@example.com", "b.person@example.com"])
    assert api.erase_bulk(batch.bulk_id) == {"ok": True, "bulk_id": batch.bulk_id, "erased": 0, "in_flight": 2}


def test_cli_erase_prints_the_answer(served_app, account):
    api = ScanClient(served_app.url, account.api_key)
    scan_id = api.create("jane.doe@example.com").scan_id
    with db.connection_context():
        states.complete(scan_id, {"risk": {"score": 5, "band": "low"}})
    out, err = io.StringIO(), io.StringIO()
    code = main(["erase", scan_id], stdout=out, stderr=err,
                env={"SCAN_API_KEY": account.api_key, "SCAN_API_URL": served_app.url})
    assert code == 0, err.getvalue()
    assert json.loads(out.getvalue())["scan_id"] == scan_id
    err = io.StringIO()
    assert main(["erase-bulk", "blk_nope"], stdout=io.StringIO(), stderr=err,
                env={"SCAN_API_KEY": account.api_key, "SCAN_API_URL": served_app.url}) == 1
    assert "not_found" in err.getvalue()


def test_erased_scans_in_the_completed_list_are_typed_as_erased(served_app, account):
    api = ScanClient(served_app.url, account.api_key, sleep=lambda s: None)
    kept, gone = api.create("kept.person@example.com").scan_id, api.create("gone.person@example.com").scan_id
    with db.connection_context():
        for scan_id in (kept, gone):
            states.complete(scan_id, {"risk": {"score": 5, "band": "low"}, "partial": False})
    api.erase(gone)
    listed = {scan.scan_id: scan for scan in api.iter_scans(status="completed")}
    assert set(listed) == {kept, gone}
    erased = listed[gone]
    assert (erased.status, erased.done, erased.erased, erased.target, erased.result, erased.failure) == \
        ("completed", True, True, None, None, None)
    assert erased.erased_at and erased.completed_at and erased.kind == "email"
    assert not listed[kept].erased and listed[kept].result.risk.band == "low"
