// The overview's live refresh: every data-refresh ms, fetch /live (the
// overview's live part, rendered by the server) and swap it in. A broker
// that is down shows in what /live renders; a dashboard that is down is
// said here, and both clear on the first answer after they recover.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) return;
  var every = Number(live.dataset.refresh) || 2000;
  // No swap while a pointer is down: a click whose press and release
  // fell on two versions of a link would be lost.
  var pressed = false;
  document.addEventListener("pointerdown", function () { pressed = true; }, true);
  document.addEventListener("pointerup", function () { setTimeout(function () { pressed = false; }, 0); }, true);
  function tick() {
    if (pressed) { setTimeout(tick, 100); return; }
    fetch("/live", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        return r.text().then(function (html) {
          live.innerHTML = html;
          live.dataset.state = r.ok ? "ok" : "broker-down";
        });
      })
      .catch(function () {
        live.dataset.state = "dashboard-down";
        if (!document.getElementById("dashboard-down")) {
          var b = document.createElement("div");
          b.id = "dashboard-down";
          b.className = "banner";
          b.setAttribute("role", "alert");
          b.textContent = "The dashboard itself cannot be reached; the figures below are stale. Retrying.";
          live.prepend(b);
        }
      })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
