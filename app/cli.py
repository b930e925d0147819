"""Operator commands (D10), run as ``flask --app wsgi GROUP COMMAND``.

Every command prints a readable line, or one JSON object with ``--json`` so scripts
and the QA scenarios can drive it. Failures exit with status 1 and one line on
stderr (with ``--json``: ``{"ok": false, "error": ...}``).
"""
from __future__ import annotations

import json
import sys

import click
from flask import Flask
from flask.cli import AppGroup

from app.extensions import db
from app.models import ApiKey, Customer
from app.services import accounts, scans
from app.services.accounts import AccountError

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def emit(as_json: bool, payload: dict, text: str) -> None:
    click.echo(json.dumps(payload, sort_keys=True) if as_json else text)


def fail(as_json: bool, message: str):
    if as_json:
        click.echo(json.dumps({"ok": False, "error": message}))
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(1)


def run(as_json, action):
    try:
        with db.connection_context():
            return action()
    except AccountError as exc:
        fail(as_json, str(exc))


db_cli = AppGroup("db", help="Database schema.")
customers_cli = AppGroup("customers", help="Customer accounts, credits, tiers and limits.")
keys_cli = AppGroup("keys", help="API keys.")
users_cli = AppGroup("users", help="Portal users.")
scans_cli = AppGroup("scans", help="Scan maintenance.")


@db_cli.command("upgrade")
@json_option
def db_upgrade(as_json):
    """Create or migrate the schema; running it again changes nothing."""
    from app.migrations import current_version, upgrade
    applied = run(as_json, upgrade)
    version = run(as_json, current_version)
    emit(as_json, {"ok": True, "applied": applied, "version": version},
         f"schema at version {version}" + (f" (applied {applied})" if applied else " (up to date)"))


@customers_cli.command("create")
@click.option("--name", required=True)
@click.option("--tier", required=True, type=click.Choice(["pro", "business", "enterprise"]))
@click.option("--credits", default=0, type=int, show_default=True)
@json_option
def customers_create(name, tier, credits, as_json):
    customer = run(as_json, lambda: accounts.create_customer(name, tier, credits))
    emit(as_json, accounts.customer_dict(customer),
         f"customer {customer.id} ({customer.tier}, {customer.balance} credits)")


@customers_cli.command("list")
@json_option
def customers_list(as_json):
    rows = run(as_json, lambda: [accounts.customer_dict(c) for c in Customer.select().order_by(Customer.created_at)])
    emit(as_json, {"customers": rows},
         "\n".join(f"{c['customer_id']}  {c['tier']:<10} {c['balance']:>8}  {c['name']}" for c in rows)
         or "no customers")


@customers_cli.command("credit", context_settings={"ignore_unknown_options": True})
@click.argument("customer_id")
@click.argument("amount", type=int)
@json_option
def customers_credit(customer_id, amount, as_json):
    """Add AMOUNT credits (negative to take them back); writes a ledger row."""
    balance = run(as_json, lambda: accounts.add_credits(customer_id, amount))
    emit(as_json, {"customer_id": customer_id, "balance": balance}, f"{customer_id} balance {balance}")


@customers_cli.command("tier")
@click.argument("customer_id")
@click.argument("tier", type=click.Choice(["pro", "business", "enterprise"]))
@json_option
def customers_tier(customer_id, tier, as_json):
    customer = run(as_json, lambda: accounts.set_tier(customer_id, tier))
    emit(as_json, accounts.customer_dict(customer), f"{customer_id} tier {customer.tier}")


@customers_cli.command("limits")
@click.argument("customer_id")
@click.option("--inflight", type=int)
@click.option("--hour", type=int)
@click.option("--day", type=int)
@json_option
def customers_limits(customer_id, inflight, hour, day, as_json):
    """Override the tier's limits for one customer."""
    customer = run(as_json, lambda: accounts.set_limits(customer_id, inflight=inflight, hour=hour, day=day))
    data = accounts.customer_dict(customer)
    emit(as_json, data, f"{customer_id} limits {data['limits']}")


@customers_cli.command("recount")
@click.argument("customer_id")
@json_option
def customers_recount(customer_id, as_json):
    """Rebuild the in-flight and window counters from the scans (after editing scans by hand)."""
    def recount():
        accounts.get_customer(customer_id)
        return scans.recount(customer_id)
    result = run(as_json, recount)
    emit(as_json, result, f"{customer_id} in flight {result['in_flight']['was']} -> {result['in_flight']['now']}, "
                          f"{result['day']} scans in the last day")


@keys_cli.command("issue")
@click.argument("customer_id")
@click.option("--name", default="")
@click.option("--webhook-url")
@click.option("--webhook-secret")
@json_option
def keys_issue(customer_id, name, webhook_url, webhook_secret, as_json):
    """Issue a key. Its plaintext is printed now and can never be shown again."""
    key, plaintext = run(as_json, lambda: accounts.issue_key(customer_id, name, webhook_url, webhook_secret))
    emit(as_json, {**accounts.key_dict(key), "api_key": plaintext},
         f"key {key.id}\napi key (shown once, store it now): {plaintext}")


@keys_cli.command("list")
@click.argument("customer_id", required=False)
@json_option
def keys_list(customer_id, as_json):
    def load():
        query = ApiKey.select().order_by(ApiKey.created_at)
        if customer_id:
            query = query.where(ApiKey.customer == customer_id)
        return [accounts.key_dict(k) for k in query]
    rows = run(as_json, load)
    emit(as_json, {"keys": rows},
         "\n".join(f"{k['key_id']}  {k['customer_id']}  {k['prefix']}…{k['last4']}  {k['status']}  {k['name']}"
                   for k in rows) or "no keys")


