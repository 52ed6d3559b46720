// Live feed and local times. Pages work without this script; it only enhances them.
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) { el.textContent = d.toLocaleString(); el.title = el.getAttribute("datetime"); }
    });
  }
  localTimes(document);
  var feed = document.getElementById("live-feed");
  if (!feed || !window.WebSocket) return;
  var scheme = location.protocol === "https:" ? "wss://" : "ws://";
  var queue = [], timer = null;
  function job(id) {  // an allocation named in an event, linked to its page
    var a = document.createElement("a"); a.href = "/jobs/" + id + "/"; a.textContent = "#" + id; return a;
  }
  function flush() {  // coalesce bursts: one DOM update per animation frame
    timer = null;
    queue.splice(0).forEach(function (ev) {
      var li = document.createElement("li");
      li.className = "event " + (ev.kind || "").replace(".", "-");
      var text = ev.kind;
      if (ev.kind === "decision") {
        text = "decision " + ev.decision + ": " + ev.code + " for #" + ev.preemptor +
               (ev.victims && ev.victims.length ? " (victims " + ev.victims.join(", ") + ")" : "") +
               (ev.other_victims ? " (" + ev.other_victims + " of other tenants)" : "") +
               (ev.shadow ? " [shadow]" : "");
        var a = document.createElement("a"); a.href = "/ops/decisions/" + ev.decision + "/"; a.textContent = text;
        li.appendChild(a);
      } else if (ev.allocation) {
        li.appendChild(document.createTextNode(text + ": "));
        li.appendChild(job(ev.allocation));
        li.appendChild(document.createTextNode(" " + (ev.state || "")));
      } else if (ev.allocations) {
        li.appendChild(document.createTextNode(text + ":"));
        ev.allocations.forEach(function (x) { li.appendChild(document.createTextNode(" ")); li.appendChild(job(x)); });
      } else if (ev.node) {  // node.health, node.devices: which node, and why
        li.appendChild(document.createTextNode(text + ": "));
        var n = document.createElement("a"); n.href = "/ops/nodes/" + encodeURIComponent(ev.node) + "/"; n.textContent = ev.node;
        li.appendChild(n);
        li.appendChild(document.createTextNode(" " + (ev.state ? ev.state + ": " : "") + (ev.reason || ev.mismatch || "")));
      } else { li.textContent = text; }
      var when = new Date();  // when it arrived, as the server-rendered entries show when they were made
      var time = document.createElement("time");
      time.setAttribute("datetime", when.toISOString());
      time.textContent = when.toLocaleString();
      li.appendChild(document.createTextNode(" "));
      li.appendChild(time);
      feed.insertBefore(li, feed.firstChild);
      while (feed.children.length > 200) feed.removeChild(feed.lastChild);
    });
  }
  function connect(delay) {
    var ws = new WebSocket(scheme + location.host + "/ws/live/");
    ws.onopen = function () { document.body.dataset.live = "on"; };
    ws.onmessage = function (m) {
      var frame = JSON.parse(m.data);  // {"kind": "events", "events": [...]}, coalesced by the server
      if (frame.kind !== "events") return;
      Array.prototype.push.apply(queue, frame.events);
      if (!timer) timer = window.requestAnimationFrame(flush);
    };
    ws.onclose = function () {
      document.body.dataset.live = "off";
      setTimeout(function () { connect(Math.min(delay * 2, 30000)); }, delay);
    };
  }
  connect(1000);
})();
