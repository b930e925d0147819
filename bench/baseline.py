"""The baseline: a bare Flask app answering one small JSON object, no database, no Redis.

It runs under the same ``gunicorn --config gunicorn.conf.py`` settings (workers,
threads, access log) as the API, so the ratio API/baseline isolates what the API does
per request (authentication, queries, charging, encoding) from what any Flask app on
this gunicorn costs (HTTP parsing, WSGI, access log).

    gunicorn --config gunicorn.conf.py bench.baseline:app
"""
from flask import Flask, jsonify

app = Flask(__name__)


@app.get("/json")
def hello():
    return jsonify({"ok": True, "message": "Hello, World!"})
