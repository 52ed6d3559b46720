// A running job's elapsed time and GPU-hours count on between the refreshes its events bring:
// from the figures the page was served with (data-tick-seconds, data-tick-gpu-hours and
// data-tick-gpus), plus the seconds since this page first showed them. A refreshed fragment
// carries fresh figures and starts again from them.
(function () {
  function words(seconds) {
    var h = Math.floor(seconds / 3600), m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    return h ? h + "h " + two(m) + "m " + two(s) + "s" : m + "m " + two(s) + "s";
  }
  function since(el) {
    if (el._tickFrom === undefined) el._tickFrom = Date.now();
    return Math.floor((Date.now() - el._tickFrom) / 1000);
  }
  function tick() {
    document.querySelectorAll("[data-tick-seconds]").forEach(function (el) {
      el.textContent = words(parseInt(el.dataset.tickSeconds, 10) + since(el));
    });
    document.querySelectorAll("[data-tick-gpu-hours]").forEach(function (el) {
      var hours = parseFloat(el.dataset.tickGpuHours) + parseInt(el.dataset.tickGpus, 10) * since(el) / 3600;
      el.textContent = hours.toFixed(3);
    });
  }
  setInterval(tick, 1000);
})();
