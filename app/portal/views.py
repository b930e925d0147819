"""Portal pages (D12). Views are thin: the rules live in ``app.services``."""
from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Response,
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)

from app import events
from app.api import actions as api_actions
from app.config import retry_schedule_words
from app.models import ApiKey, utcnow
from app.portal import audit, charts, security
from app.portal.forms import ActionForm, EraseForm, LedgerExportForm, LoginForm, RollSecretForm, WebhookForm
from app.services import (
    accounts,
    activity,
    billing,
    delivery_console,
    erasure,
    findings,
    portal_users,
    quotas,
    reads,
    targets,
    webhooks,
)
from app.services import usage as usage_service
from app.services.accounts import AccountError
from app.services.crypto import decrypt_secret
from app.services.errors import Forbidden, InvalidRequest, NotFound, ScanInFlight
from app.services.limits import limits_for

bp = Blueprint("portal", __name__, url_prefix="/app", template_folder="templates", static_folder="static")
bp.after_request(security.add_security_headers)
bp.after_request(audit.record_action)  # every portal action is an activity log entry (D20)


@bp.context_processor
def inject_logout_form():
    return {"logout_form": ActionForm()}

STATUSES = webhooks.STATUSES
EVENTS = events.NAMES


def _moment(value) -> datetime | None:
    """A datetime from a model field or a D6 ISO string (the services' dicts carry those)."""
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    return value


@bp.app_template_filter("utc")
def utc(value) -> str:
    moment = _moment(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"


@bp.app_template_filter("ago")
def ago(value) -> str:
    moment = _moment(value)
    if not moment:
        return ""
    seconds = int((utcnow() - moment).total_seconds())
    if seconds < 0:
        return "in the future"
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if unit == 'day' and count > 1 else ''} ago"
    return "just now"


@bp.app_template_filter("safe_href")
def safe_href(value) -> str | None:
    """A link target only when it is an absolute http(s) URL: a result comes from the
    engine, and a ``javascript:`` or ``data:`` URL must never become a link."""
    if not isinstance(value, str):
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    return value.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def _page_arg() -> int:
    page = request.args.get("page", "1")
    return int(page) if page.isdigit() and 0 < int(page) < 100000 else 1


def _choice(name: str, allowed) -> str | None:
    value = request.args.get(name)
    return value if value in allowed else None


@bp.get("/")
def home():
    return redirect(url_for("portal.keys"))


