"""The privacy's event kinds: about a person the customer holds scans of (bodies:
``app.privacy.subjects``'), one per customer and mode, to every endpoint of its keys that lists it:
``{event, scan_ids, at}``, never the target. Sent only to endpoints that list them (like every
kind but the default two), always in the feed. Declared to the registry by ``app.declared``."""
from app.events.kinds import Kind

SUBJECT_OPTED_OUT = "subject.opted_out"  # the person opted out: delete your own copies of these scans
SUBJECT_ERASED = "subject.erased"  # the person's scans were erased at their request

KINDS = (Kind(SUBJECT_OPTED_OUT), Kind(SUBJECT_ERASED))
