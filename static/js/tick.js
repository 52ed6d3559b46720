// Figures that grow by the second while a job holds its nodes: its elapsed time
// (data-tick-seconds, as the server counted them when it rendered the element) and its GPU-hours
// (data-tick-gpu-hours at data-tick-gpus GPUs). Each counts on from when this page got the
// element, not from the browser's clock against the server's; a live refresh swaps in a fresh
// element with the server's figures. Pages work without this script.
(function () {
  var seen = new WeakMap();
  function words(s) {
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    return h ? h + "h " + two(m) + "m " + two(r) + "s" : m + "m " + two(r) + "s";
  }
  function since(el) {
    if (!seen.has(el)) seen.set(el, Date.now());
    return Math.max(0, (Date.now() - seen.get(el)) / 1000);
  }
  function tick() {
    document.querySelectorAll("[data-tick-seconds]").forEach(function (el) {
      var base = Number(el.dataset.tickSeconds);
      if (!isNaN(base)) el.textContent = words(base + Math.floor(since(el)));
    });
    document.querySelectorAll("[data-tick-gpu-hours]").forEach(function (el) {
      var base = Number(el.dataset.tickGpuHours), gpus = Number(el.dataset.tickGpus);
      if (!isNaN(base) && !isNaN(gpus)) el.textContent = (base + gpus * since(el) / 3600).toFixed(3);
    });
  }
  tick();
  setInterval(tick, 1000);
})();