@bp.route("/login", methods=["GET", "POST"])
def login():
    form = LoginForm()
    status, headers = 200, {}
    if form.validate_on_submit():
        try:
            # remote_addr is the client's address: ProxyFix has applied X-Forwarded-For
            # through TRUSTED_PROXIES proxies, and only those.
            user = portal_users.authenticate(form.email.data, form.password.data, request.remote_addr)
        except portal_users.LoginThrottled as exc:
            minutes = -(-exc.retry_after // 60)
            flash(f"Too many failed attempts. Wait {minutes} minute{'s' if minutes > 1 else ''} and try again.",
                  "error")
            status, headers = 429, {"Retry-After": str(exc.retry_after)}
        except portal_users.LoginRefused:
            flash("E-mail or password is wrong.", "error")
            status = 401
        else:
            security.begin_session(user)
            return redirect(security.safe_next(form.next.data) or url_for("portal.keys"))
    elif request.method == "GET":
        form.next.data = security.safe_next(request.args.get("next")) or ""
    return render_template("portal/login.html", form=form), status, headers


@bp.post("/logout")
def logout():
    form = ActionForm()
    if form.validate_on_submit():
        security.end_session()
    return redirect(url_for("portal.login"))


@bp.get("/api-keys")
@security.login_required
def keys():
    return render_template("portal/keys.html", keys=accounts.customer_keys(g.portal_customer.id), action=ActionForm())


def _owned_key_or_404(key_id: str) -> ApiKey:
    try:
        return webhooks.owned_key(key_id, g.portal_customer.id)
    except LookupError:
        abort(404)


@bp.get("/api-keys/<key_id>")
@security.login_required
def key_page(key_id):
    return _key_page(_owned_key_or_404(key_id))


def _key_page(key: ApiKey, *, form: WebhookForm | None = None, revealed: str | None = None, code: int = 200,
              roll: RollSecretForm | None = None, confirm_roll: datetime | None = None):
    """The key's page. A POST that reveals a secret or refuses the webhook form answers with it
    directly: the secret then lives only in that one response (no-store), never in the cookie."""
    status = request.args.get("status") if request.args.get("status") in STATUSES else None
    event = request.args.get("event") if request.args.get("event") in EVENTS else None
    deliveries = delivery_console.key_deliveries(key.id, g.portal_customer.id, status=status, event=event,
                                                 page=_page_arg())
    if form is None:
        form = WebhookForm(formdata=None, url=key.webhook_url or "", payload=key.webhook_payload)
    form.secret.data = ""  # a typed secret is not echoed back in the page
    html = render_template("portal/key.html", key=key, form=form, action=ActionForm(), deliveries=deliveries,
                           status=status, event=event, statuses=STATUSES, events=EVENTS, revealed=revealed,
                           secret_state=webhooks.secret_state(key), roll=roll or RollSecretForm(formdata=None),
                           confirm_roll=confirm_roll,
                           retry_schedule=retry_schedule_words(current_app.config["WEBHOOK_RETRY_SCHEDULE"]),
                           webhook_timeout=f'{current_app.config["WEBHOOK_TIMEOUT_SECONDS"]:g}')
    return html, code


def _back(key_id, **args):
    return redirect(url_for("portal.key_page", key_id=key_id, **args))


def _run(key_id, action, success: str):
    """Run a service action for the key's owner and flash its outcome."""
    try:
        result = action()
    except LookupError:
        abort(404)
    except AccountError as exc:
        flash(str(exc), "error")
        return None
    flash(success, "ok")
    return result


@bp.post("/api-keys/<key_id>/webhook")
@security.login_required
def save_webhook(key_id):
    key = _owned_key_or_404(key_id)
    form = WebhookForm()
    if not form.validate_on_submit():
        flash("; ".join(f"{form[name].label.text}: {', '.join(errs)}" for name, errs in form.errors.items()), "error")
        return _key_page(key, form=form, code=400)
    try:
        webhooks.set_webhook(key.id, g.portal_customer.id, form.url.data, form.secret.data or None)
        webhooks.set_payload(key.id, g.portal_customer.id, form.payload.data)
    except LookupError:
        abort(404)
    except AccountError as exc:  # the URL or secret refused, with the reason: a form error
        flash(str(exc), "error")
        return _key_page(key, form=form, code=400)
    flash("Webhook settings saved.", "ok")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret")
@security.login_required
def new_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = _run(key.id, lambda: webhooks.generate_secret(key.id, g.portal_customer.id),
                      "A new signing secret is in force. Update your receiver.")
        if secret:
            return _key_page(_owned_key_or_404(key.id), revealed=secret)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/roll")
@security.login_required
def roll_secret(key_id):
    """Rolling rotation, in two steps: the first POST shows when the overlap would end and
    asks to confirm; the confirmed one creates the next secret and shows it once."""
    key = _owned_key_or_404(key_id)
    form = RollSecretForm()
    if not form.validate_on_submit():
        flash("; ".join(f"{form[name].label.text}: {', '.join(errs)}" for name, errs in form.errors.items()), "error")
        return _key_page(key, roll=form, code=400)
    hours = form.overlap_hours.data
    if form.confirm.data != "yes":
        form.confirm.data = "yes"
        return _key_page(key, roll=form, confirm_roll=utcnow() + timedelta(hours=hours))
    rolled = _run(key.id, lambda: webhooks.roll_secret(key.id, g.portal_customer.id, hours),
                  "The next signing secret is ready. Install it in your receiver before the overlap ends."
                  if hours else "A new signing secret is in force. Update your receiver.")
    if rolled:
        return _key_page(_owned_key_or_404(key.id), revealed=rolled.secret)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/switch")
@security.login_required
def switch_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.switch_secret(key.id, g.portal_customer.id),
             "The next signing secret is now the only one.")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/reveal")
@security.login_required
def reveal_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = decrypt_secret(key.webhook_secret_enc)
        if secret:
            return _key_page(key, revealed=secret)
        flash("The key has no signing secret to show: generate one.", "error")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/test-event")
@security.login_required
def test_event(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.send_test_event(key.id, g.portal_customer.id),
             "Test event queued: its attempts appear below.")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/deliveries/<delivery_id>/redeliver")
@security.login_required
def redeliver(key_id, delivery_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.redeliver(delivery_id, g.portal_customer.id),
             f"Delivery {delivery_id} queued again.")
    return _back(key.id)


# --- scans and batches ------------------------------------------------------------------

