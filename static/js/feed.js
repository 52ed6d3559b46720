// The live feed's lines, in words: which group, whose job, how big, who preempted whom. Lines can
// be filtered by group and kind (#feed-group, #feed-kind) and the feed paused (#feed-pause):
// while paused, new lines wait (counted in #feed-waiting) and appear, in order, on resume.
(function () {
  var feed = document.getElementById("live-feed");
  if (!feed) return;
  var groupSel = document.getElementById("feed-group"), kindSel = document.getElementById("feed-kind");
  var pauseBtn = document.getElementById("feed-pause"), waitingEl = document.getElementById("feed-waiting");
  var queue = [], waiting = [], timer = null, paused = false;
  var KINDS = {"decision": "decision", "node.state": "node", "node.devices": "node", "node.health": "node", "override": "operator",
               "policy": "operator"};
  function category(kind) { return KINDS[kind] || "job"; }

  function text(s) { return document.createTextNode(s); }
  function link(href, words) { var a = document.createElement("a"); a.href = href; a.textContent = words; return a; }
  function size(j) { return j.nodes + " × " + j.gpus + " GPU"; }
  function job(ev, id) {  // "#12 (physics, 2 × 8 GPU)", linked to its page
    var span = document.createElement("span"), j = (ev.jobs || {})[String(id)];
    span.appendChild(link("/jobs/" + id + "/", "#" + id));
    if (j) span.appendChild(text(" (" + j.tenant + ", " + size(j) + ")"));
    return span;
  }
  function groupOf(ev) {
    if (ev.group) return ev.group;
    var jobs = ev.jobs || {};
    for (var k in jobs) { if (jobs[k].group) return jobs[k].group; }
    return "";
  }
  function list(li, ev, ids) {
    ids.forEach(function (id, i) { if (i) li.appendChild(text(", ")); li.appendChild(job(ev, id)); });
  }
  function render(ev) {
    var li = document.createElement("li"), group = groupOf(ev);
    li.className = "event " + (ev.kind || "").replace(".", "-");
    li.dataset.kind = category(ev.kind);
    li.dataset.group = group;
    var where = group ? group + ": " : "";
    if (ev.kind === "decision") {
      li.appendChild(link("/ops/decisions/" + ev.decision + "/", "decision " + ev.decision + ": " + ev.code));
      li.appendChild(text(" " + where));
      li.appendChild(job(ev, ev.preemptor));
      var victims = ev.victims || [];
      if (victims.length || ev.other_victims) {
        li.appendChild(text(" preempted "));
        list(li, ev, victims);
        if (ev.other_victims) {
          li.appendChild(text((victims.length ? " and " : "") + ev.other_victims + " job" +
                              (ev.other_victims > 1 ? "s" : "") + " of other tenants"));
        }
      }
      if (ev.shadow) li.appendChild(text(" [shadow]"));
    } else if (ev.kind === "node.state" || ev.kind === "node.devices" || ev.kind === "node.health") {
      li.appendChild(text(where + "node "));
      li.appendChild(link("/ops/nodes/" + ev.node + "/", ev.node));
      if (ev.kind === "node.state") li.appendChild(text(" is " + ev.state));
      else if (ev.kind === "node.health") li.appendChild(text(" is " + ev.state + (ev.reason ? ": " + ev.reason : "")));
      else li.appendChild(text(" reported its GPUs" + (ev.mismatch ? ": " + ev.mismatch : "")));
    } else if (ev.kind === "allocations.placed" || ev.kind === "array.submitted") {
      li.appendChild(text(where + (ev.kind === "array.submitted" ? "array " + ev.array + " submitted: " : "started ")));
      list(li, ev, ev.allocations || []);
    } else if (ev.kind === "override" || ev.kind === "policy") {
      li.appendChild(text(where + (ev.kind === "policy" ? "policy changed" : ev.action)));
      if (ev.allocation) { li.appendChild(text(" ")); li.appendChild(job(ev, ev.allocation)); }
    } else if (ev.allocation) {
      var verb = {"allocation.submitted": "submitted", "allocation.cancelled": "cancelled"}[ev.kind];
      // A cancel of work whose process may still run: terminating until its agent reports it gone.
      if (ev.kind === "allocation.cancelled" && ev.state && ev.state !== "cancelled") verb = "cancel asked (" + ev.state + ")";
      li.appendChild(text(where));
      li.appendChild(job(ev, ev.allocation));
      li.appendChild(text(verb ? " " + verb
                               : " is " + (ev.state || "changed")));
    } else { li.appendChild(text(ev.kind)); }
    var when = new Date();  // when it arrived, as the server-rendered entries show when they were made
    var time = document.createElement("time");
    time.setAttribute("datetime", when.toISOString());
    time.textContent = when.toLocaleString();
    li.appendChild(text(" "));
    li.appendChild(time);
    return li;
  }
  function shown(li) {
    var g = groupSel ? groupSel.value : "", k = kindSel ? kindSel.value : "";
    return (!g || li.dataset.group === g) && (!k || li.dataset.kind === k);
  }
  function filter() {
    Array.prototype.forEach.call(feed.children, function (li) { li.hidden = !shown(li); });
  }
  function flush() {  // coalesce bursts: one DOM update per animation frame
    timer = null;
    queue.splice(0).forEach(function (ev) {
      var li = render(ev);
      li.hidden = !shown(li);
      feed.insertBefore(li, feed.firstChild);
    });
    while (feed.children.length > 200) feed.removeChild(feed.lastChild);
  }
  function take(events) {
    Array.prototype.push.apply(queue, events);
    if (!timer) timer = window.requestAnimationFrame(flush);
  }
  document.addEventListener("lattice:events", function (e) {
    if (paused) {
      Array.prototype.push.apply(waiting, e.detail);
      if (waitingEl) waitingEl.textContent = waiting.length + " new while paused";
    } else { take(e.detail); }
  });
  if (groupSel) groupSel.addEventListener("change", filter);
  if (kindSel) kindSel.addEventListener("change", filter);
  if (pauseBtn) pauseBtn.addEventListener("click", function () {
    paused = !paused;
    pauseBtn.textContent = paused ? "Resume" : "Pause";
    pauseBtn.setAttribute("aria-pressed", paused ? "true" : "false");
    if (!paused) { take(waiting.splice(0)); if (waitingEl) waitingEl.textContent = ""; }
  });
})();
