// gridfold web: keeps <main id="live"> current from the server's events, with no
// reload. The server sends the page's content, already escaped, at least once a
// second; this script only puts it in place. No third-party code.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var status = document.getElementById("status");
  if (!main || !window.EventSource) {
    if (status) { status.textContent = "no live updates in this browser"; }
    return;
  }
  var updates = 0;
  var source = new EventSource("/live?path=" + encodeURIComponent(main.dataset.path));
  source.addEventListener("update", function (event) {
    // Leave the page alone while someone types in it (the why form).
    var active = document.activeElement;
    if (active && active !== document.body && main.contains(active) && active.tagName === "INPUT") {
      return;
    }
    main.innerHTML = event.data;
    updates += 1;
    document.body.dataset.updates = String(updates);
    status.textContent = "live · " + new Date().toLocaleTimeString();
    status.className = "status live";
  });
  source.onerror = function () {
    status.textContent = "reconnecting…";
    status.className = "status down";
  };
})();
