"""Operator commands (D10), run as ``flask --app wsgi GROUP COMMAND``.

Every command prints readable tables, or one JSON object with ``--json`` so scripts
and the QA scenarios can drive it; both come from ``emit``. Failures, a mistyped
argument included, exit with status 1 and one line on stderr (with ``--json`` also
``{"ok": false, "error": ...}`` on stdout); no traceback reaches the terminal.
The rules live in the domains' packages: a command parses, calls them, and prints.
"""
from __future__ import annotations

import getpass
import json
import logging
import sys
import warnings

import click
import peewee
from flask import Flask
from flask.cli import AppGroup

from app.accounts import access, portal_roles
from app.accounts.models import TIERS, key_display
from app.extensions import db
from app.plumbing import runtime
from app.plumbing.errors import AccountError, ServiceError
from app.plumbing.models import iso

log = logging.getLogger(__name__)

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


# --- output: a table (or a line) for people, one JSON object for scripts ----------------------


def cell(value) -> str:
    """One table cell: never a Python repr, and no control character reaches the terminal."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class Table:
    """Rows under optional headers; ``Table.record`` is one object as field / value rows."""

    def __init__(self, rows, headers=None, title: str | None = None, empty: str = "none"):
        self.rows = [[cell(v) for v in row] for row in rows]
        self.headers = list(headers) if headers else None
        self.title = title
        self.empty = empty

    @classmethod
    def record(cls, pairs, title: str | None = None) -> Table:
        return cls([(name, value) for name, value in pairs], title=title)

    def render(self) -> str:
        lines = [self.title] if self.title else []
        if not self.rows:
            return "\n".join(lines + [self.empty])
        rows = ([self.headers] if self.headers else []) + self.rows
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for number, row in enumerate(rows):
            lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
            if number == 0 and self.headers:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def emit(as_json: bool, payload: dict, *sections) -> None:
    """Print ``payload`` as one JSON object (with ``"ok": true``, as every failure has
    ``"ok": false``), or each section (a ``Table`` or a line) for a person."""
    if as_json:
        click.echo(json.dumps({"ok": True, **payload}, sort_keys=True))
        return
    click.echo("\n\n".join(s.render() if isinstance(s, Table) else str(s) for s in sections))


class CommandError(click.ClickException):
    """A command's failure: one line on stderr, exit 1 (with --json also a JSON object on stdout)."""

    exit_code = 1

    def __init__(self, message: str, as_json: bool = False):
        super().__init__(cell(" ".join(str(message).split())) or "failed")
        self.as_json = as_json

    def show(self, file=None) -> None:
        if self.as_json:
            click.echo(json.dumps({"ok": False, "error": self.message}))
        click.echo(f"error: {self.message}", err=True)


def fail(as_json: bool, message: str):
    raise CommandError(message, as_json)


