"""Events: the registry of event kinds, the stored feed and its stream.

Offers: ``kinds`` (every event's name, when it fires and its body), ``feed``, ``models``."""
