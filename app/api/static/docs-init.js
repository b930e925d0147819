// Starts Swagger UI on /api/docs. A file of its own, not an inline script, so that the
// page's Content-Security-Policy can allow scripts from this site only ('self').
window.addEventListener("load", function () {
  var container = document.getElementById("swagger-ui-container");
  window.ui = SwaggerUIBundle({
    url: container.getAttribute("data-spec-url"),
    dom_id: "#swagger-ui-container"
  });
});
