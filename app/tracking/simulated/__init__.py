"""Simulated investigations, shared by the bundled simulator (``simulator/``) and the
service's sandbox engine for test keys (``app.tracking.sandbox_engine``, decisions D15).

Both must answer the same target the same way, so the target conventions of docs/contract.md
E3 (``conventions``) and the result generator (``results``) live here, in the service's
package: production may not ship the ``simulator`` package, and the service must not
import it. Nothing here imports Flask or touches the network.
"""
