// A classic script (no module support needed): if the dashboard's modules cannot run (an old
// browser, a failed download), say so. Kept out of index.html so the Content-Security-Policy
// allows scripts from this origin only.
setTimeout(function () {
  var note = document.getElementById("form-loading");
  if (note && !document.body.dataset.ready) {
    note.className = "warn";
    note.textContent = "The dashboard did not start (see the browser console). " +
      "The REST API and its docs are at /docs.";
  }
}, 10000);