@keys_cli.command("revoke")
@click.argument("key_id")
@json_option
def keys_revoke(key_id, as_json):
    key = run(as_json, lambda: accounts.revoke_key(key_id))
    emit(as_json, accounts.key_dict(key), f"{key.id} revoked")


def _key_action(as_json, action):
    """``run`` for a key's secret: an unknown key is one line and status 1, like a refused input."""
    try:
        return run(as_json, action)
    except LookupError as exc:
        fail(as_json, str(exc))


@keys_cli.command("roll-secret")
@click.argument("key_id")
@click.option("--overlap-hours", default=24, show_default=True, type=int,
              help="How long both secrets sign (0 to 168); 0 replaces the secret at once.")
@json_option
def keys_roll_secret(key_id, overlap_hours, as_json):
    """Create the key's next webhook secret; printed now, never shown again."""
    from app.services import webhooks
    rolled = _key_action(as_json, lambda: webhooks.roll_secret(key_id, None, overlap_hours))
    from app.models.base import iso
    switch_at = iso(rolled.switch_at)
    emit(as_json, {"ok": True, "key_id": key_id, "webhook_secret": rolled.secret, "switch_at": switch_at,
                   "overlap_hours": overlap_hours},
         f"next webhook secret of {key_id} (shown once, store it now): {rolled.secret}\n"
         + (f"both secrets sign until {switch_at}; then only the new one"
            if overlap_hours else "it is the only secret from now on"))


@keys_cli.command("switch-secret")
@click.argument("key_id")
@json_option
def keys_switch_secret(key_id, as_json):
    """End the key's secret rotation now: the next secret becomes the only one."""
    from app.services import webhooks
    _key_action(as_json, lambda: webhooks.switch_secret(key_id, None))
    emit(as_json, {"ok": True, "key_id": key_id}, f"{key_id}: the next webhook secret is now the only one")


@users_cli.command("create")
@click.argument("customer_id")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@json_option
def users_create(customer_id, email, password_stdin, as_json):
    """Create a portal user; the password comes from a prompt or stdin, never an argument."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    user = run(as_json, lambda: accounts.create_user(customer_id, email, password))
    emit(as_json, {"user_id": user.id, "customer_id": customer_id, "email": user.email},
         f"user {user.id} <{user.email}>")


def _read_password(password_stdin: bool, as_json: bool) -> str:
    if password_stdin:
        return sys.stdin.readline().rstrip("\n")
    try:
        return click.prompt("New password", hide_input=True, confirmation_prompt=True, err=True)
    except click.Abort:
        fail(as_json, "no password given")


@users_cli.command("list")
@click.argument("customer_id", required=False)
@json_option
def users_list(customer_id, as_json):
    """Portal users (of one customer when given), with their live sessions."""
    from app.services import portal_users
    rows = run(as_json, lambda: portal_users.list_users(customer_id))
    table = [f"{'USER':<28} {'CUSTOMER':<28} {'STATE':<8} {'SESSIONS':>8}  {'LAST LOGIN':<20}  EMAIL"]
    table += [f"{u['user_id']:<28} {u['customer_id']:<28} {'disabled' if u['disabled'] else 'active':<8} "
              f"{u['sessions']:>8}  {u['last_login_at'] or 'never':<20}  {u['email']}" for u in rows]
    emit(as_json, {"users": rows}, "\n".join(table) if rows else "no users")


@users_cli.command("reset-password")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the new password from standard input.")
@json_option
def users_reset_password(email, password_stdin, as_json):
    """Set a new password (from a prompt or stdin) and end the user's portal sessions."""
    from app.services import portal_users
    run(as_json, lambda: portal_users.get_user(email))  # an unknown e-mail fails before the prompt
    password = _read_password(password_stdin, as_json)
    user, ended = run(as_json, lambda: portal_users.reset_password(email, password))
    emit(as_json, {"ok": True, **portal_users.user_dict(user), "sessions_ended": ended},
         f"password of {user.email} reset; {ended} session(s) ended")


@users_cli.command("disable")
@click.argument("email")
@json_option
def users_disable(email, as_json):
    """Refuse the user's logins from now on and end their portal sessions."""
    from app.services import portal_users
    user, ended = run(as_json, lambda: portal_users.set_disabled(email, True))
    emit(as_json, {"ok": True, **portal_users.user_dict(user), "sessions_ended": ended},
         f"{user.email} disabled; {ended} session(s) ended")


@users_cli.command("enable")
@click.argument("email")
@json_option
def users_enable(email, as_json):
    """Let a disabled user log in again."""
    from app.services import portal_users
    user, _ = run(as_json, lambda: portal_users.set_disabled(email, False))
    emit(as_json, {"ok": True, **portal_users.user_dict(user)}, f"{user.email} enabled")


@scans_cli.command("recover")
@json_option
def scans_recover(as_json):
    """Re-dispatch scans and webhook deliveries whose jobs were lost (D13)."""
    from workers.recovery import sweep
    report = run(as_json, sweep)
    emit(as_json, {"ok": True, **report}, ", ".join(f"{k}: {v}" for k, v in report.items()))


def register_cli(app: Flask) -> None:
    for group in (db_cli, customers_cli, keys_cli, users_cli, scans_cli):
        app.cli.add_command(group)
