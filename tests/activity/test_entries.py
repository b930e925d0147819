"""The activity log's service (D20): entries, the list and its filters, the day partitions and
their expiry (a whole partition dropped, never a DELETE walking the log)."""
from __future__ import annotations

import unicodedata
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.activity import entries
from app.activity.models import DEFAULT_PARTITION, ActivityEntry
from app.activity.statements import entries as store
from app.plumbing import crypto
from app.plumbing.errors import InvalidRequest

T = datetime(2031, 3, 10, 12, 0)  # far from any real date: the tests do not depend on today


@pytest.fixture
def no_day_partitions(conn):
    """Every day partition dropped (other tests leave theirs): this test's days start without one."""
    for day in store.day_partitions():
        store.drop_day_partition(day)


def entry(customer_id="cus_a", *, at=T, livemode=True, **fields) -> str:
    fields.setdefault("action", "scan.read")
    fields.setdefault("status", 200)
    return entries.record(customer_id=customer_id, livemode=livemode, now=at, **fields)


def ids(body) -> list[str]:
    return [e["activity_id"] for e in body["data"]]


def test_an_entry_holds_what_the_call_did_and_only_a_hash_of_its_targets(conn):
    subject = entries.Subject("blk_1", entries.hashes_of([("email", "jane@example.com"), ("phone", "+447700900123"),
                                                            ("email", "jane@example.com")]), "kyc_aml", "CASE-1")
    entry_id = entry(action="bulk.create", status=202, credits=2, key_id="key_1", resource_id=None,
                     client_address="203.0.113.7", request_id="req_1", subject=subject)
    row = ActivityEntry.get(ActivityEntry.id == entry_id)
    assert (row.action, row.status, row.credits, row.key_id, row.resource_id, row.client_address, row.request_id,
            row.purpose, row.case_ref) == ("bulk.create", 202, 2, "key_1", "blk_1", "203.0.113.7", "req_1",
                                           "kyc_aml", "CASE-1")
    # One hash per distinct target, keyed: not a plain digest of the target.
    assert row.target_hashes == [crypto.target_hash("email", "jane@example.com"),
                                 crypto.target_hash("phone", "+447700900123")]
    assert "jane" not in str(row.target_hashes)
    [listed] = entries.list_entries("cus_a", livemode=True)["data"]
    assert listed["activity_id"] == entry_id and "target_hashes" not in listed


def test_long_or_odd_fields_are_clipped_not_refused(conn):
    entry_id = entry(resource_id="x" * 500, request_id="req\x00" + "y" * 100, client_address="z" * 100)
    row = ActivityEntry.get(ActivityEntry.id == entry_id)
    assert len(row.resource_id) == 64 and row.request_id.startswith("req?") and len(row.client_address) == 64


def test_the_list_is_newest_first_paged_by_cursor_and_of_one_customer_and_mode(conn):
    made = [entry(at=T + timedelta(seconds=i)) for i in range(5)]
    same_time = [entry(at=T + timedelta(seconds=10)) for _ in range(2)]  # a tie: the id orders them
    entry("cus_b", at=T + timedelta(seconds=3))
    test_mode = entry(livemode=False, at=T + timedelta(seconds=4))
    expected = ids(entries.list_entries("cus_a", livemode=True, limit=100))
    assert set(expected[:2]) == set(same_time) and expected[2:] == made[::-1]
    first = entries.list_entries("cus_a", livemode=True, limit=3)
    assert ids(first) == expected[:3] and first["has_more"] is True
    second = entries.list_entries("cus_a", livemode=True, limit=3, starting_after=ids(first)[-1])
    third = entries.list_entries("cus_a", livemode=True, limit=3, starting_after=ids(second)[-1])
    assert ids(second) + ids(third) == expected[3:] and third["has_more"] is False
    assert ids(entries.list_entries("cus_a", livemode=False)) == [test_mode]
    for foreign in (test_mode, made[0].replace("act_", "act_x")):  # another mode's cursor, an unknown one
        with pytest.raises(InvalidRequest) as refused:
            entries.list_entries("cus_a", livemode=True, starting_after=foreign)
        assert refused.value.details == {"starting_after": ["no activity entry of yours has this id"]}


