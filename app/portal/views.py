"""Portal pages (D12). Views are thin: the rules live in ``app.services``."""
from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from functools import partial
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
from wtforms.fields.choices import SelectChoice

from app import actions as api_actions
from app import events
from app.config import retry_schedule_words
from app.models import ApiKey, utcnow
from app.portal import audit, charts, security
from app.portal.forms import (
    AccessForm,
    ActionForm,
    CodeForm,
    EndpointForm,
    EraseForm,
    InviteForm,
    LedgerExportForm,
    LoginForm,
    RoleForm,
    RollSecretForm,
    SetPasswordForm,
    SettingsForm,
    UserStateForm,
    WebhookForm,
)
from app.services import (
    access,
    accounts,
    activity,
    billing,
    delivery_console,
    endpoints,
    erasure,
    findings,
    portal_users,
    quotas,
    reads,
    targets,
    time_bounds,
    two_factor,
    webhooks,
)
from app.services import portal_roles as roles
from app.services import scans as scans_service
from app.services import usage as usage_service
from app.services.accounts import AccountError
from app.services.crypto import decrypt_secret
from app.services.errors import Conflict, Forbidden, InvalidRequest, NotFound, ScanInFlight, SecretChanged, ServiceError
from app.services.limits import limits_for
from app.services.paging import Page

bp = Blueprint("portal", __name__, url_prefix="/app", template_folder="templates", static_folder="static")
bp.after_request(security.add_security_headers)
bp.after_request(audit.record_action)  # every portal action is an activity log entry (D20)


@bp.context_processor
def inject_logout_form():
    return {"logout_form": ActionForm(), "can": security.can, "may": security.may, "perm": roles}

STATUSES = webhooks.STATUSES
EVENTS = events.DELIVERY_EVENTS


