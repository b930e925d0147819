"""Every domain's event kinds, declared to the events' registry (``app.events.kinds.declare``)
from the modules their domains keep them in, in the order customers read them.

``import app`` runs this first (``app/__init__.py``), so every process, and every module that
reads the registry, which can only be imported through the ``app`` package, sees the whole list;
the registry refuses to be read before it. A kind added to one of these modules' ``KINDS`` needs
nothing here."""
from app.events import kinds
from app.privacy import event_kinds as privacy
from app.sources import event_kinds as sources
from app.watches import event_kinds as watches
from app.webhooks import event_kinds as webhooks

kinds.declare(*webhooks.KINDS, *watches.KINDS, *sources.KINDS, *privacy.KINDS)
