"""The simulated investigation engine: the API of E1 and its controls (E3).

API (``Authorization: Bearer <ENGINE_TOKEN>`` required when ``ENGINE_TOKEN`` is set):

- ``POST /v1/investigations`` ``{"target", "kind", "reference"}``
  → 201 ``{"id", "recipes", "eta_seconds"}``; with ``"callback_url"`` also ``"callbacks": true``
  when the simulator calls back (E7, ``simulator.callbacks``)
- ``POST /v1/investigations/batch`` ``{"items": [...]}`` (1 to 100 items)
  → 201 ``{"items": [{"id", "recipes", "eta_seconds"}, ...]}`` in request order
- ``GET /v1/investigations/<id>``
  → 200 ``{"id", "status", "recipes_total", "recipes_done", "result", "error"}``
- ``POST /v1/investigations/status`` ``{"ids": [...]}`` (1 to 100 ids: the batch look of E6)
  → 200 ``{"items": [...]}``, each as the single look answers, in the order asked; an id this
  engine never issued is ``{"id", "status": "error", "error": {"code": "not_found"}}``
- ``DELETE /v1/investigations/<id>`` (E7) → 204: the engine forgets the investigation, its
  result and its artifacts (every later look or artifact answers 404, as for an id it never
  issued); 404 for an unknown or already deleted id. Deletions are held in the process's
  memory (a reset keeps them; a restart forgets them), as ids carry their own state.

Submissions (single and batch items) accept ``"sources": [ids]``: a re-run of those sources
only (E6). Results carry ``sources``, ``evidence`` and ``risk.reasons`` (see
``app.tracking.simulated.results``); ``partial…`` targets (phones ending ``7777``) end with some
sources rate-limited or timed out.

Investigations are stateless (see ``simulator.investigations``), so the results and the
``fail``/``slow``/``hang``/``partial``/``junk`` target conventions documented there hold across
restarts. A ``junk`` investigation (phones ending ``6666``) ends ``done`` with ``"result": "not an object"``.
A ``changing`` target (phones ending ``4444``) finds more at each new investigation (E7): one more
breach each time and one more verified profile every other time, counted from the investigations of
that target this process received since its last reset (``app.tracking.simulated.results``).

Controls (no auth, for tests and QA): ``POST /_sim/engine/mode`` with ``{"mode": "up"}``,
``{"mode": "down"}`` (every ``/v1`` call answers 503) or ``{"mode": "flaky", "every": N}``
(every N-th ``/v1`` call since the mode was set answers 500), each with ``"batch_look": false`` to
answer the batch look with 404 as an engine without it does (default true) and ``"deletion": false``
to answer deletions with 405 as an engine without E7's deletion does (default true) and
``"sources_listing": false`` to answer ``GET /v1/sources`` with 404 (E8); ``GET /_sim/engine/mode``;
``GET /_sim/engine/stats`` → ``{"submit", "batch", "status", "looks", "deletes", "total"}`` calls received,
counted before mode and auth are applied; ``GET /_sim/engine/volume`` → ``{"submitted", "looked"}``
investigations submitted (single and batch items) and ids asked in batch looks, counted once
answered (the load behind the calls: a benchmark divides it by the calls); ``POST
/_sim/engine/reset`` → mode up, stats, volume and the changing targets' counts zero.

Decoded ids and their plans are kept (up to ``PLAN_CACHE_SIZE``, then forgotten all at once): a
scan in flight is looked at many times, and decoding its id again each time was most of a batch
look's cost (100,000 scans in flight at a 10 s poll are 10,000 ids a second). Ids still carry all
their state: a restarted simulator answers the same.

Sources (E8, ``simulator.sources``): ``GET /v1/sources`` lists them with their probe identities;
a submission with ``"probe": true`` (and ``"sources": [id]``) is a probe, answered after a few
seconds (times the time scale); ``POST /_sim/engine/sources/<id>`` ``{"mode": "ok"|"error"|"slow"|
"wrong"}`` breaks a source on purpose and ``GET /_sim/engine/sources`` shows the modes.

Artifacts named in results are served at ``GET /_sim/artifacts/<id>.pdf`` and ``.card.json``.
"""
import hmac
import threading
import time
from collections import Counter