class OperatorCommand(click.Command):
    """A mistyped command line is a failure like any other: one line and exit 1, not click's
    usage block and exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        as_json = "--json" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise CommandError(exc.format_message(), as_json) from None


class OperatorGroup(AppGroup):
    command_class = OperatorCommand


def run(as_json, action):
    """Run ``action`` with a database connection; every failure becomes one line."""
    try:
        with db.connection_context():
            return action()
    except (AccountError, ServiceError, LookupError) as exc:
        message = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
        fail(as_json, message)
    except peewee.PeeweeException as exc:
        fail(as_json, f"database error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    except click.ClickException:
        raise
    except Exception as exc:
        log.debug("operator command failed", exc_info=True)
        fail(as_json, f"unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def read_secret_line() -> str:
    """One secret from standard input (never an argument, so it is never in ``ps``)."""
    line = sys.stdin.readline()
    return line.removesuffix("\n")


def customer_record(data: dict, title: str | None = None) -> Table:
    limits, overrides = data["limits"], data["overrides"]
    shown = ", ".join(f"{limits[k]} {label}" + (" (override)" if overrides[k] is not None else "")
                      for k, label in (("inflight", "in flight"), ("hour", "per hour"), ("day", "per day")))
    return Table.record([("customer", data["customer_id"]), ("name", data["name"]), ("tier", data["tier"]),
                         ("balance", data["balance"]), ("limits", shown)], title=title)


def limits_table(data: dict) -> Table:
    return Table([(label, data["limits"][k], "override" if data["overrides"][k] is not None else "tier default")
                  for k, label in (("inflight", "in flight"), ("hour", "per hour"), ("day", "per day"),
                                        ("watches", "watches"))],
                 headers=["limit", "value", "source"], title=f"limits of {data['customer_id']}")


def scopes_cell(data: dict) -> str:
    return "all" if data["scopes"] == list(access.SCOPES) else ",".join(data["scopes"])


def allowlist_cell(data: dict) -> str:
    return "anywhere" if data["allowed_ips"] is None else ",".join(data["allowed_ips"])


def key_record(data: dict) -> Table:
    return Table.record([("key", data["key_id"]), ("customer", data["customer_id"]), ("name", data["name"]),
                         ("key shown as", key_display(data['prefix'], data['last4'])), ("mode", data["mode"]),
                         ("status", data["status"]),
                         ("created", data["created_at"]), ("last used", data["last_used_at"]),
                         ("scopes", ",".join(data["scopes"])), ("expires", data["expires_at"] or "never"),
                         ("allowed IPs", allowlist_cell(data)),
                         ("webhook URL", data["webhook_url"]), ("webhook secret", data["has_webhook_secret"])])


def keys_table(rows: list[dict], title: str | None = None) -> Table:
    return Table([(k["key_id"], k["customer_id"], key_display(k["prefix"], k["last4"]), k["mode"], k["status"],
                   k["last_used_at"], scopes_cell(k), k["expires_at"] or "never", allowlist_cell(k),
                   k["webhook_url"], k["name"]) for k in rows],
                 headers=["key", "customer", "shown as", "mode", "status", "last used", "scopes", "expires",
                          "allowed IPs", "webhook URL", "name"],
                 title=title, empty="no keys")


scopes_option = click.option(
    "--scopes", default=None, metavar="LIST",
    help=f"Comma-separated scopes: {', '.join(access.SCOPES)} (default when issued: all).")
expires_option = click.option(
    "--expires-in-days", type=int, default=None, metavar="N",
    help=f"The key stops working N days from now (1 to {access.MAX_EXPIRY_DAYS}; default when issued: never).")
allowed_ips_option = click.option(
    "--allowed-ips", default=None, metavar="CIDR[,CIDR...]",
    help=f"The IP addresses or CIDR blocks (IPv4, IPv6; at most {access.MAX_ALLOWED_BLOCKS}) the key may be used "
         f"from; '{access.NO_ALLOWLIST}' removes the allowlist (default when issued: anywhere).")


db_cli = OperatorGroup("db", help="Database schema.")
customers_cli = OperatorGroup("customers", help="Customer accounts, credits, tiers and limits.")
keys_cli = OperatorGroup("keys", help="API keys and their webhook settings.")
users_cli = OperatorGroup("users", help="Portal users.")
scans_cli = OperatorGroup("scans", help="Scan maintenance.")
deliveries_cli = OperatorGroup("deliveries", help="Webhook deliveries.")
watches_cli = OperatorGroup("watches", help="Watches: the scheduler of their due scans.")
subjects_cli = OperatorGroup("subjects", help="A data subject's requests: what is held about a person and who "
                                             "looked them up; erasure of every customer's scans of them.")
suppressions_cli = OperatorGroup("suppressions", help="Opt-outs of the people targets belong to (stored as keyed "
                                                      "hashes, never as targets).")


@db_cli.command("upgrade")
@json_option
def db_upgrade(as_json):
    """Create or migrate the schema; running it again changes nothing."""
    from app.activity import entries
    from app.migrations import current_version, upgrade
    from app.plumbing.models import utcnow
    applied = run(as_json, upgrade)
    version = run(as_json, current_version)
    # Today's and the coming week's partitions of the activity log now, before the service
    # writes: one made while entries of its day are being written refuses them (PostgreSQL
    # routes an entry to the DEFAULT partition, then finds the day's range taken from it).
    run(as_json, lambda: entries.prepare_partitions(utcnow()))
    emit(as_json, {"applied": applied, "version": version},
         f"schema at version {version}" + (f" (applied {', '.join(map(str, applied))})" if applied
                                           else " (up to date)"))


@db_cli.command("check-logging")
@json_option
def db_check_logging(as_json):
    """Warn when PostgreSQL would write statements, with the personal data in them, to its log."""
    from app.privacy import server_log
    risks = run(as_json, server_log.statement_logging_risks)
    if risks:
        if as_json:
            click.echo(json.dumps({"ok": False, "error": "statements would reach the server's log", "risks": risks}))
        for line in risks:
            click.echo(f"warning: {line}", err=True)
        raise SystemExit(1)
    emit(as_json, {"risks": []}, "the server logs no statement text")


@customers_cli.command("create")
@click.option("--name", required=True)
@click.option("--tier", required=True, type=click.Choice(TIERS))
@click.option("--credits", default=0, type=int, show_default=True)
@json_option
def customers_create(name, tier, credits, as_json):
    from app.billing import customers
    data = run(as_json, lambda: customers.customer_dict(customers.create_customer(name, tier, credits)))
    emit(as_json, data, customer_record(data, title="customer created"))


def sink_record(data: dict, title: str) -> Table:
    return Table.record([("sink", data["sink_id"]), ("customer", data["customer_id"]), ("url", data["url"]),
                         ("format", data["format"]), ("delivered", data["delivered"]),
                         ("last error", data["last_error"] or "-")], title=title)


@customers_cli.command("audit-sink")
@click.argument("customer_id")
@click.option("--url", required=True, help="The SIEM's collector URL (https; checked as a webhook URL is).")
@click.option("--token-stdin", is_flag=True, required=True, help="Read the collector's token from standard input.")
@click.option("--format", "sink_format", type=click.Choice(["splunk_hec", "ndjson"]), default="splunk_hec",
              show_default=True, help="splunk_hec: Splunk's HTTP Event Collector (Authorization: Splunk TOKEN); "
                                      "ndjson: one entry a line (Authorization: Bearer TOKEN).")
@json_option
def customers_audit_sink(customer_id, url, token_stdin, sink_format, as_json):
    """Push every new activity entry of CUSTOMER_ID to a SIEM, batched, within a minute (retried as
    webhooks are). The token is kept encrypted and never shown again."""
    from app.activity import audit_sinks
    token = read_secret_line()
    if not token:
        fail(as_json, "no token on standard input")
    data = run(as_json, lambda: audit_sinks.add(customer_id, url=url, token=token, format=sink_format))
    emit(as_json, data, sink_record(data, "audit sink added"))


@customers_cli.command("audit-sinks")
@click.argument("customer_id")
@json_option
def customers_audit_sinks(customer_id, as_json):
    """The customer's audit sinks, with what each delivered and its last error (never a token)."""
    from app.activity import audit_sinks
    rows = run(as_json, lambda: audit_sinks.list_sinks(customer_id))
    emit(as_json, {"sinks": rows}, Table([(r["sink_id"], r["format"], r["url"], r["delivered"],
                                           r["last_error"] or "-") for r in rows],
                                         headers=["sink", "format", "url", "delivered", "last error"],
                                         empty="no audit sinks"))


