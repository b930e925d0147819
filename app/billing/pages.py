"""Usage: balance, limits, charts of scans and credits, the ledger and its CSV export."""
from __future__ import annotations

from datetime import timedelta

from flask import flash, g, render_template, request

from app.accounts import portal_roles as roles
from app.billing import charges, quotas
from app.billing import usage as usage_service
from app.billing.limits import limits_for
from app.plumbing.errors import InvalidRequest
from app.plumbing.models import utcnow
from app.portal import charts, security
from app.portal.blueprint import bp, csv_cell, csv_download, form_errors, page_arg
from app.portal.forms import LedgerExportForm


def _activity_charts(customer_id: str, now) -> list[dict]:
    days = usage_service.activity(customer_id, "day", now)
    hours = usage_service.activity(customer_id, "hour", now)
    out = []
    for chart_id, heading, buckets, short, every in (
            ("per-day", "Last 30 days, per day", days, [b.start.strftime("%m-%d") for b in days], 3),
            ("per-hour", "Last 48 hours, per hour (UTC)", hours, [b.start.strftime("%H:00") for b in hours], 4)):
        scans_total, credits_total = sum(b.scans for b in buckets), sum(b.credits for b in buckets)
        description = (f"{scans_total} scans created and {credits_total} credits spent from {buckets[0].label} "
                       f"to {buckets[-1].label} UTC.")
        svg = charts.bar_chart(chart_id, f"Scans created and credits spent: {heading.lower()}", description,
                               [b.label for b in buckets],
                               [("scans created", "scans", [b.scans for b in buckets]),
                                ("credits spent", "credits", [b.credits for b in buckets])],
                               short=short, tick_every=every)
        out.append({"id": chart_id, "heading": heading, "svg": svg, "buckets": buckets,
                    "scans": scans_total, "credits": credits_total})
    return out


def _usage_page(form: LedgerExportForm | None = None, code: int = 200):
    customer = g.portal_customer
    now = utcnow()
    limits = limits_for(customer)
    window = quotas.window_usage(customer.id, now)
    quota = [("In flight now", quotas.inflight_count(customer.id), limits.inflight),
             ("Created in the last hour", window.hour, limits.hour),
             ("Created in the last 24 hours", window.day, limits.day)]
    if form is None:
        form = LedgerExportForm(formdata=None, start=(now - timedelta(days=29)).date(), end=now.date())
    ledger = usage_service.ledger_page(customer.id, page_arg())
    return render_template("portal/usage.html", customer=customer, quota=quota, ledger=ledger,
                           charts=_activity_charts(customer.id, now), export=form,
                           prices=charges.PRICE_WORDS), code


@bp.get("/usage")
@security.requires(roles.READ)
def usage():
    return _usage_page()


# "reads": how many reads a row of summed reads holds (empty on other rows); last, so that
# readers of the earlier columns by position keep working.
CSV_COLUMNS = ("time_utc", "change", "balance_after", "kind", "what", "endpoint", "scan_id", "bulk_id",
               "request_id", "reason", "reads")


@bp.get("/usage/ledger.csv")
@security.requires(roles.READ)
def ledger_csv():
    form = LedgerExportForm(formdata=request.args)
    period = None
    if form.validate():
        try:
            period = usage_service.check_period(form.start.data, form.end.data)
        except InvalidRequest as exc:
            form.end.errors = list(form.end.errors) + [str(exc)]
    if period is None:
        flash("Ledger export: " + form_errors(form), "error")
        return _usage_page(form, 400)
    customer_id = g.portal_customer.id

    rows = ([entry["created_at"].strftime("%Y-%m-%dT%H:%M:%SZ"), entry["delta"], entry["balance_after"], entry["kind"]]
            + [csv_cell(entry[name]) for name in ("what", "endpoint", "scan_id", "bulk_id", "request_id", "reason")]
            + [entry["reads"] or ""]
            for entry in usage_service.ledger_export(customer_id, *period))
    return csv_download(f"ledger-{form.start.data.isoformat()}-to-{form.end.data.isoformat()}.csv", CSV_COLUMNS,
                        rows)