def test_filters(conn):
    create = entry(action="scan.create", status=202, key_id="key_1", at=T,
                   subject=entries.Subject("scn_1", entries.hashes_of([("email", "Jane@example.com")])))
    read = entry(action="scan.read", key_id="key_2", resource_id="scn_1", at=T + timedelta(minutes=1))
    other = entry(action="scan.create", status=202, key_id="key_1", at=T + timedelta(minutes=2),
                  subject=entries.Subject("scn_2", entries.hashes_of([("email", "john@example.com")])))

    def listed(**filters):
        return ids(entries.list_entries("cus_a", livemode=True, **filters))

    assert listed(action="scan.create") == [other, create]
    assert listed(key_id="key_2") == [read]
    assert listed(resource_id="scn_1") == [read, create]
    assert listed(created_after=T, created_before=T + timedelta(minutes=2)) == [read]  # both bounds exclusive
    # The target in its canonical form: no case counts, nor the white space around it.
    assert listed(target="  Jane@EXAMPLE.com ") == [create]
    assert listed(target="jane@example.com") == [create]
    assert listed(target="john@example.com", action="scan.read") == []
    with pytest.raises(InvalidRequest) as refused:
        listed(target="jane@")
    assert refused.value.code == "invalid_target"
    with pytest.raises(InvalidRequest) as refused:
        listed(target="ab")
    assert refused.value.code == "target_too_short"


def test_the_portals_page_shows_both_modes_unless_asked_and_the_export_reads_everything(conn):
    live, test = entry(at=T), entry(livemode=False, at=T + timedelta(seconds=1))
    page = entries.portal_entries("cus_a", limit=1)
    assert [e["activity_id"] for e in page["entries"]] == [test] and page["next"] == test
    later = entries.portal_entries("cus_a", limit=1, starting_after=page["next"])
    assert [e["activity_id"] for e in later["entries"]] == [live] and later["next"] is None
    assert [e["activity_id"] for e in entries.portal_entries("cus_a", livemode=True)["entries"]] == [live]
    many = [entry(at=T + timedelta(seconds=10 + i)) for i in range(7)]
    store_batches = list(store.all_rows("cus_a", livemode=True, batch=3))
    assert [row[0] for row in store_batches] == many[::-1] + [live]
    assert [e["activity_id"] for e in entries.export_entries("cus_a", livemode=None)] == many[::-1] + [test, live]
    with pytest.raises(InvalidRequest):
        entries.export_entries("cus_a", target="x")  # refused before the first row is read


def test_an_entry_of_a_day_without_a_partition_is_kept_and_moves_into_it_when_made(no_day_partitions):
    early = entry(at=T)
    assert store.partition_of(early) == DEFAULT_PARTITION
    assert entries.prepare_partitions(T) == entries.PARTITION_DAYS_AHEAD + 1
    assert store.day_partitions() == [T.date() + timedelta(days=n) for n in range(entries.PARTITION_DAYS_AHEAD + 1)]
    assert store.partition_of(early) == "activity_entry_p20310310"
    assert store.default_partition_count() == 0
    later = entry(at=T + timedelta(days=3, hours=5))
    assert store.partition_of(later) == "activity_entry_p20310313"
    assert entries.prepare_partitions(T) == 0  # made once
    assert entries.prepare_partitions(T + timedelta(days=1)) == 1  # the next day's week adds one
    assert ids(entries.list_entries("cus_a", livemode=True)) == [later, early]


def test_expiry_drops_whole_day_partitions_past_the_retention(no_day_partitions):
    retention = timedelta(days=400)  # ACTIVITY_RETENTION_DAYS' default
    past = T - retention - timedelta(days=1)  # one day past the retention
    short = T - retention + timedelta(days=1)  # one day short of it
    with freeze_time(past):
        entries.prepare_partitions(past, days_ahead=1)
        gone = entry(at=past)
    with freeze_time(short):
        entries.prepare_partitions(short, days_ahead=0)
        kept = entry(at=short)
    with freeze_time(T):
        dropped = entries.expire(T)
    # The day of ``gone`` is wholly past the retention; the next one is not (its last hours are within).
    assert dropped == 1
    assert not store.exists(gone) and store.exists(kept)
    assert store.day_partitions() == [(past + timedelta(days=1)).date(), short.date()]
    assert entries.expire(T) == 0


@pytest.mark.config(ACTIVITY_RETENTION_DAYS=30)
def test_expiry_follows_the_setting_and_clears_the_default_partition_too(no_day_partitions):
    stray_old = entry(at=T - timedelta(days=31))  # no partition for its day: the DEFAULT one holds it
    stray_recent = entry(at=T - timedelta(days=29))
    assert store.partition_of(stray_old) == store.partition_of(stray_recent) == DEFAULT_PARTITION
    entries.prepare_partitions(T - timedelta(days=40), days_ahead=0)
    in_partition = entry(at=T - timedelta(days=40))
    assert entries.expire(T) == 1
    assert not store.exists(stray_old) and not store.exists(in_partition)
    assert store.exists(stray_recent)
    assert ids(entries.list_entries("cus_a", livemode=True)) == [stray_recent]


