"""Source health (D30): each source the engine consults, its status and quarantine, its probes,
and its answers counted per minute (what the last hour's share answered and p95 are read from)."""
from peewee import BooleanField, CharField, CompositeKey, DateTimeField, IntegerField, SmallIntegerField, TextField

from app.plumbing.models import BaseModel, utcnow


class Source(BaseModel):
    id = CharField(max_length=80, primary_key=True)
    name = CharField(max_length=200)
    # JSON lists/objects as text: the kinds it answers for (empty: unknown), its probe identities
    # (E8; null when the engine lists none), the last probe rounds (newest first).
    kinds = TextField(default="[]")
    probes = TextField(null=True)
    status = CharField(max_length=10, default="healthy")
    status_since = DateTimeField(default=utcnow)
    # Answers before this are not counted (a released source starts afresh).
    counted_since = DateTimeField(default=utcnow)
    quarantined = BooleanField(default=False)
    quarantined_at = DateTimeField(null=True)
    quarantined_by = CharField(max_length=10, null=True)  # "auto" or "operator"
    quarantine_reason = CharField(max_length=300, null=True)
    # Probe rounds judged right (> 0) or wrong (< 0) in a row; 0: none yet, or unanswered.
    probe_streak = IntegerField(default=0)
    last_probe_at = DateTimeField(null=True)
    last_probe_ok = BooleanField(null=True)
    last_probes = TextField(default="[]")
    # The round in flight: its two engine ids (known-good, known-bad) and when it went.
    probe_good_id = CharField(max_length=300, null=True)
    probe_bad_id = CharField(max_length=300, null=True)
    probe_sent_at = DateTimeField(null=True)
    next_probe_at = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "source"


class SourceMinute(BaseModel):
    """A source's answers in one minute and latency class: how many, how many answered (not
    error, rate-limited or timed out). ``bucket``: the index of the latency class (-1: no latency)."""
    source_id = CharField(max_length=80)
    minute = DateTimeField()
    bucket = SmallIntegerField()
    answers = IntegerField(default=0)
    answered = IntegerField(default=0)

    class Meta:
        table_name = "source_minute"
        primary_key = CompositeKey("source_id", "minute", "bucket")
        indexes = ((("minute",), False),)