def _moment(value) -> datetime | None:
    """A naive UTC datetime from a model field or an ISO string (the services' dicts and the
    engine's results carry those); text that is no time is None."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


@bp.app_template_filter("utc")
def utc(value) -> str:
    """Every time the portal shows, in one format."""
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


def _page_arg(source=None) -> int:
    page = (source or request.args).get("page", "1")
    return int(page) if page.isdigit() and 0 < int(page) < 100000 else 1


def _choice(name: str, allowed, source=None) -> str | None:
    value = (source or request.args).get(name)
    return value if value in allowed else None


def _filter_source():
    """Where a list's filters come from: a search posts them, so that a target never travels in
    an address (kept by server logs, browser history and Referer headers); links without one use the
    query string."""
    return request.form if request.method == "POST" else request.args


def _target_filter(name: str, label: str, limit: int, errors: list[str]) -> str:
    """A filter that holds a target (or part of one), taken only from a posted form: one in the
    address is refused with a page that says to use the form (it is not applied)."""
    value = (_filter_source().get(name) or "").strip()[:limit]
    if value and request.method != "POST":
        errors.append(f"{label}: search with the form (a target is not taken from the address)")
        return ""
    return value


@bp.get("/")
@security.requires(roles.READ)
def home():
    return redirect(url_for("portal.keys"))


@bp.route("/login", methods=["GET", "POST"])
@security.public
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
            next_path = security.safe_next(form.next.data)
            if two_factor.enabled(user):
                security.begin_second_step(user, next_path)  # no session yet: the code first
                return redirect(url_for("portal.login_code"))
            security.begin_session(user)
            return redirect(next_path or url_for("portal.keys"))
    elif request.method == "GET":
        form.next.data = security.safe_next(request.args.get("next")) or ""
    return render_template("portal/login.html", form=form), status, headers


@bp.post("/logout")
@security.public
def logout():
    form = ActionForm()
    if form.validate_on_submit():
        security.end_session()
    return redirect(url_for("portal.login"))


@bp.get("/api-keys")
@security.requires(roles.READ)
def keys():
    found, now = accounts.customer_keys(g.portal_customer.id), utcnow()
    return render_template("portal/keys.html", keys=found, action=ActionForm(),
                           expired={key.id for key in found if access.is_expired(key, now)})


def _owned_key_or_404(key_id: str) -> ApiKey:
    try:
        return webhooks.owned_key(key_id, g.portal_customer.id)
    except LookupError:
        abort(404)


@bp.get("/api-keys/<key_id>")
@security.requires(roles.READ)
def key_page(key_id):
    return _key_page(_owned_key_or_404(key_id))


def _key_page(key: ApiKey, *, form: WebhookForm | None = None, revealed: str | None = None, code: int = 200,
              roll: RollSecretForm | None = None, confirm_roll: datetime | None = None,
              access_form: AccessForm | None = None, endpoint_form: EndpointForm | None = None,
              endpoint_roll: dict | None = None):
    """The key's page. A POST that reveals a secret or refuses the webhook form answers with it
    directly: the secret then lives only in that one response (no-store), never in the cookie."""
    status = request.args.get("status") if request.args.get("status") in STATUSES else None
    event = request.args.get("event") if request.args.get("event") in EVENTS else None
    endpoint_rows = _endpoint_rows(key)
    # An endpoint of this key's (a deleted one's deliveries stay listed, unfiltered); never another key's.
    endpoint = request.args.get("endpoint_id") if request.args.get("endpoint_id") in {
        e["endpoint_id"] for e in endpoint_rows} else None
    deliveries = delivery_console.key_deliveries(key.id, g.portal_customer.id, status=status, event=event,
                                                 endpoint_id=endpoint, page=_page_arg())
    if form is None:
        form = WebhookForm(formdata=None, url=key.webhook_url or "", payload=key.webhook_payload)
    form.secret.data = ""  # a typed secret is not echoed back in the page
    if access_form is None:
        access_form = AccessForm(formdata=None, scopes=list(key.scopes),
                                 expires_on=key.expires_at.date() if key.expires_at else None,
                                 allowed_ips=access.allowlist_text(key.allowed_ips))
    _scope_choices(access_form, key)
    html = render_template("portal/key.html", key=key, form=form, action=ActionForm(), deliveries=deliveries,
                           status=status, event=event, endpoint=endpoint, statuses=STATUSES, events=EVENTS,
                           revealed=revealed,
                           secret_state=webhooks.secret_state(key), roll=roll or RollSecretForm(formdata=None),
                           confirm_roll=confirm_roll, access_form=access_form, scope_words=access.SCOPE_WORDS,
                           endpoints=endpoint_rows,
                           endpoint_labels={e["endpoint_id"]: e["description"] or e["url"] for e in endpoint_rows},
                           endpoint_form=endpoint_form or EndpointForm(formdata=None),
                           max_endpoints=endpoints.MAX_ENDPOINTS, endpoint_roll=endpoint_roll,
                           first_endpoint_id=webhooks.first_endpoint_id(key.id),
                           expired=access.is_expired(key, utcnow()),
                           retry_schedule=retry_schedule_words(current_app.config["WEBHOOK_RETRY_SCHEDULE"]),
                           webhook_timeout=f'{current_app.config["WEBHOOK_TIMEOUT_SECONDS"]:g}')
    return html, code


def _endpoint_rows(key: ApiKey) -> list[dict]:
    """The key's endpoints for its page: each with its edit form and, when auto-disable stopped it,
    since when its deliveries failed and how many (D22)."""
    rows = []
    for endpoint in endpoints.list_endpoints(key):
        form = EndpointForm(formdata=None, prefix=endpoint["endpoint_id"], url=endpoint["url"],
                            events=endpoint["events"], payload=endpoint["payload"],
                            description=endpoint["description"])
        failing = endpoints.failing_since(endpoint["endpoint_id"]) if endpoint["disabled_at"] else None
        rows.append({**endpoint, "form": form, "failed": failing[0] if failing else None,
                     "failing_since": failing[1] if failing else None})
    return rows


@bp.post("/api-keys/<key_id>/endpoints")
@security.requires(roles.ENDPOINTS)
def add_endpoint(key_id):
    key = _owned_key_or_404(key_id)
    form = EndpointForm()
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
        return _key_page(key, endpoint_form=form, code=400)
    created = _run(key.id, lambda: endpoints.create(
        key, url=form.url.data, events=form.events.data, payload=form.payload.data,
        description=form.description.data or ""), "Endpoint added. Copy its signing secret to your receiver.",
        refused=(InvalidRequest, Conflict))
    if created is None:
        return _key_page(key, endpoint_form=form, code=400)
    return _key_page(_owned_key_or_404(key.id), revealed=created[1])


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>")
@security.requires(roles.ENDPOINTS)
def update_endpoint(key_id, endpoint_id):
    key = _owned_key_or_404(key_id)
    form = EndpointForm(prefix=endpoint_id)
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
        return _key_page(key, code=400)
    done = _run(key.id, lambda: endpoints.update(
        key, endpoint_id, url=form.url.data, events=form.events.data, payload=form.payload.data,
        description=form.description.data or ""), "Endpoint saved.", refused=InvalidRequest)
    return _back(key.id) if done is not None else _key_page(key, code=400)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/enabled")
@security.requires(roles.ENDPOINTS)
def set_endpoint_enabled(key_id, endpoint_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        enable = request.form.get("enabled") == "yes"
        _run(key.id, lambda: endpoints.set_enabled(key, endpoint_id, enabled=enable),
             "Endpoint enabled: events are sent to it again." if enable else "Endpoint disabled.",
             refused=InvalidRequest)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/roll-secret")
@security.requires(roles.ENDPOINTS)
def roll_endpoint_secret(key_id, endpoint_id):
    """A further endpoint's rolling rotation (D16), in two steps as the key's: the first POST shows
    when the overlap would end and asks to confirm; the confirmed one shows the next secret once."""
    key = _owned_key_or_404(key_id)
    form = RollSecretForm()
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
        return _key_page(key, code=400)
    hours = form.overlap_hours.data
    if form.confirm.data != "yes":
        return _key_page(key, endpoint_roll={"endpoint_id": endpoint_id, "hours": hours,
                                             "ends": utcnow() + timedelta(hours=hours)})
    rolled = _run(key.id, lambda: endpoints.roll_secret(key, endpoint_id, overlap_hours=hours),
                  "The endpoint's next signing secret is ready. Install it in its receiver before the "
                  "overlap ends." if hours else "A new signing secret is in force for the endpoint.",
                  refused=(InvalidRequest, SecretChanged))
    if rolled:
        return _key_page(_owned_key_or_404(key.id), revealed=rolled.secret)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/switch-secret")
@security.requires(roles.ENDPOINTS)
def switch_endpoint_secret(key_id, endpoint_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: endpoints.switch_secret(key, endpoint_id),
             "The endpoint's next signing secret is now its only one.",
             refused=(InvalidRequest, SecretChanged))
    return _back(key.id)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/delete")
@security.requires(roles.ENDPOINTS)
def delete_endpoint(key_id, endpoint_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: endpoints.delete(key, endpoint_id), "Endpoint deleted.", refused=InvalidRequest)
    return _back(key.id)


def _back(key_id, **args):
    return redirect(url_for("portal.key_page", key_id=key_id, **args))


def _run(key_id, action, success: str, *,
         refused: type[Exception] | tuple[type[Exception], ...] = AccountError):
    """Run a service action for the key's owner and flash its outcome: an unknown object is a 404,
    a ``refused`` input (the endpoints service raises ``InvalidRequest``) a flashed error."""
    try:
        result = action()
    except LookupError:
        abort(404)
    except refused as exc:
        flash(str(exc), "error")
        return None
    flash(success, "ok")
    return result


@bp.post("/api-keys/<key_id>/webhook")
@security.requires(roles.WEBHOOKS)
def save_webhook(key_id):
    key = _owned_key_or_404(key_id)
    form = WebhookForm()
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
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


def _scope_choices(form: AccessForm, key: ApiKey) -> None:
    """The scopes the form offers: every scope, those the key lacks shown but not offered."""
    form.scopes.choices = [SelectChoice(scope, scope) for scope in access.SCOPES if scope in key.scopes]


@bp.post("/api-keys/<key_id>/access")
@security.requires(roles.KEY_ACCESS)
def save_access(key_id):
    """Narrow the key's scopes, make its expiry earlier, edit its allowlist (D21): a wider set of
    scopes or a later expiry is refused whole, nothing changed."""
    key = _owned_key_or_404(key_id)
    form = AccessForm()
    _scope_choices(form, key)
    form.scopes.pre_validate = lambda _form: None  # a scope the key lacks is the service's refusal, said plainly
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
        return _key_page(key, access_form=form, code=400)
    try:
        access.narrow_access(key.id, g.portal_customer.id, scopes=form.scopes.data or [],
                             expires_at=access.expiry_on(form.expires_on.data, key.expires_at),
                             allowed_ips=form.allowed_ips.data or "")
    except LookupError:
        abort(404)
    except AccountError as exc:
        flash(str(exc), "error")
        return _key_page(key, access_form=form, code=400)
    flash("Access of the key saved.", "ok")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret")
@security.requires(roles.WEBHOOKS)
def new_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = _run(key.id, lambda: webhooks.generate_secret(key.id, g.portal_customer.id),
                      "A new signing secret is in force. Update your receiver.")
        if secret:
            return _key_page(_owned_key_or_404(key.id), revealed=secret)
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/roll")
@security.requires(roles.WEBHOOKS)
def roll_secret(key_id):
    """Rolling rotation, in two steps: the first POST shows when the overlap would end and
    asks to confirm; the confirmed one creates the next secret and shows it once."""
    key = _owned_key_or_404(key_id)
    form = RollSecretForm()
    if not form.validate_on_submit():
        flash(_form_errors(form), "error")
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
@security.requires(roles.WEBHOOKS)
def switch_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.switch_secret(key.id, g.portal_customer.id),
             "The next signing secret is now the only one.")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/secret/reveal")
@security.requires(roles.WEBHOOKS)
def reveal_secret(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = decrypt_secret(key.webhook_secret_enc)
        if secret:
            return _key_page(key, revealed=secret)
        flash("The key has no signing secret to show: generate one.", "error")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/test-event")
@security.requires(roles.WEBHOOKS)
def test_event(key_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.send_test_event(key.id, g.portal_customer.id),
             "Test event queued: its attempts appear below.")
    return _back(key.id)


@bp.post("/api-keys/<key_id>/deliveries/<delivery_id>/redeliver")
@security.requires(roles.DELIVERIES)
def redeliver(key_id, delivery_id):
    key = _owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        _run(key.id, lambda: webhooks.redeliver(delivery_id, g.portal_customer.id),
             f"Delivery {delivery_id} queued again.")
    return _back(key.id)


# --- scans and batches ------------------------------------------------------------------

@bp.route("/scans", methods=["GET", "POST"])
@security.requires(roles.READ)
def scans():
    customer_id = g.portal_customer.id
    keys = accounts.customer_keys(customer_id)
    source, errors = _filter_source(), []
    filters = {"status": _choice("status", reads.STATUSES, source), "kind": _choice("kind", targets.KINDS, source),
               "key": _choice("key", {k.id for k in keys}, source),
               "bulk": (source.get("bulk") or "").strip()[:60] or None,
               "q": _target_filter("q", "Target contains", reads.MAX_SEARCH, errors) or None}
    listing = Page([], 0, 1, 25)  # a refused filter is not applied: nothing is listed
    if not errors:
        listing = reads.portal_scans(customer_id, status=filters["status"], kind=filters["kind"],
                                     key_id=filters["key"], bulk_id=filters["bulk"], search=filters["q"],
                                     page=_page_arg(source))
    for error in errors:
        flash(f"Scan filter: {error}", "error")
    return render_template("portal/scans.html", scans=listing, filters=filters, keys=keys, refused=bool(errors),
                           statuses=reads.STATUSES, kinds=targets.KINDS), 400 if errors else 200


@bp.get("/scans/<scan_id>")
@security.requires(roles.READ)
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
    """The result's findings by path and by id, their labels, and sources by id, for the scan
    page's tables and links."""
    if not result:
        return {"by_path": {}, "by_id": {}, "labels": {}, "sources": {}, "badges": SOURCE_BADGES}
    found = result.get("findings") or []
    return {"by_path": {f["path"]: f for f in found}, "by_id": {f["id"]: f for f in found},
            "labels": _finding_labels(result), "sources": {s["id"]: s for s in result.get("sources") or []},
            "badges": SOURCE_BADGES}