@customers_cli.command("audit-sink-remove")
@click.argument("sink_id")
@json_option
def customers_audit_sink_remove(sink_id, as_json):
    """Stop pushing to an audit sink and forget it (its token with it)."""
    from app.activity import audit_sinks
    data = run(as_json, lambda: audit_sinks.remove(sink_id))
    emit(as_json, data, f"audit sink {sink_id} removed")


@customers_cli.command("list")
@json_option
def customers_list(as_json):
    from app.accounts import admin
    from app.billing import customers
    rows = run(as_json, lambda: [customers.customer_dict(c) for c in admin.list_customers()])
    emit(as_json, {"customers": rows},
         Table([(c["customer_id"], c["tier"], c["balance"], c["name"]) for c in rows],
               headers=["customer", "tier", "balance", "name"], empty="no customers"))


@customers_cli.command("credit", context_settings={"ignore_unknown_options": True})
@click.argument("customer_id")
@click.argument("amount", type=int)
@click.option("--reason", default=None,
              help="Why (optional; kept in the ledger row and shown to the customer with the movement).")
@json_option
def customers_credit(customer_id, amount, reason, as_json):
    """Add AMOUNT credits (negative to take them back); writes a ledger row, with the reason if given."""
    from app.billing import customers
    balance = run(as_json, lambda: customers.add_credits(customer_id, amount, reason))
    reason = (reason or "").strip() or None
    emit(as_json, {"customer_id": customer_id, "amount": amount, "balance": balance, "reason": reason},
         Table.record([("customer", customer_id), ("change", f"{amount:+d}"), ("balance", balance),
                       ("reason", reason or "")]))


@customers_cli.command("tier")
@click.argument("customer_id")
@click.argument("tier", type=click.Choice(TIERS))
@json_option
def customers_tier(customer_id, tier, as_json):
    from app.accounts import admin
    from app.billing import customers
    data = run(as_json, lambda: customers.customer_dict(admin.set_tier(customer_id, tier)))
    emit(as_json, data, customer_record(data))


@customers_cli.command("limits")
@click.argument("customer_id")
@click.option("--inflight", type=int)
@click.option("--hour", type=int)
@click.option("--day", type=int)
@click.option("--watches", type=int, help="The most watches not ended (per mode).")
@json_option
def customers_limits(customer_id, inflight, hour, day, watches, as_json):
    """Override the tier's limits for one customer (without options: show them)."""
    from app.accounts import admin
    from app.billing import customers
    data = run(as_json, lambda: customers.customer_dict(
        admin.set_limits(customer_id, inflight=inflight, hour=hour, day=day, watches=watches)))
    emit(as_json, data, limits_table(data))


@customers_cli.command("settings")
@click.argument("customer_id")
@click.option("--require-purpose", type=click.Choice(["on", "off"]),
              help="on: every scan must say why (400 purpose_required without a purpose).")
@click.option("--result-retention-days", type=int, metavar="N",
              help="Days a completed or failed scan's target and result are kept (1 to 3650; default 90).")
@click.option("--require-2fa", "require_2fa", type=click.Choice(["on", "off"]),
              help="on: every portal user of the customer logs in with a second factor (those without one "
                   "enrol before anything else).")
@json_option
def customers_settings(customer_id, require_purpose, result_retention_days, require_2fa, as_json):
    """The customer's settings (without options: show them)."""
    from app.accounts import admin, two_factor
    from app.billing import customers
    wanted = None if require_purpose is None else require_purpose == "on"
    data = run(as_json, lambda: customers.customer_dict(admin.set_settings(
        customer_id, require_purpose=wanted, result_retention_days=result_retention_days)))
    if require_2fa is not None:
        run(as_json, lambda: two_factor.set_required(customer_id, require_2fa == "on", by="operator"))
        data = run(as_json, lambda: customers.customer_dict(admin.get_customer(customer_id)))
    settings = data["settings"]
    emit(as_json, data, Table.record([("customer", data["customer_id"]),
                                      ("require purpose", "on" if settings["require_purpose"] else "off"),
                                      ("result retention", f"{settings['result_retention_days']} days"),
                                      ("require 2fa", "on" if settings["require_2fa"] else "off")]))


@customers_cli.command("scim-token")
@click.argument("customer_id")
@click.option("--revoke", is_flag=True, help="Revoke the customer's SCIM token instead: provisioning stops.")
@json_option
def customers_scim_token(customer_id, revoke, as_json):
    """Issue the customer's SCIM token (for its identity provider, at /scim/v2/), printed now and never
    again; an earlier token stops working. With --revoke, revoke it."""
    from app.accounts import scim
    if revoke:
        had = run(as_json, lambda: scim.revoke_token(customer_id))
        emit(as_json, {"customer_id": customer_id, "revoked": had},
             f"SCIM token of {customer_id} revoked" if had else f"{customer_id} had no SCIM token")
        return
    token = run(as_json, lambda: scim.issue_token(customer_id))
    emit(as_json, {"customer_id": customer_id, "scim_token": token},
         f"SCIM token of {customer_id} (shown once, store it now; an earlier one no longer works): {token}")


