// Charts of the stored usage series (GET /api/v1/usage/series/), drawn by uPlot (static/vendor/uplot).
// A section with data-charts holds range buttons (data-range) and figures with data-chart (what to
// draw: utilisation, vcluster, queue, preemptions, share, quota, budget) and data-src (the series'
// URL without its range). The 1 h range follows the live feed: events ask for the series again, at
// most once every 5 s, and the chart is redrawn in place. Each chart is window.latticeCharts[id].
(function () {
  if (!window.uPlot) return;
  var charts = window.latticeCharts = {};
  var COLOURS = ["#2f6fdf", "#d9822b", "#8e44ad", "#7f8c8d", "#27ae60", "#c0392b", "#16a085", "#b7950b"];

  function line(label, i, extra) {
    var s = {label: label, stroke: COLOURS[i % COLOURS.length], width: 1.5, points: {show: false}};
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }
  function flat(t, value) { return t.map(function () { return value; }); }
  function cumulative(t, used, step) {
    var sum = 0;
    return used.map(function (g) { sum += g * step / 3600; return Math.round(sum * 1000) / 1000; });
  }

  // Per kind: the lines and their values, from the series' body and the figure's data attributes.
  var KINDS = {
    utilisation: function (b) {
      return [["GPUs in use", b.gpu_used], ["held for preemptors", b.gpu_held], ["borrowed", b.gpu_borrowed],
              ["free", b.gpu_free]];
    },
    vcluster: function (b) { return [["GPUs in use", b.gpu_used], ["borrowed", b.gpu_borrowed]]; },
    queue: function (b) { return [["pending jobs", b.pending], ["GPUs asked for", b.pending_gpus]]; },
    preemptions: function (b) {
      var perHour = 3600 / b.step;
      var out = Object.keys(b.preemptions).map(function (reason) {
        return [reason + " per hour", b.preemptions[reason].map(function (n) { return n * perHour; })];
      });
      return out.length ? out : [["preemptions per hour: none in this range", flat(b.t, 0)]];
    },
    share: function (b, el) {
      return [["GPUs in use", b.gpu_used], ["fair share", flat(b.t, parseFloat(el.dataset.fairShare)), true]];
    },
    quota: function (b, el) {
      return [["GPUs in use", b.gpu_used], ["quota", flat(b.t, parseFloat(el.dataset.quota)), true]];
    },
    budget: function (b, el) {
      var lines = [["GPU-hours used in the range", cumulative(b.t, b.gpu_used, b.step)]];
      if (el.dataset.budget) lines.push(["monthly budget", flat(b.t, parseFloat(el.dataset.budget)), true]);
      return lines;
    },
  };

  function draw(el, body) {
    var lines = KINDS[el.dataset.chart](body, el);
    var data = [body.t].concat(lines.map(function (l) { return l[1]; }));
    var old = charts[el.id];
    if (old && old.series.length === data.length) { old.setData(data); return; }
    if (old) old.destroy();
    var opts = {
      width: Math.max(280, el.clientWidth || 600), height: 180,
      series: [{}].concat(lines.map(function (l, i) { return line(l[0], i, l[2] ? {dash: [6, 4]} : null); })),
      scales: {y: {range: function (u, lo, hi) { return [0, Math.max(1, hi * 1.1)]; }}},
      axes: [{}, {size: 64}],
    };
    el.querySelectorAll(".uplot").forEach(function (n) { n.remove(); });
    charts[el.id] = new window.uPlot(opts, data, el);
  }

  function load(el, range) {
    el.dataset.range = range;
    // Only the newest request draws: an older answer arriving late would put older data back.
    var seq = (parseInt(el.dataset.seq || "0", 10) + 1).toString();
    el.dataset.seq = seq;
    var url = el.dataset.src + (el.dataset.src.indexOf("?") < 0 ? "?" : "&") + "range=" + range;
    return fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (body && el.dataset.range === range && el.dataset.seq === seq) { draw(el, body); el.dataset.loaded = range; }
      })
      .catch(function () {});
  }

  document.querySelectorAll("[data-charts]").forEach(function (section) {
    var figures = section.querySelectorAll("[data-chart][data-src][id]");
    function show(range) {
      section.dataset.range = range;
      section.querySelectorAll("[data-range]").forEach(function (b) {
        if (b.tagName === "BUTTON") b.setAttribute("aria-pressed", String(b.dataset.range === range));
      });
      figures.forEach(function (el) { load(el, range); });
    }
    section.querySelectorAll("button[data-range]").forEach(function (b) {
      b.addEventListener("click", function () { show(b.dataset.range); });
    });
    show(section.dataset.range || "24h");

    var last = 0, timer = null;
    document.addEventListener("lattice:events", function () {
      if (section.dataset.range !== "1h" || timer) return;
      timer = setTimeout(function () {
        timer = null;
        if (section.dataset.range !== "1h") return;  // another range was chosen meanwhile
        last = Date.now();
        figures.forEach(function (el) { load(el, "1h"); });
      }, Math.max(0, last + 5000 - Date.now()));
    });
  });
})();
