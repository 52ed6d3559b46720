// Fragments that follow the live feed: an element with data-live-refresh="URL" (and an id) is
// fetched again from URL when events arrive, and swapped for the element of the same id in the
// answer. With data-live-job="N", only events naming allocation N count. At most one fetch per
// element is in flight; events meanwhile ask for one more after it.
(function () {
  function names(ev, id) {
    var ids = [ev.allocation, ev.preemptor].concat(ev.allocations || [], ev.victims || []);
    return ids.some(function (x) { return x !== undefined && x !== null && String(x) === id; });
  }
  var state = {};
  function refresh(id) {
    var s = state[id] || (state[id] = {busy: false, again: false, timer: null});
    if (s.busy) { s.again = true; return; }
    if (s.timer) return;
    s.timer = setTimeout(function () {  // a burst of events: one fetch
      s.timer = null;
      var el = document.getElementById(id);
      if (!el) return;
      s.busy = true;
      fetch(el.dataset.liveRefresh, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null) return;
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
          var now = document.getElementById(id);
          if (fresh && now) {
            now.replaceWith(fresh);
            if (window.latticeLocalTimes) window.latticeLocalTimes(fresh);
            document.dispatchEvent(new CustomEvent("lattice:refreshed", {detail: id}));
          }
        })
        .catch(function () {})
        .then(function () {
          s.busy = false;
          if (s.again) { s.again = false; refresh(id); }
        });
    }, 400);
  }
  document.addEventListener("lattice:events", function (e) {
    document.querySelectorAll("[data-live-refresh][id]").forEach(function (el) {
      var job = el.dataset.liveJob;
      if (!job || e.detail.some(function (ev) { return names(ev, job); })) refresh(el.id);
    });
  });
})();
