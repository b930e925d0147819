"""The webhooks' event kind (D22): an event about the key's endpoints, not about a scan; its body
is ``app.webhooks.endpoints``'. Declared to the registry by ``app.declared``."""
from app.events.kinds import Kind

ENDPOINT_DISABLED = "endpoint.disabled"

KINDS = (Kind(ENDPOINT_DISABLED),)
