"""The client against a server that answers what the API never would: a JSON array, a page that
repeats itself. Each is a clear error, never a traceback or an endless, charged loop. The server
is a real HTTP server on a real socket."""
from __future__ import annotations

import http.server
import io
import json
import threading

import pytest
from scan_api_client import ScanClient
from scan_api_client.cli import main
from scan_api_client.errors import ApiError


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    requests = 0

    def do_GET(self):
        type(self).requests += 1
        if self.path.startswith("/array"):
            body = json.dumps([{"scan_id": "scn_x"}]).encode()
        else:  # every page says there is more after the same last scan
            body = json.dumps({"ok": True, "has_more": True, "data": [
                {"scan_id": "scn_same", "status": "queued", "target": "a@example.com", "kind": "email",
                 "created_at": "2026-01-01T00:00:00Z"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Misbehaving.requests = 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def test_an_answer_that_is_a_json_array_is_a_clear_api_error(server):
    api = ScanClient(f"{server}/array", "service_live_x")
    with pytest.raises(ApiError) as caught:
        api.get("scn_x")
    assert caught.value.code == "invalid_response"
    assert "JSON list, not an object" in str(caught.value)


def test_the_command_line_prints_one_line_for_it_not_a_traceback(server):
    out, err = io.StringIO(), io.StringIO()
    code = main(["get", "scn_x"], stdin=io.StringIO(""), stdout=out, stderr=err,
                env={"SCAN_API_URL": f"{server}/array", "SCAN_API_KEY": "service_live_x"}, sleep=lambda s: None)
    assert code != 0
    assert "Traceback" not in err.getvalue()
    assert "not an object" in err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1


def test_pages_that_make_no_progress_stop_the_listing(server):
    api = ScanClient(f"{server}/pages", "service_live_x")
    with pytest.raises(ApiError) as caught:
        list(api.iter_scans())
    assert "make no progress" in str(caught.value)
    assert _Misbehaving.requests == 2  # the second page repeated the first: no third request
