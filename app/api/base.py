"""The Blueprint class of the JSON API: validation errors answer 400 (D2), not webargs' 422."""
import inspect
import json
from typing import ClassVar

import marshmallow as ma
from flask_smorest import Blueprint
from flask_smorest.arguments import ArgumentsMixin
from webargs.flaskparser import is_json_request
from werkzeug.routing import BaseConverter

from app.errors import ApiError

NOT_JSON_MESSAGE = "the request body must be JSON, sent with Content-Type: application/json"


class Parser(type(ArgumentsMixin.ARGUMENTS_PARSER)):
    DEFAULT_VALIDATION_STATUS = 400
    # An unknown query parameter is a 400 naming it, as a mistyped one (`?limt=5`) would
    # otherwise be ignored without a word (webargs excludes them by default).
    DEFAULT_UNKNOWN_BY_LOCATION: ClassVar[dict] = {**type(ArgumentsMixin.ARGUMENTS_PARSER).DEFAULT_UNKNOWN_BY_LOCATION,
                                   "query": ma.RAISE, "querystring": ma.RAISE}

    def _raw_load_json(self, req):
        if not is_json_request(req):
            # webargs would read no body at all and report every required field missing,
            # which hides the real mistake (a form post, a missing header).
            raise ApiError(400, "invalid_request", NOT_JSON_MESSAGE)
        try:
            return super()._raw_load_json(req)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise  # webargs answers these with its invalid-JSON 400
        except (RecursionError, ValueError) as exc:
            # JSON nested deeper than Python's recursion limit ([[[[...]]]]), or an integer of
            # more than 4,300 digits (Python's int conversion limit), is not a body this API
            # takes: the invalid-JSON 400, not a 500.
            raise json.JSONDecodeError(f"the JSON document cannot be read: {exc.__class__.__name__}",
                                       doc="-", pos=0) from None


class ApiBlueprint(Blueprint):
    ARGUMENTS_PARSER = Parser()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prepare_doc_cbks.append(self._prepare_added_parameters_doc)

    def doc(self, **kwargs):
        """As flask-smorest's, except that ``parameters`` (a header, a hand-written query
        parameter) are added to those the view's arguments document: flask-smorest's own merge
        replaces the list, and a view's query arguments vanished from the document."""
        added = kwargs.pop("parameters", None)
        decorator = super().doc(**kwargs)
        if not added:
            return decorator

        def decorate(func):
            wrapper = decorator(func)
            wrapper._apidoc["added_parameters"] = [*wrapper._apidoc.get("added_parameters", []), *added]
            return wrapper
        return decorate

    @staticmethod
    def _prepare_added_parameters_doc(doc, doc_info, **_):
        """After the arguments' parameters (flask-smorest's first callback): the ``doc`` ones."""
        added = doc_info.get("added_parameters")
        if added:
            doc.setdefault("parameters", []).extend(added)
        return doc

    # What each priced thing costs, in words (billing's ``charges.PRICE_WORDS``: call, scan, bulk),
    # handed in at start (``install_prices``): this toolkit knows no domain.
    PRICE_WORDS: ClassVar[dict[str, str]] = {}

    @classmethod
    def install_prices(cls, words: dict[str, str]) -> None:
        cls.PRICE_WORDS = dict(words)

    def priced(self, what: str):
        """The view's docstring as its OpenAPI description, with the price of ``what`` (call,
        scan, bulk) at ``{price}``, put in when the document is made (``register_views_in_doc``):
        the document says what billing charges. Put it right above the ``def``."""
        def decorate(view):
            view = self.doc(description=inspect.cleandoc(view.__doc__ or ""))(view)
            view._apidoc["priced"] = what
            return view
        return decorate

    def register_views_in_doc(self, api, app, spec, *, name, parameters):
        """As flask-smorest's, the priced operations' ``{price}`` said in words first."""
        # The texts are put back afterwards, the docs left as they were for the next app. (A deep
        # copy of the docs copied their schemas too: new instances that the document resolved
        # again, and every app built took 1.3 s longer, the test suite's apps a third of its time.)
        originals = []
        for endpoint in self._docs.values():
            for operation in endpoint.values():
                what = operation.get("priced") if isinstance(operation, dict) else None
                if what is not None:
                    originals.extend(_put_price(operation, self.PRICE_WORDS[what]))
        try:
            super().register_views_in_doc(api, app, spec, name=name, parameters=parameters)
        finally:
            for part, field, text in originals:
                part[field] = text


def _put_price(operation: dict, words: str) -> list[tuple[dict, str, str]]:
    """The price in words at ``{price}`` in an operation's summary and description, from its
    docstring or its ``doc(description=...)``: each text changed, as it was."""
    originals = []
    for part in (operation.get("docstring", {}), operation.get("manual_doc", {})):
        for field in ("summary", "description"):
            if isinstance(part.get(field), str):
                originals.append((part, field, part[field]))
                part[field] = part[field].replace("{price}", words)
    return originals


class ScanIdConverter(BaseConverter):
    """A scan id in ``/scan/<scan_id>``: any path segment but ``bulk``, the bulk creation's path.

    Without it ``GET /scan/bulk`` reads "bulk" as a scan id and answers 404. Not matching
    it here leaves ``/scan/bulk`` to its own rule alone, so any method but POST is a 405
    ``method_not_allowed`` with ``Allow: POST`` (D2).
    """

    regex = r"(?!bulk\Z)[^/]+"


class WatchIdConverter(ScanIdConverter):
    """A watch id in ``/watches/<watch_id>``: any path segment but ``bulk``, the bulk creation's
    path, for the same reason (``GET /watches/bulk`` is a 405, not a read of a watch "bulk")."""
