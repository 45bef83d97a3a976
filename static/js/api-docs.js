// Starts Swagger UI on /docs (app/routes/api_docs.py). A file, not an inline script: the
// site's Content-Security-Policy allows scripts from the site itself only.
"use strict";
(() => {
  const root = document.getElementById("swagger-ui");
  window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    deepLinking: true,
  });
})();
