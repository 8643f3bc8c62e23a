// phaselog ui: the only script. Live pages (docs/ui.md, "Live pages"): the element #live is the part
// of a page that is re-read when something changes. Two ways to learn of a change:
//  * the event stream (data-stream-url, Server-Sent Events of the ledger's event feed): each event
//    re-reads the page at once;
//  * polling, the fallback (no EventSource, the stream refused or down): a run page compares its
//    fingerprint (data-version-url) every 2 s, the other pages re-read themselves every 10 s.
// While the stream is open a run page still compares its fingerprint every 2 s (and the other pages
// re-read themselves every 10 s): progress events (a phase running, its steps) are not feed events.
// Without JavaScript a page is simply static.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var streamUrl = live.getAttribute("data-stream-url");
  var versionUrl = live.getAttribute("data-version-url");
  var dot = document.getElementById("live-dot");
  var busy = false;
  var again = false;
  var ticks = 0;
  function mark(cls) { if (dot) { dot.className = "live-dot " + cls; } }
  function refresh() {
    if (busy) { again = true; return; }  // one re-read at a time; a burst of events costs one more
    busy = true;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) { return; }
        live.innerHTML = fresh.innerHTML;
        var v = fresh.getAttribute("data-version");
        if (v !== null) { live.setAttribute("data-version", v); }
        dot = document.getElementById("live-dot");
        mark("updated");
      })
      .catch(function () { mark("lost"); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  function check() {
    if (!versionUrl) { refresh(); return; }
    fetch(versionUrl, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (d) {
        if (d.version !== live.getAttribute("data-version")) { refresh(); return; }
        mark("ok");
      })
      .catch(function () { mark("lost"); });
  }
  function tick() {
    ticks += 1;
    if (busy || document.hidden) { return; }
    var every = versionUrl ? 1 : 5;  // in 2 s ticks; the stream brings feed events at once either way
    if (ticks % every === 0) { check(); }
  }
  if (streamUrl && window.EventSource) {
    var opened = false;
    var source = new EventSource(streamUrl);
    source.onopen = function () {
      live.setAttribute("data-streaming", "1");
      mark("ok");
      // What happened while the stream was being opened (or was down) is caught up once.
      if (opened || versionUrl) { check(); }
      opened = true;
    };
    source.onmessage = function (m) {
      live.setAttribute("data-last-event", m.lastEventId);
      refresh();
    };
    source.onerror = function () {
      // CONNECTING: the browser retries by itself; CLOSED (a 503, a refusal): polling from now on.
      live.setAttribute("data-streaming", source.readyState === 2 ? "closed" : "0");
    };
  }
  window.setInterval(tick, 2000);
})();