def _finding_labels(result: dict) -> dict[str, str]:
    """What a person calls each finding ("Breach: LinkedIn (2012-05)"), by its path in the result."""
    labels = {}
    for group, word in (("verified", "Verified profile"), ("weak", "Weak profile")):
        for index, p in enumerate((result.get("profiles") or {}).get(group) or []):
            labels[f"profiles.{group}[{index}]"] = f"{word}: {p.get('platform')} {p.get('handle') or ''}".strip()
    for name, word in (("emails", "E-mail address"), ("phones", "Phone number")):
        for index, value in enumerate((result.get("contacts") or {}).get(name) or []):
            labels[f"contacts.{name}[{index}]"] = f"{word}: {value}"
    for index, b in enumerate(result.get("breaches") or []):
        labels[f"breaches[{index}]"] = f"Breach: {b.get('name')}" + (f" ({b['date']})" if b.get("date") else "")
    return labels


@bp.post("/scans/<scan_id>/findings/<finding_id>/feedback")
@security.requires(roles.SCANS)
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


@bp.post("/scans/<scan_id>/rerun")
@security.requires(roles.SCANS)
def rerun_scan(scan_id):
    """The re-run button of a partial scan: the API's re-run, with the key that made the scan."""
    if not ActionForm().validate_on_submit():
        flash("The form expired: try again.", "error")
        return redirect(url_for("portal.scan_page", scan_id=scan_id))
    try:
        # Its entry is written with its charge (D25); an exception raised after carries it.
        outcome = scans_service.portal_rerun(g.portal_customer, scan_id, request_id=g.get("request_id"),
                                             entry_for=partial(audit.charged_entry, status=302))
    except NotFound:
        abort(404)
    except Exception as exc:
        audit.written(getattr(exc, activity.RECORDED, None))
        if not isinstance(exc, ServiceError):
            raise
        flash(f"Re-run refused: {exc.message}", "error")
        return redirect(url_for("portal.scan_page", scan_id=scan_id))
    audit.written(outcome.recorded)
    flash("Re-run queued: it asks again the sources that could not answer. This is its page.", "ok")
    return redirect(url_for("portal.scan_page", scan_id=outcome.body["scan_id"]))


