"""A key's webhook endpoints (D22), on the key's page: add, change, enable or disable, roll and switch
secrets, delete."""
from __future__ import annotations

from datetime import timedelta

from flask import flash, request

from app.accounts import portal_roles as roles
from app.plumbing.errors import Conflict, InvalidRequest, SecretChanged
from app.plumbing.models import utcnow
from app.portal import security
from app.portal.blueprint import bp, form_errors
from app.portal.forms import RollSecretForm
from app.webhooks import endpoints
from app.webhooks.pages.forms import EndpointForm
from app.webhooks.pages.keys import back_to_key, key_button, owned_key_or_404, render_key_page, run_action


@bp.post("/api-keys/<key_id>/endpoints")
@security.requires(roles.ENDPOINTS)
def add_endpoint(key_id):
    key = owned_key_or_404(key_id)
    form = EndpointForm()
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, endpoint_form=form, code=400)
    created = run_action(key.id, lambda: endpoints.create(
        key, url=form.url.data, events=form.events.data, payload=form.payload.data,
        description=form.description.data or ""), "Endpoint added. Copy its signing secret to your receiver.",
        refused=(InvalidRequest, Conflict))
    if created is None:
        return render_key_page(key, endpoint_form=form, code=400)
    return render_key_page(owned_key_or_404(key.id), revealed=created[1])


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>")
@security.requires(roles.ENDPOINTS)
def update_endpoint(key_id, endpoint_id):
    key = owned_key_or_404(key_id)
    form = EndpointForm(prefix=endpoint_id)
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, code=400)
    done = run_action(key.id, lambda: endpoints.update(
        key, endpoint_id, url=form.url.data, events=form.events.data, payload=form.payload.data,
        description=form.description.data or ""), "Endpoint saved.", refused=InvalidRequest)
    return back_to_key(key.id) if done is not None else render_key_page(key, code=400)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/enabled")
@security.requires(roles.ENDPOINTS)
def set_endpoint_enabled(key_id, endpoint_id):
    enable = request.form.get("enabled") == "yes"
    return key_button(key_id, lambda key: endpoints.set_enabled(key, endpoint_id, enabled=enable),
                      "Endpoint enabled: events are sent to it again." if enable else "Endpoint disabled.",
                      refused=InvalidRequest)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/roll-secret")
@security.requires(roles.ENDPOINTS)
def roll_endpoint_secret(key_id, endpoint_id):
    """A further endpoint's rolling rotation (D16), in two steps as the key's: the first POST shows
    when the overlap would end and asks to confirm; the confirmed one shows the next secret once."""
    key = owned_key_or_404(key_id)
    form = RollSecretForm()
    if not form.validate_on_submit():
        flash(form_errors(form), "error")
        return render_key_page(key, code=400)
    hours = form.overlap_hours.data
    if form.confirm.data != "yes":
        return render_key_page(key, endpoint_roll={"endpoint_id": endpoint_id, "hours": hours,
                                             "ends": utcnow() + timedelta(hours=hours)})
    rolled = run_action(key.id, lambda: endpoints.roll_secret(key, endpoint_id, overlap_hours=hours),
                  "The endpoint's next signing secret is ready. Install it in its receiver before the "
                  "overlap ends." if hours else "A new signing secret is in force for the endpoint.",
                  refused=(InvalidRequest, SecretChanged))
    if rolled:
        return render_key_page(owned_key_or_404(key.id), revealed=rolled.secret)
    return back_to_key(key.id)


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/switch-secret")
@security.requires(roles.ENDPOINTS)
def switch_endpoint_secret(key_id, endpoint_id):
    return key_button(key_id, lambda key: endpoints.switch_secret(key, endpoint_id),
                      "The endpoint's next signing secret is now its only one.",
                      refused=(InvalidRequest, SecretChanged))


@bp.post("/api-keys/<key_id>/endpoints/<endpoint_id>/delete")
@security.requires(roles.ENDPOINTS)
def delete_endpoint(key_id, endpoint_id):
    return key_button(key_id, lambda key: endpoints.delete(key, endpoint_id), "Endpoint deleted.",
                      refused=InvalidRequest)