def test_expired_days_keep_every_entry_at_least_the_retention(app):
    with app.app_context():
        days = [T.date() - timedelta(days=n) for n in (402, 401, 400, 399)]
        assert entries.expired_days(days, T) == days[:2]


def test_the_periodic_job_makes_and_drops_partitions(no_day_partitions, redis_conn):
    from app import periodic

    with freeze_time(T - timedelta(days=500)):
        entries.prepare_partitions(T - timedelta(days=500), days_ahead=0)
    with freeze_time(T):
        report = periodic.run(periodic.BY_NAME["activity_log"])
    assert report["activity_partitions_made"] == entries.PARTITION_DAYS_AHEAD  # the days still to come
    assert report["activity_partitions_dropped"] == 1
    assert store.day_partitions()[0] == T.date() + timedelta(days=1)


def test_the_periodic_job_leaves_a_day_that_has_begun_in_the_default_partition(no_day_partitions):
    """It runs while the service writes: a partition attached while its day's entries are written
    refuses one, so a day that began without its partition keeps its entries where they are."""
    today = entry(at=T)
    assert entries.upkeep(T)["activity_partitions_made"] == entries.PARTITION_DAYS_AHEAD
    assert store.day_partitions() == [T.date() + timedelta(days=n) for n in range(1, entries.PARTITION_DAYS_AHEAD + 1)]
    assert store.partition_of(today) == DEFAULT_PARTITION
    later = entry(at=T + timedelta(hours=1))
    assert ids(entries.list_entries("cus_a", livemode=True)) == [later, today]
    assert entries.upkeep(T + timedelta(days=1))["activity_partitions_made"] == 1  # only the new last day


def test_upkeep_that_cannot_get_its_locks_waits_for_its_next_turn(no_day_partitions, database_url, caplog):
    """Another transaction holds the log's table: the partition change gives up after its lock
    timeout (it would hold up every insert queued behind it), and the next turn does it."""
    import psycopg2

    other = psycopg2.connect(database_url)
    try:
        other.cursor().execute('LOCK TABLE "activity_entry" IN ACCESS EXCLUSIVE MODE')  # in its transaction
        assert entries.upkeep(T) == {"activity_partitions_made": 0, "activity_partitions_dropped": 0}
    finally:
        other.rollback()
        other.close()
    assert "activity log upkeep postponed to its next turn: OperationalError" in caplog.text
    assert store.day_partitions() == []
    assert entries.upkeep(T)["activity_partitions_made"] == entries.PARTITION_DAYS_AHEAD


def test_the_target_filter_finds_every_spelling_of_a_target(conn):
    email = entry(action="scan.create", status=202, at=T,
                  subject=entries.Subject("scn_1", entries.hashes_of([("email", "Jane.Doe@example.com")])))
    handle = entry(action="scan.create", status=202, at=T + timedelta(minutes=1),
                   subject=entries.Subject("scn_2", entries.hashes_of([("username", "SuppHandle")])))
    phone = entry(action="bulk.create", status=202, at=T + timedelta(minutes=2),
                  subject=entries.Subject("blk_1", entries.hashes_of([("phone", "+14155550199")])))

    def listed(target):
        return ids(entries.list_entries("cus_a", livemode=True, target=target))

    for spelling in ("jane.doe@example.com", "JANE.DOE@EXAMPLE.COM", " Jane.Doe@Example.com "):
        assert listed(spelling) == [email], spelling
    for spelling in ("supphandle", "@SUPPHANDLE", "SuppHandle"):
        assert listed(spelling) == [handle], spelling
    for spelling in ("+1 (415) 555-0199", "+1.415.555.0199", "+1-415-555-0199", "+14155550199"):
        assert listed(spelling) == [phone], spelling
    # An entry keeps the canonical form's hash, whatever the spelling it was created with.
    row = ActivityEntry.get(ActivityEntry.id == email)
    assert row.target_hashes == [crypto.target_hash("email", "jane.doe@example.com")]


def test_entries_written_before_canonical_forms_are_found_by_their_own_spelling(conn):
    # Before, an entry held the hash of the target as a creation stored it: local part and handle as given.
    legacy_email = entry(action="scan.create", status=202, at=T, subject=entries.Subject(
        "scn_1", (crypto.target_hash("email", "Jane.Doe@example.com"),)))
    legacy_handle = entry(action="scan.create", status=202, at=T + timedelta(minutes=1), subject=entries.Subject(
        "scn_2", (crypto.target_hash("username", "SuppHandle"),)))
    lower = entry(action="scan.create", status=202, at=T + timedelta(minutes=2), subject=entries.Subject(
        "scn_3", (crypto.target_hash("email", "kim@example.com"),)))

    def listed(target):
        return ids(entries.list_entries("cus_a", livemode=True, target=target))

    assert listed("Jane.Doe@EXAMPLE.com") == [legacy_email]  # the spelling it was created with
    assert listed("@SuppHandle") == [legacy_handle]
    assert listed("KIM@example.com") == [lower]  # a lower-case target's old hash is its canonical one