from flask import Blueprint, Response, current_app, jsonify, request

from simulator import artifacts, sources
from simulator.callbacks import DEFAULT_SENDERS, CallbackSender
from simulator.errors import json_error
from simulator.investigations import CHANGING, JUNK, KINDS, NORMAL, decode_id, encode_id, now_ms, plan_for, progress_at
from simulator.results import result_for

MAX_BATCH = 100
JUNK_RESULT = "not an object"
MODES = ("up", "down", "flaky")
STAT_NAMES = ("submit", "batch", "status", "looks", "deletes")
VOLUME_NAMES = ("submitted", "looked")
PLAN_CACHE_SIZE = 400_000  # about 300 bytes an entry: 120 MB at most

engine_bp = Blueprint("engine", __name__)

# Which stats counter each API view feeds; also the set of views that mode and auth apply to.
_STAT_OF_ENDPOINT = {"engine.submit": "submit", "engine.submit_batch": "batch", "engine.status": "status",
                     "engine.status_batch": "looks", "engine.delete": "deletes",
                     "engine.list_sources": "sources"}


class EngineControl:
    """Mode and call counters, shared by the server's threads."""

    def __init__(self, callback_secret: str = "", callback_senders: int = DEFAULT_SENDERS) -> None:
        self._lock = threading.Lock()
        # Ids deleted (E7). A reset keeps them: it must not bring back what the engine forgot.
        self.deleted: set[str] = set()
        self.callbacks = CallbackSender(callback_secret, self.deleted.__contains__, callback_senders)
        self.sources = sources.SourceModes()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._mode, self._every, self._calls_in_mode = "up", None, 0
            self._batch_look = self._deletion = self._listing = True
            self._stats = Counter()
            self._volume = Counter()
            self._generations: Counter = Counter()  # (kind, target) -> investigations of a changing target
        self.plans: dict[str, tuple] = {}  # engine id -> (Investigation, Plan); see the module's docstring
        self.callbacks.reset()
        self.sources.reset()

    def set_mode(self, mode: str, every: int | None, batch_look: bool = True, deletion: bool = True,
                 sources_listing: bool = True) -> None:
        with self._lock:
            self._mode, self._every, self._calls_in_mode = mode, every, 0
            self._batch_look, self._deletion, self._listing = batch_look, deletion, sources_listing

    def mode(self) -> dict:
        with self._lock:
            return {"mode": self._mode, "every": self._every, "batch_look": self._batch_look,
                    "deletion": self._deletion, "sources_listing": self._listing}

    def sources_listing(self) -> bool:
        with self._lock:
            return self._listing

    def batch_look(self) -> bool:
        with self._lock:
            return self._batch_look

    def deletion(self) -> bool:
        with self._lock:
            return self._deletion

    def stats(self) -> dict:
        with self._lock:
            counts = {name: self._stats[name] for name in STAT_NAMES}
        return {**counts, "total": sum(counts.values())}

    def volume(self) -> dict:
        with self._lock:
            return {name: self._volume[name] for name in VOLUME_NAMES}

    def next_generation(self, kind: str, target: str) -> int:
        """How many investigations of this changing target came before this one (E7)."""
        with self._lock:
            earlier = self._generations[(kind, target)]
            self._generations[(kind, target)] += 1
            return earlier

    def add_volume(self, name: str, n: int) -> None:
        with self._lock:
            self._volume[name] += n

    def admit(self, stat: str) -> int | None:
        """Count one API call; the error status the current mode imposes on it, if any."""
        with self._lock:
            self._stats[stat] += 1
            self._calls_in_mode += 1
            if self._mode == "down":
                return 503
            if self._mode == "flaky" and self._calls_in_mode % self._every == 0:
                return 500
            return None