@bp.post("/scans/<scan_id>/erase")
@security.requires(roles.SCANS)
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
@security.requires(roles.READ)
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
@security.requires(roles.READ)
def usage():
    return _usage_page()


# "reads": how many reads a row of summed reads holds (empty on other rows); last, so that
# readers of the earlier columns by position keep working.
CSV_COLUMNS = ("time_utc", "change", "balance_after", "kind", "what", "endpoint", "scan_id", "bulk_id",
               "request_id", "reason", "reads")


def _csv_cell(value) -> str:
    """Text a spreadsheet would run as a formula (= + - @, tab, CR) is quoted with a leading '."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


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
        flash("Ledger export: " + _form_errors(form), "error")
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
                                                                    "request_id", "reason")]
                            + [entry["reads"] or ""])
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
    """A time filter as the page's inputs send it (``YYYY-MM-DDTHH:MM``, UTC), under the API's
    rule (``time_bounds``): one it refuses is a form error, never a query."""
    raw = (_filter_source().get(name) or "").strip()
    if not raw:
        return None
    try:
        return time_bounds.parse(raw)
    except time_bounds.InvalidTime as exc:
        errors.append(f"{name.replace('_', ' ')}: {exc}")
        return None


def _activity_filters() -> tuple[dict, dict, list[str]]:
    """The activity page's filters as typed (for the form and links) and as the service takes
    them, with the errors of those that are not valid (such a filter is not applied)."""
    errors: list[str] = []
    source = _filter_source()
    shown = {name: (source.get(name) or "").strip()[:1000]
             for name in ("action", "key", "resource", "created_after", "created_before", "mode")}
    shown["target"] = _target_filter("target", "target", 1000, errors)
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


@bp.route("/activity", methods=["GET", "POST"])
@security.requires(roles.READ)
def activity_log():
    shown, query, errors = _activity_filters()
    cursor = _filter_source().get("after")
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
    keys = accounts.customer_keys(g.portal_customer.id)
    return render_template("portal/activity.html", page=page, filters=shown, keys=keys,
                           key_names={k.id: k.name or k.display for k in keys},
                           actions=sorted(set(audit.ACTIONS.values()) | set(api_actions.ACTIONS.values())),
                           modes=ACTIVITY_MODES, export_args={k: v for k, v in shown.items() if v},
                           cursor=cursor), code


@bp.route("/activity.csv", methods=["GET", "POST"])
@security.requires(roles.READ)
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
        # Back to the page with the other filters: a target never goes into an address.
        return redirect(url_for("portal.activity_log", **{k: v for k, v in shown.items() if v and k != "target"}))

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


# --- second login step, set-password links (D21) ------------------------------------------------

def _form_errors(form) -> str:
    return "; ".join(f"{form[name].label.text}: {', '.join(errs)}" for name, errs in form.errors.items())


@bp.route("/login/code", methods=["GET", "POST"])
@security.public
def login_code():
    """After the password, the code: the session starts only when it is right."""
    pending = security.second_step()
    if pending is None:
        return redirect(url_for("portal.login"))
    user_id, next_path = pending
    form = CodeForm()
    status, headers = 200, {}
    if form.validate_on_submit():
        try:
            user = two_factor.verify_login(user_id, form.code.data, request.remote_addr)
        except portal_users.LoginThrottled as exc:
            minutes = -(-exc.retry_after // 60)
            flash(f"Too many wrong codes. Wait {minutes} minute{'s' if minutes > 1 else ''} and try again.", "error")
            status, headers = 429, {"Retry-After": str(exc.retry_after)}
        except portal_users.LoginRefused:
            flash("The code is wrong or was used already.", "error")
            status = 401
        else:
            security.begin_session(user)
            return redirect(next_path or url_for("portal.keys"))
    return render_template("portal/login_code.html", form=form), status, headers


@bp.route("/set-password/<token>", methods=["GET", "POST"])
@security.public
def set_password(token):
    """The one-time link an owner gave a new user (or a user who needed a new password)."""
    if portal_users.password_link_user(token) is None:
        return render_template("portal/set_password.html", form=None), 404
    form = SetPasswordForm()
    if form.validate_on_submit():
        try:
            portal_users.use_password_link(token, form.password.data)
        except LookupError:
            return render_template("portal/set_password.html", form=None), 404
        except AccountError as exc:
            flash(str(exc), "error")
        else:
            security.end_session()
            flash("Your password is set: log in with it.", "ok")
            return redirect(url_for("portal.login"))
    elif request.method == "POST":
        flash(_form_errors(form), "error")
    return render_template("portal/set_password.html", form=form), 400 if request.method == "POST" else 200


# --- the user's own two-factor login -------------------------------------------------------------

def _qr_svg(uri: str) -> str:
    """The QR code as inline SVG, drawn here: the secret never goes to another service."""
    import segno
    return segno.make(uri, error="m").svg_inline(scale=5, dark="#000", light="#fff", omitsize=False)


def _two_factor_page(form: CodeForm | None = None, code: int = 200, recovery: list[str] | None = None):
    user = g.user
    if recovery is not None:  # shown once, in this response only (no-store)
        return render_template("portal/two_factor.html", recovery=recovery, enabled=True), code
    if two_factor.enabled(user):
        return render_template("portal/two_factor.html", enabled=True, form=form or CodeForm(formdata=None),
                               left=two_factor.recovery_codes_left(user),
                               required=bool(g.portal_customer.require_2fa)), code
    secret = two_factor.pending_secret(user)
    uri = two_factor.provisioning_uri(secret, user.email)
    return render_template("portal/two_factor.html", enabled=False, secret=secret, qr=_qr_svg(uri),
                           form=form or CodeForm(formdata=None), required=bool(g.portal_customer.require_2fa)), code


@bp.get("/account/two-factor", endpoint="two_factor")  # named in security.ENROLMENT_ENDPOINTS
@security.requires(roles.ACCOUNT)
def two_factor_page():
    return _two_factor_page()


@bp.post("/account/two-factor/confirm")
@security.requires(roles.ACCOUNT)
def two_factor_confirm():
    form = CodeForm()
    if not form.validate_on_submit():
        flash(_form_errors(form) or "The form expired: try again.", "error")
        return _two_factor_page(form, 400)
    try:
        codes = two_factor.confirm_enrolment(g.user, form.code.data, request.remote_addr)
    except portal_users.LoginThrottled as exc:
        flash(f"Too many wrong codes. Wait {-(-exc.retry_after // 60)} minutes and try again.", "error")
        return _two_factor_page(form, 429)
    except AccountError as exc:
        flash(f"{exc}. Check your phone's clock and type the code your app shows now.", "error")
        return _two_factor_page(form, 400)
    flash("Two-factor login is on.", "ok")
    return _two_factor_page(recovery=codes)


@bp.post("/account/two-factor/disable")
@security.requires(roles.ACCOUNT)
def two_factor_disable():
    form = CodeForm()
    if form.validate_on_submit():
        try:
            two_factor.disable(g.user, form.code.data, request.remote_addr)
        except portal_users.LoginThrottled as exc:
            flash(f"Too many wrong codes. Wait {-(-exc.retry_after // 60)} minutes and try again.", "error")
            return _two_factor_page(form, 429)
        except AccountError as exc:
            flash(str(exc), "error")
            return _two_factor_page(form, 400)
        flash("Two-factor login is off.", "ok")
    return redirect(url_for("portal.two_factor"))


# --- users and settings (owners) -----------------------------------------------------------------

def _users_page(invite: InviteForm | None = None, link: str | None = None, link_user=None, code: int = 200):
    listed = portal_users.customer_users(g.portal_customer.id)
    return render_template("portal/users.html", users=listed, invite=invite or InviteForm(formdata=None),
                           role_forms={u.id: RoleForm(formdata=None, role=u.role, prefix=u.id) for u in listed},
                           action=ActionForm(), state=UserStateForm(formdata=None), link=link, link_user=link_user,
                           role_words=roles.ROLE_WORDS, no_password=portal_users.NO_PASSWORD, link_hours=int(
                               portal_users.SET_PASSWORD_LINK_LIFETIME.total_seconds() // 3600)), code


def _link_url(token: str) -> str:
    return url_for("portal.set_password", token=token, _external=True)


@bp.get("/users")
@security.requires(roles.USERS)
def users():
    return _users_page()


@bp.post("/users")
@security.requires(roles.USERS)
def invite_user():
    form = InviteForm()
    if not form.validate_on_submit():
        flash(_form_errors(form) or "The form expired: try again.", "error")
        return _users_page(invite=form, code=400)
    try:
        user, token = portal_users.invite_user(g.portal_customer.id, email=form.email.data, role=form.role.data,
                                               by_user_id=g.user.id)
    except AccountError as exc:
        flash(str(exc), "error")
        return _users_page(invite=form, code=400)
    flash(f"{user.email} is invited. Send them the link below: it is shown only now.", "ok")
    return _users_page(link=_link_url(token), link_user=user)


def _customer_user_or_404(user_id: str):
    try:
        return portal_users.customer_user(g.portal_customer.id, user_id)
    except LookupError:
        abort(404)


@bp.post("/users/<user_id>/role")
@security.requires(roles.USERS)
def user_role(user_id):
    user = _customer_user_or_404(user_id)
    form = RoleForm(prefix=user.id)
    if form.validate_on_submit():
        try:
            portal_users.change_role(g.portal_customer.id, user.id, form.role.data, by_user_id=g.user.id)
        except AccountError as exc:
            flash(str(exc), "error")
            return _users_page(code=400)
        flash(f"{user.email} is now {form.role.data}.", "ok")
    else:
        flash(_form_errors(form) or "The form expired: try again.", "error")
        return _users_page(code=400)
    return redirect(url_for("portal.users"))


@bp.post("/users/<user_id>/state")
@security.requires(roles.USERS)
def user_state(user_id):
    user = _customer_user_or_404(user_id)
    form = UserStateForm()
    if form.validate_on_submit() and form.disabled.data in ("0", "1"):
        disabled = form.disabled.data == "1"
        try:
            portal_users.set_user_disabled(g.portal_customer.id, user.id, disabled, by_user_id=g.user.id)
        except AccountError as exc:
            flash(str(exc), "error")
            return _users_page(code=400)
        flash(f"{user.email} is {'disabled: their sessions have ended' if disabled else 'enabled'}.", "ok")
        return redirect(url_for("portal.users"))
    flash("The form expired: try again.", "error")
    return _users_page(code=400)


@bp.post("/users/<user_id>/link")
@security.requires(roles.USERS)
def user_link(user_id):
    """A new one-time set-password link (a user who lost theirs, or their password)."""
    user = _customer_user_or_404(user_id)
    if not ActionForm().validate_on_submit():
        flash("The form expired: try again.", "error")
        return _users_page(code=400)
    token = portal_users.new_password_link(g.portal_customer.id, user.id, by_user_id=g.user.id)
    flash("A new link is ready. Give it to the user: it is shown only now.", "ok")
    return _users_page(link=_link_url(token), link_user=user)


@bp.route("/settings", methods=["GET", "POST"])
@security.requires(roles.SETTINGS)
def settings():
    customer = g.portal_customer
    form = SettingsForm(formdata=None if request.method == "GET" else request.form,
                        require_2fa=customer.require_2fa, require_purpose=customer.require_purpose,
                        result_retention_days=customer.result_retention_days)
    if request.method == "POST":
        if not form.validate():
            flash(_form_errors(form) or "The form expired: try again.", "error")
            return render_template("portal/settings.html", form=form), 400
        try:
            accounts.set_settings(customer.id, require_purpose=bool(form.require_purpose.data),
                                  result_retention_days=form.result_retention_days.data)
        except AccountError as exc:
            flash(str(exc), "error")
            return render_template("portal/settings.html", form=form), 400
        if bool(form.require_2fa.data) != customer.require_2fa:
            two_factor.set_required(customer.id, bool(form.require_2fa.data), by=g.user.id)
        flash("Settings saved.", "ok")
        return redirect(url_for("portal.settings"))
    return render_template("portal/settings.html", form=form)
