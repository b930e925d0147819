"""The sources' event kinds (D30): about one of the engine's sources, not about a customer's scan:
its status changed (worse: degraded; back to healthy: recovered). Bodies ``{event, source_id, name,
status, previous_status, at}`` (``app.sources.health``), no personal data; only to endpoints and
streams that list them, never in a feed that names no kind. Declared to the registry by
``app.declared``."""
from app.events.kinds import Kind

SOURCE_DEGRADED = "source.degraded"
SOURCE_RECOVERED = "source.recovered"

KINDS = tuple(Kind(name, in_default_feed=False) for name in (SOURCE_DEGRADED, SOURCE_RECOVERED))
