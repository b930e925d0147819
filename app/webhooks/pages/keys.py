"""API keys: the list, a key's page (webhook, signing secrets, access, deliveries) and its forms."""
from __future__ import annotations

from datetime import datetime, timedelta

from flask import abort, current_app, flash, g, redirect, render_template, request, url_for
from wtforms.fields.choices import SelectChoice

from app.accounts import access, admin
from app.accounts import portal_roles as roles
from app.accounts.models import ApiKey
from app.events import kinds as events
from app.plumbing.config import retry_schedule_words
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import AccountError
from app.plumbing.models import utcnow
from app.portal import security
from app.portal.blueprint import bp, form_errors, page_arg
from app.portal.forms import AccessForm, ActionForm, RollSecretForm, WebhookForm
from app.webhooks import delivery_console, delivery_log, endpoints, key_settings, outbox, signing_secrets
from app.webhooks.pages.forms import EndpointForm

STATUSES = delivery_log.STATUSES
EVENTS = events.delivery_events()


@bp.get("/")
@security.requires(roles.READ)
def home():
    return redirect(url_for("portal.keys"))


@bp.get("/api-keys")
@security.requires(roles.READ)
def keys():
    found, now = admin.customer_keys(g.portal_customer.id), utcnow()
    return render_template("portal/keys.html", keys=found, action=ActionForm(),
                           expired={key.id for key in found if access.is_expired(key, now)})


def owned_key_or_404(key_id: str) -> ApiKey:
    try:
        return key_settings.owned_key(key_id, g.portal_customer.id)
    except LookupError:
        abort(404)


@bp.get("/api-keys/<key_id>")
@security.requires(roles.READ)
def key_page(key_id):
    return render_key_page(owned_key_or_404(key_id))


def render_key_page(key: ApiKey, *, form: WebhookForm | None = None, revealed: str | None = None, code: int = 200,
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
                                                 endpoint_id=endpoint, page=page_arg())
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
                           secret_state=signing_secrets.secret_state(key), roll=roll or RollSecretForm(formdata=None),
                           confirm_roll=confirm_roll, access_form=access_form, scope_words=access.SCOPE_WORDS,
                           endpoints=endpoint_rows,
                           endpoint_labels={e["endpoint_id"]: e["description"] or e["url"] for e in endpoint_rows},
                           endpoint_form=endpoint_form or EndpointForm(formdata=None),
                           max_endpoints=endpoints.MAX_ENDPOINTS, endpoint_roll=endpoint_roll,
                           first_endpoint_id=outbox.first_endpoint_id(key.id),
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


def back_to_key(key_id, **args):
    return redirect(url_for("portal.key_page", key_id=key_id, **args))


def run_action(key_id, action, success: str, *,
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


def key_button(key_id, action, success: str, **refusal):
    """A button on the key's page: the customer's key (else 404), ``action(key)`` run when the
    button's form is valid (its CSRF token), its outcome flashed (``run_action``, ``refusal`` as
    its ``refused``), then back to the key's page."""
    key = owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        run_action(key.id, lambda: action(key), success, **refusal)
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/webhook")
@security.requires(roles.WEBHOOKS)
def save_webhook(key_id):
    key = owned_key_or_404(key_id)
    form = WebhookForm()
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, form=form, code=400)
    try:
        key_settings.set_webhook(key.id, g.portal_customer.id, form.url.data, form.secret.data or None)
        key_settings.set_payload(key.id, g.portal_customer.id, form.payload.data)
    except LookupError:
        abort(404)
    except AccountError as exc:  # the URL or secret refused, with the reason: a form error
        flash(str(exc), "error")
        return render_key_page(key, form=form, code=400)
    flash("Webhook settings saved.", "ok")
    return back_to_key(key.id)


def _scope_choices(form: AccessForm, key: ApiKey) -> None:
    """The scopes the form offers: every scope, those the key lacks shown but not offered."""
    form.scopes.choices = [SelectChoice(scope, scope) for scope in access.SCOPES if scope in key.scopes]


@bp.post("/api-keys/<key_id>/access")
@security.requires(roles.KEY_ACCESS)
def save_access(key_id):
    """Narrow the key's scopes, make its expiry earlier, edit its allowlist (D21): a wider set of
    scopes or a later expiry is refused whole, nothing changed."""
    key = owned_key_or_404(key_id)
    form = AccessForm()
    _scope_choices(form, key)
    form.scopes.pre_validate = lambda _form: None  # a scope the key lacks is the service's refusal, said plainly
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, access_form=form, code=400)
    try:
        access.narrow_access(key.id, g.portal_customer.id, scopes=form.scopes.data or [],
                             expires_at=access.expiry_on(form.expires_on.data, key.expires_at),
                             allowed_ips=form.allowed_ips.data or "")
    except LookupError:
        abort(404)
    except AccountError as exc:
        flash(str(exc), "error")
        return render_key_page(key, access_form=form, code=400)
    flash("Access of the key saved.", "ok")
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/secret")
@security.requires(roles.WEBHOOKS)
def new_secret(key_id):
    key = owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = run_action(key.id, lambda: signing_secrets.generate_secret(key.id, g.portal_customer.id),
                      "A new signing secret is in force. Update your receiver.")
        if secret:
            return render_key_page(owned_key_or_404(key.id), revealed=secret)
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/secret/roll")
@security.requires(roles.WEBHOOKS)
def roll_secret(key_id):
    """Rolling rotation, in two steps: the first POST shows when the overlap would end and
    asks to confirm; the confirmed one creates the next secret and shows it once."""
    key = owned_key_or_404(key_id)
    form = RollSecretForm()
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, roll=form, code=400)
    hours = form.overlap_hours.data
    if form.confirm.data != "yes":
        form.confirm.data = "yes"
        return render_key_page(key, roll=form, confirm_roll=utcnow() + timedelta(hours=hours))
    rolled = run_action(key.id, lambda: signing_secrets.roll_secret(key.id, g.portal_customer.id, hours),
                  "The next signing secret is ready. Install it in your receiver before the overlap ends."
                  if hours else "A new signing secret is in force. Update your receiver.")
    if rolled:
        return render_key_page(owned_key_or_404(key.id), revealed=rolled.secret)
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/secret/switch")
@security.requires(roles.WEBHOOKS)
def switch_secret(key_id):
    return key_button(key_id, lambda key: signing_secrets.switch_secret(key.id, g.portal_customer.id),
                      "The next signing secret is now the only one.")


@bp.post("/api-keys/<key_id>/secret/reveal")
@security.requires(roles.WEBHOOKS)
def reveal_secret(key_id):
    key = owned_key_or_404(key_id)
    if ActionForm().validate_on_submit():
        secret = decrypt_secret(key.webhook_secret_enc)
        if secret:
            return render_key_page(key, revealed=secret)
        flash("The key has no signing secret to show: generate one.", "error")
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/test-event")
@security.requires(roles.WEBHOOKS)
def test_event(key_id):
    return key_button(key_id, lambda key: outbox.send_test_event(key.id, g.portal_customer.id),
                      "Test event queued: its attempts appear below.")


@bp.post("/api-keys/<key_id>/deliveries/<delivery_id>/redeliver")
@security.requires(roles.DELIVERIES)
def redeliver(key_id, delivery_id):
    return key_button(key_id, lambda _key: delivery_log.redeliver(delivery_id, g.portal_customer.id),
                      f"Delivery {delivery_id} queued again.")