class InvalidBody(ValueError):
    """A request body the engine refuses with 400."""


@engine_bp.record_once
def _install_control(state) -> None:
    config = state.app.config
    state.app.extensions["sim_engine"] = EngineControl(config.get("ENGINE_CALLBACK_SECRET") or "",
                                                       int(config.get("SIM_CALLBACK_SENDERS") or DEFAULT_SENDERS))


def control() -> EngineControl:
    return current_app.extensions["sim_engine"]


@engine_bp.before_request
def _gate_api_calls():
    stat = _STAT_OF_ENDPOINT.get(request.endpoint)
    if stat is None:
        return None
    imposed = control().admit(stat)
    if imposed == 503:
        return json_error(503, "engine_unavailable", "The engine is down (simulated).")
    if imposed == 500:
        return json_error(500, "engine_flaky", "Transient engine failure (simulated).")
    if not _authorised():
        response, status = json_error(401, "unauthorized", "Missing or wrong bearer token.")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response, status
    return None


def _authorised() -> bool:
    token = current_app.config.get("ENGINE_TOKEN") or ""
    if not token:
        return True
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


@engine_bp.errorhandler(InvalidBody)
def _invalid_body(exc: InvalidBody):
    return json_error(400, "invalid_request", str(exc))


@engine_bp.post("/v1/investigations")
def submit():
    body = _submission(*_parse_item(_json_body()))
    control().add_volume("submitted", 1)
    return jsonify(body), 201


@engine_bp.post("/v1/investigations/batch")
def submit_batch():
    items = _json_body().get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise InvalidBody(f"items must be a list of 1 to {MAX_BATCH} investigations")
    # Validate everything before answering, so a bad item refuses the batch as a whole.
    parsed = []
    for index, item in enumerate(items):
        try:
            parsed.append(_parse_item(item))
        except InvalidBody as exc:
            raise InvalidBody(f"items[{index}]: {exc}") from exc
    answers = [_submission(*item) for item in parsed]
    control().add_volume("submitted", len(answers))
    return jsonify({"items": answers}), 201


@engine_bp.get("/v1/investigations/<engine_id>")
def status(engine_id: str):
    body = _look(engine_id)
    if body is None:
        return json_error(404, "not_found", "No such investigation.")
    return jsonify(body)


@engine_bp.delete("/v1/investigations/<engine_id>")
def delete(engine_id: str):
    """E7's deletion: forget the investigation and its result; 404 when unknown or deleted before."""
    engine_control = control()
    if not engine_control.deletion():
        return json_error(405, "method_not_allowed", "This engine does not offer deletion (simulated).")
    if _decoded(engine_id) is None:
        return json_error(404, "not_found", "No such investigation.")
    engine_control.deleted.add(engine_id)
    engine_control.plans.pop(engine_id, None)
    return Response(status=204)