@customers_cli.command("sso")
@click.argument("customer_id")
@click.option("--issuer", metavar="URL", help="The OpenID provider's issuer (https; http outside production only).")
@click.option("--client-id", metavar="X", help="The portal's client id at the provider.")
@click.option("--client-secret-stdin", is_flag=True, help="Read the client secret from standard input.")
@click.option("--domains", metavar="A.COM[,B.COM]", help="The e-mail domains that sign in through the provider.")
@click.option("--default-role", type=click.Choice(portal_roles.ROLES), default=portal_roles.VIEWER,
              show_default=True, help="The role of a user the provider's claim maps to no role.")
@click.option("--role-claim", metavar="CLAIM", help="The ID token's claim whose values give the role.")
@click.option("--role-map", metavar="'VALUE=ROLE,...'", help="Which claim value gives which role.")
@click.option("--required", is_flag=True, help="Refuse password and TOTP sign-in for the customer's users.")
@click.option("--remove", is_flag=True, help="Remove the customer's single sign-on.")
@json_option
def customers_sso(customer_id, issuer, client_id, client_secret_stdin, domains, default_role, role_claim,
                  role_map, required, remove, as_json):
    """Portal sign-in through the customer's OpenID Connect provider (without options: show it;
    the client secret is never shown)."""
    from app.accounts import sso
    if remove:
        removed = run(as_json, lambda: sso.remove(customer_id))
        emit(as_json, {"customer_id": customer_id, "removed": removed},
             f"{customer_id}: single sign-on {'removed' if removed else 'was not set'}")
        return
    if issuer or client_id or domains or client_secret_stdin:
        if not (issuer and client_id and domains and client_secret_stdin):
            fail(as_json, "--issuer, --client-id, --client-secret-stdin and --domains go together")
        secret = read_secret_line()
        found = run(as_json, lambda: sso.configure(
            customer_id, issuer=issuer, client_id=client_id, client_secret=secret, domains=domains,
            default_role=default_role, role_claim=role_claim, role_map=role_map, required=required))
    else:
        found = run(as_json, lambda: sso.settings(customer_id))
    data = sso.settings_dict(found)
    emit(as_json, data, Table.record([
        ("customer", data["customer_id"]), ("issuer", data["issuer"]), ("client id", data["client_id"]),
        ("client secret", data["client_secret"]), ("domains", ", ".join(data["domains"])),
        ("default role", data["default_role"]), ("role claim", data["role_claim"]),
        ("role map", ", ".join(data["role_map"]) or None), ("required", data["required"]),
        ("redirect URI", f"https://PORTAL_HOST{data['redirect_path']}")]))


@customers_cli.command("show")
@click.argument("customer_id")
@json_option
def customers_show(customer_id, as_json):
    """Balance, tier, limits, usage now, keys and the latest credit movements."""
    from app.billing import charges, customers
    data = run(as_json, lambda: customers.customer_overview(customer_id))
    usage, limits = data["usage"], data["limits"]
    emit(as_json, data,
         customer_record(data),
         Table([("in flight now", usage["in_flight"], limits["inflight"]),
                ("created in the last hour", usage["hour"], limits["hour"]),
                ("created in the last 24 hours", usage["day"], limits["day"])],
               headers=["quota", "now", "limit"], title="usage"),
         keys_table(data["keys"], title="keys"),
         Table([(r["created_at"], f"{r['delta']:+d}", r["balance_after"],
                 r["kind"] if r["reads"] is None else charges.reads_words(r["reads"]), r["note"],
                 r["scan_id"])
                for r in data["ledger"]],
               headers=["time", "change", "balance", "kind", "note / reason", "reference"],
               title="latest credit movements", empty="no credit movements"))


@customers_cli.command("recount")
@click.argument("customer_id")
@json_option
def customers_recount(customer_id, as_json):
    """Rebuild the in-flight and window counters from the scans (after editing scans by hand)."""
    from app.accounts import admin
    from app.billing import customers
    def recount():
        admin.get_customer(customer_id)
        return customers.recount(customer_id)
    result = run(as_json, recount)
    emit(as_json, result, f"{customer_id} in flight {result['in_flight']['was']} -> {result['in_flight']['now']}, "
                          f"{result['day']} scans in the last day")


@keys_cli.command("issue")
@click.argument("customer_id")
@click.option("--name", default="")
@click.option("--webhook-url")
@click.option("--webhook-secret", help="Visible to other users in `ps`: prefer --webhook-secret-stdin.")
@click.option("--webhook-secret-stdin", is_flag=True, help="Read the webhook secret from standard input.")
@click.option("--test", "test_mode", is_flag=True,
              help="Issue a test key (service_test_…): free, sandbox engine, data apart from live keys.")
@scopes_option
@expires_option
@allowed_ips_option
@json_option
def keys_issue(customer_id, name, webhook_url, webhook_secret, webhook_secret_stdin, test_mode, scopes,
               expires_in_days, allowed_ips, as_json):
    """Issue a key. Its plaintext is printed now and can never be shown again. By default it has every
    scope, never expires and works from anywhere."""
    from app.accounts import admin
    if webhook_secret_stdin:
        if webhook_secret is not None:
            fail(as_json, "give --webhook-secret or --webhook-secret-stdin, not both")
        webhook_secret = read_secret_line()
        if not webhook_secret:
            fail(as_json, "no webhook secret on standard input")
    from app.webhooks import key_settings
    key, plaintext = run(as_json, lambda: key_settings.issue_key(
        customer_id, name, webhook_url, webhook_secret, livemode=not test_mode, scopes=scopes,
        expires_in_days=expires_in_days, allowed_ips=allowed_ips))
    data = admin.key_dict(key)
    emit(as_json, {**data, "api_key": plaintext}, key_record(data), f"api key (shown once, store it now): {plaintext}")


