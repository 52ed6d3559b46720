// The live feed's socket and local times. Pages work without this script; it only enhances them.
// Each frame's events are handed to the page as a "lattice:events" DOM event (detail: the list):
// feed.js writes them as feed lines, refresh.js swaps in fragments that they change.
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) { el.textContent = d.toLocaleString(); el.title = el.getAttribute("datetime"); }
    });
  }
  window.latticeLocalTimes = localTimes;
  localTimes(document);
  var wanted = document.getElementById("live-feed") || document.querySelector("[data-live-refresh], [data-charts]");
  if (!wanted || !window.WebSocket) return;
  var scheme = location.protocol === "https:" ? "wss://" : "ws://";
  function connect(delay) {
    var ws = new WebSocket(scheme + location.host + "/ws/live/");
    ws.onopen = function () { document.body.dataset.live = "on"; };
    ws.onmessage = function (m) {
      var frame = JSON.parse(m.data);  // {"kind": "events", "events": [...]}, coalesced by the server
      if (frame.kind !== "events") return;
      document.dispatchEvent(new CustomEvent("lattice:events", {detail: frame.events}));
    };
    ws.onclose = function () {
      document.body.dataset.live = "off";
      setTimeout(function () { connect(Math.min(delay * 2, 30000)); }, delay);
    };
  }
  connect(1000);
})();
