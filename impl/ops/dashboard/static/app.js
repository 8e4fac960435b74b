// Belay dashboard: live regions by short poll, the charts (SVG drawn from /api/charts), and the
// database-unreachable banner. Fragments are server-rendered with autoescaping; chart labels are set
// with textContent. The Content-Security-Policy admits scripts from /static only (no inline script,
// no inline style: SVG gets presentation attributes).
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLOURS = { succeeded: "#16a34a", failed: "#dc2626", cancelled: "#78350f" };
  var lastOk = new Date();
  var failing = {};

  function banner() { return document.getElementById("db-banner"); }

  function hhmmss(d) { return d.toISOString().slice(11, 19) + "Z"; }

  function markDown(key, message) {
    failing[key] = true;
    var b = banner();
    if (!b) return;
    b.textContent = message + " Showing what was read at " + hhmmss(lastOk) + "; retrying.";
    b.hidden = false;
    document.body.setAttribute("data-db", "down");
  }

  function markUp(key) {
    delete failing[key];
    lastOk = new Date();
    if (Object.keys(failing).length) return;
    var b = banner();
    if (b && !b.hasAttribute("data-static")) { b.hidden = true; b.textContent = ""; }
    document.body.removeAttribute("data-db");
  }

  function get(url, as) {
    var ctl = window.AbortController ? new AbortController() : null;
    var timer = ctl ? setTimeout(function () { ctl.abort(); }, 10000) : null;
    return fetch(url, { credentials: "same-origin", cache: "no-store", signal: ctl ? ctl.signal : undefined,
                        headers: as === "json" ? { Accept: "application/json" } : {} })
      .then(function (r) {
        if (timer) clearTimeout(timer);
        if (r.status === 503) {
          return r.text().then(function (t) {
            var msg = t;
            try { msg = JSON.parse(t).message || t; } catch (e) { /* plain text */ }
            throw { down: true, message: msg };
          });
        }
        if (!r.ok) throw { down: false, message: "HTTP " + r.status };
        return as === "json" ? r.json() : r.text();
      }, function () {
        if (timer) clearTimeout(timer);
        throw { down: true, message: "The dashboard does not answer." };
      });
  }

  function fail(key, region, err) {
    if (region) region.setAttribute("data-stale", "yes");
    if (err && err.down) markDown(key, /unreachable/i.test(err.message) ? err.message : "Database unreachable: " + err.message);
  }

  // Replace each top-level element of the fragment that has an id with the page's element of that id
  // (what a fragment does not carry, like a form being typed into, stays as it is).
  function swap(region, html) {
    var t = document.createElement("template");
    t.innerHTML = html;
    var fresh = Array.prototype.slice.call(t.content.children);
    var replaced = 0;
    fresh.forEach(function (el) {
      var old = el.id && document.getElementById(el.id);
      if (old) { old.replaceWith(el); replaced++; }
    });
    if (!replaced) region.innerHTML = html;
  }

  function startRegion(region, key) {
    var every = parseInt(region.getAttribute("data-poll-ms"), 10) || 1000;
    var busy = false;
    function poll() {
      if (busy || document.hidden) return;
      busy = true;
      get(region.getAttribute("data-poll-url"), "text")
        .then(function (html) { swap(region, html); applyFilter(); region.removeAttribute("data-stale"); markUp(key); })
        .catch(function (err) { fail(key, region, err); })
        .finally(function () { busy = false; });
    }
    setInterval(poll, every);
  }

  // --- charts ---------------------------------------------------------------------------------------

  function el(name, attrs, parent) {
    var e = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, x, y, s, cls, anchor) {
    var t = el("text", { x: x, y: y, "class": cls || "axis", "text-anchor": anchor || "start" }, parent);
    t.textContent = s;
    return t;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = [1, 2, 2.5, 5, 10].find(function (f) { return f * p >= v; });
    return m * p;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "—";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
    return (ms / 60000).toFixed(1) + " min";
  }

  var W = 600, H = 150, L = 44, R = 8, T = 14, B = 20;

  function frame(svg, max, label, fmt, minutes) {
    var ih = H - T - B;
    [0, 0.5, 1].forEach(function (f) {
      var y = T + ih - f * ih;
      el("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "#e5e7eb" }, svg);
      text(svg, L - 4, y + 4, fmt(max * f), "axis", "end");
    });
    text(svg, L, H - 4, minutes[0].slice(11, 16) + "Z", "axis");
    text(svg, W - R, H - 4, minutes[minutes.length - 1].slice(11, 16) + "Z", "axis", "end");
    text(svg, L + 4, T - 3, label, "chart-label");
  }

  function finishedChart(q, data) {
    var minutes = data.minutes, n = minutes.length, outcomes = data.outcomes;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", "class": "chart-finished", role: "img" });
    var totals = minutes.map(function (_, i) {
      return outcomes.reduce(function (s, o) { return s + q.finished[o][i]; }, 0);
    });
    var max = niceMax(Math.max.apply(null, totals.concat([1])));
    frame(svg, max, "jobs finished per minute", function (v) { return String(Math.round(v * 10) / 10); }, minutes);
    var iw = W - L - R, ih = H - T - B, bw = iw / n;
    for (var i = 0; i < n; i++) {
      var y = T + ih;
      outcomes.forEach(function (o) {
        var v = q.finished[o][i];
        if (!v) return;
        var h = (v / max) * ih;
        y -= h;
        var r = el("rect", { x: (L + i * bw + 0.5).toFixed(1), y: y.toFixed(1), width: Math.max(bw - 1, 1).toFixed(1),
                             height: h.toFixed(1), fill: COLOURS[o], "class": "bar", "data-minute": minutes[i],
                             "data-outcome": o, "data-n": v }, svg);
        el("title", {}, r).textContent = minutes[i].slice(11, 16) + "Z " + o + ": " + v;
      });
    }
    return svg;
  }

  function latencyChart(q, data) {
    var minutes = data.minutes, n = minutes.length, lat = q.claim_latency_ms;
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", "class": "chart-latency", role: "img" });
    var vals = lat.p95.filter(function (v) { return v !== null; });
    var max = niceMax(Math.max.apply(null, vals.concat([1])));
    frame(svg, max, "claim latency per minute (median, p95)", fmtMs, minutes);
    var iw = W - L - R, ih = H - T - B, step = iw / n;
    [["p95", "#f59e0b"], ["p50", "#2563eb"]].forEach(function (pair) {
      var key = pair[0], d = "", pen = "M";
      for (var i = 0; i < n; i++) {
        var v = lat[key][i];
        if (v === null) { pen = "M"; continue; }
        var x = L + (i + 0.5) * step, y = T + ih - (v / max) * ih;
        d += pen + x.toFixed(1) + "," + y.toFixed(1) + " ";
        pen = "L";
        var c = el("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 2.5, fill: pair[1], "class": "lat-point lat-" + key,
                               "data-minute": minutes[i], "data-ms": v, "data-n": lat.n[i] }, svg);
        el("title", {}, c).textContent = minutes[i].slice(11, 16) + "Z " + key + " " + fmtMs(v) + " (" + lat.n[i] + " claims)";
      }
      if (d) el("path", { d: d.trim(), fill: "none", stroke: pair[1], "stroke-width": 1.5, "class": "lat-line lat-" + key }, svg);
    });
    return svg;
  }

  function outcomes(data) { return data.outcomes; }

  // A name as the operator should read it: as it is when printable, else as a JSON string (so a queue
  // named "a\nb" never reads as "a b"). The server's views.shown_name does the same for the tiles.
  function shown(name) {
    return /[\u0000-\u001f\u007f-\u009f\u00ad\u2028\u2029]/.test(name) ? JSON.stringify(name) : name;
  }

  // --- the queue filter: hides what does not match at once (the next poll brings the server's view) -----

  function filterText() {
    var box = document.getElementById("queue-filter");
    return box ? box.value.toLowerCase() : "";
  }

  function applyFilter() {
    var needle = filterText();
    var items = document.querySelectorAll("#tiles-inner [data-queue], #charts [data-queue]");
    for (var i = 0; i < items.length; i++) {
      var name = (items[i].getAttribute("data-queue") || "").toLowerCase();
      if (needle && name.indexOf(needle) < 0) items[i].setAttribute("data-filtered", "out");
      else items[i].removeAttribute("data-filtered");
    }
  }

  function startFilter() {
    var box = document.getElementById("queue-filter");
    var region = document.getElementById("tiles");
    if (!box || !region) return;
    box.addEventListener("input", function () {
      var url = new URL(region.getAttribute("data-poll-url"), window.location.href);
      if (box.value) url.searchParams.set("q", box.value); else url.searchParams.delete("q");
      region.setAttribute("data-poll-url", url.pathname + url.search);
      var page = new URL(window.location.href);
      if (box.value) page.searchParams.set("q", box.value); else page.searchParams.delete("q");
      window.history.replaceState(null, "", page.pathname + page.search + page.hash);
      applyFilter();
    });
    ["queue-sort", "queue-view"].forEach(function (id) {
      var sel = document.getElementById(id);
      if (sel) sel.addEventListener("change", function () { document.getElementById("queue-controls").submit(); });
    });
  }

  function drawCharts(box, data) {
    var names = Object.keys(data.queues);
    var wrap = document.createElement("div");
    wrap.className = "charts";
    if (!names.length) {
      var p = document.createElement("p");
      p.className = "empty";
      p.id = "charts-empty";
      p.textContent = "No job finished or was claimed in the last hour.";
      wrap.appendChild(p);
    }
    names.forEach(function (name) {
      var q = data.queues[name];
      var card = document.createElement("section");
      card.className = "chart";
      card.setAttribute("data-queue", name);
      var h = document.createElement("h3");
      h.className = "queue-name";
      h.textContent = shown(name);
      card.appendChild(h);
      var t = q.totals, sum = document.createElement("p");
      sum.className = "note chart-totals";
      sum.textContent = t.succeeded + " succeeded · " + t.failed + " failed · " + t.cancelled + " cancelled · " +
        t.claimed + " first claims in the hour";
      card.appendChild(sum);
      var legend = document.createElement("p");
      legend.className = "legend chart-legend";
      outcomes(data).concat(["p50", "p95"]).forEach(function (o) {
        var sw = el("svg", { width: 12, height: 12, "aria-hidden": "true" });
        el("rect", { width: 12, height: 12, fill: COLOURS[o] || (o === "p50" ? "#2563eb" : "#f59e0b") }, sw);
        var item = document.createElement("span");
        item.className = "swatch";
        item.appendChild(sw);
        item.appendChild(document.createTextNode(" " + (o === "p50" ? "median latency" : o === "p95" ? "p95 latency" : o)));
        legend.appendChild(item);
      });
      card.appendChild(legend);
      card.appendChild(finishedChart(q, data));
      card.appendChild(latencyChart(q, data));
      wrap.appendChild(card);
    });
    box.replaceChildren(wrap);
    box.setAttribute("data-drawn", data.now);
    applyFilter();
  }

  function startCharts(box) {
    var url = box.getAttribute("data-charts-url");
    var every = parseInt(box.getAttribute("data-poll-ms"), 10) || 5000;
    var busy = false;
    function poll() {
      if (busy || document.hidden) return;
      busy = true;
      get(url, "json")
        .then(function (data) { drawCharts(box, data); box.removeAttribute("data-stale"); markUp("charts"); })
        .catch(function (err) { fail("charts", box, err); })
        .finally(function () { busy = false; });
    }
    poll();
    setInterval(poll, every);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var b = banner();
    if (b && !b.hidden) b.setAttribute("data-static", "yes");  // the server's own 503 page
    var regions = document.querySelectorAll("[data-poll-url]");
    for (var i = 0; i < regions.length; i++) startRegion(regions[i], "region" + i);
    var charts = document.getElementById("charts");
    if (charts) startCharts(charts);
    startFilter();
  });
})();