@keys_cli.command("set-webhook")
@click.argument("key_id")
@click.option("--url", default=None, help='The webhook URL; "" removes it (deliveries stop).')
@click.option("--secret-stdin", is_flag=True, help="Also set the signing secret, read from standard input.")
@click.option("--payload", type=click.Choice(["full", "thin"]), default=None,
              help="What each event's body carries: full (the scan and its result) or thin (ids, status, times "
                   "and purpose only; the receiver reads the rest through the API).")
@json_option
def keys_set_webhook(key_id, url, secret_stdin, payload, as_json):
    """Set a key's webhook URL (and secret) and what its bodies carry, by the portal's rules."""
    from app.accounts import admin
    from app.webhooks import key_settings
    if url is None and payload is None:
        fail(as_json, "give --url, --payload or both")
    if url is None and secret_stdin:
        fail(as_json, "--secret-stdin goes with --url")
    secret = None
    if secret_stdin:
        secret = read_secret_line()
        if not secret:
            fail(as_json, "no webhook secret on standard input")

    def save():
        key = admin.get_key(key_id)
        if url is not None:
            key = key_settings.set_webhook(key.id, key.customer_id, url, secret)
        if payload is not None:
            key = key_settings.set_payload(key.id, key.customer_id, payload)
        return admin.key_dict(key)
    data = run(as_json, save)
    emit(as_json, data, key_record(data))


@keys_cli.command("set-access")
@click.argument("key_id")
@scopes_option
@expires_option
@allowed_ips_option
@json_option
def keys_set_access(key_id, scopes, expires_in_days, allowed_ips, as_json):
    """Change what a key may do (D21): its scopes, its expiry (counted from now) and its IP allowlist
    (``none`` removes it); what is not given stays."""
    from app.accounts import admin
    changes = {} if allowed_ips is None else {"allowed_ips": allowed_ips}
    data = run(as_json, lambda: admin.key_dict(access.set_access(key_id, scopes=scopes,
                                                                    expires_in_days=expires_in_days, **changes)))
    emit(as_json, data, key_record(data))


@keys_cli.command("show")
@click.argument("key_id")
@json_option
def keys_show(key_id, as_json):
    """One key: its mode, status, scopes, expiry, allowlist and webhook settings."""
    from app.accounts import admin
    data = run(as_json, lambda: admin.key_dict(admin.get_key(key_id)))
    emit(as_json, data, key_record(data))


@keys_cli.command("list")
@click.argument("customer_id", required=False)
@json_option
def keys_list(customer_id, as_json):
    from app.accounts import admin
    rows = run(as_json, lambda: [admin.key_dict(k) for k in admin.list_keys(customer_id)])
    emit(as_json, {"keys": rows}, keys_table(rows))


@keys_cli.command("revoke")
@click.argument("key_id")
@json_option
def keys_revoke(key_id, as_json):
    from app.accounts import admin
    data = run(as_json, lambda: admin.key_dict(admin.revoke_key(key_id)))
    emit(as_json, data, key_record(data))


@keys_cli.command("roll-secret")
@click.argument("key_id")
@click.option("--overlap-hours", default=24, show_default=True, type=int,
              help="How long both secrets sign (0 to 168); 0 replaces the secret at once.")
@json_option
def keys_roll_secret(key_id, overlap_hours, as_json):
    """Create the key's next webhook secret; printed now, never shown again."""
    from app.webhooks import signing_secrets
    rolled = run(as_json, lambda: signing_secrets.roll_secret(key_id, None, overlap_hours))
    switch_at = iso(rolled.switch_at)
    overlap = overlap_hours if rolled.overlapping else 0
    emit(as_json, {"key_id": key_id, "webhook_secret": rolled.secret, "switch_at": switch_at,
                   "overlap_hours": overlap},
         f"new webhook secret of {key_id} (shown once, store it now): {rolled.secret}\n"
         + (f"both secrets sign until {switch_at}; then only the new one" if rolled.overlapping else
            "the key had no usable secret: this one signs from now on, alone" if overlap_hours else
            "it replaced the old secret at once and is the only one from now on"))


@keys_cli.command("switch-secret")
@click.argument("key_id")
@json_option
def keys_switch_secret(key_id, as_json):
    """End the key's secret rotation now: the next secret becomes the only one."""
    from app.webhooks import signing_secrets
    run(as_json, lambda: signing_secrets.switch_secret(key_id, None))
    emit(as_json, {"key_id": key_id}, f"{key_id}: the next webhook secret is now the only one")


@keys_cli.command("endpoints")
@click.argument("key_id")
@json_option
def keys_endpoints(key_id, as_json):
    """A key's webhook endpoints (D22): id, URL, events, body, enabled or since when disabled."""
    from app.accounts import admin
    from app.webhooks import endpoints
    rows = run(as_json, lambda: endpoints.list_endpoints(admin.get_key(key_id)))
    emit(as_json, {"key_id": key_id, "endpoints": rows},
         "\n".join(f"{e['endpoint_id']}  {'enabled' if e['enabled'] else 'disabled'}"
                   f"{' since ' + e['disabled_at'] if e['disabled_at'] else ''}  {e['url']}  "
                   f"{','.join(e['events'])}  {e['payload']}" for e in rows) or f"{key_id} has no endpoint")


