// Belay dashboard: live queue tiles by short poll. The fragment is server-rendered with autoescaping;
// the Content-Security-Policy admits scripts from /static only.
(function () {
  "use strict";
  function startTiles() {
    var box = document.getElementById("tiles");
    if (!box) return;
    var url = box.getAttribute("data-poll-url");
    var every = parseInt(box.getAttribute("data-poll-ms"), 10) || 1000;
    var busy = false;
    function poll() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
        .then(function (html) { box.innerHTML = html; box.removeAttribute("data-stale"); })
        .catch(function () { box.setAttribute("data-stale", "yes"); })
        .finally(function () { busy = false; });
    }
    setInterval(poll, every);
  }
  document.addEventListener("DOMContentLoaded", startTiles);
})();