def test_the_target_filter_finds_unicode_spellings_and_entries_kept_under_the_earlier_rule(conn):
    nfd = unicodedata.normalize("NFD", "josé.garcía@example.com")
    new = entry(action="scan.create", status=202, at=T,
                subject=entries.Subject("scn_1", entries.hashes_of([("email", nfd)])))
    # Kept before NFC and IDNA forms: the hash of the domain as it was written.
    earlier = entry(action="scan.create", status=202, at=T + timedelta(minutes=1), subject=entries.Subject(
        "scn_2", (crypto.target_hash("email", "pat@bücher.example"),)))
    trunk = entry(action="scan.create", status=202, at=T + timedelta(minutes=2), subject=entries.Subject(
        "scn_3", (crypto.target_hash("phone", "+4402079460958"),)))

    def listed(target):
        return ids(entries.list_entries("cus_a", livemode=True, target=target))

    assert listed("josé.garcía@example.com") == [new]
    assert listed("pat@xn--bcher-kva.example") == listed("PAT@BÜCHER.example") == [earlier]
    assert listed("+44 20 7946 0958") == [trunk]


# --- the audit export ---------------------------------------------------------------------------

def exported(cursor=None, *, customer_id="cus_a", livemode=True, limit=1000):
    page = entries.export_page(customer_id, livemode=livemode, cursor=cursor, limit=limit)
    return [e["activity_id"] for e in page.entries], page


def test_the_export_pages_through_every_entry_of_the_mode_once_in_the_order_written(conn):
    written = [entry(at=T + timedelta(seconds=n)) for n in range(5)]
    entry(livemode=False)  # another mode
    entry("cus_b")  # another customer
    first, page = exported(limit=2)
    assert first == written[:2] and page.has_more
    second, page = exported(page.next_cursor, limit=2)
    third, last = exported(page.next_cursor, limit=2)
    assert second == written[2:4] and third == written[4:] and not last.has_more
    again, empty = exported(last.next_cursor)
    assert again == [] and empty.next_cursor == last.next_cursor  # caught up: ask later with the same cursor
    later = entry(at=T - timedelta(days=1))  # an earlier clock: still after everything exported
    assert exported(last.next_cursor)[0] == [later]
    assert exported(livemode=False)[0] != [] and exported(customer_id="cus_b")[0] != []


def test_an_entry_still_being_written_holds_the_export_back_so_it_is_never_skipped(conn, database_url):
    """An entry's time and id are chosen before its transaction commits: a transaction that began
    first may commit last, behind entries already exported. The export stops before the oldest
    transaction still running, so the late one is exported after, not lost."""
    import psycopg2

    before = entry(at=T)
    other = psycopg2.connect(database_url)
    try:
        row = entries._row(entry_id="act_late", created_at=T + timedelta(seconds=1), customer_id="cus_a",
                            livemode=True, action="scan.read", status=200, credits=1)
        other.cursor().execute(store.INSERT.replace("?", "%s"), store.values(row))  # not committed yet
        after = entry(at=T + timedelta(seconds=2))  # committed, with a later time
        held, page = exported()
        assert held == [before]  # `after` waits for the open transaction
        other.commit()
    finally:
        other.close()
    rest, _ = exported(page.next_cursor)
    assert rest == ["act_late", after]


def test_a_cursor_the_service_did_not_make_is_refused(conn):
    for cursor in ("nope", "bm9wZQ", entries.encode_cursor(("0", T, "act_1")).replace("M", "!")):
        with pytest.raises(InvalidRequest) as refused:
            entries.export_page("cus_a", livemode=True, cursor=cursor)
        assert "cursor" in refused.value.details


def test_entries_moved_into_their_day_partition_are_not_exported_again(no_day_partitions):
    first = entry(at=T)
    exported_ids, page = exported()
    assert exported_ids == [first] and store.partition_of(first) == DEFAULT_PARTITION
    entries.prepare_partitions(T)  # moves it out of the DEFAULT partition
    assert store.partition_of(first) != DEFAULT_PARTITION
    assert exported(page.next_cursor)[0] == []