@bp.get("/scans")
@security.login_required
def scans():
    customer_id = g.portal_customer.id
    keys = accounts.customer_keys(customer_id)
    filters = {"status": _choice("status", reads.STATUSES), "kind": _choice("kind", targets.KINDS),
               "key": _choice("key", {k.id for k in keys}),
               "bulk": (request.args.get("bulk") or "").strip()[:60] or None,
               "q": (request.args.get("q") or "").strip()[:reads.MAX_SEARCH] or None}
    listing = reads.portal_scans(customer_id, status=filters["status"], kind=filters["kind"], key_id=filters["key"],
                                 bulk_id=filters["bulk"], search=filters["q"], page=_page_arg())
    return render_template("portal/scans.html", scans=listing, filters=filters, keys=keys,
                           statuses=reads.STATUSES, kinds=targets.KINDS)


@bp.get("/scans/<scan_id>")
@security.login_required
def scan_page(scan_id):
    try:
        scan = reads.scan_detail(g.portal_customer.id, scan_id)
    except NotFound:
        abort(404)
    return render_template("portal/scan.html", scan=scan, explained=_explained(scan.get("result")),
                           action=ActionForm(), erase_form=EraseForm(),
                           retention_days=g.portal_customer.result_retention_days,
                           deliveries=webhooks.scan_deliveries(scan["scan_id"], g.portal_customer.id))


# What the scan page shows for each failed, found or silent source.
SOURCE_BADGES = {"found": "ok", "not_found": "", "skipped": "", "error": "failed", "rate_limited": "failed",
                 "timeout": "failed"}


def _explained(result: dict | None) -> dict:
    """The result's findings by path and sources by id, for the scan page's tables and links."""
    if not result:
        return {"by_path": {}, "sources": {}, "badges": SOURCE_BADGES}
    return {"by_path": {f["path"]: f for f in result.get("findings") or []},
            "sources": {s["id"]: s for s in result.get("sources") or []}, "badges": SOURCE_BADGES}


@bp.post("/scans/<scan_id>/findings/<finding_id>/feedback")
@security.login_required
def finding_feedback(scan_id, finding_id):
    """The feedback buttons of a finding: the API's feedback, for either mode, free of charge."""
    if ActionForm().validate_on_submit():
        verdict = request.form.get("verdict")
        try:
            findings.give_feedback(g.portal_customer.id, scan_id, finding_id, verdict=verdict,
                                   note=request.form.get("note") or None, livemode=None)
        except (NotFound, Forbidden):  # another customer's scan is a 404 here, as on the scan page
            abort(404)
        except InvalidRequest as exc:
            flash(exc.message, "error")
        else:
            flash("Thank you: the finding is marked " + ("not this person." if verdict == "false_positive"
                                                         else "confirmed."), "ok")
    return redirect(url_for("portal.scan_page", scan_id=scan_id, _anchor=finding_id))


@bp.post("/scans/<scan_id>/erase")
@security.login_required
def erase_scan(scan_id):
    try:
        scan = reads.scan_detail(g.portal_customer.id, scan_id)
    except NotFound:
        abort(404)
    form = EraseForm()
    if not form.validate_on_submit():
        flash("Tick the box to confirm the erasure.", "error")
    else:
        try:
            erasure.erase_scan(customer_id=g.portal_customer.id, scan_id=scan_id, livemode=scan["livemode"])
            flash("The scan's personal data was erased.", "ok")
        except ScanInFlight as exc:
            flash(exc.message, "error")
    return redirect(url_for("portal.scan_page", scan_id=scan_id))


@bp.get("/batches/<bulk_id>")
@security.login_required
def batch_page(bulk_id):
    try:
        batch = reads.batch_detail(g.portal_customer.id, bulk_id)
    except NotFound:
        abort(404)
    return render_template("portal/batch.html", batch=batch)


# --- usage ---------------------------------------------------------------------------

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
    ledger = usage_service.ledger_page(customer.id, _page_arg())
    return render_template("portal/usage.html", customer=customer, quota=quota, ledger=ledger,
                           charts=_activity_charts(customer.id, now), export=form,
                           prices=billing.PRICE_WORDS), code


@bp.get("/usage")
@security.login_required
def usage():
    return _usage_page()


CSV_COLUMNS = ("time_utc", "change", "balance_after", "kind", "what", "endpoint", "scan_id", "bulk_id",
               "request_id", "reason")