@keys_cli.command("enable-endpoint")
@click.argument("key_id")
@click.argument("endpoint_id")
@json_option
def keys_enable_endpoint(key_id, endpoint_id, as_json):
    """Enable a key's endpoint again (after auto-disable stopped it): its later events are sent."""
    from app.accounts import admin
    from app.webhooks import endpoints
    data = run(as_json, lambda: endpoints.set_enabled(admin.get_key(key_id), endpoint_id, enabled=True))
    emit(as_json, data, f"{endpoint_id}: enabled; later events of {key_id} are sent to it again")


@keys_cli.command("check-endpoints")
@click.argument("key_id")
@click.option("--hours-ahead", type=click.IntRange(0, 24 * 365), default=0, metavar="N",
              help="QA only (refused in production): judge as if it were N hours from now.")
@json_option
def keys_check_endpoints(key_id, hours_ahead, as_json):
    """Judge the auto-disable rule for the key's enabled endpoints now, as the workers do after
    each delivery that failed for good; prints the endpoints it disabled."""
    from app.accounts import admin
    from app.webhooks import endpoints
    if hours_ahead and runtime.config["APP_ENV"] == "production":
        fail(as_json, "--hours-ahead moves the clock for QA and is refused in production")
    disabled = run(as_json, lambda: endpoints.check_endpoints(admin.get_key(key_id), hours_ahead=hours_ahead))
    emit(as_json, {"key_id": key_id, "disabled": disabled},
         "\n".join(f"{e}: disabled; its later events are recorded as skipped" for e in disabled)
         or f"{key_id}: no endpoint disabled")


@users_cli.command("create")
@click.argument("customer_id")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.option("--role", type=click.Choice(portal_roles.ROLES), default=portal_roles.OWNER,
              show_default=True, help="What the user may do in the portal.")
@json_option
def users_create(customer_id, email, password_stdin, role, as_json):
    """Create a portal user of the customer, an owner unless --role says otherwise (owners add
    the others in the portal too); the password comes from a prompt or stdin, never an argument."""
    from app.accounts import admin
    password = _read_password(password_stdin, as_json)
    user = run(as_json, lambda: admin.create_user(customer_id, email, password, role))
    emit(as_json, {"user_id": user.id, "customer_id": customer_id, "email": user.email, "role": user.role},
         f"user {user.id} <{user.email}>, {user.role}")


NOT_GIVEN = "no password given: use --password-stdin (no terminal to prompt on)"


def _read_password(password_stdin: bool, as_json: bool) -> str:
    if password_stdin:
        return sys.stdin.readline().rstrip("\n")
    # Without a terminal getpass would fall back on reading the password from the pipe in clear,
    # after a GetPassWarning ("may be echoed"): made an error here, it says what to do instead.
    with warnings.catch_warnings():
        warnings.simplefilter("error", getpass.GetPassWarning)
        try:
            return click.prompt("New password", hide_input=True, confirmation_prompt=True, err=True)
        except (click.Abort, getpass.GetPassWarning):
            click.echo(err=True)  # after the prompt's text
            fail(as_json, NOT_GIVEN)


@users_cli.command("list")
@click.argument("customer_id", required=False)
@json_option
def users_list(customer_id, as_json):
    """Portal users (of one customer when given), with their live sessions."""
    from app.accounts import portal_users
    rows = run(as_json, lambda: portal_users.list_users(customer_id))
    emit(as_json, {"users": rows},
         Table([(u["user_id"], u["customer_id"], u["role"], "disabled" if u["disabled"] else "active",
                 "on" if u["two_factor"] else "off", u["sessions"], u["last_login_at"] or "never", u["email"])
                for u in rows],
               headers=["user", "customer", "role", "state", "2fa", "sessions", "last login", "email"],
               empty="no users"))


@users_cli.command("reset-password")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the new password from standard input.")
@json_option
def users_reset_password(email, password_stdin, as_json):
    """Set a new password (from a prompt or stdin) and end the user's portal sessions."""
    from app.accounts import portal_users
    run(as_json, lambda: portal_users.get_user(email))  # an unknown e-mail fails before the prompt
    password = _read_password(password_stdin, as_json)
    user, ended = run(as_json, lambda: portal_users.reset_password(email, password))
    emit(as_json, {**portal_users.user_dict(user), "sessions_ended": ended},
         f"password of {user.email} reset; {ended} session(s) ended")


@users_cli.command("reset-login")
@click.argument("email")
@click.option("--password-stdin", is_flag=True, help="Read the new password from standard input.")
@json_option
def users_reset_login(email, password_stdin, as_json):
    """Emergency sign-in: a new password, every session ended, and password sign-in allowed for a
    day although the customer's single sign-on is required."""
    from app.accounts import portal_users, sso
    run(as_json, lambda: portal_users.get_user(email))
    password = _read_password(password_stdin, as_json)
    user, ended = run(as_json, lambda: sso.emergency_password_login(email, password))
    emit(as_json, {**portal_users.user_dict(user), "sessions_ended": ended,
                   "password_login_until": iso(user.password_login_until)},
         f"password of {user.email} reset; password sign-in allowed until {iso(user.password_login_until)}; "
         f"{ended} session(s) ended")


