// phaselog ui: the only script. Live refresh of a run page: poll the run's fingerprint (names of
// its records, cheap to compute) and, when it changes, fetch the page again and swap the live part.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var url = live.getAttribute("data-version-url");
  var dot = document.getElementById("live-dot");
  var busy = false;
  function mark(cls) { if (dot) { dot.className = "live-dot " + cls; } }
  function refresh() {
    return fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) { return; }
        live.innerHTML = fresh.innerHTML;
        live.setAttribute("data-version", fresh.getAttribute("data-version"));
        dot = document.getElementById("live-dot");
        mark("updated");
      });
  }
  function tick() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (d) {
        if (d.version !== live.getAttribute("data-version")) { return refresh(); }
        mark("ok");
      })
      .catch(function () { mark("lost"); })
      .then(function () { busy = false; });
  }
  window.setInterval(tick, 2000);
})();