def _csv_cell(value) -> str:
    """Text a spreadsheet would run as a formula (= + - @, tab, CR) is quoted with a leading '."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@bp.get("/usage/ledger.csv")
@security.login_required
def ledger_csv():
    form = LedgerExportForm(formdata=request.args)
    period = None
    if form.validate():
        try:
            period = usage_service.check_period(form.start.data, form.end.data)
        except InvalidRequest as exc:
            form.end.errors = list(form.end.errors) + [str(exc)]
    if period is None:
        flash("Ledger export: " + "; ".join(f"{form[name].label.text}: {', '.join(errs)}"
                                            for name, errs in form.errors.items()), "error")
        return _usage_page(form, 400)
    customer_id = g.portal_customer.id

    def rows():
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_COLUMNS)
        for entry in usage_service.ledger_export(customer_id, *period):
            writer.writerow([entry["created_at"].strftime("%Y-%m-%dT%H:%M:%SZ"), entry["delta"],
                             entry["balance_after"], entry["kind"]]
                            + [_csv_cell(entry[name]) for name in ("what", "endpoint", "scan_id", "bulk_id",
                                                                    "request_id", "reason")])
            if buffer.tell() > 16384:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()

    filename = f"ledger-{form.start.data.isoformat()}-to-{form.end.data.isoformat()}.csv"
    return Response(stream_with_context(rows()), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


# --- the activity log ---------------------------------------------------------------------

ACTIVITY_MODES = {"live": True, "test": False}
ACTIVITY_CSV_COLUMNS = ("time_utc", "mode", "action", "key_id", "user_email", "resource_id", "status", "credits",
                        "client_address", "request_id", "purpose", "case_ref")
ID_ARG = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ACTION_ARG = re.compile(r"^[a-z_]+\.[a-z_]+$")


def _moment_arg(name: str, errors: list[str]) -> datetime | None:
    """A time filter (``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM[:SS]``, UTC), as the page's inputs send it."""
    raw = (request.args.get(name) or "").strip()
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw[:32])
    except ValueError:
        errors.append(f"{name.replace('_', ' ')}: not a date and time (YYYY-MM-DD HH:MM)")
        return None
    return moment.replace(tzinfo=None) if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


def _activity_filters() -> tuple[dict, dict, list[str]]:
    """The activity page's filters as typed (for the form and links) and as the service takes
    them, with the errors of those that are not valid (such a filter is not applied)."""
    errors: list[str] = []
    shown = {name: (request.args.get(name) or "").strip()[:1000]
             for name in ("action", "key", "resource", "target", "created_after", "created_before", "mode")}
    query: dict = {"livemode": ACTIVITY_MODES.get(shown["mode"])}
    for name, column, rule in (("action", "action", ACTION_ARG), ("key", "key_id", ID_ARG),
                               ("resource", "resource_id", ID_ARG)):
        if shown[name] and not rule.match(shown[name]):
            errors.append(f"{name}: not a valid {'action name' if name == 'action' else 'id'}")
        elif shown[name]:
            query[column] = shown[name]
    for name in ("created_after", "created_before"):
        query[name] = _moment_arg(name, errors)
    if shown["target"]:
        query["target"] = shown["target"]
    return shown, query, errors


@bp.get("/activity")
@security.login_required
def activity_log():
    shown, query, errors = _activity_filters()
    cursor = request.args.get("after")
    code = 400 if errors else 200
    page = {"entries": [], "next": None}
    if not errors:
        try:
            page = activity.portal_entries(g.portal_customer.id, starting_after=cursor if cursor and
                                           ID_ARG.match(cursor) else None, **query)
        except InvalidRequest as exc:
            errors, code = [str(exc)], 400
    for error in errors:
        flash(f"Activity filter: {error}", "error")
    return render_template("portal/activity.html", page=page, filters=shown, keys=accounts.customer_keys(
        g.portal_customer.id), actions=sorted(set(audit.ACTIONS.values()) | set(api_actions.ACTIONS.values())),
        modes=ACTIVITY_MODES, export_args={k: v for k, v in shown.items() if v}), code


@bp.get("/activity.csv")
@security.login_required
def activity_csv():
    shown, query, errors = _activity_filters()
    if not errors:
        try:
            entries = activity.export_entries(g.portal_customer.id, **query)
        except InvalidRequest as exc:
            errors = [str(exc)]
    if errors:
        for error in errors:
            flash(f"Activity export: {error}", "error")
        return redirect(url_for("portal.activity_log", **{k: v for k, v in shown.items() if v}))

    def rows():
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(ACTIVITY_CSV_COLUMNS)
        for entry in entries:
            writer.writerow([entry["created_at"], "live" if entry["livemode"] else "test"]
                            + [_csv_cell(entry[name]) for name in ACTIVITY_CSV_COLUMNS[2:]])
            if buffer.tell() > 16384:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()

    filename = f"activity-{utcnow():%Y%m%dT%H%M%SZ}.csv"
    return Response(stream_with_context(rows()), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})
