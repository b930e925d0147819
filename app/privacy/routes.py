"""The erasure endpoints: erase a scan, erase a bulk batch's scans now. Tagged ``scans`` in the
OpenAPI document, beside the scan's and the batch's reads (``app.scans.routes``) on the same paths.

Views stay thin: ``app.privacy.erasure`` erases and answers; authentication, charging and the limit
headers are ``app.api.hooks``'s.
"""
from __future__ import annotations

from flask.views import MethodView

from app.accounts import access
from app.api import hooks, openapi
from app.api.base import ApiBlueprint
from app.api.openapi import HEADERS, SECURITY
from app.privacy import erasure
from app.scans.schemas import BulkErasedSchema, ScanErasedSchema

blp = ApiBlueprint("privacy", __name__, url_prefix="/api/v1",
                   description="Erase a scan's or a batch's personal data now.")
documented_errors = openapi.errors_of(blp)


@blp.route("/scan/<scan_id:scan_id>")
class ScanErase(MethodView):
    @hooks.api_call(scope=access.SCANS_ERASE, action="scan.erase")
    @blp.doc(security=SECURITY, tags=["scans"], summary="Erase a scan", operationId="eraseScan")
    @blp.response(200, ScanErasedSchema, headers=HEADERS, description="The scan is erased.",
                  example={"ok": True, "scan_id": "scn_3kT9wQ0vXl2mYp7aRz1b4Q", "erased_at": "2026-11-21T09:30:00Z"})
    @documented_errors(401, 402, 403, 404, 409, 503, overrides={
        409: "`scan_in_flight` (the scan is still queued or running; free of charge)"},
        codes={409: ("scan_in_flight",)})
    @blp.priced("call")
    def delete(self, key, scan_id):
        """Erase a completed or failed scan now: its target, result and failure message, and the bodies of its
        webhook deliveries, are deleted; a delivery still waiting to be sent is cancelled. Its id, times, purpose,
        case reference and charges stay, and its reads answer them with `erased_at`. Erasing it again answers
        the same. Costs {price}."""
        return hooks.render(erasure.erase_scan(customer_id=key.customer_id, scan_id=scan_id, livemode=key.livemode))


@blp.route("/scan/bulk/<string:bulk_id>")
class BulkErase(MethodView):
    @hooks.api_call(scope=access.SCANS_ERASE, action="bulk.erase")
    @blp.doc(security=SECURITY, tags=["scans"], summary="Erase a bulk batch", operationId="eraseBulk")
    @blp.response(200, BulkErasedSchema, headers=HEADERS, description="Every completed or failed scan of the "
                  "batch is erased.", example={"ok": True, "bulk_id": "blk_Q2x0mV8rLk1cYt6nWb3a9g", "erased": 98,
                                               "in_flight": 2})
    @documented_errors(401, 402, 403, 404, 503, codes={404: ("not_found",)})
    @blp.priced("call")
    def delete(self, key, bulk_id):
        """Erase every completed or failed scan of a batch now, as erasing each scan would; scans still queued or
        running are counted in `in_flight` and left as they are. Costs {price}."""
        return hooks.render(erasure.erase_batch(customer_id=key.customer_id, bulk_id=bulk_id, livemode=key.livemode))