@engine_bp.post("/v1/investigations/status")
def status_batch():
    """The batch look (E6): each id as the single look answers it, in the order asked. With
    ``batch_look`` off (``/_sim/engine/mode``) it answers 404, as an engine without it would."""
    if not control().batch_look():
        return json_error(404, "not_found", "This engine does not offer the batch look (simulated).")
    ids = _json_body().get("ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_BATCH or not all(isinstance(i, str) for i in ids):
        raise InvalidBody(f"ids must be a list of 1 to {MAX_BATCH} investigation ids")
    items = [_look(engine_id) or _unknown(engine_id) for engine_id in ids]
    control().add_volume("looked", len(items))
    return jsonify({"items": items})


def _unknown(engine_id: str) -> dict:
    return {"id": engine_id, "status": "error", "recipes_total": 0, "recipes_done": 0, "result": None,
            "error": {"code": "not_found", "message": "No such investigation."}}


def _look(engine_id: str) -> dict | None:
    """What ``GET /v1/investigations/<id>`` answers, or None for an id this engine never issued."""
    known = _decoded(engine_id)
    if known is None:
        return None
    investigation, plan = known
    kind, target = investigation.kind, investigation.target
    progress = progress_at(plan, time.time() - investigation.created_ms / 1000)
    body = {"id": engine_id, "status": progress.status, "recipes_total": plan.recipes,
            "recipes_done": progress.recipes_done, "result": None, "error": None}
    if progress.status == "done":
        artifact_base = f"{request.host_url}_sim/artifacts/{engine_id}"
        finished = time.gmtime(investigation.created_ms / 1000 + plan.duration_s)
        asked = None if investigation.sources is None else list(investigation.sources)
        body["result"] = JUNK_RESULT if plan.behaviour == JUNK else result_for(
            kind, target, artifact_base, sources=asked, checked_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", finished),
            generation=investigation.generation)
        sources.apply(body["result"], kind, target, probe=investigation.probe, modes=control().sources.snapshot())
    elif progress.status == "error":
        body["error"] = {"code": "engine_failed", "message": f"Recipe {progress.recipes_done + 1} failed (simulated)."}
    return body


def _decoded(engine_id: str) -> tuple | None:
    """``(Investigation, Plan)`` of an id this engine issued and did not delete, from the cache
    when looked at before."""
    if engine_id in control().deleted:
        return None
    plans = control().plans
    known = plans.get(engine_id)
    if known is None:
        investigation = decode_id(engine_id)
        if investigation is None:
            return None
        known = (investigation, _plan(investigation.kind, investigation.target, investigation.probe))
        if len(plans) >= PLAN_CACHE_SIZE:
            plans.clear()  # cheaper than an LRU's bookkeeping on every look; the next looks decode again
        plans[engine_id] = known  # a dict's item assignment is atomic under the GIL: threads may race, harmlessly
    return known


@engine_bp.get("/_sim/engine/mode")
def get_mode():
    return jsonify(control().mode())


@engine_bp.post("/_sim/engine/mode")
def set_mode():
    body = _json_body()
    mode, every = body.get("mode"), body.get("every")
    if mode not in MODES:
        raise InvalidBody(f"mode must be one of {', '.join(MODES)}")
    if mode == "flaky":
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise InvalidBody("flaky mode needs every: a positive integer")
    else:
        every = None
    batch_look, deletion = body.get("batch_look", True), body.get("deletion", True)
    if not isinstance(batch_look, bool):
        raise InvalidBody("batch_look must be true or false")
    if not isinstance(deletion, bool):
        raise InvalidBody("deletion must be true or false")
    listing = body.get("sources_listing", True)
    if not isinstance(listing, bool):
        raise InvalidBody("sources_listing must be true or false")
    control().set_mode(mode, every, batch_look, deletion, listing)
    return jsonify(control().mode())


@engine_bp.get("/v1/sources")
def list_sources():
    """E8's listing: each source, the kinds it answers for, its known-good and known-bad identities.
    With ``sources_listing`` off (``/_sim/engine/mode``) it answers 404, as an engine without it would."""
    if not control().sources_listing():
        return json_error(404, "not_found", "This engine does not list its sources (simulated).")
    return jsonify(sources.listing())


@engine_bp.get("/_sim/engine/sources")
def get_sources():
    return jsonify(control().sources.state())


@engine_bp.post("/_sim/engine/sources/<source_id>")
def set_source(source_id: str):
    if source_id not in sources.NAMES:
        return json_error(404, "not_found", "No such source.")
    mode = _json_body().get("mode")
    if mode not in sources.MODES:
        raise InvalidBody(f"mode must be one of {', '.join(sources.MODES)}")
    control().sources.set(source_id, mode)
    return jsonify({"id": source_id, "name": sources.NAMES[source_id], "mode": mode})


@engine_bp.get("/_sim/engine/callbacks")
def get_callbacks():
    return jsonify(_sender().state())


@engine_bp.post("/_sim/engine/callbacks")
def set_callbacks():
    """``{"drop": true}``: every callback due from now on is dropped instead of sent (lost callbacks)."""
    drop = _json_body().get("drop")
    if not isinstance(drop, bool):
        raise InvalidBody("drop must be true or false")
    _sender().set_drop(drop)
    return jsonify(_sender().state())


def _sender() -> CallbackSender:
    return control().callbacks


@engine_bp.get("/_sim/engine/stats")
def get_stats():
    return jsonify(control().stats())


@engine_bp.get("/_sim/engine/volume")
def get_volume():
    return jsonify(control().volume())


@engine_bp.post("/_sim/engine/reset")
def reset():
    control().reset()
    return jsonify({**control().mode(), "stats": control().stats()})


@engine_bp.get("/_sim/artifacts/<engine_id>.pdf")
def artifact_pdf(engine_id: str):
    known = _decoded(engine_id)
    if known is None:
        return json_error(404, "not_found", "No such artifact.")
    return Response(artifacts.report_pdf(known[0].kind, known[0].target), mimetype="application/pdf")


@engine_bp.get("/_sim/artifacts/<engine_id>.card.json")
def artifact_card(engine_id: str):
    known = _decoded(engine_id)
    if known is None:
        return json_error(404, "not_found", "No such artifact.")
    return jsonify(artifacts.person_card(known[0].kind, known[0].target))


def _json_body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InvalidBody("the body must be a JSON object")
    return body


def _parse_item(item) -> tuple[str, str, list[str] | None, str | None, str | None, bool]:
    """``(kind, target, sources, reference, callback_url, probe)`` of a valid submission."""
    if not isinstance(item, dict):
        raise InvalidBody("an investigation must be a JSON object")
    kind, target, reference = item.get("kind"), item.get("target"), item.get("reference")
    if kind not in KINDS:
        raise InvalidBody(f"kind must be one of {', '.join(KINDS)}")
    if not isinstance(target, str) or not target.strip():
        raise InvalidBody("target must be a non-empty string")
    if reference is not None and not isinstance(reference, str):
        raise InvalidBody("reference must be a string")
    asked = item.get("sources")
    if asked is not None and not (isinstance(asked, list) and asked and all(isinstance(s, str) and s for s in asked)):
        raise InvalidBody("sources must be a non-empty list of source ids")
    probe = item.get("probe", False)
    if not isinstance(probe, bool):
        raise InvalidBody("probe must be true or false")
    if probe and asked is None:
        raise InvalidBody("a probe names the sources it asks")
    callback_url = item.get("callback_url")
    if callback_url is not None and not (isinstance(callback_url, str)
                                         and callback_url.startswith(("http://", "https://"))):
        raise InvalidBody("callback_url must be an http(s) URL")
    return kind, target, asked, reference, callback_url, probe


def _submission(kind: str, target: str, asked: list[str] | None = None, reference: str | None = None,
                callback_url: str | None = None, probe: bool = False) -> dict:
    plan = _plan(kind, target, probe)
    generation = control().next_generation(kind, target) if plan.behaviour == CHANGING and not probe else 0
    created_ms = now_ms()
    engine_id = encode_id(kind, target, created_ms, sources=asked, generation=generation, probe=probe)
    answer: dict[str, object] = {"id": engine_id, "recipes": plan.recipes, "eta_seconds": plan.eta_seconds}
    sender = _sender()
    if callback_url is not None and sender.secret:  # no secret: no promise (E7)
        sender.schedule(engine_id, reference, callback_url, plan, created_ms / 1000)
        answer["callbacks"] = True
    return answer


def _plan(kind: str, target: str, probe: bool):
    """An investigation's plan; a probe's answers after ``sources.PROBE_SECONDS`` (E8: an engine may
    answer a probe faster), whatever its target."""
    plan = plan_for(kind, target, _time_scale())
    if probe:
        return type(plan)(duration_s=sources.PROBE_SECONDS * _time_scale(), recipes=plan.recipes, behaviour=NORMAL)
    return plan


def _time_scale() -> float:
    return float(current_app.config["SIM_TIME_SCALE"])
