// Petri's environment page: it replaces the environments section with each
// rendering the server sends (server-sent events), keeps open logs open,
// loads a log tail when it is opened, and keeps ages current.
(function () {
  "use strict";
  var main = document.getElementById("environments");
  var live = document.getElementById("live");
  var logs = {}; // data-src -> text already shown
  var loading = {}; // data-src -> a read is under way
  var closed = {}; // data-src -> closed by the reader (a failed step's log opens by itself)

  function human(ms) {
    // kubectl's duration.HumanDuration.
    var s = Math.max(0, Math.floor(ms / 1000)), m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24), y = Math.floor(d / 365);
    if (s < 120) return s + "s";
    if (m < 10) return m + "m" + (s % 60 ? (s % 60) + "s" : "");
    if (m < 180) return m + "m";
    if (h < 8) return h + "h" + (m % 60 ? (m % 60) + "m" : "");
    if (h < 48) return h + "h";
    if (h < 192) return d + "d" + (h % 24 ? (h % 24) + "h" : "");
    if (y < 2) return d + "d";
    if (y < 8) return y + "y" + (d % 365 ? (d % 365) + "d" : "");
    return y + "y";
  }

  function tick() {
    var now = Date.now();
    main.querySelectorAll("time[data-age]").forEach(function (t) {
      t.textContent = human(now - Date.parse(t.getAttribute("datetime")));
    });
    main.querySelectorAll("time[data-until]").forEach(function (t) {
      var left = Date.parse(t.getAttribute("datetime")) - now;
      t.textContent = left > 0 ? "in " + human(left) : "expired";
    });
  }

  function running(d) {
    var p = d.getAttribute("data-phase");
    return p === "Deploying" || p === "Undeploying";
  }

  function load(d) {
    var src = d.getAttribute("data-src"), pre = d.querySelector("pre");
    if (logs[src] !== undefined) pre.textContent = logs[src];
    else pre.textContent = "loading…";
    if ((logs[src] !== undefined && !running(d)) || loading[src]) return;
    loading[src] = true;
    fetch(src, { cache: "no-store" }).then(function (r) {
      return r.text().then(function (t) {
        if (r.ok) logs[src] = t;
        // The section may have been replaced meanwhile: write to the
        // current element.
        main.querySelectorAll("details.log").forEach(function (cur) {
          if (cur.getAttribute("data-src") !== src) return;
          var p = cur.querySelector("pre");
          p.textContent = t;
          p.scrollTop = p.scrollHeight;
        });
      });
    }).catch(function () {
      pre.textContent = "(the log could not be read)";
    }).then(function () { delete loading[src]; });
  }

  function wire(root, wasOpen) {
    root.querySelectorAll("details.log").forEach(function (d) {
      var src = d.getAttribute("data-src");
      if (wasOpen && wasOpen[src]) d.open = true;
      if (closed[src]) d.open = false;
      d.addEventListener("toggle", function () {
        if (d.open) { delete closed[src]; load(d); } else closed[src] = true;
      });
      if (d.open) load(d);
    });
  }

  function openLogs() {
    var open = {};
    main.querySelectorAll("details.log[open]").forEach(function (d) {
      open[d.getAttribute("data-src")] = true;
    });
    return open;
  }

  wire(main, null);
  tick();
  setInterval(tick, 15000);

  if (!window.EventSource) return;
  var events = new EventSource("ui/events");
  events.addEventListener("open", function () {
    document.body.classList.add("connected");
    live.textContent = "live";
  });
  events.addEventListener("error", function () {
    document.body.classList.remove("connected");
    // A refused stream (429: this address has too many pages open; 503:
    // the page is full) is not retried by the browser: say so.
    live.textContent = events.readyState === EventSource.CLOSED ? "not live: reload later" : "reconnecting";
  });
  events.addEventListener("environments", function (e) {
    var open = openLogs();
    main.innerHTML = e.data;
    wire(main, open);
    tick();
  });
})();
