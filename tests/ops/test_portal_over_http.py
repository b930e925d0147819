"""The portal's session cookie is Secure in production: over plain HTTP every form fails its
CSRF check, and the answer says why instead of "reload the page"."""


def test_a_form_posted_over_plain_http_says_the_portal_needs_https(app):
    app.config["SESSION_COOKIE_SECURE"] = True  # as production sets it
    client = app.test_client()
    plain = client.post("/app/login", data={"email": "a@example.com", "password": "x"})
    assert plain.status_code == 400 and plain.get_json()["error"] == "csrf_failed"
    assert "HTTPS" in plain.get_json()["message"]
    secure = app.test_client().post("/app/login", data={"email": "a@example.com", "password": "x"},
                                    base_url="https://localhost")
    assert secure.status_code == 400 and "reload the page" in secure.get_json()["message"]
