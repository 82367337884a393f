// ReDoc over this service's own schema, from the vendored standalone bundle (no CDN, no fonts).
/* global Redoc */
window.addEventListener("load", () => {
  Redoc.init("/openapi.json", { hideDownloadButton: false }, document.getElementById("redoc"));
});