@users_cli.command("disable")
@click.argument("email")
@json_option
def users_disable(email, as_json):
    """Refuse the user's logins from now on and end their portal sessions."""
    from app.accounts import portal_users
    user, ended = run(as_json, lambda: portal_users.set_disabled(email, True))
    emit(as_json, {**portal_users.user_dict(user), "sessions_ended": ended},
         f"{user.email} disabled; {ended} session(s) ended")


@users_cli.command("enable")
@click.argument("email")
@json_option
def users_enable(email, as_json):
    """Let a disabled user log in again."""
    from app.accounts import portal_users
    user, _ = run(as_json, lambda: portal_users.set_disabled(email, False))
    emit(as_json, {**portal_users.user_dict(user)}, f"{user.email} enabled")


@scans_cli.command("recover")
@json_option
def scans_recover(as_json):
    """Re-dispatch scans and webhook deliveries whose jobs were lost (D13), now: every one
    whose job is not alive, however recent (the workers' periodic sweep waits
    RECOVERY_STALE_SECONDS)."""
    from app.recovery import sweep
    report = run(as_json, lambda: sweep(at_once=True))
    emit(as_json, {**report}, Table(list(report.items()), headers=["recovered", "count"]))


@scans_cli.command("erase")
@click.argument("scan_id")
@json_option
def scans_erase(scan_id, as_json):
    """Erase a completed or failed scan's target, result and webhook bodies now (any customer's),
    as the customer's DELETE /api/v1/scan/{id} would."""
    from app.privacy import erasure
    data = run(as_json, lambda: erasure.erase_any_scan(scan_id))
    emit(as_json, data, Table.record([("scan", data["scan_id"]), ("erased at", data["erased_at"])]))


@scans_cli.command("erase-expired")
@click.option("--days-ahead", type=click.IntRange(0, 3650), default=0, metavar="N",
              help="QA only (refused in production): erase as if it were N days from now.")
@json_option
def scans_erase_expired(days_ahead, as_json):
    """Erase now every scan past its customer's result retention, as the workers' periodic job does."""
    from datetime import timedelta

    from app.plumbing.models import utcnow
    from app.privacy import erasure
    if days_ahead and runtime.config["APP_ENV"] == "production":
        fail(as_json, "--days-ahead moves the clock for QA and is refused in production")
    now = utcnow() + timedelta(days=days_ahead)

    def erase():
        if as_json:
            return erasure.erase_past_retention(now)
        with click.progressbar(length=erasure.due_for_retention(now), label="erasing", file=sys.stderr) as bar:
            return erasure.erase_past_retention(now, progress=bar.update)
    erased = run(as_json, erase)
    emit(as_json, {"erased": erased}, f"{erased} scan(s) erased")


@deliveries_cli.command("redeliver")
@click.argument("delivery_id")
@json_option
def deliveries_redeliver(delivery_id, as_json):
    """Send a failed webhook delivery again, as the portal's redeliver button does."""
    from app.webhooks import delivery_log
    def redeliver():
        delivery = delivery_log.redeliver(delivery_id, delivery_log.delivery_owner(delivery_id))
        return {"delivery_id": delivery.id, "key_id": delivery.api_key_id, "event": delivery.event,
                "status": delivery.status, "url": delivery.url, "attempts_before": delivery.series_start}
    data = run(as_json, redeliver)
    emit(as_json, data, Table.record([("delivery", data["delivery_id"]), ("key", data["key_id"]),
                                      ("event", data["event"]), ("status", data["status"]), ("url", data["url"]),
                                      ("attempts before", data["attempts_before"])], title="delivery queued again"))


KIND = click.Choice(["email", "phone", "username"])


def opt_out_record(data: dict, title: str) -> Table:
    """An opt-out as the operator sees it: its kind and keyed hash (the target is not kept)."""
    return Table.record([("kind", data["kind"]), ("hash", data["target_hash"])], title=title)


@suppressions_cli.command("add")
@click.argument("kind", type=KIND)
@click.argument("target")
@json_option
def suppressions_add(kind, target, as_json):
    """Record that the person TARGET belongs to opted out: creations for it are refused, free."""
    from app.privacy import suppressions
    data = run(as_json, lambda: suppressions.add(kind, target))
    emit(as_json, data, opt_out_record(data, "opt-out recorded" if data["added"] else "opt-out was recorded already"))


@suppressions_cli.command("remove")
@click.argument("kind", type=KIND)
@click.argument("target")
@json_option
def suppressions_remove(kind, target, as_json):
    """Withdraw the opt-outs that refuse TARGET (in any spelling)."""
    from app.privacy import suppressions
    data = run(as_json, lambda: suppressions.remove(kind, target))
    emit(as_json, data, opt_out_record(data, "opt-out withdrawn" if data["removed"] else "no opt-out for this target"))


@suppressions_cli.command("list")
@click.argument("kind", type=KIND, required=False)
@click.argument("target", required=False)
@json_option
def suppressions_list(kind, target, as_json):
    """Every opt-out, newest first: kind, keyed hash and time (the targets are not stored); with
    KIND TARGET, those that refuse TARGET (in any spelling)."""
    from app.privacy import suppressions
    if kind is not None and target is None:
        raise click.UsageError("give the TARGET after its KIND, or neither")
    rows = run(as_json, lambda: suppressions.list_all(kind, target))
    emit(as_json, {"suppressions": [{**row, "created_at": iso(row["created_at"])} for row in rows]},
         Table([(row["kind"], row["target_hash"], iso(row["created_at"])) for row in rows],
               headers=["kind", "hash", "since"], empty="no opt-outs"))


@subjects_cli.command("export")
@click.argument("target")
@click.option("--kind", type=KIND, default=None, help="The target's kind, when it could be read as another.")
def subjects_export(target, kind):
    """For a person's access request, as JSON: which customers looked TARGET up (in any spelling),
    when and why (purpose, case_ref), the scans and watches still holding it, and whether the person
    opted out. The JSON names no target: keep the request's own record of whom it is about."""
    from app.privacy import subjects
    emit(True, run(True, lambda: subjects.export(target, kind)))


@subjects_cli.command("erase")
@click.argument("target")
@click.option("--kind", type=KIND, default=None, help="The target's kind, when it could be read as another.")
@json_option
def subjects_erase(target, kind, as_json):
    """Erase every customer's completed and failed scans of TARGET (in any spelling), as their own
    erasure does; each customer is told (event subject.erased, the scans' ids, never the target).
    Scans still in flight are listed: run the command again once they have finished."""
    from app.privacy import subjects
    data = run(as_json, lambda: subjects.erase(target, kind))
    emit(as_json, data, Table.record([("scans erased", data["erased"]),
                                      ("still in flight", ", ".join(data["in_flight"]) or "none")]))


@watches_cli.command("run-due")
@click.option("--days-ahead", type=click.IntRange(0, 3650), default=0, metavar="N",
              help="QA only (refused in production): as if it were N days from now.")
@click.option("--customer", "customer_id", default=None, metavar="CUSTOMER_ID",
              help="Only this customer's watches (with --days-ahead, the others' stay where they are).")
@json_option
def watches_run_due(days_ahead, customer_id, as_json):
    """Make the scans of the watches due now, as the workers' periodic job does; prints what became
    of them (scans made, missed and tried again later, watches paused or ended)."""
    from datetime import timedelta

    from app.plumbing.models import utcnow
    from app.watches import watchlist as watches
    if days_ahead and runtime.config["APP_ENV"] == "production":
        fail(as_json, "--days-ahead moves the clock for QA and is refused in production")
    report = run(as_json, lambda: watches.run_due(utcnow() + timedelta(days=days_ahead), customer_id=customer_id))
    emit(as_json, report, Table.record([(name.replace("_", " "), count) for name, count in report.items()]))


sources_cli = OperatorGroup("sources", help="The engine's sources: health, probes, quarantine (D30).")


def sources_table(rows: list[dict]) -> Table:
    return Table([(r["id"], r["status"], r["since"], r["answered_ratio"], r["p95_latency_ms"], r["last_probe_at"],
                   r["last_probe_ok"], r["quarantined"], r.get("quarantine_reason")) for r in rows],
                 headers=["id", "status", "since", "answered", "p95 ms", "last probe", "probe ok", "quarantined",
                          "reason"], empty="no sources known yet")


@sources_cli.command("list")
@json_option
def sources_list(as_json):
    """Every source: status, the last hour's share answered and p95, the last probe, quarantine."""
    from app.sources import health
    rows = run(as_json, health.operator_view)
    emit(as_json, {"sources": rows}, sources_table(rows))


@sources_cli.command("probe")
@click.argument("source_id", required=False)
@click.option("--wait", "wait_seconds", type=click.FloatRange(0, 300), default=30.0, show_default=True,
              metavar="SECONDS", help="How long to wait for the answers before judging (0: send only).")
@json_option
def sources_probe(source_id, wait_seconds, as_json):
    """Probe SOURCE_ID (or every source the engine lists) now: its known-good and known-bad identities,
    then (with --wait) the answers judged and every source judged again."""
    from app.sources import health, probes
    report = run(as_json, lambda: probes.probe_now(source_id, wait_seconds=wait_seconds))
    rows = run(as_json, health.operator_view)
    if source_id is not None:
        rows = [r for r in rows if r["id"] == source_id]
    emit(as_json, {"report": report, "sources": rows},
         Table.record([(name.replace("_", " "), count) for name, count in report.items()]), sources_table(rows))


@sources_cli.command("quarantine")
@click.argument("source_id")
@click.option("--reason", required=True, help="Why (shown to operators; 1 to 300 characters).")
@json_option
def sources_quarantine(source_id, reason, as_json):
    """Leave SOURCE_ID out of new submissions until `sources release`."""
    from app.sources import health
    row = run(as_json, lambda: health.quarantine(source_id, reason))
    emit(as_json, {"source": row}, f"source {source_id} quarantined: new scans leave it out")


@sources_cli.command("release")
@click.argument("source_id")
@json_option
def sources_release(source_id, as_json):
    """Ask SOURCE_ID again in new submissions; its health is counted afresh from now."""
    from app.sources import health
    row = run(as_json, lambda: health.release(source_id))
    emit(as_json, {"source": row}, f"source {source_id} released: new scans ask it again")


GROUPS = (db_cli, customers_cli, keys_cli, users_cli, scans_cli, deliveries_cli, watches_cli, suppressions_cli,
          sources_cli, subjects_cli)
# The options of the ``flask`` command itself that take a value (``--app wsgi``).
_FLASK_OPTIONS_WITH_VALUE = {"--app", "-A", "--env-file", "-e"}


def is_operator_command(args: list[str]) -> bool:
    """Whether a ``flask`` command line (its arguments) runs one of these groups: its first word
    that is neither an option of ``flask`` nor such an option's value names one."""
    words = iter(args)
    for word in words:
        if word in _FLASK_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word in {group.name for group in GROUPS}
    return False


def register_cli(app: Flask) -> None:
    for group in GROUPS:
        app.cli.add_command(group)
